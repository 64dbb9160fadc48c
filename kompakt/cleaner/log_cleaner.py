"""LogCleaner: the broker-facing object that owns the cleaner's workers, config and metrics.

Role: what the Broker constructs (`LogCleaner(config, log_manager, time=time)`), starts and shuts
down, and what storage calls through `LogManager.cleaner` to pause, resume and abort cleaning of a
partition. Per-partition state, checkpoints and selection live in `manager.py`; the two passes in
`cleaner.py`, run by the worker processes of `pool.py`.

Threads: one "cleaner thread" per `log.cleaner.threads` slot (Kafka's CleanerThread), each owning
one worker process. Its loop: take an admin compact-now request or grab the filthiest log; build a
`CleanJob` (a snapshot of the log's segments, taken under the log's lock); hand it to the worker
and wait, turning an Aborted state into the worker's abort flag; swap the `.cleaned` output in
under the log's lock (`swap_in`); checkpoint the new cleaner point; log Kafka's summary; then run
retention on compact,delete logs; sleep `log.cleaner.backoff.ms` when nothing was eligible.

Swap steps (each a crash point with its recovery; the renames inside step 2 are
Log.replace_segments' own numbered steps, recovered by the storage loader):
  1. worker wrote and fsynced `<base>.{log,index,timeindex}.cleaned` for every group
     -> crash: the loader deletes `.cleaned` files; the checkpoint is unchanged, the clean reruns.
  2. per group, under the log's lock: check the replaced segments are still in the log, open the
     cleaned segment, `log.replace_segments([cleaned], olds)` (.cleaned -> .swap -> old .deleted ->
     live) -> crash: the loader finishes or rolls back that group; earlier groups are live
     (cleaning a clean segment again is harmless); the checkpoint is unchanged, the clean reruns.
  3. write the cleaner-offset-checkpoint (temp file, fsync, rename, fsync dir)
     -> crash before: the same clean reruns over already-clean data; after: done.
Test hook: env TEST_KOMPAKT_CRASH_AT = before_swap | after_first_group | before_checkpoint |
after_checkpoint (optionally `:<n>`, the n-th time) makes the broker SIGKILL itself at that point
(crash tests only; the seam is kompakt/storage/faults.py).

Failures: a full disk (ENOSPC/EDQUOT writing `.cleaned` files) abandons the clean: the worker
deletes its partial output, the partition is left as it was and cleaned again after
log.cleaner.backoff.ms (or at once for an admin compact-now). Any other exception in the worker marks the partition uncleanable (skipped until restart,
counted per log dir, Kafka's message logged); a worker that dies is counted in dead-thread-count,
replaced, and its partial output deleted; a partition whose clean killed two workers is marked
uncleanable.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time as _time
from collections import deque

from kompakt.cleaner import cleaner as C
from kompakt.cleaner import rules
from kompakt.cleaner.history import CleanerHistory
from kompakt.cleaner.manager import LogCleanerManager, cleanable_offsets, log_dir_of, make_log_to_clean, now_ms
from kompakt.cleaner.offset_map import BYTES_PER_ENTRY, slots_for_memory
from kompakt.cleaner.pool import MAX_MAP_MEMORY, Worker
from kompakt.cleaner.stats import CleanerMetrics, PartitionCleanStatus, summary_line
from kompakt.cleaner.throttler import Throttler
from kompakt.storage.faults import crash_point

log = logging.getLogger("kompakt.cleaner")

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4, "uncompressed": 0, "none": 0}


def _tp(tp):
    return (tp[0], int(tp[1]))


def _cfg(config, key, default):
    try:
        return config[key]
    except Exception:  # noqa: BLE001 - tests pass plain dicts without every key
        return default


def check_offset_map(threads: int, dedupe_buffer_size: int, load_factor: float) -> None:
    """Raise ValueError when each worker's share of the dedupe buffer cannot hold a single key.
    The share is capped as each worker's map is (MAX_MAP_MEMORY, Kafka's Int.MaxValue): sizing an
    uncapped share of a huge buffer (Long.MAX_VALUE) searched for a prime near 4e17, seconds of
    CPU on the broker's event loop."""
    per_worker = min(dedupe_buffer_size // max(threads, 1), MAX_MAP_MEMORY)
    if threads and (per_worker < 2 * BYTES_PER_ENTRY or int(slots_for_memory(per_worker) * load_factor) < 1):
        raise ValueError(f"log.cleaner.dedupe.buffer.size={dedupe_buffer_size} over "
                         f"log.cleaner.threads={threads} leaves an offset map too small to hold "
                         "a single key, so log cleaning would never make progress; increase "
                         "log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads")


class SwapConflictError(RuntimeError):
    """The log changed under a clean (segments gone or resized); the output is discarded."""


class LogCleaner:
    def __init__(self, config, log_manager, time=_time):
        self.log_manager = log_manager
        self.time = time
        self._read_config(config)
        log_dirs = getattr(config, "log_dirs", None) or _cfg(config, "log.dirs", None) or []
        if isinstance(log_dirs, str):
            log_dirs = [d for d in log_dirs.split(",") if d]
        self.manager = LogCleanerManager(log_dirs, self._logs, time=time)
        self.history = CleanerHistory()       # passes and dirty ratios for the web console (history.py)
        self.manager.history = self.history
        self.metrics = CleanerMetrics()
        self.partitions: dict = {}            # tp -> PartitionCleanStatus
        self.totals = {"cleanings_total": 0, "bytes_read_total": 0, "bytes_written_total": 0,
                       "messages_read_total": 0, "messages_written_total": 0,
                       "guarantee_checks_total": 0, "guarantee_check_seconds_total": 0.0}
        self.guarantee_violations: dict = {}  # topic -> violations found (kompakt_compaction_guarantee_violations_total)
        self.throttler = Throttler(self.io_max)
        self.workers: list[Worker] = []
        self.current: dict = {}               # worker id -> tp being cleaned
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._requests: deque = deque()       # (tp, concurrent Future) for clean_now
        self._deaths_by_tp: dict = {}
        self._started = False
        # The seam of kompakt.tombstone.retention.groups: (tp, LogConfig) -> the group-safe horizon
        # offset of the partition (rules.py; LONG_MAX: no group holds tombstones back). Set by the
        # broker, which owns the consumer groups; called in a cleaner thread when a job is built.
        self.group_horizon = None

    def _read_config(self, config) -> None:
        self.config = config
        self.num_threads = int(_cfg(config, "log.cleaner.threads", 1))
        self.dedupe_buffer_size = int(_cfg(config, "log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024))
        self.load_factor = float(_cfg(config, "log.cleaner.io.buffer.load.factor", 0.9))
        self.backoff_ms = int(_cfg(config, "log.cleaner.backoff.ms", 15000))
        self.io_max = float(_cfg(config, "log.cleaner.io.max.bytes.per.second", 1.7976931348623157e308))
        self.guarantee_check_ratio = float(_cfg(config, "kompakt.cleaner.guarantee.check.ratio", 0.005))

    async def reconfigure(self, config) -> None:
        """Dynamic cleaner configs changed (config/dynamic.py): like Kafka's LogCleaner.reconfigure,
        stop the cleaner threads (a clean in progress is aborted, its output deleted, and it runs
        again later), take the new thread count, offset-map size, throttle and backoff, start again."""
        check_offset_map(int(_cfg(config, "log.cleaner.threads", 1)),
                         int(_cfg(config, "log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024)),
                         float(_cfg(config, "log.cleaner.io.buffer.load.factor", 0.9)))
        was_running = self._started
        if was_running:
            await self.shutdown()
        self._read_config(config)
        self.throttler = Throttler(self.io_max)
        if was_running:
            self.start()
        log.info("log cleaner reconfigured: %d thread(s), %d bytes of offset map, io max %s bytes/s, "
                 "backoff %d ms", self.num_threads, self.dedupe_buffer_size, self.io_max, self.backoff_ms)

    # --- lifecycle ---------------------------------------------------------------------------------
    def _logs(self) -> dict:
        try:
            return {_tp(tp): lg for tp, lg in self.log_manager.all_logs().items()}
        except Exception:  # noqa: BLE001 - a log manager still loading has no logs yet
            return {}

    def start(self, loop=None) -> None:
        if self._started:
            return
        self._started = True
        self._stop.clear()
        per_worker = min(self.dedupe_buffer_size // max(self.num_threads, 1), MAX_MAP_MEMORY)
        try:
            check_offset_map(self.num_threads, self.dedupe_buffer_size, self.load_factor)
        except ValueError:
            self._started = False
            raise
        for i in range(self.num_threads):
            w = Worker(i, per_worker, self.load_factor, self.throttler)
            self.workers.append(w)
            t = threading.Thread(target=self._run, args=(w,), name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        log.info("log cleaner started: %d worker(s), %d bytes of offset map each", self.num_threads, per_worker)

    async def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        for t in self._threads:
            t.join(timeout=30)
        for w in self.workers:
            w.stop()
        while self._requests:
            _, fut = self._requests.popleft()
            if not fut.done():
                fut.set_exception(RuntimeError("log cleaner shut down"))
        self._threads.clear()
        self.workers.clear()
        self._started = False

    # --- hooks used by storage ---------------------------------------------------------------------
    def abort_and_pause_cleaning(self, tp) -> None:
        self.manager.abort_and_pause_cleaning(tp)

    def resume_cleaning(self, tp) -> None:
        self.manager.resume_cleaning(tp)
        self._wake.set()

    def abort_cleaning(self, tp) -> None:
        """Partition deletion: stop any clean and forget the partition (Kafka also drops it from the
        uncleanable set, maintainUncleanablePartitions)."""
        self.manager.abort_cleaning(tp)
        self.manager.forget_uncleanable(tp)
        self.partitions.pop(_tp(tp), None)
        self._deaths_by_tp.pop(_tp(tp), None)

    def pause_cleaning_for_non_compacted_partitions(self) -> list:
        return self.manager.pause_cleaning_for_non_compacted_partitions()

    def update_checkpoints(self, log_dir, partition_to_update=None, partition_to_remove=None) -> None:
        self.manager.update_checkpoints(log_dir, partition_to_update=partition_to_update,
                                        partition_to_remove=partition_to_remove)

    def maybe_truncate_checkpoint(self, tp, offset) -> None:
        self.manager.maybe_truncate_checkpoint(tp, offset)

    def cleaner_checkpoint(self, tp) -> int | None:
        return self.manager.cleaner_checkpoint(tp)

    def retain_checkpoints(self, log_dir, tps) -> None:
        self.manager.retain_checkpoints(log_dir, tps)

    def handle_log_dir_failure(self, log_dir) -> None:
        self.manager.handle_log_dir_failure(log_dir)

    # --- admin -------------------------------------------------------------------------------------
    async def clean_now(self, tp):
        """Clean one partition now, whatever its dirty ratio; returns the clean's figures."""
        if not self._started or not self.workers:
            raise RuntimeError("the log cleaner is not running")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._requests.append((_tp(tp), fut))
        self._wake.set()
        return await asyncio.wrap_future(fut)

    def status(self) -> dict:
        counts, sizes = self.manager.uncleanable_counts()
        self.metrics.uncleanable_partitions = counts
        self.metrics.uncleanable_bytes = sizes
        d = {
            "running": self._started,
            "max_dirty_percent": 100.0 * self.manager.dirtiest_ratio,
            "max_clean_time_secs": self.metrics.max_clean_time_secs,
            "max_compaction_delay_secs": self.manager.max_compaction_delay_ms / 1000.0,
            "max_buffer_utilization_percent": self.metrics.max_buffer_utilization_percent,
            "cleaner_recopy_percent": self.metrics.cleaner_recopy_percent,
            "uncleanable_partitions_count": counts,
            "uncleanable_bytes": sizes,
            "dead_thread_count": self.metrics.dead_thread_count + sum(w.idle_deaths for w in self.workers),
            "time_since_last_run_ms": (int((_time.monotonic() - self.metrics.last_run_monotonic) * 1000)
                                       if self.metrics.last_run_monotonic >= 0 else -1),
            "workers": [{"id": w.id, "pid": w.pid, "alive": w.alive(),
                         "cleaning": "%s-%d" % self.current[w.id] if w.id in self.current else None}
                        for w in self.workers],
            "io_max_bytes_per_second": self.io_max,
            "dedupe_buffer_size": self.dedupe_buffer_size,
            "cleans_aborted": self.metrics.cleans_aborted,
            "cleans_failed": self.metrics.cleans_failed,
            "guarantee_check_ratio": self.guarantee_check_ratio,
            "guarantee_violations_by_topic": dict(self.guarantee_violations),
        }
        d.update(self.totals)
        return d

    def partition_status(self, tp) -> dict | None:
        tp = _tp(tp)
        lg = self.log_manager.get_log(tp)  # one lookup: a scrape asks this for every partition
        if lg is None:
            return None
        ps = self.partitions.get(tp) or PartitionCleanStatus()
        view = self.manager.partition_view(tp)
        d = ps.as_dict()
        d["state"] = view["state"]
        d["paused_count"] = view["paused_count"]
        d["uncleanable"] = view["uncleanable_reason"] is not None
        d["uncleanable_reason"] = view["uncleanable_reason"]
        d["compacted"] = bool(lg.config.compact)
        try:
            cp = self.manager.cleaner_checkpoint(tp)
            fd, fu, _ = cleanable_offsets(lg, cp, now_ms(self.time))
            ltc = make_log_to_clean(tp, lg, fd, fu)
            d.update(dirty_ratio=ltc.cleanable_ratio, cleaner_point=fd, first_dirty_offset=fd,
                     first_uncleanable_offset=ltc.first_uncleanable_offset, clean_bytes=ltc.clean_bytes,
                     cleanable_bytes=ltc.cleanable_bytes)
        except Exception as exc:  # noqa: BLE001 - status must never fail a scrape
            d["status_error"] = str(exc)
        d["last_clean_duration_ms"] = int(ps.last_clean_duration_s * 1000)
        d["distinct_keys_after_last_clean"] = ps.distinct_keys_last_clean
        return d

    # --- the cleaner thread ------------------------------------------------------------------------
    def _run(self, worker: Worker) -> None:
        while not self._stop.is_set():
            cleaned = False
            try:
                cleaned = self._one_round(worker)
            except Exception:  # noqa: BLE001 - the thread must survive anything
                log.exception("log cleaner thread %d: unexpected error", worker.id)
            if not cleaned and not self._stop.is_set():
                self._wake.wait(self.backoff_ms / 1000.0)
                self._wake.clear()

    def _one_round(self, worker: Worker) -> bool:
        self.metrics.last_run_monotonic = _time.monotonic()
        request = None
        try:
            request = self._requests.popleft()
        except IndexError:
            pass
        if request is not None:
            tp, fut = request
            ltc = self.manager.grab_for_clean_now(tp)
            if ltc is None:
                state = self.manager.state_of(tp)
                if state.kind in ("InProgress", "Aborted") and not self._stop.is_set():
                    # another cleaner thread is on it: ask again once that clean is over
                    self._requests.append(request)
                    self._stop.wait(0.05)
                    return True
                if tp not in self._logs():
                    reason = "unknown partition"
                elif state.kind == "Paused":
                    reason = f"cleaning is paused ({state})"
                else:
                    reason = ("nothing cleanable: the cleaner point is at the first uncleanable offset "
                              "(active segment, last stable offset or min.compaction.lag.ms)")
                fut.set_result({"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": reason})
                return True
            self._clean(worker, ltc, fut)
            return True
        ltc = self.manager.grab_filthiest_compacted_log()
        outcome = self._clean(worker, ltc, None) if ltc is not None else None
        self._retention_for_compact_delete()
        # a clean abandoned on a full disk counts as no work: back off before the same disk again
        return ltc is not None and not str((outcome or {}).get("reason", "")).startswith("disk full")

    def _retention_for_compact_delete(self) -> None:
        """compact,delete: after cleaning, retention's rules delete old segments (Kafka's deleteOldSegments
        from the cleaner thread), while the logs are InProgress so nothing else cleans them."""
        logs = self.manager.grab_deletable_logs()
        if not logs:
            return
        from kompakt.storage import retention
        try:
            for tp, lg in logs:
                try:
                    with lg.lock:
                        plan = retention.plan_for_log(lg, now_ms(self.time))
                        if plan:
                            reason = ", ".join(r for r, _ in plan.steps)
                            n = lg.delete_segments(plan.segments, reason)
                            log.info("compact,delete retention removed %d segment(s) of %s-%d (%s)",
                                     n, tp[0], tp[1], reason)
                except Exception as exc:  # noqa: BLE001 - retention failing must not stop cleaning
                    log.warning("retention of compacted log %s-%d failed: %s", tp[0], tp[1], exc)
        finally:
            self.manager.done_deleting([tp for tp, _ in logs])

    def build_job(self, ltc) -> C.CleanJob:
        lg = ltc.log
        cfg = lg.config
        with lg.lock:
            segs = list(lg.segments)
            start = lg.log_start_offset
        infos = []
        for s in segs:
            infos.append(C.SegmentInfo(
                s.base_offset, s.log_path, s.size,
                _size_of_index(getattr(s, "offset_index", None)),
                _size_of_index(getattr(s, "time_index", None)),
                _v(getattr(s, "last_modified", 0)) / 1000.0))
        cleanable = [i for i in infos[:-1] if i.base_offset < ltc.first_uncleanable_offset]
        tail = infos[len(cleanable):]
        codec_name = str(getattr(cfg, "compression_type", "producer")).lower()
        return C.CleanJob(
            tp=ltc.tp, dir=lg.dir, segments=cleanable, tail=tail,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset, log_start_offset=start,
            now_ms=now_ms(self.time), delete_retention_ms=cfg.delete_retention_ms,
            segment_bytes=cfg.segment_bytes,
            max_index_size=getattr(cfg, "segment_index_bytes", 10 * 1024 * 1024),
            index_interval_bytes=getattr(cfg, "index_interval_bytes", 4096),
            target_codec=CODECS.get(codec_name),
            active_producers=_active_producers(lg),
            group_horizon_offset=self._group_horizon(ltc.tp, cfg),
            guarantee_check_ratio=self.guarantee_check_ratio)

    def _group_horizon(self, tp, cfg) -> int:
        if self.group_horizon is None:
            return rules.NO_GROUP_HORIZON
        try:
            offset = self.group_horizon(tp, cfg)
        except Exception:  # noqa: BLE001 - not knowing the groups must not fail the clean: hold all
            log.exception("group-safe horizon of %s-%d unknown; this clean keeps every tombstone", tp[0], tp[1])
            return 0
        return rules.NO_GROUP_HORIZON if offset is None else int(offset)

    def _clean(self, worker: Worker, ltc, fut) -> dict | None:
        tp = ltc.tp
        lg = ltc.log
        log_dir = log_dir_of(lg)
        started_ms = now_ms(self.time)
        self.current[worker.id] = tp
        outcome = None
        end_offset = None
        try:
            job = self.build_job(ltc)
            log.info("Beginning cleaning of log %s-%d (dirty section [%d, %d), ratio %.2f)", tp[0], tp[1],
                     ltc.first_dirty_offset, ltc.first_uncleanable_offset, ltc.cleanable_ratio)
            kind, payload = worker.run(job, lambda: self.manager.is_aborted(tp), self._stop.is_set)
            if kind == "ok" and payload.guarantee is not None:
                self._note_check(tp, payload.guarantee)
                if payload.guarantee.violations:
                    self._discard(payload)
                    kind, payload = "violation", payload.guarantee
            if kind == "ok":
                if self.manager.is_aborted(tp) or self._stop.is_set():
                    self._discard(payload)
                    kind, payload = "aborted", None
                else:
                    try:
                        self.swap_in(lg, payload)
                    except SwapConflictError as exc:
                        log.info("discarding clean of %s-%d: %s", tp[0], tp[1], exc)
                        self._discard(payload)
                        kind, payload = "aborted", None
            if kind == "ok":
                end_offset = payload.end_offset
                outcome = self._record(worker, ltc, payload, started_ms)
            elif kind == "aborted":
                self.metrics.cleans_aborted += 1
                outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": "aborted"}
            elif kind == "disk_full":
                # the worker deleted what it wrote: the partition is as it was; try again later
                self.metrics.cleans_aborted += 1
                log.warning("abandoned the clean of %s-%d: the disk is full (%s); the log is unchanged and "
                            "is cleaned again once there is space", tp[0], tp[1], payload)
                outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": f"disk full: {payload}"}
            elif kind == "violation":
                reason = self._refuse(lg, tp, log_dir, ltc, payload)
                outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": reason,
                           "guarantee": payload.as_dict()}
            elif kind == "died":
                self.metrics.dead_thread_count += 1
                C.delete_cleaned_files(lg.dir)
                n = self._deaths_by_tp[tp] = self._deaths_by_tp.get(tp, 0) + 1
                if n >= 2:
                    self._uncleanable(lg, tp, log_dir, f"worker died {n} times cleaning it")
                outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": "worker died"}
            else:
                self._uncleanable(lg, tp, log_dir, str(payload).strip().splitlines()[-1])
                log.warning("[kafka-log-cleaner-thread-%d]: Unexpected exception thrown when cleaning log %s. "
                            "Marking its partition (%s-%d) as uncleanable\n%s", worker.id, _describe(lg),
                            tp[0], tp[1], payload)
                outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": str(payload)}
        except Exception as exc:  # noqa: BLE001 - a failed swap marks the partition like a failed clean
            self._uncleanable(lg, tp, log_dir, repr(exc))
            log.exception("Unexpected exception thrown when cleaning log %s. Marking its partition "
                          "(%s-%d) as uncleanable", _describe(lg), tp[0], tp[1])
            outcome = {"topic": tp[0], "partition": tp[1], "cleaned": False, "reason": repr(exc)}
        finally:
            self.current.pop(worker.id, None)
            if end_offset is not None:
                crash_point("before_checkpoint")
            self.manager.done_cleaning(tp, log_dir, end_offset)
            if end_offset is not None:
                crash_point("after_checkpoint")
            if fut is not None and not fut.done():
                fut.set_result(outcome)
        return outcome

    def _note_check(self, tp, report) -> None:
        self.totals["guarantee_checks_total"] += 1
        self.totals["guarantee_check_seconds_total"] += report.seconds
        ps = self.partitions.setdefault(tp, PartitionCleanStatus())
        ps.last_guarantee_check = {"ok": report.ok, "sampled_batches": report.sampled_batches,
                                   "records_checked": report.records_checked,
                                   "output_batches": report.output_batches,
                                   "seconds": round(report.seconds, 6), "seed": report.seed,
                                   "violations": [v.as_dict() for v in report.violations[:10]]}

    def _refuse(self, lg, tp, log_dir, ltc, report) -> str:
        """A clean whose output breaks a compaction guarantee: nothing is swapped in (the output is
        already deleted), the partition is marked uncleanable, and everyone hears about it."""
        n = len(report.violations)
        self.guarantee_violations[tp[0]] = self.guarantee_violations.get(tp[0], 0) + n
        kinds = sorted({v.kind for v in report.violations})
        first = report.violations[0]
        reason = (f"compaction guarantee violated ({', '.join(kinds)}): {first.detail}; "
                  f"output discarded, log unchanged")
        self._uncleanable(lg, tp, log_dir, reason)
        log.error("COMPACTION GUARANTEE VIOLATED in the clean of %s-%d (dirty section [%d, %d)): %d violation(s) "
                  "of %s; first: %s. The cleaned output was NOT swapped in (the log is unchanged) and the "
                  "partition is marked uncleanable until restart. Check seed %d, sampled %d batches / %d "
                  "records. Violations: %s", tp[0], tp[1], ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                  n, ", ".join(kinds), first.detail, report.seed, report.sampled_batches,
                  report.records_checked, "; ".join(f"{v.kind}@{v.offset}" for v in report.violations[:20]))
        return reason

    def _uncleanable(self, lg, tp, log_dir, reason: str) -> None:
        self.metrics.cleans_failed += 1
        self.manager.mark_uncleanable(log_dir, tp, reason)
        ps = self.partitions.setdefault(tp, PartitionCleanStatus())
        ps.uncleanable = True
        ps.last_error = reason

    def _discard(self, result) -> None:
        for g in result.groups:
            for ext in (".log", ".index", ".timeindex", ".txnindex"):
                C._unlink(C.segment_file(os.path.dirname(g.log_path), g.base_offset, ext, C.CLEANED_SUFFIX))

    def swap_in(self, lg, result) -> None:
        """Steps 2 of the module docstring: each group through Log.replace_segments under the lock."""
        from kompakt.storage.segment import LogSegment
        crash_point("before_swap")
        with lg.lock:
            current = {s.base_offset: s for s in lg.segments}
            active = lg.segments[-1] if lg.segments else None
            for g in result.groups:
                for b in g.replaces:
                    seg = current.get(b)
                    if seg is None or seg is active:
                        raise SwapConflictError(f"segment {b} is no longer a cleanable segment of the log")
            for n, g in enumerate(result.groups):
                olds = [current[b] for b in g.replaces]
                new = LogSegment.open(lg.dir, g.base_offset, lg.config, suffix=C.CLEANED_SUFFIX)
                # an empty index file opens as a preallocated active one: trim it like Kafka's
                # onBecomeInactiveSegment before the segment joins the log as an inactive segment
                new.on_become_inactive()
                log.info("Swapping in cleaned segment %s for segment(s) %s in log %s-%d", new,
                         [o.base_offset for o in olds], lg.tp[0], lg.tp[1])
                lg.replace_segments([new], olds)
                if n == 0:
                    crash_point("after_first_group")

    def _record(self, worker, ltc, result, started_ms) -> dict:
        tp = ltc.tp
        s = result.stats
        self.metrics.record(worker.id, s)
        self.totals["cleanings_total"] += 1
        self.totals["bytes_read_total"] += s.bytes_read
        self.totals["bytes_written_total"] += s.bytes_written
        self.totals["messages_read_total"] += s.messages_read
        self.totals["messages_written_total"] += s.messages_written
        self._deaths_by_tp.pop(tp, None)
        ps = self.partitions.setdefault(tp, PartitionCleanStatus())
        ps.cleaner_point = result.end_offset
        ps.first_uncleanable_offset = ltc.first_uncleanable_offset
        ps.last_clean_time_ms = now_ms(self.time)
        ps.last_clean_duration_s = s.elapsed_secs
        ps.records_after_last_clean = s.messages_written
        ps.distinct_keys_last_clean = result.map_size
        ps.tombstones_retained = s.tombstones_retained
        ps.tombstones_held_back = s.tombstones_held_back
        ps.group_horizon_offset = result.group_horizon_offset
        ps.keyless_dropped = s.invalid_messages
        ps.cleans += 1
        if result.end_offset < ltc.first_uncleanable_offset:
            ps.partial_passes += 1
        # Kafka's multi-line layout: the text log format keeps its line breaks (broker/observability/logging_setup.py)
        log.info(summary_line(worker.id, f"{tp[0]}-{tp[1]}", ltc.first_dirty_offset, result.end_offset, s),
                 extra={"_multiline": True})
        self.history.record_pass(now_ms(self.time), tp, s, ltc.cleanable_ratio, ltc.first_dirty_offset,
                                 result.end_offset)
        out = {"topic": tp[0], "partition": tp[1], "cleaned": True,
               "first_dirty_offset": ltc.first_dirty_offset, "end_offset": result.end_offset,
               "first_uncleanable_offset": ltc.first_uncleanable_offset,
               "groups": [[g.base_offset, g.replaces] for g in result.groups], "map_size": result.map_size}
        out.update(s.as_dict())
        return out


def _v(x):
    return x() if callable(x) else x


def _size_of_index(idx) -> int:
    if idx is None:
        return 0
    try:
        return int(_v(idx.size_in_bytes))
    except Exception:  # noqa: BLE001
        return 0


def _active_producers(lg):
    """{pid: (last data offset or -1, epoch)} from the log's producer state, None if unknown."""
    ps = getattr(lg, "producer_state", None)
    producers = getattr(ps, "producers", None)
    if producers is None:
        return None
    out = {}
    for pid, e in list(producers.items()):
        try:
            out[pid] = (e.last_data_offset, e.producer_epoch)
        except Exception:  # noqa: BLE001
            continue
    return out


def _describe(lg) -> str:
    return (f"Log(dir={lg.dir}, topic={lg.tp[0]}, partition={lg.tp[1]}, "
            f"logStartOffset={lg.log_start_offset}, logEndOffset={lg.log_end_offset})")
