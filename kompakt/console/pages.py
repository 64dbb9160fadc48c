"""The console's routes on the admin HTTP app: server-rendered pages, each also as JSON.

| path                                   | page                                                      |
|----------------------------------------|-----------------------------------------------------------|
| /console                               | redirects to /console/broker                              |
| /console/broker                        | listeners, log dirs with disk use, uptime, versions       |
| /console/topics                        | every topic; POST creates one (name, partitions, configs) |
| /console/topics/{t}                    | partitions, configs; POST .../configs, .../partitions, .../delete, .../compact, .../pause, .../resume |
| /console/topics/{t}/records            | the record browser (records.py)                           |
| /console/groups, /console/groups/{g}   | consumer groups, lag; POST .../reset, .../delete          |
| /console/transactions                  | transactions, producers, open transactions per partition  |
| /console/cleaner                       | passes, dirty ratio over time, tombstones held back       |
| /console/charts/{passes,dirty}.png     | the cleaner's charts; /console/charts/whatif.png?topic=&partition=&set=k=v |
| /console/login                         | the admin token, kept in a same-site cookie (auth.py)     |

Every page answers JSON for `?_format=json`, a `.json` suffix on its path, or `Accept:
application/json` (Datasette's convention); the JSON is the dict the page is drawn from
(data.py). Forms post, then redirect (303) to the page with a message; a refused change is drawn
again with Kafka's error name and message and the values the user typed, status 400.

A form posted from a page of another origin is refused with 403 (`same_origin`, before the token
check): the console's forms are plain HTML posts, which any web page could otherwise make the
operator's browser send to a loopback broker without a token.

Invariants: Jinja2 and matplotlib are imported on the first page or chart, never when the admin
app starts (the broker's start time and idle memory stay as they were); charts are drawn in
worker threads; state changes go through the broker's Kafka handlers (kafka_calls.py).
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import time
from typing import Any, Awaitable, Callable
from urllib.parse import quote, urlencode

from aiohttp import web

from kompakt.broker.admin.views import ApiError, jsonable

BROKER_KEY = web.AppKey("console_broker", object)
TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
STATIC = os.path.join(os.path.dirname(__file__), "static")
REFRESH_MS = 3000

routes = web.RouteTableDef()
_env = None


# --- rendering ---------------------------------------------------------------------------------------
def _environment():
    global _env
    if _env is None:
        import jinja2

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                 undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
        env.filters.update(bytes=human_bytes, ms=ms_time, pct=percent, num=number, duration=duration, q=quote)
        _env = env
    return _env


def human_bytes(n: Any) -> str:
    if n is None or n == "":
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def ms_time(ms: Any) -> str:
    if ms is None or ms == "" or int(ms) < 0:
        return ""
    return _dt.datetime.fromtimestamp(int(ms) / 1000).strftime("%Y-%m-%d %H:%M:%S")


def percent(ratio: Any) -> str:
    return "" if ratio is None else f"{100 * float(ratio):.1f}%"


def number(n: Any) -> str:
    return "" if n is None else f"{n:,}"


def duration(seconds: Any) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + (f"{h}h " if d or h else "") + f"{m}m {s}s"


def wants_json(request: web.Request) -> bool:
    return (request.query.get("_format") == "json" or request.path.endswith(".json")
            or request.headers.get("Accept", "").startswith("application/json"))


def json_url(request: web.Request) -> str:
    query = dict(request.query)
    query["_format"] = "json"
    return f"{request.path}?{urlencode(query)}"


async def render(request: web.Request, template: str, data: dict[str, Any], *, status: int = 200,
                 title: str = "", nav: str = "") -> web.Response:
    if wants_json(request):
        return web.json_response(jsonable(data), status=status, dumps=lambda v: json.dumps(v, indent=1))
    context = {"data": data, "title": title, "nav": nav, "json_url": json_url(request),
               "message": request.query.get("done"), "refresh_ms": REFRESH_MS, "path": request.path,
               "query": dict(request.query), "now_ms": int(time.time() * 1000)}
    context.update(data)
    html = _environment().get_template(template).render(**context)
    return web.Response(text=html, content_type="text/html", status=status)


def _broker(request: web.Request) -> Any:
    return request.app[BROKER_KEY]


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


async def error_page(request: web.Request, exc: ApiError, nav: str = "") -> web.Response:
    if wants_json(request):
        return web.json_response(exc.body(), status=exc.status)
    return await render(request, "error.html", {"error": exc.body()}, status=exc.status, title="Error", nav=nav)


def done(location: str, message: str) -> web.HTTPSeeOther:
    sep = "&" if "?" in location else "?"
    return web.HTTPSeeOther(f"{location}{sep}{urlencode({'done': message})}")


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
    return "broker.html", await data.broker_page(_broker(request)), "Broker"


@page("/console/topics", nav="topics")
async def topics_page(request: web.Request):
    from kompakt.console import data
    return "topics.html", {**await data.topics_page(_broker(request)), "form": {}, "error": None}, "Topics"


def _parse_configs(text: str) -> dict[str, str]:
    out = {}
    for line in text.replace(",\n", "\n").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ApiError(400, "bad_config", f"config line {line!r} is not key=value")
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _int(form, name: str, what: str) -> int:
    raw = (form.get(name) or "").strip()
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"bad_{name}", f"{what} must be a whole number, got {raw!r}") from None


@routes.post("/console/topics")
async def create_topic(request: web.Request) -> web.StreamResponse:
    from kompakt.console import data, kafka_calls as K
    broker = _broker(request)
    form = await request.post()
    name = (form.get("name") or "").strip()
    error = None
    try:
        partitions = _int(form, "partitions", "partitions") if (form.get("partitions") or "").strip() else -1
        configs = _parse_configs(form.get("configs") or "")
        if form.get("compacted"):
            configs.setdefault("cleanup.policy", "compact")
        result = await K.create_topic(broker, name, partitions, configs)
        if not result.error_code:
            raise done(f"/console/topics/{quote(name, safe='')}", f"Created topic {name} "
                                                                    f"({result.num_partitions} partition(s)).")
        error = {"kafka_error": K.error_name(result.error_code), "message": result.error_message}
    except ApiError as exc:
        error = exc.body()
    page_data = await data.topics_page(broker)
    return await render(request, "topics.html", {**page_data, "form": dict(form), "error": error},
                        status=400, title="Topics", nav="topics")


async def _topic(request: web.Request) -> tuple[str, bool]:
    from kompakt.broker.admin.views import log_manager_of, topic_partitions
    known = topic_partitions(log_manager_of(_broker(request)))
    return _strip_json(request.match_info["topic"], known)


@routes.get("/console/topics/{topic}")
async def topic_page(request: web.Request) -> web.StreamResponse:
    return await _topic_view(request)


async def _topic_view(request: web.Request, error: dict | None = None, form: dict | None = None) -> web.StreamResponse:
    from kompakt.console import data
    try:
        topic, as_json = await _topic(request)
        page_data = await data.topic_page(_broker(request), topic)
    except ApiError as exc:
        return await error_page(request, exc, "topics")
    page_data.update(error=error, form=form or {})
    if as_json:
        return web.json_response(jsonable(page_data))
    return await render(request, "topic.html", page_data, status=400 if error else 200, title=f"Topic {topic}",
                        nav="topics")


def _kafka_error(code: int, message: str | None) -> dict:
    from kompakt.console.kafka_calls import error_name
    return {"kafka_error": error_name(code), "message": message or error_name(code)}


@routes.post("/console/topics/{topic}/configs")
async def alter_configs(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    topic = request.match_info["topic"]
    form = await request.post()
    try:
        to_set = _parse_configs(form.get("set") or "")
        to_delete = [k for k in (form.get("delete") or "").replace(",", " ").split() if k]
        if not to_set and not to_delete:
            raise ApiError(400, "nothing_to_change", "give key=value lines to set or names to delete")
        result = await K.alter_topic_configs(_broker(request), topic, to_set, to_delete)
    except ApiError as exc:
        return await _topic_view(request, exc.body(), dict(form))
    if result.error_code:
        return await _topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    what = ", ".join([f"{k}={v}" for k, v in to_set.items()] + [f"{k} reset to its default" for k in to_delete])
    raise done(f"/console/topics/{quote(topic, safe='')}", f"Altered {topic}: {what}.")


@routes.post("/console/topics/{topic}/partitions")
async def add_partitions(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    topic = request.match_info["topic"]
    form = await request.post()
    try:
        count = _int(form, "count", "the new partition count")
        result = await K.create_partitions(_broker(request), topic, count)
    except ApiError as exc:
        return await _topic_view(request, exc.body(), dict(form))
    if result.error_code:
        return await _topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    raise done(f"/console/topics/{quote(topic, safe='')}", f"{topic} now has {count} partitions.")


@routes.post("/console/topics/{topic}/delete")
async def delete_topic(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    topic = request.match_info["topic"]
    form = await request.post()
    if (form.get("confirm") or "") != topic:
        return await _topic_view(request, {"error": "not_confirmed",
                                           "message": f"type the topic's name ({topic}) to delete it"}, dict(form))
    result = await K.delete_topic(_broker(request), topic)
    if result.error_code:
        return await _topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    raise done("/console/topics", f"Deleted topic {topic}.")


CONSOLE_COMPACT_WAIT_S = 30.0


@routes.post("/console/topics/{topic}/compact")
async def compact_now(request: web.Request) -> web.StreamResponse:
    """The admin API's compact-now (POST /v1/partitions/{t}/{p}/compact?roll=true) from a button:
    roll the active segment, clean, and say what the pass did."""
    from kompakt.broker.admin.app import _error_body, start_compact
    topic = request.match_info["topic"]
    form = await request.post()
    partition = (form.get("partition") or "0").strip()
    try:
        tp, task = await start_compact(_broker(request), topic, partition, roll=True)
    except ApiError as exc:
        return await _topic_view(request, exc.body(), dict(form))
    done_, _ = await asyncio.wait({task}, timeout=CONSOLE_COMPACT_WAIT_S)
    if task not in done_:
        raise done(f"/console/topics/{quote(topic, safe='')}",
                   f"Cleaning {topic}-{partition}: still running after {CONSOLE_COMPACT_WAIT_S:.0f} s; "
                   f"the cleaner page lists the pass when it ends.")
    if task.exception() is not None:
        return await _topic_view(request, _error_body(task.exception()), dict(form))
    stats = task.result() or {}
    if not stats.get("cleaned", True):
        raise done(f"/console/topics/{quote(topic, safe='')}",
                   f"{topic}-{partition} was not cleaned: {stats.get('reason')}.")
    removed = stats.get("messages_read", 0) - stats.get("messages_written", 0)
    raise done(f"/console/topics/{quote(topic, safe='')}",
               f"Cleaned {topic}-{partition}: {removed} record(s) removed, {human_bytes(stats.get('bytes_read', 0))} "
               f"read, {human_bytes(stats.get('bytes_written', 0))} written.")


@routes.post("/console/topics/{topic}/pause")
@routes.post("/console/topics/{topic}/resume")
async def pause_or_resume(request: web.Request) -> web.StreamResponse:
    """The admin API's pause / resume of one partition's cleaning, from a button."""
    from kompakt.broker.admin.app import pause_cleaning, resume_cleaning
    topic = request.match_info["topic"]
    form = await request.post()
    partition = (form.get("partition") or "0").strip()
    pausing = request.path.endswith("/pause")
    try:
        view = await (pause_cleaning if pausing else resume_cleaning)(_broker(request), topic, partition)
    except ApiError as exc:
        return await _topic_view(request, exc.body(), dict(form))
    count = view["cleaner"].get("paused_count") or 0
    raise done(f"/console/topics/{quote(topic, safe='')}",
               f"Cleaning of {topic}-{partition} {'paused' if pausing else 'resumed'}"
               + (f" ({count} pause(s) outstanding)." if count else "."))


@routes.get("/console/topics/{topic}/records.json")
@routes.get("/console/topics/{topic}/records")
async def records_page(request: web.Request) -> web.StreamResponse:
    from kompakt.console.records import DECODINGS, DEFAULT_LIMIT, ISOLATIONS, browse
    from kompakt.broker.admin.views import resolve_partition
    q = request.query
    topic = request.match_info["topic"]
    try:
        partition = q.get("partition", "0")
        tp, lg = resolve_partition(_broker(request), topic, partition)
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
                    number = int(_dt.datetime.fromisoformat(value).timestamp() * 1000)
                except ValueError:
                    raise ApiError(400, "bad_value", f"the timestamp must be milliseconds since the epoch or an "
                                                     f"ISO date-time (2026-01-31T12:00:00), got {value!r}") from None
            if start_from == "timestamp":
                timestamp = number
            else:
                offset = number
        try:
            limit = int(q.get("limit", DEFAULT_LIMIT))
        except ValueError:
            raise ApiError(400, "bad_limit", f"limit must be a whole number, got {q.get('limit')!r}") from None
        result = await asyncio.to_thread(browse, lg, offset=offset, timestamp_ms=timestamp, limit=limit,
                                         decode=decode, isolation=isolation)
    except ApiError as exc:
        return await error_page(request, exc, "topics")
    from kompakt.broker.admin.views import topic_partitions
    result.update(topic=topic, partition=tp[1], partitions=topic_partitions(_broker(request).log_manager)[topic],
                  start_from=start_from, value=value, limit=limit)
    return await render(request, "records.html", result, title=f"Records of {topic}-{tp[1]}", nav="topics")


@page("/console/groups", nav="groups")
async def groups_page(request: web.Request):
    from kompakt.console import data
    return "groups.html", await data.groups_page(_broker(request)), "Consumer groups"


@routes.get("/console/groups/{group}")
async def group_page(request: web.Request) -> web.StreamResponse:
    return await _group_view(request)


async def _group_view(request: web.Request, error: dict | None = None, form: dict | None = None) -> web.StreamResponse:
    from kompakt.console import data, kafka_calls as K
    broker = _broker(request)
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


RESET_TARGETS = ("earliest", "latest", "offset", "timestamp", "shift")


@routes.post("/console/groups/{group}/reset")
async def reset_offsets(request: web.Request) -> web.StreamResponse:
    """kafka-consumer-groups --reset-offsets: --to-earliest, --to-latest, --to-offset,
    --to-datetime (here milliseconds), --shift-by; for one topic or every topic the group has
    offsets for. Kafka refuses while the group has members (the coordinator answers the commit
    with UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION); the page says so."""
    from kompakt.console import data, kafka_calls as K
    broker = _broker(request)
    group = request.match_info["group"]
    form = await request.post()
    try:
        target = form.get("to") or ""
        if target not in RESET_TARGETS:
            raise ApiError(400, "bad_target", f"reset to one of {', '.join(RESET_TARGETS)}, got {target!r}")
        current = await data.group_page(broker, group)
        if current["state"] not in ("Empty", "Dead"):
            raise ApiError(409, "group_active", f"group {group} is {current['state']} with "
                                                f"{len(current.get('members', []))} member(s): stop its consumers "
                                                "first (Kafka resets offsets only of an inactive group)")
        topic = (form.get("topic") or "").strip()
        committed = {(o["topic"], o["partition"]): o["committed_offset"] for o in current["offsets"]}
        if topic:
            from kompakt.broker.admin.views import topic_partitions
            counts = topic_partitions(broker.log_manager)
            if topic not in counts:
                raise ApiError(404, "unknown_topic", f"unknown topic {topic!r}", kafka_error="UNKNOWN_TOPIC_OR_PARTITION")
            tps = [(topic, p) for p in range(counts[topic])]
        else:
            tps = sorted(committed)
        if not tps:
            raise ApiError(400, "no_partitions", f"group {group} has no committed offsets; name a topic")
        if target in ("earliest", "latest"):
            new = await K.list_offsets(broker, tps, K.EARLIEST if target == "earliest" else K.LATEST)
        elif target == "timestamp":
            ts = _int(form, "value", "the timestamp (ms)")
            new = await K.list_offsets(broker, tps, ts)
            latest = await K.list_offsets(broker, tps, K.LATEST)
            new = {tp: (off if off >= 0 else latest[tp]) for tp, off in new.items()}
        elif target == "offset":
            value = _int(form, "value", "the offset")
            new = {tp: value for tp in tps}
        else:
            shift = _int(form, "value", "the shift")
            new = {tp: committed.get(tp, 0) + shift for tp in tps}
        if target in ("offset", "shift"):   # clamp into [log start, end] as the Kafka tool does
            lo = await K.list_offsets(broker, tps, K.EARLIEST)
            hi = await K.list_offsets(broker, tps, K.LATEST)
            new = {tp: max(lo[tp], min(hi[tp], off)) for tp, off in new.items()}
        results = await K.commit_offsets(broker, group, new)
    except ApiError as exc:
        return await _group_view(request, exc.body(), dict(form))
    except K.CallError as exc:
        return await _group_view(request, {"kafka_error": exc.name, "message": exc.message}, dict(form))
    failed = [r for r in results if r["error"]]
    if failed:
        first = failed[0]
        return await _group_view(request, {"kafka_error": first["error"],
                                           "message": f"the coordinator refused the commit for "
                                                      f"{first['topic']}-{first['partition']}"}, dict(form))
    summary = ", ".join(f"{t}-{p}→{off}" for (t, p), off in sorted(new.items())[:8])
    raise done(f"/console/groups/{quote(group, safe='')}", f"Reset {len(new)} offset(s): {summary}.")


@routes.post("/console/groups/{group}/delete")
async def delete_group(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    group = request.match_info["group"]
    result = await K.delete_group(_broker(request), group)
    if result.error_code:
        return await _group_view(request, _kafka_error(result.error_code, None))
    raise done("/console/groups", f"Deleted group {group}.")


@page("/console/transactions", nav="transactions")
async def transactions_page(request: web.Request):
    from kompakt.console import data
    return "transactions.html", await data.transactions_page(_broker(request)), "Transactions and producers"


@page("/console/cleaner", nav="cleaner")
async def cleaner_page(request: web.Request):
    from kompakt.console import data
    page_data = await data.cleaner_page(_broker(request))
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
    history = data.cleaner_history(_broker(request))
    passes = history.passes() if history is not None else []
    return _png(await asyncio.to_thread(charts.passes_chart, passes))


@routes.get("/console/charts/dirty.png")
async def dirty_png(request: web.Request) -> web.Response:
    from kompakt.console import charts, data
    broker = _broker(request)
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
        report = await compare_partition(_broker(request), q.get("topic", ""), q.get("partition", "0"),
                                         [s for s in q.getall("set", []) if s.strip()],
                                         parse_max_records(q.get("max_records", str(DEFAULT_MAX_RECORDS))))
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    return _png(await asyncio.to_thread(chart_png, report))


def _png(body: bytes) -> web.Response:
    # the pages name their charts with ?v=<what they show>, so a short private cache is exact, and
    # lets the page preload a new chart before swapping it in (console.js)
    return web.Response(body=body, content_type="image/png", headers={"Cache-Control": "private, max-age=60"})


# --- login (with admin.api.token set) ----------------------------------------------------------------
@routes.get("/console/login")
async def login_page(request: web.Request) -> web.Response:
    return await render(request, "login.html", {"next": request.query.get("next", "/console/broker"),
                                                "error": None}, title="Sign in")


@routes.post("/console/login")
async def login(request: web.Request) -> web.StreamResponse:
    from kompakt.broker.admin.auth import COOKIE, token_matches
    form = await request.post()
    token = form.get("token") or ""
    target = form.get("next") or "/console/broker"
    if not target.startswith("/console"):
        target = "/console/broker"
    expected = request.app.get(TOKEN_KEY)
    if expected is None or not token_matches(expected, token):
        return await render(request, "login.html", {"next": target, "error": {"message": "that is not the admin API token"}},
                            status=401, title="Sign in")
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/console",
                        secure=request.secure)
    raise response


TOKEN_KEY = web.AppKey("console_token", object)


@web.middleware
async def same_origin(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Refuse a console form posted from another site (cross-site request forgery): a page
    elsewhere could otherwise make the operator's browser delete a topic on a loopback broker
    that has no token. Browsers name the posting page's origin in `Origin`; tools that send none
    (curl, scripts) are not browsers and pass. Runs before the token check, so the refusal is
    the same with or without a token."""
    if request.method not in ("GET", "HEAD", "OPTIONS") and request.path.startswith("/console"):
        origin = request.headers.get("Origin")
        if origin is not None:
            from urllib.parse import urlsplit
            if origin == "null" or urlsplit(origin).netloc.lower() != request.host.lower():
                return web.Response(status=403, content_type="text/plain",
                                    text=f"refused: a form posted from {origin} to this console "
                                         f"({request.host}); open the console's own page and submit it there")
    return await handler(request)


def add_console(app: web.Application, broker: Any, token: str | None) -> None:
    """Mount the console on the admin app (cheap: no Jinja2 or matplotlib import here)."""
    app[BROKER_KEY] = broker
    app[TOKEN_KEY] = token
    app.middlewares.insert(0, same_origin)
    app.add_routes(routes)
    app.router.add_static("/console/static", STATIC, append_version=False)
