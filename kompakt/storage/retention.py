"""Retention rules (UnifiedLog.deleteOldSegments) as pure functions over a log's segment list.

Role: decide *which* segments retention deletes; the LogManager does the deleting under the log's
lock. Segments are any objects with `base_offset`, `size` and `largest_timestamp` (a LogSegment;
largest_timestamp is the max record timestamp, or the file's mtime when the segment has none).

Rules, in Kafka's order (each run sees the log as the previous one left it):
  1. log-start breach   the *next* segment's base offset <= log_start_offset (the whole segment is
                        below the start offset, e.g. after DeleteRecords). Runs for every policy.
  2. retention.bytes    walking oldest-first, delete while (log size - retention.bytes) still covers
                        the segment's size. Only with cleanup.policy containing `delete`.
  3. retention.ms       now - segment.largest_timestamp > retention.ms. Only with `delete`.
Every rule walks oldest-first and stops at the first segment that fails it (deletion is a prefix).

Guards (invariants of the result, Kafka's UnifiedLog.deletableSegments):
  - the active (last) segment goes too when the rule selects it, it holds something and its upper
    bound (the log end offset) is not above the high watermark: Kafka deletes an expired active
    segment, rolling a new empty one first (Log.delete_segments does), so a topic that stopped
    receiving data still loses it after retention.ms; an empty active segment is never chosen;
  - never a segment whose upper bound (next segment's base offset, or the log end offset for the
    active one) is above the high watermark, so the log start offset can never pass it.
A segment with a timestamp in the future is never old enough (Kafka logs it and keeps it).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

LOG_START_BREACH = "log-start-offset breach"
RETENTION_SIZE_BREACH = "retention.bytes breach"
RETENTION_MS_BREACH = "retention.ms breach"

Predicate = Callable[[Any, Any], bool]  # (segment, next_segment) -> delete?


def deletable_segments(segments: Sequence[Any], high_watermark: int, predicate: Predicate,
                       log_end_offset: int | None = None) -> list[Any]:
    """The oldest-first prefix of segments satisfying `predicate` and below the HW. The active
    (last) segment is a candidate only when `log_end_offset` is given (its upper bound) and it is
    not empty; its `predicate` sees None as the next segment."""
    out = []
    n = len(segments)
    for i, segment in enumerate(segments):
        if i + 1 < n:
            nxt = segments[i + 1]
            upper_bound = nxt.base_offset
        elif log_end_offset is None or segment.size == 0:
            break
        else:
            nxt, upper_bound = None, log_end_offset
        if high_watermark >= upper_bound and predicate(segment, nxt):
            out.append(segment)
        else:
            break
    return out


def log_start_breached(segments: Sequence[Any], log_start_offset: int, high_watermark: int) -> list[Any]:
    return deletable_segments(segments, high_watermark,
                              lambda seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset)


def retention_size_breached(segments: Sequence[Any], retention_bytes: int, high_watermark: int,
                            log_end_offset: int | None = None) -> list[Any]:
    if retention_bytes < 0:
        return []
    diff = sum(s.size for s in segments) - retention_bytes
    if diff <= 0:
        return []

    def over(seg, _nxt) -> bool:
        nonlocal diff
        if diff - seg.size >= 0:
            diff -= seg.size
            return True
        return False

    return deletable_segments(segments, high_watermark, over, log_end_offset)


def retention_ms_breached(segments: Sequence[Any], retention_ms: int, now_ms: int, high_watermark: int,
                          log_end_offset: int | None = None) -> list[Any]:
    if retention_ms < 0:
        return []

    def expired(seg, _nxt) -> bool:
        ts = seg.largest_timestamp
        if ts > now_ms:
            log.warning("segment %s has a largest timestamp %d in the future (now %d): retention.ms "
                        "cannot delete it until then", getattr(seg, "base_offset", "?"), ts, now_ms)
        return now_ms - ts > retention_ms

    return deletable_segments(segments, high_watermark, expired, log_end_offset)


@dataclass
class RetentionPlan:
    """Segments to delete, oldest first, each with the rule that selected it."""
    steps: list[tuple[str, list[Any]]] = field(default_factory=list)
    _next_base: int | None = None

    @property
    def segments(self) -> list[Any]:
        return [s for _, segs in self.steps for s in segs]

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def __bool__(self) -> bool:
        return bool(self.segments)

    @property
    def new_log_start_offset(self) -> int | None:
        """Base offset of the first surviving segment (what the log start offset rises to)."""
        return self._next_base


def plan_retention(segments: Sequence[Any], *, compact: bool, delete: bool, retention_ms: int,
                   retention_bytes: int, log_start_offset: int, high_watermark: int,
                   now_ms: int, log_end_offset: int | None = None) -> RetentionPlan:
    """Run the three rules in order, each over what the previous left (as deleteOldSegments does).
    `log_end_offset` makes the active segment a candidate of the size and time rules (Kafka's
    rule; a Log always passes it, see plan_for_log)."""
    remaining = list(segments)
    plan = RetentionPlan()
    start = log_start_offset

    def take(reason: str, chosen: list[Any]) -> None:
        nonlocal remaining, start
        if chosen:
            plan.steps.append((reason, chosen))
            remaining = remaining[len(chosen):]
            start = max(start, remaining[0].base_offset if remaining else log_end_offset)

    take(LOG_START_BREACH, log_start_breached(remaining, start, high_watermark))
    if delete:
        take(RETENTION_SIZE_BREACH, retention_size_breached(remaining, retention_bytes, high_watermark,
                                                            log_end_offset))
        take(RETENTION_MS_BREACH, retention_ms_breached(remaining, retention_ms, now_ms, high_watermark,
                                                        log_end_offset))
    if plan:
        # every segment going: the log rolls a new one at the log end offset first
        plan._next_base = remaining[0].base_offset if remaining else log_end_offset
    return plan


def plan_for_log(log_obj: Any, now_ms: int) -> RetentionPlan:
    """`plan_retention` for a Log (reads its config, segments, offsets; call under the log's lock)."""
    cfg = log_obj.config
    return plan_retention(list(log_obj.segments), compact=cfg.compact, delete=cfg.delete,
                          retention_ms=cfg.retention_ms, retention_bytes=cfg.retention_bytes,
                          log_start_offset=log_obj.log_start_offset,
                          high_watermark=log_obj.high_watermark, now_ms=now_ms,
                          log_end_offset=log_obj.log_end_offset)
