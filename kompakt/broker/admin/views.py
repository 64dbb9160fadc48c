"""JSON views of partitions and the cleaner for the admin API, and its error type.

Role: turn the broker's live objects (LogManager, Log, LogCleaner.partition_status) into plain
JSON-able dicts, resolve `{topic}/{partition}` path parts into a log or the ApiError saying what is
wrong, and map Kafka error codes to HTTP statuses. No aiohttp here: kompakt.broker.admin.app serves
these; `kompakt admin` prints them.

Invariants: views only read (no log lock is taken, so a view never waits for a cleaner swap); a
broken cleaner status shows up as `status_error` in the view instead of failing the request.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import os
from typing import Any, Mapping

from kompakt.broker.observability.live import log_size
from kompakt.broker.txn.state import TxnState

log = logging.getLogger(__name__)

# Kafka error code name -> HTTP status, for KafkaErrors raised by storage / cleaner.
KAFKA_STATUS = {
    "UNKNOWN_TOPIC_OR_PARTITION": 404,
    "INVALID_REQUEST": 400,
    "INVALID_CONFIG": 400,
    "POLICY_VIOLATION": 409,
    "KAFKA_STORAGE_ERROR": 500,
}


class ApiError(Exception):
    """An error answered as JSON with `status`; `kind` is a short machine-readable word."""

    def __init__(self, status: int, kind: str, message: str, kafka_error: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.kafka_error = status, kind, message, kafka_error

    def body(self) -> dict[str, Any]:
        out = {"error": self.kind, "message": self.message, "status": self.status}
        if self.kafka_error:
            out["kafka_error"] = self.kafka_error
        return out


def jsonable(value: Any) -> Any:
    """Plain JSON data from dicts, dataclasses, namedtuples, slotted objects, enums, sets, paths."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Mapping):
        return {str(k if not isinstance(k, tuple) else "-".join(map(str, k))): jsonable(v) for k, v in value.items()}
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return jsonable(value.to_dict())
    if hasattr(value, "__dict__"):
        return jsonable({k: v for k, v in vars(value).items() if not k.startswith("_")})
    slots = getattr(type(value), "__slots__", None)
    if slots:
        return jsonable({k: getattr(value, k, None) for k in slots if not k.startswith("_")})
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def kafka_error_of(exc: BaseException) -> ApiError | None:
    code = getattr(exc, "code", None)
    if code is None:
        return None
    try:
        from kompakt.protocol.errors import ErrorCode
        name = ErrorCode(int(code)).name
    except (ImportError, ValueError, TypeError):
        name = str(code)
    status = KAFKA_STATUS.get(name, 409)
    return ApiError(status, name.lower(), str(exc) or name, kafka_error=name)


def log_manager_of(broker: Any) -> Any:
    manager = getattr(broker, "log_manager", None)
    if manager is None or not getattr(broker, "ready", False):
        raise ApiError(503, "not_ready", "the broker has not loaded its logs yet; retry when /ready answers 200")
    return manager


def cleaner_of(broker: Any, what: str) -> Any:
    cleaner = getattr(broker, "cleaner", None)
    if cleaner is None:
        raise ApiError(503, "cleaner_disabled", f"cannot {what}: the log cleaner is not running "
                                                "(log.cleaner.enable=false or log.cleaner.threads=0)")
    return cleaner


def topic_partitions(manager: Any) -> dict[str, int]:
    """topic -> partition count, from LogManager.topics (falls back to the logs present)."""
    topics = getattr(manager, "topics", None)
    if isinstance(topics, Mapping) and topics:
        return {name: int(getattr(meta, "partitions", meta) if not isinstance(meta, int) else meta)
                for name, meta in topics.items()}
    counts: dict[str, int] = {}
    for tp in manager.all_logs():
        counts[tp[0]] = max(counts.get(tp[0], 0), tp[1] + 1)
    return counts


def topic_partition(topic: str, partition: int) -> Any:
    try:
        from kompakt.storage import TopicPartition
        return TopicPartition(topic, partition)
    except ImportError:  # before storage lands a plain tuple hashes and compares the same
        return (topic, partition)


def resolve_partition(broker: Any, topic: str, partition_text: str) -> tuple[Any, Any]:
    """(tp, log) for a path's topic and partition, or the 400/404 ApiError saying what is wrong."""
    try:
        partition = int(partition_text)
    except ValueError:
        raise ApiError(400, "bad_partition", f"partition must be a non-negative integer, got {partition_text!r}")
    if partition < 0:
        raise ApiError(400, "bad_partition", f"partition must be a non-negative integer, got {partition}")
    manager = log_manager_of(broker)
    counts = topic_partitions(manager)
    if topic not in counts:
        raise ApiError(404, "unknown_topic", f"unknown topic {topic!r}; GET /v1/partitions lists the topics",
                       kafka_error="UNKNOWN_TOPIC_OR_PARTITION")
    if partition >= counts[topic]:
        raise ApiError(404, "unknown_partition", f"partition {partition} is out of range: topic {topic!r} has "
                                                 f"{counts[topic]} partition(s), 0..{counts[topic] - 1}",
                       kafka_error="UNKNOWN_TOPIC_OR_PARTITION")
    tp = topic_partition(topic, partition)
    lg = manager.get_log(tp)
    if lg is None:
        raise ApiError(404, "unknown_partition", f"partition {topic}-{partition} has no log on this broker",
                       kafka_error="UNKNOWN_TOPIC_OR_PARTITION")
    return tp, lg


def cleanup_policy(lg: Any) -> list[str]:
    cfg = getattr(lg, "config", None)
    policy = getattr(cfg, "cleanup_policy", None)
    if policy is None:
        return []
    return sorted(policy) if not isinstance(policy, str) else [p.strip() for p in policy.split(",")]


def is_compacted(lg: Any) -> bool:
    cfg = getattr(lg, "config", None)
    compact = getattr(cfg, "compact", None)
    return bool(compact) if compact is not None else "compact" in cleanup_policy(lg)


def cleaner_view(broker: Any, tp: Any, lg: Any) -> dict[str, Any]:
    """The cleaner's view of one partition (LogCleaner.partition_status) as JSON."""
    cleaner = getattr(broker, "cleaner", None)
    if cleaner is None:
        return {"enabled": False}
    if not callable(getattr(cleaner, "partition_status", None)):
        return {"enabled": True}
    try:
        status = cleaner.partition_status(tp)
    except Exception as exc:  # one broken status must not hide the partition
        log.warning("cleaner status of %s-%s failed: %s", tp[0], tp[1], exc)
        return {"enabled": True, "status_error": f"{type(exc).__name__}: {exc}"}
    out = {"enabled": True}
    status = jsonable(status)
    if isinstance(status, dict):
        out.update(status)
    elif status is not None:
        out["state"] = status
    return out


def tombstone_retention_view(broker: Any, tp: Any, lg: Any) -> dict[str, Any] | None:
    """kompakt.tombstone.retention.groups of the partition's topic: the group-safe horizon now,
    which groups hold it, each group's position, and how many tombstones the last clean held back
    (None when the topic names no groups)."""
    guard = getattr(broker, "tombstone_guard", None)
    if guard is None:
        return None
    try:
        view = guard.view(tp, lg.config)
    except Exception as exc:  # a status must not fail the request
        log.warning("tombstone retention status of %s-%s failed: %s", tp[0], tp[1], exc)
        return {"status_error": f"{type(exc).__name__}: {exc}"}
    if view is None:
        return None
    out = view.as_dict()
    cleaner = cleaner_view(broker, tp, lg)
    out["held_back_by_last_clean"] = cleaner.get("tombstones_held_back")
    out["horizon_of_last_clean"] = cleaner.get("group_horizon_offset")
    return out


def partition_view(broker: Any, tp: Any, lg: Any, *, detail: bool = False) -> dict[str, Any]:
    segments = list(getattr(lg, "segments", ()) or ())
    active = getattr(lg, "active_segment", None)
    out: dict[str, Any] = {
        "topic": tp[0], "partition": tp[1],
        "cleanup_policy": cleanup_policy(lg),
        "log_start_offset": getattr(lg, "log_start_offset", None),
        "log_end_offset": getattr(lg, "log_end_offset", None),
        "high_watermark": getattr(lg, "high_watermark", None),
        "last_stable_offset": getattr(lg, "last_stable_offset", None),
        "ongoing_transactions": ongoing_transactions(lg),
        "size_bytes": log_size(lg),
        "segment_count": len(segments),
        "cleaner": cleaner_view(broker, tp, lg),
    }
    retention = tombstone_retention_view(broker, tp, lg)
    if retention is not None:
        out["tombstone_retention"] = retention
    if detail:
        out["dir"] = os.fspath(getattr(lg, "dir", "")) or None
        topic_id = getattr(lg, "topic_id", None)
        out["topic_id"] = str(topic_id) if topic_id is not None else None
        out["recovery_point"] = getattr(lg, "recovery_point", None)
        out["segments"] = [{
            "base_offset": getattr(seg, "base_offset", None),
            "size_bytes": getattr(seg, "size", None),
            "largest_timestamp_ms": getattr(seg, "largest_timestamp", None),
            "last_modified_ms": _ms(getattr(seg, "last_modified", None)),
            "active": seg is active,
        } for seg in segments]
        manager = getattr(broker, "log_manager", None)
        meta = (getattr(manager, "topics", None) or {}).get(tp[0]) if manager is not None else None
        out["config_overrides"] = jsonable(getattr(meta, "configs", None) or {})
    return out


def ongoing_transactions(lg: Any) -> list[dict[str, int]]:
    """The partition's open transactions, oldest first: what holds its last stable offset back."""
    ongoing = getattr(getattr(lg, "producer_state", None), "ongoing", None)
    if not isinstance(ongoing, Mapping):
        return []
    return [{"producer_id": pid, "first_offset": first} for first, pid in sorted(dict(ongoing).items())]


def transactions_view(broker: Any, state: str | None = None) -> dict[str, Any]:
    """Every transactional id the transaction coordinator knows (DescribeTransactions' fields)."""
    txn = getattr(broker, "txn", None)
    if txn is None or not getattr(txn, "active", False):
        raise ApiError(503, "not_ready", "the transaction coordinator has not loaded yet; retry when /ready answers 200")
    names = [s.kafka_name for s in TxnState]
    if state is not None and state.lower() not in {n.lower() for n in names}:
        # a misspelt filter must not read as "no transactions"
        raise ApiError(400, "bad_state", f"unknown transaction state {state!r}; one of {', '.join(names)}")
    out = []
    for tid, meta in sorted(dict(txn.txns).items()):
        name = meta.state.kafka_name
        if state is not None and name.lower() != state.lower():
            continue
        out.append({"transactional_id": tid, "state": name, "producer_id": meta.producer_id,
                    "producer_epoch": meta.producer_epoch, "timeout_ms": meta.timeout_ms,
                    "start_time_ms": meta.start_ms, "last_update_ms": meta.last_update_ms,
                    "partitions": [f"{t}-{p}" for t, p in sorted(meta.partitions)]})
    return {"transactions": out, "counters": jsonable(txn.counters)}


def _ms(value: Any) -> Any:
    if isinstance(value, float):  # seconds since the epoch (os.stat style) -> ms
        return int(value * 1000)
    return value
