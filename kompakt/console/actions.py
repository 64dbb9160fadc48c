"""The console's forms: what a POST changes, and the page it answers with.

Topics: create (CreateTopics), alter or reset configs (IncrementalAlterConfigs), add partitions
(CreatePartitions), delete (DeleteTopics, only with the name typed again); a compacted
partition's compact now / pause / resume cleaning (the admin API's own start_compact,
pause_cleaning, resume_cleaning). Groups: reset offsets (ListOffsets + OffsetCommit as
kafka-consumer-groups --reset-offsets, only while the group has no members), delete
(DeleteGroups). Kafka calls go through the broker's handlers (kafka_calls.py).

A change done answers 303 to its page with a message; a refusal draws the page again with
Kafka's error name and message (or the API's) and the values typed, status 400 (or the API's).
"""
from __future__ import annotations

import asyncio
from urllib.parse import quote

from aiohttp import web

from kompakt.broker.admin.views import ApiError
from kompakt.console.pages import group_view, topic_view
from kompakt.console.render import broker_of, done, human_bytes, render

routes = web.RouteTableDef()
CONSOLE_COMPACT_WAIT_S = 30.0
RESET_TARGETS = ("earliest", "latest", "offset", "timestamp", "shift")


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
    broker = broker_of(request)
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
        result = await K.alter_topic_configs(broker_of(request), topic, to_set, to_delete)
    except ApiError as exc:
        return await topic_view(request, exc.body(), dict(form))
    if result.error_code:
        return await topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    what = ", ".join([f"{k}={v}" for k, v in to_set.items()] + [f"{k} reset to its default" for k in to_delete])
    raise done(f"/console/topics/{quote(topic, safe='')}", f"Altered {topic}: {what}.")


@routes.post("/console/topics/{topic}/partitions")
async def add_partitions(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    topic = request.match_info["topic"]
    form = await request.post()
    try:
        count = _int(form, "count", "the new partition count")
        result = await K.create_partitions(broker_of(request), topic, count)
    except ApiError as exc:
        return await topic_view(request, exc.body(), dict(form))
    if result.error_code:
        return await topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    raise done(f"/console/topics/{quote(topic, safe='')}", f"{topic} now has {count} partitions.")


@routes.post("/console/topics/{topic}/delete")
async def delete_topic(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    topic = request.match_info["topic"]
    form = await request.post()
    if (form.get("confirm") or "") != topic:
        return await topic_view(request, {"error": "not_confirmed",
                                           "message": f"type the topic's name ({topic}) to delete it"}, dict(form))
    result = await K.delete_topic(broker_of(request), topic)
    if result.error_code:
        return await topic_view(request, _kafka_error(result.error_code, result.error_message), dict(form))
    raise done("/console/topics", f"Deleted topic {topic}.")


@routes.post("/console/topics/{topic}/compact")
async def compact_now(request: web.Request) -> web.StreamResponse:
    """The admin API's compact-now (POST /v1/partitions/{t}/{p}/compact?roll=true) from a button:
    roll the active segment, clean, and say what the pass did."""
    from kompakt.broker.admin.app import _error_body, start_compact
    topic = request.match_info["topic"]
    form = await request.post()
    partition = (form.get("partition") or "0").strip()
    try:
        tp, task = await start_compact(broker_of(request), topic, partition, roll=True)
    except ApiError as exc:
        return await topic_view(request, exc.body(), dict(form))
    done_, _ = await asyncio.wait({task}, timeout=CONSOLE_COMPACT_WAIT_S)
    if task not in done_:
        raise done(f"/console/topics/{quote(topic, safe='')}",
                   f"Cleaning {topic}-{partition}: still running after {CONSOLE_COMPACT_WAIT_S:.0f} s; "
                   f"the cleaner page lists the pass when it ends.")
    if task.exception() is not None:
        return await topic_view(request, _error_body(task.exception()), dict(form))
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
        view = await (pause_cleaning if pausing else resume_cleaning)(broker_of(request), topic, partition)
    except ApiError as exc:
        return await topic_view(request, exc.body(), dict(form))
    count = view["cleaner"].get("paused_count") or 0
    raise done(f"/console/topics/{quote(topic, safe='')}",
               f"Cleaning of {topic}-{partition} {'paused' if pausing else 'resumed'}"
               + (f" ({count} pause(s) outstanding)." if count else "."))


@routes.post("/console/groups/{group}/reset")
async def reset_offsets(request: web.Request) -> web.StreamResponse:
    """kafka-consumer-groups --reset-offsets: --to-earliest, --to-latest, --to-offset,
    --to-datetime (here milliseconds), --shift-by; for one topic or every topic the group has
    offsets for. Kafka refuses while the group has members (the coordinator answers the commit
    with UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION); the page says so."""
    from kompakt.console import data, kafka_calls as K
    broker = broker_of(request)
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
        return await group_view(request, exc.body(), dict(form))
    except K.CallError as exc:
        return await group_view(request, {"kafka_error": exc.name, "message": exc.message}, dict(form))
    failed = [r for r in results if r["error"]]
    if failed:
        first = failed[0]
        return await group_view(request, {"kafka_error": first["error"],
                                           "message": f"the coordinator refused the commit for "
                                                      f"{first['topic']}-{first['partition']}"}, dict(form))
    summary = ", ".join(f"{t}-{p}→{off}" for (t, p), off in sorted(new.items())[:8])
    raise done(f"/console/groups/{quote(group, safe='')}", f"Reset {len(new)} offset(s): {summary}.")


@routes.post("/console/groups/{group}/delete")
async def delete_group(request: web.Request) -> web.StreamResponse:
    from kompakt.console import kafka_calls as K
    group = request.match_info["group"]
    result = await K.delete_group(broker_of(request), group)
    if result.error_code:
        return await group_view(request, _kafka_error(result.error_code, None))
    raise done("/console/groups", f"Deleted group {group}.")
