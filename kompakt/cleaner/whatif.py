"""What-if compaction: replay a partition's records, with their timestamps, through the cleaner's
own rules under given settings, and report disk, cleaning work, freshness and tombstone lifetimes
over time.

Role: the engine behind `kompakt pipeline whatif` and the admin API's `.../whatif`. It never reads
files: the caller hands it the partition's batches (`InputBatch`, from the log's own headers and
keys) and the settings (`Settings`: the topic's LogConfig plus the cleaner's broker keys); it
rebuilds the log from nothing in memory, appending each batch at its timestamp, and runs the
cleaner against it as the broker would:

  rolling     storage.segment.should_roll (segment.bytes, segment.ms / max.compaction.lag.ms,
              segment.index.bytes), checked at each append, as the log does;
  selection   cleaner.manager.log_to_clean / is_eligible (first dirty and first uncleanable
              offsets, min.compaction.lag.ms, dirty ratio against min.cleanable.dirty.ratio,
              max.compaction.lag.ms), checked every log.cleaner.backoff.ms, and again at once after
              a clean, like a cleaner thread;
  the clean   an offset map of the dirty range bounded by the map's capacity (a partial pass ends
              where it fills), segments grouped by cleaner.group_segments_by_size, every record's
              fate from rules.record_fate and every batch's tombstones from
              rules.tombstones_removable, delete horizons stamped at the first clean that keeps them.
Nothing here restates a rule: the functions named above are the ones a real clean runs.

What is modelled coarsely (stated in every report under "model"): a clean takes no time; record
sizes are their batch's bytes shared equally (a compressed batch keeps its ratio when rebuilt);
transaction markers follow the tombstone rule and aborted data is dropped at the first clean (no
open transactions, so the last stable offset is the log end); consumer groups hold nothing back;
retention (cleanup.policy=compact,delete) is not replayed. With a time-dependent selection
(min/max.compaction.lag.ms) the checks are spread over the replayed span at log.cleaner.backoff.ms,
at most MAX_CHECKS of them.

Output (`replay(...) -> dict`): a timeline of SAMPLES intervals (end time, peak disk bytes, peak
age of the oldest uncleaned record, segments, cleans and bytes read/written so far, tombstones
visible) and a summary (cleans, bytes read/written, disk at the end / mean / peak, freshness mean /
peak, how long tombstones stayed visible before their horizon removed them: min / median / p95 /
max, those superseded by a later record of their key, those still visible at the end).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kompakt.cleaner import manager, rules
from kompakt.cleaner.cleaner import group_segments_by_size
from kompakt.storage.segment import should_roll

BATCH_OVERHEAD = 61
SAMPLES = 200
MAX_CHECKS = 200_000
OFFSET_INDEX_ENTRY = 8


@dataclass
class InputBatch:
    base_offset: int
    last_offset: int
    size: int                   # bytes on disk
    max_timestamp: int
    records: list               # [(offset, key bytes or None, tombstone)]
    is_control: bool = False
    is_aborted: bool = False


@dataclass
class Settings:
    config: object              # the topic's LogConfig
    backoff_ms: int = 15_000    # log.cleaner.backoff.ms
    map_capacity: int = 5_033_164   # keys per pass: dedupe buffer / threads / 24 x load factor
    label: str = ""

    def describe(self) -> dict:
        c = self.config
        return {"label": self.label, "segment.bytes": c.segment_bytes, "segment.ms": c.segment_ms,
                "min.cleanable.dirty.ratio": c.min_cleanable_dirty_ratio,
                "min.compaction.lag.ms": c.min_compaction_lag_ms, "max.compaction.lag.ms": c.max_compaction_lag_ms,
                "delete.retention.ms": c.delete_retention_ms, "log.cleaner.backoff.ms": self.backoff_ms,
                "map_capacity_keys": self.map_capacity}


class _Batch:
    __slots__ = ("base_offset", "last_offset", "size", "max_ts", "records", "rec_size", "horizon", "is_control",
                 "is_aborted")

    def __init__(self, b: InputBatch, arrival: int):
        self.base_offset, self.last_offset, self.size = b.base_offset, b.last_offset, b.size
        self.max_ts = arrival
        self.records = b.records
        self.rec_size = (b.size - BATCH_OVERHEAD) / max(1, len(b.records))
        self.horizon = None        # the delete horizon a clean stamped (ms), None: not stamped
        self.is_control, self.is_aborted = b.is_control, b.is_aborted


class _Segment:
    """What the cleaner's selection reads of a segment (manager.py), plus its batches."""

    def __init__(self, base_offset: int, created_ms: int):
        self.base_offset = base_offset
        self.created = created_ms
        self.batches: list = []
        self.size = 0
        self.largest_timestamp = -1
        self.offset_index_bytes = 0
        self.time_index_bytes = 0

    def rolling_based_timestamp(self):
        return self.batches[0].max_ts if self.batches else None

    def add(self, b: _Batch, index_interval: int) -> None:
        self.batches.append(b)
        self.size += b.size
        self.largest_timestamp = max(self.largest_timestamp, b.max_ts)
        self.offset_index_bytes = (self.size // max(1, index_interval)) * OFFSET_INDEX_ENTRY


class _Log:
    """The replayed log: the attributes manager.log_to_clean reads, and nothing else."""

    def __init__(self, tp, config, start: int, now: int):
        self.tp = tp
        self.config = config
        self.log_start_offset = start
        self.log_end_offset = start
        self.segments = [_Segment(start, now)]
        self.size = 0                       # bytes of all segments, kept up to date

    @property
    def last_stable_offset(self) -> int:
        return self.log_end_offset


@dataclass
class _Run:
    settings: Settings
    log: _Log
    checkpoint: int | None = None
    cleans: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    visible: dict = field(default_factory=dict)     # offset of a visible tombstone -> its arrival
    tombstone_lifetimes: list = field(default_factory=list)   # removed past their delete horizon
    tombstones_superseded: int = 0                          # removed because the key was written again
    clean_times: list = field(default_factory=list)


def replay(batches: list, settings: Settings, tp=("whatif", 0)) -> dict:
    """Replay `batches` (in offset order) under `settings`; see the module docstring."""
    if not batches:
        return {"settings": settings.describe(), "model": MODEL, "timeline": [], "summary": {"records": 0}}
    arrivals = []
    clock = batches[0].max_timestamp
    for b in batches:                       # the log's clock never runs backwards
        clock = max(clock, b.max_timestamp)
        arrivals.append(clock)
    t0, t_end = arrivals[0], arrivals[-1]
    run = _Run(settings, _Log(tp, settings.config, batches[0].base_offset, t0))
    cfg = settings.config
    # min/max.compaction.lag.ms make the selection change with time alone: check on every step;
    # without them it changes only with an append, so only the first check after one matters
    timed = cfg.min_compaction_lag_ms > 0 or cfg.max_compaction_lag_ms < rules.LONG_MAX
    step = max(1, settings.backoff_ms, (t_end - t0) // MAX_CHECKS + 1 if timed else 0)
    tl = _Timeline(run, t0, t_end, [b.base_offset for b in batches], arrivals)
    next_check = t0                   # timed: the next check; untimed: the first check after an append
    pending = False
    for b, at in zip(batches, arrivals):
        while (timed or pending) and next_check <= at:
            tl.observe(next_check)
            _checks_at(run, next_check, tl)
            pending = False
            next_check += step
        tl.observe(at)
        _append(run, _Batch(b, at), at)
        tl.observe(at)
        if not timed and not pending:
            next_check = t0 + -(-(at - t0) // step) * step     # the cleaner's first wake-up at or after it
            pending = True
    while (timed or pending) and next_check <= t_end:
        tl.observe(next_check)
        _checks_at(run, next_check, tl)
        pending = False
        next_check += step
    tl.close()
    return {"settings": settings.describe(), "model": MODEL, "timeline": tl.points,
            "summary": _summary(run, tl, batches, t_end)}


MODEL = ("cleans take no time; record bytes are their batch's bytes shared equally; markers follow the tombstone "
         "rule and aborted data goes at the first clean; no consumer group holds tombstones back; retention "
         "(compact,delete) is not replayed")


def _append(run: _Run, b: _Batch, now: int) -> None:
    lg = run.log
    cfg = run.settings.config
    seg = lg.segments[-1]
    index_full = seg.offset_index_bytes + OFFSET_INDEX_ENTRY > cfg.segment_index_bytes
    if should_roll(seg.size, seg.base_offset, seg.rolling_based_timestamp(), seg.created, 0, index_full,
                   segment_bytes=cfg.segment_bytes, max_segment_ms=cfg.max_segment_ms(), messages_size=b.size,
                   max_timestamp_in_messages=b.max_ts, max_offset_in_messages=b.last_offset, now_ms=now):
        seg = _Segment(max(b.base_offset, lg.log_end_offset), now)
        lg.segments.append(seg)
    seg.add(b, cfg.index_interval_bytes)
    lg.size += b.size
    lg.log_end_offset = b.last_offset + 1
    for off, key, tomb in b.records:
        if tomb and key is not None and not b.is_control:
            run.visible[off] = now


def _checks_at(run: _Run, now: int, tl) -> None:
    """One wake-up of the cleaner thread: clean while something is eligible (it loops at once
    after a clean, and backs off only when nothing was)."""
    for _ in range(1000):
        if not _maybe_clean(run, now):
            return
        tl.observe(now)


def _maybe_clean(run: _Run, now: int) -> bool:
    lg = run.log
    ltc, _ = manager.log_to_clean(lg.tp, lg, run.checkpoint, now)
    if not manager.is_eligible(ltc, lg.config.min_cleanable_dirty_ratio):
        return False
    _clean(run, ltc, now)
    return True


def _clean(run: _Run, ltc, now: int) -> None:
    lg = run.log
    cfg = lg.config
    first_dirty, upper = ltc.first_dirty_offset, ltc.first_uncleanable_offset
    latest, key_map = _offset_map(lg, first_dirty, upper, run.settings.map_capacity)
    end_offset = max(latest + 1, first_dirty)
    to_clean = [s for s in lg.segments[:-1] if s.base_offset < end_offset]
    groups = group_segments_by_size(to_clean, cfg.segment_bytes, cfg.segment_index_bytes, upper)
    replaced = {id(s) for s in to_clean}
    cleaned = [_clean_group(run, g, key_map, latest, upper, now) for g in groups]
    keep = [s for s in lg.segments if id(s) not in replaced]
    lg.segments = sorted(cleaned + keep, key=lambda s: s.base_offset)
    lg.size += sum(s.size for s in cleaned) - sum(s.size for s in to_clean)
    run.checkpoint = end_offset
    run.cleans += 1
    run.clean_times.append(now)


def _offset_map(lg: _Log, start: int, end: int, capacity: int) -> tuple[int, dict]:
    """Pass 1 (Cleaner.build_offset_map): the latest offset of each key in [start, end) and the
    last offset mapped; a full map ends the pass at the last record it took."""
    key_map: dict = {}
    latest = -1
    segs = lg.segments
    dirty = [s for i, s in enumerate(segs)
             if s.base_offset < end and (segs[i + 1].base_offset if i + 1 < len(segs) else end) > start]
    for i, seg in enumerate(dirty):
        next_base = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        for b in seg.batches:
            if b.last_offset < start:
                continue
            if b.base_offset >= end:
                break
            if not (b.is_control or b.is_aborted):
                for off, key, _ in b.records:
                    if off < start or key is None:
                        continue
                    if key not in key_map and len(key_map) >= capacity:
                        return latest, key_map
                    key_map[key] = off
                    latest = max(latest, off)
            latest = max(latest, b.last_offset)
        latest = max(latest, next_base - 1)
    return latest, key_map


def _clean_group(run: _Run, group: list, key_map: dict, latest: int, upper: int, now: int) -> _Segment:
    drm = run.log.config.delete_retention_ms
    out = _Segment(group[0].base_offset, now)
    for seg in group:
        run.bytes_read += seg.size
        for b in seg.batches:
            kept_batch = _filter(run, b, key_map, latest, upper, now, drm)
            if kept_batch is not None:
                out.add(kept_batch, run.log.config.index_interval_bytes)
    out.largest_timestamp = max((b.max_ts for b in out.batches), default=group[-1].largest_timestamp)
    run.bytes_written += out.size
    return out


def _filter(run: _Run, b: _Batch, key_map: dict, latest: int, upper: int, now: int, drm: int):
    removable = rules.tombstones_removable(b.horizon is not None, b.horizon or 0, b.last_offset, now)
    if b.is_control or b.is_aborted:
        if b.is_aborted or removable:
            return None
        if b.horizon is None:
            b.horizon = rules.delete_horizon(now, drm)
        return b
    kept = []
    for rec in b.records:
        off, key, tomb = rec
        fate = rules.record_fate(off, latest, key is not None, key_map.get(key, -1) if key is not None else -1,
                                 tomb, removable)
        if fate == rules.KEEP:
            kept.append(rec)
        elif tomb and key is not None:
            arrival = run.visible.pop(off, None)
            if arrival is not None and fate == rules.DROP_TOMBSTONE:
                run.tombstone_lifetimes.append(now - arrival)
            elif arrival is not None:
                run.tombstones_superseded += 1
    if len(kept) == len(b.records) and (b.horizon is not None or not any(t for _, _, t in kept)):
        return b
    if not kept and b.last_offset + 1 != upper:
        return None
    nb = _Batch.__new__(_Batch)
    nb.base_offset, nb.last_offset, nb.max_ts = b.base_offset, b.last_offset, b.max_ts
    nb.records, nb.rec_size = kept, b.rec_size
    nb.size = BATCH_OVERHEAD + int(round(b.rec_size * len(kept)))
    nb.is_control, nb.is_aborted = False, False
    nb.horizon = b.horizon
    if nb.horizon is None and any(t for _, _, t in kept):
        nb.horizon = rules.delete_horizon(now, drm)
    return nb


class _Timeline:
    """SAMPLES equal intervals of the replayed span; each point is the interval's end with the peak
    disk use and the peak age of the oldest uncleaned record seen in it (peaks, not instants: a
    sample taken at one moment of a periodic roll-and-clean cycle would alias), and the counters
    (cleans, bytes read and written) at its end."""

    def __init__(self, run: _Run, t0: int, t_end: int, bases: list, arrivals: list):
        self.run, self.bases, self.arrivals = run, bases, arrivals
        n = SAMPLES if t_end > t0 else 1
        self.ends = [t0 + (t_end - t0) * (i + 1) // n for i in range(n)]
        self.points: list = []
        self.disk_max = self.age_max = 0
        self.peak_disk = self.peak_age = 0
        self.age_sum = 0.0

    def age(self, t: int) -> int:
        lg = self.run.log
        first_dirty = self.run.checkpoint if self.run.checkpoint is not None else lg.log_start_offset
        if first_dirty >= lg.log_end_offset:
            return 0
        i = max(0, bisect.bisect_right(self.bases, first_dirty) - 1)
        return max(0, t - self.arrivals[i])

    def observe(self, t: int) -> None:
        while self.ends and self.ends[0] < t:
            self._close_interval()
        self.disk_max = max(self.disk_max, self.run.log.size)
        self.age_max = max(self.age_max, self.age(t))

    def _close_interval(self) -> None:
        end = self.ends.pop(0)
        self.observe_at_end(end)
        run = self.run
        self.points.append({"time_ms": end, "disk_bytes": self.disk_max, "oldest_uncleaned_age_ms": self.age_max,
                            "segments": len(run.log.segments), "cleans": run.cleans, "bytes_read": run.bytes_read,
                            "bytes_written": run.bytes_written, "tombstones_visible": len(run.visible)})
        self.peak_disk, self.peak_age = max(self.peak_disk, self.disk_max), max(self.peak_age, self.age_max)
        self.age_sum += self.age_max
        self.disk_max = self.age_max = 0

    def observe_at_end(self, end: int) -> None:
        self.disk_max = max(self.disk_max, self.run.log.size)
        self.age_max = max(self.age_max, self.age(end))

    def close(self) -> None:
        while self.ends:
            self._close_interval()


def _pct(xs: list, q: float):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _summary(run: _Run, tl: _Timeline, batches: list, t_end: int) -> dict:
    points = tl.points or [{"disk_bytes": 0, "oldest_uncleaned_age_ms": 0}]
    life = run.tombstone_lifetimes
    still = [t_end - a for a in run.visible.values()]
    return {
        "records": sum(len(b.records) for b in batches), "input_bytes": sum(b.size for b in batches),
        "span_ms": t_end - batches[0].max_timestamp if batches else 0,
        "cleans": run.cleans, "bytes_read": run.bytes_read, "bytes_written": run.bytes_written,
        "disk_bytes_end": run.log.size, "disk_bytes_max": tl.peak_disk,
        "disk_bytes_mean": sum(p["disk_bytes"] for p in points) // len(points),
        "segments_end": len(run.log.segments),
        "oldest_uncleaned_age_ms_max": tl.peak_age,
        "oldest_uncleaned_age_ms_mean": int(sum(p["oldest_uncleaned_age_ms"] for p in points) / len(points)),
        "tombstones_removed": len(life), "tombstones_superseded": run.tombstones_superseded,
        "tombstone_visible_ms": {"min": min(life) if life else None, "median": _pct(life, 0.5),
                                 "p95": _pct(life, 0.95), "max": max(life) if life else None},
        "tombstones_still_visible": len(still), "tombstone_still_visible_ms_max": max(still) if still else None,
        "first_clean_ms": run.clean_times[0] if run.clean_times else None,
    }
