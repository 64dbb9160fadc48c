"""The admin API's what-if compaction for one partition of the live broker, without Spark.

GET /v1/partitions/{topic}/{partition}/whatif?set=key=value[&set=...][&max_records=N][&format=png]

replays the partition's newest `max_records` records (default DEFAULT_MAX_RECORDS, at most
MAX_RECORDS) through the cleaner's rules under the topic's current settings (its overrides over
this broker's defaults and cleaner keys) and under the same with each `set` applied
(kompakt.pipeline.jobs.whatif, kompakt.cleaner.whatif), and answers both side by side as JSON, or
as the PNG chart of `kompakt pipeline whatif --chart`. It reads the segment files (read-only, in a
worker thread) and changes nothing: a read, like the other GETs.
Errors: 400 for a key the replay does not use, a bad value (the topic config's own message), a bad
max_records or format; 404 unknown topic or partition.
"""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from kompakt.broker.admin.app import BROKER_KEY
from kompakt.broker.admin.views import ApiError, jsonable, resolve_partition

DEFAULT_MAX_RECORDS = 100_000
MAX_RECORDS = 1_000_000

routes = web.RouteTableDef()


def _max_records(request: web.Request) -> int:
    raw = request.query.get("max_records", str(DEFAULT_MAX_RECORDS))
    try:
        n = int(raw)
    except ValueError:
        raise ApiError(400, "bad_max_records", f"max_records must be a whole number, got {raw!r}")
    if not 1 <= n <= MAX_RECORDS:
        raise ApiError(400, "bad_max_records", f"max_records must be between 1 and {MAX_RECORDS}, got {n}")
    return n


@routes.get("/v1/partitions/{topic}/{partition}/whatif")
async def whatif(request: web.Request) -> web.Response:
    from kompakt.pipeline.jobs import whatif as job

    broker = request.app[BROKER_KEY]
    tp, lg = resolve_partition(broker, request.match_info["topic"], request.match_info["partition"])
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "png"):
        raise ApiError(400, "bad_format", f"format must be json or png, got {fmt!r}")
    max_records = _max_records(request)
    try:
        sets = job.parse_sets(request.query.getall("set", []))
        meta = (getattr(broker.log_manager, "topics", None) or {}).get(tp[0])
        current, proposed = job.settings_pair(dict(getattr(meta, "configs", None) or {}), sets,
                                              getattr(broker, "config", None))
    except ValueError as exc:
        raise ApiError(400, "bad_setting", str(exc)) from None

    def run() -> Any:
        # the live log start: its checkpoint lags DeleteRecords by up to the checkpoint interval
        return job.compare(job.read_batches(str(lg.dir), max_records, getattr(lg, "log_start_offset", None)),
                           current, proposed, tp)

    report = await asyncio.to_thread(run)
    if fmt == "png":
        from kompakt.pipeline.chart import whatif_chart
        return web.Response(body=whatif_chart([report]), content_type="image/png")
    report["max_records"] = max_records
    return web.json_response(jsonable(report))
