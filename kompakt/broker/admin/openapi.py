"""OpenAPI 3 description of the admin HTTP API (served at GET /openapi.json by kompakt.broker.admin.app).

Kept beside app.py so the route table and its description change together; a test checks that
every route app.py serves is described here and nothing else is.
"""
from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERR = _json(_ref("Error"), "error")
_TP_PARAMS = [
    {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "partition", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}},
]
_TP_ERRORS = {"400": _ERR, "404": _ERR, "503": _ERR}

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Kompakt admin API", "version": "1",
             "description": "Metrics, health and log-compaction control of a Kompakt broker. Errors are JSON "
                            "objects with `error`, `message` and `status`."},
    "paths": {
        "/metrics": {"get": {"summary": "Prometheus metrics (text exposition format 0.0.4)",
                             "responses": {"200": {"description": "metrics",
                                                   "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/health": {"get": {"summary": "Liveness: 200 while the process serves HTTP",
                            "responses": {"200": _json({"type": "object"}, "alive")}}},
        "/ready": {"get": {"summary": "Readiness: 200 once logs are loaded and listeners bound",
                           "responses": {"200": _json({"type": "object"}, "ready"),
                                         "503": _json({"type": "object"}, "not ready yet")}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": _json({"type": "object"}, "OpenAPI")}}},
        "/v1/partitions": {"get": {
            "summary": "Every partition: offsets, size, segments, cleanup policy and cleaner state",
            "parameters": [{"name": "topic", "in": "query", "required": False, "schema": {"type": "string"}},
                           {"name": "count", "in": "query", "required": False, "schema": {"type": "boolean"},
                            "description": "with topic: add each partition's exact record count and total_records"}],
            "responses": {"200": _json({"type": "object", "properties": {
                "partitions": {"type": "array", "items": _ref("Partition")}}}, "partitions"), "404": _ERR}}},
        "/v1/partitions/{topic}/{partition}": {"get": {
            "summary": "One partition with its segments and the cleaner's view of it",
            "parameters": _TP_PARAMS + [{"name": "count", "in": "query", "required": False,
                                         "schema": {"type": "boolean"},
                                         "description": "add `records`: the exact record count from batch headers"}],
            "responses": {"200": _json(_ref("Partition"), "the partition"), **_TP_ERRORS}}},
        "/v1/partitions/{topic}/{partition}/whatif": {"get": {
            "summary": "What-if compaction: replay the partition's newest records through the cleaner's rules under "
                       "the topic's current settings and under the same with each `set` applied; read-only",
            "parameters": _TP_PARAMS + [
                {"name": "set", "in": "query", "required": False, "description": "key=value, repeatable: "
                 "segment.bytes, internal.segment.bytes, segment.ms, segment.index.bytes, index.interval.bytes, "
                 "min.cleanable.dirty.ratio, min.compaction.lag.ms, max.compaction.lag.ms, delete.retention.ms, "
                 "log.cleaner.backoff.ms, log.cleaner.dedupe.buffer.size, log.cleaner.threads, "
                 "log.cleaner.io.buffer.load.factor",
                 "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True},
                {"name": "max_records", "in": "query", "required": False, "description": "newest records replayed "
                 "(default 100000)", "schema": {"type": "integer", "minimum": 1, "maximum": 1000000}},
                {"name": "format", "in": "query", "required": False, "schema": {"type": "string", "enum": ["json", "png"]}}],
            "responses": {"200": {"description": "both replays: settings, timeline, summary, difference",
                                  "content": {"application/json": {"schema": {"type": "object"}},
                                              "image/png": {"schema": {"type": "string", "format": "binary"}}}},
                          "400": _ERR, "404": _ERR}}},
        "/v1/partitions/{topic}/{partition}/compact": {"post": {
            "summary": "Clean this partition now, ignoring min.cleanable.dirty.ratio but never the active "
                       "segment, the last stable offset or min.compaction.lag.ms; 409 on a delete-policy "
                       "topic or while cleaning is paused",
            "parameters": _TP_PARAMS + [{"name": "wait", "in": "query", "required": False,
                                         "description": "seconds to wait for the clean before answering 202 (default 5)",
                                         "schema": {"type": "number", "minimum": 0, "maximum": 300}},
                                        {"name": "roll", "in": "query", "required": False,
                                         "schema": {"type": "boolean"},
                                         "description": "roll the active segment first, so everything written "
                                                        "so far can be cleaned"}],
            "responses": {"200": _json({"type": "object", "properties": {
                "state": {"type": "string"}, "stats": {"type": "object"}}}, "cleaned; the clean's stats"),
                "202": _json(_ref("Job"), "still cleaning; poll the Location (status_url)"),
                "409": _ERR, **_TP_ERRORS}}},
        "/v1/jobs/{job_id}": {"get": {
            "summary": "A compact job that outlived its request",
            "parameters": [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json(_ref("Job"), "the job"), "404": _ERR}}},
        "/v1/partitions/{topic}/{partition}/pause": {"post": {
            "summary": "Pause cleaning (reentrant: each pause needs one resume); aborts a running clean",
            "parameters": _TP_PARAMS,
            "responses": {"200": _json({"type": "object"}, "paused; the cleaner's view"), **_TP_ERRORS}}},
        "/v1/partitions/{topic}/{partition}/resume": {"post": {
            "summary": "Undo one pause", "parameters": _TP_PARAMS,
            "responses": {"200": _json({"type": "object"}, "resumed; the cleaner's view"),
                          "409": _json(_ref("Error"), "not paused"), **_TP_ERRORS}}},
        "/v1/partitions/{topic}/{partition}/adopt": {"post": {
            "summary": "Swap a pipeline-compacted staging dir into the live log (cleaning paused meanwhile)",
            "parameters": _TP_PARAMS,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["staging_dir"],
                "properties": {"staging_dir": {"type": "string"}}}}}},
            "responses": {"200": _json({"type": "object"}, "adopted"),
                          "409": _json(_ref("Error"), "stale staging dir: the log changed since it was made"),
                          "501": _ERR, **_TP_ERRORS}}},
        "/v1/transactions": {"get": {
            "summary": "Every transactional id the transaction coordinator knows: state, producer id and "
                       "epoch, partitions of the running transaction, timeout, start time; and its counters",
            "parameters": [{"name": "state", "in": "query", "required": False, "schema": {"type": "string"},
                            "description": "only this state (Kafka's names: Ongoing, CompleteCommit, ...)"}],
            "responses": {"200": _json({"type": "object", "properties": {
                "transactions": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
                "counters": {"type": "object", "additionalProperties": True}}}, "transactions"),
                "503": _ERR}}},
        "/v1/cleaner": {"get": {
            "summary": "The log cleaner: workers, current jobs, throttle and Kafka's cleaner figures",
            "responses": {"200": _json({"type": "object", "properties": {"enabled": {"type": "boolean"}},
                                        "additionalProperties": True}, "cleaner status")}}},
    },
    "components": {"schemas": {
        "Error": {"type": "object", "required": ["error", "message", "status"], "properties": {
            "error": {"type": "string"}, "message": {"type": "string"}, "status": {"type": "integer"},
            "kafka_error": {"type": "string"}}},
        "Job": {"type": "object", "properties": {
            "id": {"type": "string"}, "topic": {"type": "string"}, "partition": {"type": "integer"},
            "state": {"type": "string", "enum": ["running", "done", "failed"]}, "status_url": {"type": "string"},
            "started_ms": {"type": "integer"}, "finished_ms": {"type": "integer"},
            "stats": {"type": "object"}, "error": _ref("Error")}},
        "Partition": {"type": "object", "properties": {
            "topic": {"type": "string"}, "partition": {"type": "integer"},
            "cleanup_policy": {"type": "array", "items": {"type": "string"}},
            "log_start_offset": {"type": "integer"}, "log_end_offset": {"type": "integer"},
            "high_watermark": {"type": "integer"}, "last_stable_offset": {"type": "integer"},
            "size_bytes": {"type": "integer"}, "segment_count": {"type": "integer"},
            "segments": {"type": "array", "items": {"type": "object"}},
            "cleaner": {"type": "object", "description": "enabled, state, dirty_ratio, cleaner_point, "
                        "last_clean_time_ms, last_clean_duration_ms, records_after_last_clean, "
                        "distinct_keys_after_last_clean, tombstones_retained, uncleanable_reason",
                        "additionalProperties": True}}},
    }},
}
