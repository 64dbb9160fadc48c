"""Cleaner statistics: one clean's counters (Kafka's CleanerStats), its log line, and the gauges.

Role: a worker fills a `CleanerStats` while it cleans and sends it back with the result; the
LogCleaner logs `summary_line()` (the same content as Kafka's LogCleaner.recordStats, seed 000) and
folds it into `CleanerMetrics`, which the broker's metrics registry reads through `collect()`.

Kafka's figures (broker-wide): max-buffer-utilization-percent, cleaner-recopy-percent,
max-clean-time-secs (last run of each worker), max-compaction-delay-secs, max-dirty-percent,
uncleanable-partitions-count and uncleanable-bytes (per log dir), dead-thread-count,
time-since-last-run-ms. Ours per partition, which Kafka lacks: dirty ratio, cleaner point, last
clean time and duration, records and distinct keys after the last clean, tombstones retained.

Invariant: everything here is plain data (picklable across the process boundary); no clock reads
except through the `monotonic` passed in.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

MB = 1024.0 * 1024.0


class CleanerStats:
    __slots__ = ("start", "map_complete", "end", "bytes_read", "bytes_written", "map_bytes_read",
                 "map_messages_read", "messages_read", "messages_written", "invalid_messages",
                 "tombstones_retained", "tombstones_held_back", "buffer_utilization", "_monotonic")

    def __init__(self, monotonic=_time.monotonic):
        self._monotonic = monotonic
        self.start = monotonic()
        self.map_complete = -1.0
        self.end = -1.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.map_bytes_read = 0
        self.map_messages_read = 0
        self.messages_read = 0
        self.messages_written = 0
        self.invalid_messages = 0
        self.tombstones_retained = 0
        self.tombstones_held_back = 0      # kept only because a consumer group has not read past them
        self.buffer_utilization = 0.0

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__ if k != "_monotonic"}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._monotonic = _time.monotonic

    def index_done(self) -> None:
        self.map_complete = self._monotonic()

    def all_done(self) -> None:
        self.end = self._monotonic()

    @property
    def elapsed_secs(self) -> float:
        return max((self.end if self.end >= 0 else self._monotonic()) - self.start, 0.0)

    @property
    def elapsed_index_secs(self) -> float:
        return max(self.map_complete - self.start, 0.0) if self.map_complete >= 0 else 0.0

    def as_dict(self) -> dict:
        d = self.__getstate__()
        d["elapsed_secs"] = self.elapsed_secs
        d["elapsed_index_secs"] = self.elapsed_index_secs
        return d


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def summary_line(worker_id: int, log_name: str, first_dirty: int, end_offset: int, s: CleanerStats) -> str:
    """Kafka's cleaner summary (LogCleaner.recordStats), same lines and figures."""
    elapsed = s.elapsed_secs
    idx = s.elapsed_index_secs
    clean = max(elapsed - idx, 0.0)

    def rate(b, secs):
        return b / MB / secs if secs > 0 else 0.0

    return (
        f"\n\tLog cleaner thread {worker_id} cleaned log {log_name} (dirty section = [{first_dirty}, {end_offset}])\n"
        f"\t{s.bytes_read / MB:,.1f} MB of log processed in {elapsed:,.1f} seconds ({rate(s.bytes_read, elapsed):,.1f} MB/sec).\n"
        f"\tIndexed {s.map_bytes_read / MB:,.1f} MB in {idx:.1f} seconds ({rate(s.map_bytes_read, idx):,.1f} Mb/sec, {_pct(idx, elapsed):.1f}% of total time)\n"
        f"\tBuffer utilization: {100.0 * s.buffer_utilization:.1f}%\n"
        f"\tCleaned {s.bytes_read / MB:,.1f} MB in {clean:.1f} seconds ({rate(s.bytes_read, clean):,.1f} Mb/sec, {_pct(clean, elapsed):.1f}% of total time)\n"
        f"\tStart size: {s.bytes_read / MB:,.1f} MB ({s.messages_read:,d} messages)\n"
        f"\tEnd size: {s.bytes_written / MB:,.1f} MB ({s.messages_written:,d} messages)\n"
        f"\t{100.0 * (1.0 - s.bytes_written / s.bytes_read) if s.bytes_read else 0.0:.1f}% size reduction "
        f"({100.0 * (1.0 - s.messages_written / s.messages_read) if s.messages_read else 0.0:.1f}% fewer messages)\n"
    )


@dataclass
class PartitionCleanStatus:
    """Per-partition figures exposed by the admin API and as labelled gauges."""
    dirty_ratio: float = 0.0
    cleaner_point: int = 0
    first_uncleanable_offset: int = 0
    last_clean_time_ms: int = -1
    last_clean_duration_s: float = 0.0
    records_after_last_clean: int = 0
    distinct_keys_last_clean: int = 0
    tombstones_retained: int = 0
    tombstones_held_back: int = 0          # kept by the last clean only for kompakt.tombstone.retention.groups
    group_horizon_offset: int | None = None   # the group-safe horizon the last clean used (None: none)
    keyless_dropped: int = 0
    cleans: int = 0
    partial_passes: int = 0
    state: str = "None"
    uncleanable: bool = False
    last_error: str | None = None
    last_guarantee_check: dict | None = None   # the guarantee check of the last clean (guarantees.py)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CleanerMetrics:
    """The broker-wide cleaner figures, Kafka's names in comments."""
    max_buffer_utilization_percent: float = 0.0   # max-buffer-utilization-percent
    cleaner_recopy_percent: float = 0.0           # cleaner-recopy-percent
    max_clean_time_secs: float = 0.0              # max-clean-time-secs
    max_compaction_delay_secs: float = 0.0        # max-compaction-delay-secs
    max_dirty_percent: float = 0.0                # max-dirty-percent
    dead_thread_count: int = 0                    # DeadThreadCount
    last_run_monotonic: float = -1.0              # time-since-last-run-ms is derived
    uncleanable_partitions: dict = field(default_factory=dict)   # log dir -> count
    uncleanable_bytes: dict = field(default_factory=dict)        # log dir -> bytes
    cleans_completed: int = 0
    cleans_aborted: int = 0
    cleans_failed: int = 0
    last_stats_by_worker: dict = field(default_factory=dict)     # worker id -> CleanerStats dict

    def record(self, worker_id: int, stats: CleanerStats) -> None:
        self.last_stats_by_worker[worker_id] = stats.as_dict()
        last = list(self.last_stats_by_worker.values())
        self.max_buffer_utilization_percent = max(100.0 * d["buffer_utilization"] for d in last)
        self.max_clean_time_secs = max(d["elapsed_secs"] for d in last)
        read = sum(d["bytes_read"] for d in last)
        written = sum(d["bytes_written"] for d in last)
        self.cleaner_recopy_percent = 100.0 * written / read if read else 0.0
        self.cleans_completed += 1

    def as_dict(self, monotonic=_time.monotonic) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "last_stats_by_worker"}
        d["time_since_last_run_ms"] = (int((monotonic() - self.last_run_monotonic) * 1000)
                                       if self.last_run_monotonic >= 0 else -1)
        d["uncleanable_partitions_count"] = sum(self.uncleanable_partitions.values())
        return d
