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
    return parse_max_records(request.query.get("max_records", str(DEFAULT_MAX_RECORDS)))


def parse_max_records(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        raise ApiError(400, "bad_max_records", f"max_records must be a whole number, got {raw!r}")
    if not 1 <= n <= MAX_RECORDS:
        raise ApiError(400, "bad_max_records", f"max_records must be between 1 and {MAX_RECORDS}, got {n}")
    return n


async def compare_partition(broker: Any, topic: str, partition: str, sets: list[str], max_records: int) -> dict:
    """The what-if report of one partition (JSON-able); ApiError for bad input. Also the web
    console's what-if chart (kompakt/console)."""
    from kompakt.pipeline.jobs import whatif as job

    tp, lg = resolve_partition(broker, topic, partition)
    try:
        parsed = job.parse_sets(sets)
        meta = (getattr(broker.log_manager, "topics", None) or {}).get(tp[0])
        current, proposed = job.settings_pair(dict(getattr(meta, "configs", None) or {}), parsed,
                                              getattr(broker, "config", None))
    except ValueError as exc:
        raise ApiError(400, "bad_setting", str(exc)) from None

    def run() -> Any:
        # the live log start: its checkpoint lags DeleteRecords by up to the checkpoint interval
        return job.compare(job.read_batches(str(lg.dir), max_records, getattr(lg, "log_start_offset", None)),
                           current, proposed, tp)

    return await asyncio.to_thread(run)


def chart_png(report: dict) -> bytes:
    from kompakt.pipeline.chart import whatif_chart
    return whatif_chart([report])


@routes.get("/v1/partitions/{topic}/{partition}/whatif")
async def whatif(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "png"):
        raise ApiError(400, "bad_format", f"format must be json or png, got {fmt!r}")
    max_records = _max_records(request)
    report = await compare_partition(request.app[BROKER_KEY], request.match_info["topic"],
                                     request.match_info["partition"], request.query.getall("set", []), max_records)
    if fmt == "png":
        return web.Response(body=await asyncio.to_thread(chart_png, report), content_type="image/png")
    report["max_records"] = max_records
    return web.json_response(jsonable(report))
