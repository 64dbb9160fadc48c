"""The console's pages (GET) and charts on the admin HTTP app; `add_console` mounts everything.

| path                                   | page                                                      |
|----------------------------------------|-----------------------------------------------------------|
| /console                               | redirects to /console/broker                              |
| /console/broker                        | listeners, log dirs with disk use, uptime, versions       |
| /console/topics                        | every topic; its form creates one (actions.py)            |
| /console/topics/{t}                    | partitions, configs; forms: configs, partitions, delete, compact, pause, resume |
| /console/topics/{t}/records            | the record browser (records.py)                           |
| /console/groups, /console/groups/{g}   | consumer groups, lag; forms: reset offsets, delete        |
| /console/transactions                  | transactions, producers, open transactions per partition  |
| /console/cleaner                       | passes, dirty ratio over time, tombstones held back, what-if |
| /console/charts/{passes,dirty}.png     | the cleaner's charts; /console/charts/whatif.png?topic=&partition=&set=k=v |
| /console/login                         | the admin token, kept in a same-site cookie (access.py)   |

Each page also answers its JSON (render.py). Modules: render.py (HTML or JSON), actions.py (the
forms), access.py (sign-in, same-origin forms), data.py (what a page shows), kafka_calls.py,
records.py, charts.py.

Invariants: Jinja2 and matplotlib are imported on the first page or chart, never when the admin
app starts (the broker's start time and idle memory stay as they were); charts are drawn in
worker threads; state changes go through the broker's Kafka handlers (kafka_calls.py).
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import os
from typing import Any, Awaitable, Callable

from aiohttp import web

from kompakt.broker.admin.views import ApiError, jsonable
from kompakt.console.render import BROKER_KEY, broker_of, error_page, render

STATIC = os.path.join(os.path.dirname(__file__), "static")

routes = web.RouteTableDef()


# --- page registration -----------------------------------------------------------------------------
def page(path: str, *, nav: str):
    """A GET page at `path` (and `path.json`): the handler returns (template, data, title)."""
    def wrap(fn: Callable[[web.Request], Awaitable[tuple[str, dict, str]]]):
        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                template, data, title = await fn(request)
            except ApiError as exc:
                return await error_page(request, exc, nav)
            return await render(request, template, data, title=title, nav=nav)
        routes.get(path)(handler)
        if "{" not in path.rsplit("/", 1)[-1]:
            routes.get(path + ".json")(handler)
        return handler
    return wrap


def _strip_json(name: str, known) -> tuple[str, bool]:
    """`{topic}.json` is the JSON of topic `{topic}` unless a topic is literally named so."""
    if name.endswith(".json") and name not in known and name[:-5] in known:
        return name[:-5], True
    return name, False


# --- pages -------------------------------------------------------------------------------------------
@routes.get("/console")
@routes.get("/console/")
async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/console/broker")


@page("/console/broker", nav="broker")
async def broker_page(request: web.Request):
    from kompakt.console import data
    return "broker.html", await data.broker_page(broker_of(request)), "Broker"


@page("/console/topics", nav="topics")
async def topics_page(request: web.Request):
    from kompakt.console import data
    return "topics.html", {**await data.topics_page(broker_of(request)), "form": {}, "error": None}, "Topics"


async def _topic(request: web.Request) -> tuple[str, bool]:
    from kompakt.broker.admin.views import log_manager_of, topic_partitions
    known = topic_partitions(log_manager_of(broker_of(request)))
    return _strip_json(request.match_info["topic"], known)


@routes.get("/console/topics/{topic}")
async def topic_page(request: web.Request) -> web.StreamResponse:
    return await topic_view(request)


async def topic_view(request: web.Request, error: dict | None = None, form: dict | None = None) -> web.StreamResponse:
    from kompakt.console import data
    try:
        topic, as_json = await _topic(request)
        page_data = await data.topic_page(broker_of(request), topic)
    except ApiError as exc:
        return await error_page(request, exc, "topics")
    page_data.update(error=error, form=form or {})
    if as_json:
        return web.json_response(jsonable(page_data))
    return await render(request, "topic.html", page_data, status=400 if error else 200, title=f"Topic {topic}",
                        nav="topics")




@routes.get("/console/topics/{topic}/records.json")
@routes.get("/console/topics/{topic}/records")
async def records_page(request: web.Request) -> web.StreamResponse:
    from kompakt.broker.admin.views import resolve_partition, topic_partitions
    from kompakt.console import data
    from kompakt.console.records import DECODINGS, DEFAULT_LIMIT, ISOLATIONS, browse
    q = request.query
    topic = request.match_info["topic"]
    try:
        partition = q.get("partition", "0")
        tp, lg = resolve_partition(broker_of(request), topic, partition)
        decode = q.get("decode", "text")
        isolation = q.get("isolation", "read_uncommitted")
        if decode not in DECODINGS:
            raise ApiError(400, "bad_decode", f"decode must be one of {', '.join(DECODINGS)}, got {decode!r}")
        if isolation not in ISOLATIONS:
            raise ApiError(400, "bad_isolation", f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
        start_from = q.get("from", "offset")
        value = (q.get("value") or "").strip()
        offset = timestamp = None
        if value:
            try:
                number = int(value)
            except ValueError:
                if start_from != "timestamp":
                    raise ApiError(400, "bad_value", f"the offset must be a whole number, got {value!r}") from None
                try:
                    when = _dt.datetime.fromisoformat(value)
                except ValueError:
                    raise ApiError(400, "bad_value", f"the timestamp must be milliseconds since the epoch or an "
                                                     f"ISO date-time, UTC unless it names an offset "
                                                     f"(2026-01-31T12:00:00, 2026-01-31T13:00:00+01:00), "
                                                     f"got {value!r}") from None
                if when.tzinfo is None:      # as the page shows times: UTC, not the server's zone
                    when = when.replace(tzinfo=_dt.timezone.utc)
                number = int(when.timestamp() * 1000)
            if start_from == "timestamp":
                timestamp = number
            else:
                offset = number
        try:
            limit = int(q.get("limit", DEFAULT_LIMIT))
        except ValueError:
            raise ApiError(400, "bad_limit", f"limit must be a whole number, got {q.get('limit')!r}") from None
        try:
            result = await asyncio.to_thread(browse, lg, offset=offset, timestamp_ms=timestamp, limit=limit,
                                             decode=decode, isolation=isolation)
        except (OSError, ValueError) as exc:      # its files renamed away or its log closed under the read
            if data.topic_gone(broker_of(request), topic, [(tp, lg)]):
                raise data.deleted_while_read(topic) from exc
            raise
        partitions = topic_partitions(broker_of(request).log_manager).get(topic)
        if partitions is None:
            raise data.deleted_while_read(topic)
    except ApiError as exc:
        return await error_page(request, exc, "topics")
    result.update(topic=topic, partition=tp[1], partitions=partitions,
                  start_from=start_from, value=value, limit=limit)
    return await render(request, "records.html", result, title=f"Records of {topic}-{tp[1]}", nav="topics")


@page("/console/groups", nav="groups")
async def groups_page(request: web.Request):
    from kompakt.console import data
    return "groups.html", await data.groups_page(broker_of(request)), "Consumer groups"


@routes.get("/console/groups/{group}")
async def group_page(request: web.Request) -> web.StreamResponse:
    return await group_view(request)


async def group_view(request: web.Request, error: dict | None = None, form: dict | None = None) -> web.StreamResponse:
    from kompakt.console import data, kafka_calls as K
    broker = broker_of(request)
    group = request.match_info["group"]
    try:
        if group.endswith(".json") and group[:-5] in {g["group_id"] for g in await K.list_groups(broker)}:
            group = group[:-5]
            return web.json_response(jsonable(await data.group_page(broker, group)))
        page_data = await data.group_page(broker, group)
    except ApiError as exc:
        return await error_page(request, exc, "groups")
    page_data.update(error=error, form=form or {})
    return await render(request, "group.html", page_data, status=400 if error else 200, title=f"Group {group}",
                        nav="groups")




@page("/console/transactions", nav="transactions")
async def transactions_page(request: web.Request):
    from kompakt.console import data
    return "transactions.html", await data.transactions_page(broker_of(request)), "Transactions and producers"


@page("/console/cleaner", nav="cleaner")
async def cleaner_page(request: web.Request):
    from kompakt.console import data
    page_data = await data.cleaner_page(broker_of(request))
    samples = page_data.get("dirty_samples") or {}
    latest = max([s[-1][0] for s in samples.values() if s] + [0])
    page_data["chart_version"] = f"{len(page_data['passes'])}-{latest}"
    page_data["whatif_set"] = request.query.get("set", "min.cleanable.dirty.ratio=0.1")
    page_data["whatif_topic"] = request.query.get("whatif", "")
    return "cleaner.html", page_data, "Cleaner"


# --- charts ------------------------------------------------------------------------------------------
@routes.get("/console/charts/passes.png")
async def passes_png(request: web.Request) -> web.Response:
    from kompakt.console import charts, data
    history = data.cleaner_history(broker_of(request))
    passes = history.passes() if history is not None else []
    return _png(await asyncio.to_thread(charts.passes_chart, passes))


@routes.get("/console/charts/dirty.png")
async def dirty_png(request: web.Request) -> web.Response:
    from kompakt.console import charts, data
    broker = broker_of(request)
    history = data.cleaner_history(broker)
    topic = request.query.get("topic")
    samples = {f"{t}-{p}": s for (t, p), s in (history.dirty(topic) if history is not None else {}).items()}
    thresholds = {}
    for name in samples:
        t, _, p = name.rpartition("-")
        lg = broker.log_manager.get_log(_tp(t, int(p)))
        if lg is not None:
            thresholds[name] = float(lg.config.min_cleanable_dirty_ratio)
    return _png(await asyncio.to_thread(charts.dirty_chart, samples, thresholds))


def _tp(topic: str, partition: int):
    from kompakt.broker.admin.views import topic_partition
    return topic_partition(topic, partition)


@routes.get("/console/charts/whatif.png")
async def whatif_png(request: web.Request) -> web.StreamResponse:
    """The admin API's what-if chart (GET /v1/partitions/{t}/{p}/whatif?format=png) for the console."""
    from kompakt.broker.admin.whatif import DEFAULT_MAX_RECORDS, chart_png, compare_partition, parse_max_records
    q = request.query
    try:
        report = await compare_partition(broker_of(request), q.get("topic", ""), q.get("partition", "0"),
                                         [s for s in q.getall("set", []) if s.strip()],
                                         parse_max_records(q.get("max_records", str(DEFAULT_MAX_RECORDS))))
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    return _png(await asyncio.to_thread(chart_png, report))


def _png(body: bytes) -> web.Response:
    # the pages name their charts with ?v=<what they show>, so a short private cache is exact, and
    # lets the page preload a new chart before swapping it in (console.js)
    return web.Response(body=body, content_type="image/png", headers={"Cache-Control": "private, max-age=60"})


# --- mounting ----------------------------------------------------------------------------------------


def add_console(app: web.Application, broker: Any, token: str | None) -> None:
    """Mount the console on the admin app (cheap: no Jinja2 or matplotlib import here)."""
    from kompakt.console import access, actions

    app[BROKER_KEY] = broker
    app[access.TOKEN_KEY] = token
    for table in (routes, actions.routes, access.routes):
        app.add_routes(table)
    app.router.add_static("/console/static", STATIC, append_version=False)
