"""LogCleanerManager: per-partition cleaning state, cleaner checkpoints, uncleanable partitions,
and the choice of the filthiest log (Kafka's LogCleanerManager + LogToClean).

Role: everything the cleaner decides *about* partitions, behind one lock (`self.lock`, with the
condition `paused_cond` that abort_and_pause_cleaning waits on). It never reads records; it reads
segment sizes, offsets and (for max.compaction.lag.ms) the first batch header of dirty segments.

State machine: see `state.py` (table repeated there); this module applies its events:
GRAB in `grab_filthiest_compacted_log` / `grab_for_clean_now` / `grab_deletable_logs`, DONE in
`done_cleaning` / `done_deleting`, PAUSE in `abort_and_pause_cleaning` /
`pause_cleaning_for_non_compacted_partitions`, RESUME in `resume_cleaning`.

The cleaner-offset-checkpoint (one per log dir, file `cleaner-offset-checkpoint`, written through
kompakt.storage.checkpoint: version line `0`, entry count, then `topic partition offset` lines)
holds each compacted partition's first dirty offset, the cleaner point. It self-heals: a point
below the log start or above the log end is reset to the log start (and rewritten).

Selection (seed 001, "Choosing the filthiest log"): for every compacted log not in a state and not
uncleanable, the cleanable range is [first dirty, first uncleanable) where first uncleanable =
min(last stable offset, active segment base, base of the first segment younger than
min.compaction.lag.ms), rounded down to the base offset of the segment holding it (Kafka's
LogToClean: a segment with an open transaction in it is left whole); ratio = cleanable bytes / (clean bytes + cleanable bytes); eligible when
ratio > min.cleanable.dirty.ratio or when max.compaction.lag.ms is exceeded (and something is
cleanable); the largest ratio wins. `dirtiest_ratio` (max-dirty-percent) is the largest ratio of
every non-empty log considered, eligible or not (Kafka's dirtiestLogCleanableRatio).

Invariants: a partition is handed to a worker only after GRAB succeeded under the lock; the
checkpoint only moves forward through `done_cleaning` (after the swap), and backward only through
`maybe_truncate_checkpoint` (truncation) and self-healing.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time as _time
from dataclasses import dataclass

from kompakt.cleaner import state as S

log = logging.getLogger(__name__)

OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LONG_MAX = 2**63 - 1
_FIRST_BATCH_TS = struct.Struct(">q")  # maxTimestamp of a batch, at byte 35


def _tp(tp):
    return (tp[0], int(tp[1]))


def _v(x):
    return x() if callable(x) else x


def now_ms(time) -> int:
    return int(time.time() * 1000)


def log_dir_of(lg) -> str:
    return os.path.dirname(os.path.abspath(lg.dir))


def segments_between(segments, start: int, end: int):
    """Kafka's logSegments(from, to): segments whose range [base, next base) meets [start, end)."""
    out = []
    n = len(segments)
    for i, seg in enumerate(segments):
        if seg.base_offset >= end:
            break
        nxt = segments[i + 1].base_offset if i + 1 < n else LONG_MAX
        if nxt > start:
            out.append(seg)
    return out


@dataclass
class LogToClean:
    tp: tuple
    log: object
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False
    max_compaction_delay_ms: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def first_batch_timestamp(seg) -> int:
    """The max timestamp of a segment's first batch (-1: none); a LogSegment keeps it cached as its
    rolling-based timestamp, anything else with `read_bytes` is read."""
    cached = getattr(seg, "rolling_based_timestamp", None)
    if cached is not None:
        try:
            ts = cached()
        except Exception:  # noqa: BLE001 - a segment that cannot be read gives no timestamp
            return -1
        return -1 if ts is None else ts
    try:
        raw = seg.read_bytes(0, 61)
    except Exception:  # noqa: BLE001 - a segment that cannot be read gives no timestamp
        return -1
    if len(raw) < 61:
        return -1
    return _FIRST_BATCH_TS.unpack_from(raw, 35)[0]


def cleanable_offsets(lg, checkpoint: int | None, now: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, checkpoint needs rewriting)."""
    start = lg.log_start_offset
    end = lg.log_end_offset
    force = False
    if checkpoint is None:
        first_dirty = start
    elif checkpoint < start or checkpoint > end:
        log.warning("Resetting first dirty offset of %s to log start offset %d since the "
                    "checkpointed offset %d is invalid.", lg.tp, start, checkpoint)
        first_dirty = start
        force = True
    else:
        first_dirty = checkpoint
    segments = list(lg.segments)
    active_base = segments[-1].base_offset if segments else end
    bounds = [lg.last_stable_offset, active_base]
    lag = lg.config.min_compaction_lag_ms
    if lag > 0:
        for seg in segments_between(segments, first_dirty, active_base):
            if seg is segments[-1]:
                break
            if _v(seg.largest_timestamp) > now - lag:
                bounds.append(seg.base_offset)
                break
    first_uncleanable = min(bounds)
    return first_dirty, max(first_uncleanable, first_dirty), force


def max_compaction_delay(lg, first_dirty: int, now: int) -> int:
    lag = lg.config.max_compaction_lag_ms
    if lag >= LONG_MAX:
        return 0
    segments = list(lg.segments)
    earliest = LONG_MAX
    for seg in segments_between(segments[:-1], first_dirty, LONG_MAX):
        ts = first_batch_timestamp(seg)
        if ts > 0:
            earliest = min(earliest, ts)
    clean_until = now - max(lag, 0)
    return clean_until - earliest if earliest < clean_until else 0


def is_eligible(ltc: LogToClean, min_cleanable_dirty_ratio: float) -> bool:
    """Kafka's selection test: dirty ratio above min.cleanable.dirty.ratio, or max.compaction.lag.ms
    exceeded with something cleanable."""
    return ltc.total_bytes > 0 and ((ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
                                    or ltc.cleanable_ratio > min_cleanable_dirty_ratio)


def filthiest(candidates: list) -> LogToClean | None:
    """The eligible log with the largest dirty ratio (Kafka's filthiest log)."""
    return max(candidates, key=lambda c: c.cleanable_ratio) if candidates else None


def first_uncleanable_segment_base(segments, uncleanable: int) -> int:
    """Kafka's calculateCleanableBytes: the base offset of the non-active segment holding
    `uncleanable`, else of the active segment. A bound inside a segment (the last stable offset of
    an open transaction) keeps that whole segment out of the clean."""
    if not segments:
        return uncleanable
    active = segments[-1]
    if uncleanable >= active.base_offset:
        return active.base_offset
    holder = segments[0]
    for seg in segments[:-1]:
        if seg.base_offset > uncleanable:
            break
        holder = seg
    return holder.base_offset


def make_log_to_clean(tp, lg, first_dirty: int, uncleanable: int, needs_now=False, delay=0) -> LogToClean:
    """Kafka's LogToClean: `uncleanable` (cleanable_offsets' bound) becomes the base offset of the
    segment holding it; cleanable bytes are the segments in [min(first dirty, that base), that base)."""
    segments = list(lg.segments)
    first_uncleanable = first_uncleanable_segment_base(segments, uncleanable)
    clean = sum(s.size for s in segments_between(segments, -1, first_dirty))
    cleanable = sum(s.size for s in segments_between(segments, min(first_dirty, first_uncleanable),
                                                     first_uncleanable))
    return LogToClean(tp, lg, first_dirty, first_uncleanable, clean, cleanable, needs_now, delay)


def log_to_clean(tp, lg, checkpoint: int | None, now: int) -> tuple[LogToClean, bool]:
    """One log's candidacy: its LogToClean and whether the checkpoint needs rewriting. Pure over
    what `lg` exposes (segments with base_offset, size, largest_timestamp and a first batch
    timestamp; offsets; config), so the what-if replay runs it over simulated segments."""
    first_dirty, first_uncleanable, force = cleanable_offsets(lg, checkpoint, now)
    delay = max_compaction_delay(lg, first_dirty, now)
    return make_log_to_clean(tp, lg, first_dirty, first_uncleanable, delay > 0, delay), force


class LogCleanerManager:
    def __init__(self, log_dirs, logs_fn, *, time=_time):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.logs_fn = logs_fn            # () -> {TopicPartition: Log}
        self.time = time
        self.lock = threading.RLock()
        self.paused_cond = threading.Condition(self.lock)
        self.in_progress: dict = {}       # tp -> CleaningState (absent = NONE)
        self.uncleanable: dict = {}       # log dir -> {tp: reason}
        self.checkpoint_files: dict = {}
        self._cp_cache: dict = {}         # log dir -> {tp: offset}, the files' content
        self.dirtiest_ratio = 0.0
        self.max_compaction_delay_ms = 0
        self.last_selection: dict = {}    # tp -> LogToClean of the last selection round
        self.history = None               # a CleanerHistory (set by LogCleaner): dirty ratio samples
        from kompakt.storage.checkpoint import OffsetCheckpointFile
        for d in self.log_dirs:
            self.checkpoint_files[d] = OffsetCheckpointFile(os.path.join(d, OFFSET_CHECKPOINT_FILE))

    # --- state -------------------------------------------------------------------------------------
    def state_of(self, tp) -> S.CleaningState:
        with self.lock:
            return self.in_progress.get(_tp(tp), S.NONE)

    def _apply(self, tp, event) -> S.CleaningState:
        tp = _tp(tp)
        new = S.transition(self.in_progress.get(tp, S.NONE), event, tp)
        if new == S.NONE:
            self.in_progress.pop(tp, None)
        else:
            self.in_progress[tp] = new
        self.paused_cond.notify_all()
        return new

    def is_aborted(self, tp) -> bool:
        return self.state_of(tp).kind == "Aborted"

    def abort_and_pause_cleaning(self, tp, timeout_s: float | None = None) -> None:
        """PAUSE, then wait until the partition is Paused (the worker, if any, has stopped)."""
        tp = _tp(tp)
        deadline = None if timeout_s is None else _time.monotonic() + timeout_s
        with self.lock:
            self._apply(tp, S.PAUSE)
            while self.in_progress.get(tp, S.NONE).kind != "Paused":
                left = 0.1 if deadline is None else min(0.1, deadline - _time.monotonic())
                if left <= 0:
                    raise TimeoutError(f"cleaning of {tp} did not stop in time")
                self.paused_cond.wait(left)

    def resume_cleaning(self, tp) -> None:
        with self.lock:
            self._apply(tp, S.RESUME)

    def abort_cleaning(self, tp) -> None:
        """Kafka's abortCleaning: stop any clean and leave the partition free (used on deletion)."""
        with self.lock:
            self.abort_and_pause_cleaning(tp)
            self._apply(tp, S.RESUME)

    def pause_cleaning_for_non_compacted_partitions(self) -> list:
        """Retention of delete-only logs: pause each (they are never InProgress) and return them."""
        out = []
        with self.lock:
            for tp, lg in self.logs_fn().items():
                if not lg.config.compact:
                    self._apply(tp, S.PAUSE)
                    out.append((tp, lg))
        return out

    def done_cleaning(self, tp, log_dir: str | None, end_offset: int | None) -> None:
        """End of a clean (success, abort or failure): checkpoint when given, then DONE."""
        with self.lock:
            if end_offset is not None and log_dir is not None and self.state_of(tp).kind == "InProgress":
                self.update_checkpoints(log_dir, partition_to_update=(tp, end_offset))
            self._apply(tp, S.DONE)

    def done_deleting(self, tps) -> None:
        with self.lock:
            for tp in tps:
                self._apply(tp, S.DONE)

    # --- uncleanable -------------------------------------------------------------------------------
    def mark_uncleanable(self, log_dir: str, tp, reason: str) -> None:
        with self.lock:
            self.uncleanable.setdefault(log_dir, {})[_tp(tp)] = reason

    def forget_uncleanable(self, tp) -> None:
        with self.lock:
            for tps in self.uncleanable.values():
                tps.pop(_tp(tp), None)

    def is_uncleanable(self, tp) -> bool:
        tp = _tp(tp)
        with self.lock:
            return any(tp in s for s in self.uncleanable.values())

    def uncleanable_counts(self) -> tuple[dict, dict]:
        """({log dir: partitions}, {log dir: bytes}) for uncleanable-partitions-count / -bytes."""
        counts, sizes = {}, {}
        logs = self.logs_fn()
        with self.lock:
            for d, tps in self.uncleanable.items():
                counts[d] = len(tps)
                total = 0
                for tp in list(tps):
                    lg = logs.get(tp)
                    if lg is None:
                        continue
                    ltc = make_log_to_clean(tp, lg, *cleanable_offsets(
                        lg, self.cleaner_checkpoint(tp), now_ms(self.time))[:2])
                    total += ltc.cleanable_bytes
                sizes[d] = total
        return counts, sizes

    # --- checkpoints -------------------------------------------------------------------------------
    def _read_dir(self, d: str) -> dict:
        """The checkpoint of one dir, read once and then kept in memory (only we write it)."""
        cached = self._cp_cache.get(d)
        if cached is None:
            f = self.checkpoint_files[d]
            try:
                cached = {_tp(tp): off for tp, off in f.read().items()}
            except Exception as exc:  # noqa: BLE001 - a bad file means "no checkpoints" (self-heals)
                log.warning("failed to read cleaner checkpoint %s: %s", f.path, exc)
                cached = {}
            self._cp_cache[d] = cached
        return cached

    def all_cleaner_checkpoints(self) -> dict:
        out = {}
        with self.lock:
            for d in self.checkpoint_files:
                out.update(self._read_dir(d))
        return out

    def cleaner_checkpoint(self, tp) -> int | None:
        """all_cleaner_checkpoints().get(tp) without copying every partition's checkpoint (a
        scrape asks this for each compacted partition: the copy made it quadratic)."""
        tp = _tp(tp)
        found = None
        with self.lock:
            for d in self.checkpoint_files:
                found = self._read_dir(d).get(tp, found)   # a later dir wins, as in the merged dict
        return found

    def update_checkpoints(self, log_dir: str, partition_to_update=None, partition_to_remove=None) -> None:
        log_dir = os.path.abspath(log_dir)
        with self.lock:
            f = self.checkpoint_files.get(log_dir)
            if f is None:
                return
            current = dict(self._read_dir(log_dir))
            live = self.logs_fn()
            current = {tp: off for tp, off in current.items() if tp in live}
            if partition_to_update is not None:
                tp, off = partition_to_update
                current[_tp(tp)] = off
            if partition_to_remove is not None:
                current.pop(_tp(partition_to_remove), None)
            f.write(current)
            self._cp_cache[log_dir] = current

    def retain_checkpoints(self, log_dir: str, tps) -> None:
        """Keep only the entries of `tps` (the logs in `log_dir`) in its checkpoint: an entry of a
        partition living in another dir (a move interrupted before it rewrote the old dir's file,
        storage/alter_log_dirs.py) would otherwise win over the live one there."""
        log_dir = os.path.abspath(log_dir)
        with self.lock:
            f = self.checkpoint_files.get(log_dir)
            if f is None:
                return
            current = self._read_dir(log_dir)
            keep = {_tp(tp) for tp in tps}
            kept = {tp: off for tp, off in current.items() if tp in keep}
            if len(kept) != len(current):
                log.info("dropping cleaner checkpoints of partitions not in %s: %s", log_dir,
                         sorted(set(current) - set(kept)))
                f.write(kept)
                self._cp_cache[log_dir] = kept

    def maybe_truncate_checkpoint(self, tp, offset: int, log_dir: str | None = None) -> None:
        """After truncation: a cleaner point above the new end moves down to `offset`."""
        tp = _tp(tp)
        with self.lock:
            cps = self.all_cleaner_checkpoints()
            cur = cps.get(tp)
            if cur is not None and cur > offset:
                if log_dir is None:
                    lg = self.logs_fn().get(tp)
                    log_dir = log_dir_of(lg) if lg is not None else None
                if log_dir is not None:
                    self.update_checkpoints(log_dir, partition_to_update=(tp, offset))

    def handle_log_dir_failure(self, log_dir: str) -> None:
        with self.lock:
            self.checkpoint_files.pop(os.path.abspath(log_dir), None)
            self._cp_cache.pop(os.path.abspath(log_dir), None)
            self.uncleanable.pop(os.path.abspath(log_dir), None)

    # --- selection ---------------------------------------------------------------------------------
    def _log_to_clean(self, tp, lg, checkpoints, now: int) -> tuple[LogToClean, bool]:
        return log_to_clean(tp, lg, checkpoints.get(tp), now)

    def grab_filthiest_compacted_log(self, pre_clean_stats: dict | None = None) -> LogToClean | None:
        now = now_ms(self.time)
        with self.lock:
            checkpoints = self.all_cleaner_checkpoints()
            candidates = []
            max_delay = 0
            selection = {}
            for tp, lg in self.logs_fn().items():
                tp = _tp(tp)
                if not lg.config.compact or tp in self.in_progress or self.is_uncleanable(tp):
                    continue
                try:
                    ltc, force = self._log_to_clean(tp, lg, checkpoints, now)
                except Exception as exc:  # noqa: BLE001 - a log changing under us: skip this round
                    log.debug("skipping %s in selection: %s", tp, exc)
                    continue
                if force:
                    self.update_checkpoints(log_dir_of(lg), partition_to_update=(tp, ltc.first_dirty_offset))
                selection[tp] = ltc
                max_delay = max(max_delay, ltc.max_compaction_delay_ms)
                if is_eligible(ltc, lg.config.min_cleanable_dirty_ratio):
                    candidates.append(ltc)
            self.last_selection = selection
            if self.history is not None:
                self.history.sample_dirty(now, {tp: c.cleanable_ratio for tp, c in selection.items()})
            self.max_compaction_delay_ms = max_delay
            # Kafka's dirtiestLogCleanableRatio (max-dirty-percent): over every non-empty log
            # considered, before the min.cleanable.dirty.ratio filter
            self.dirtiest_ratio = max((c.cleanable_ratio for c in selection.values() if c.total_bytes > 0),
                                      default=0.0)
            best = filthiest(candidates)
            if best is None:
                return None
            self._apply(best.tp, S.GRAB)
            return best

    def grab_for_clean_now(self, tp) -> LogToClean | None:
        """Admin compact-now: GRAB this partition whatever its ratio (None if busy or nothing to do)."""
        tp = _tp(tp)
        now = now_ms(self.time)
        with self.lock:
            lg = self.logs_fn().get(tp)
            if lg is None or tp in self.in_progress:
                return None
            ltc, force = self._log_to_clean(tp, lg, self.all_cleaner_checkpoints(), now)
            if force:
                self.update_checkpoints(log_dir_of(lg), partition_to_update=(tp, ltc.first_dirty_offset))
            if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
                return None
            self._apply(tp, S.GRAB)
            return ltc

    def grab_deletable_logs(self) -> list:
        """compact,delete logs not in a state: GRAB each so retention may run on them."""
        out = []
        with self.lock:
            for tp, lg in self.logs_fn().items():
                tp = _tp(tp)
                if lg.config.compact and lg.config.delete and tp not in self.in_progress \
                        and not self.is_uncleanable(tp):
                    self._apply(tp, S.GRAB)
                    out.append((tp, lg))
        return out

    def partition_view(self, tp) -> dict:
        tp = _tp(tp)
        with self.lock:
            st = self.in_progress.get(tp, S.NONE)
            ltc = self.last_selection.get(tp)
            reason = None
            for tps in self.uncleanable.values():
                if tp in tps:
                    reason = tps[tp]
            return {"state": str(st), "paused_count": st.count if st.kind == "Paused" else 0,
                    "uncleanable_reason": reason, "selection": ltc}
