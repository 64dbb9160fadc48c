"""LogManager: every partition log across `log.dirs`, their topics, and the background log tasks.

Role (Kafka's LogManager for one node): validate and lock each log dir, keep `meta.properties`,
load and recover every partition log at startup (`num.recovery.threads.per.data.dir` threads per
dir, all dirs at once), own the topic metadata (TopicStore), create / delete / grow topics and
apply config changes live, and run the background tasks on the broker's asyncio loop with all
blocking work (fsync, unlink, retention scans) in worker threads:

    task                     period (broker key)                             work
    kafka-log-retention      log.retention.check.interval.ms                 cleanup_logs()
    kafka-log-flusher        log.flush.scheduler.interval.ms (*)             flush_dirty_logs()
    recovery-point ckpt      log.flush.offset.checkpoint.interval.ms         checkpoint_recovery_offsets()
    log-start ckpt           log.flush.start.offset.checkpoint.interval.ms   checkpoint_log_start_offsets()
    kafka-delete-logs        next due `-delete` dir                          delete_logs()
    delete-file              next due `.deleted` segment                     run_due_segment_deletions()
    producer-id expiration   producer.id.expiration.check.interval.ms        remove_expired_producers()
  every task first waits log.initial.task.delay.ms; the runner and the deletion queue live in
  storage.log_tasks. Beside them, one group-commit flusher thread per log dir
  (storage.group_commit) syncs every log appended to, round after round, and answers the
  requests waiting for durability (`wait_durable`); with kompakt.durable.acks.enable (the default)
  each log's high watermark is its durable offset. (*) Kafka never flushes by time while
  log.flush.scheduler.interval.ms is Long.MAX_VALUE (its default) even if a topic sets flush.ms;
  we check at the smallest finite flush.ms instead, so a topic's flush.ms is honoured.

Per log dir: `.lock`, `meta.properties`, `.kafka_cleanshutdown` (formats in storage.log_dirs),
`recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` (storage.checkpoint), the
partition dirs `<topic>-<n>/` (storage.log.Log) and their `-delete` / `-stray` renames
(storage.log_dirs); in the first dir only, `kompakt-topics.json` (storage.topic_store).

Crash rules: topic create saves the store before making dirs (startup creates missing partitions,
unless a log dir is offline: then they stay offline, see `_unloaded`);
delete saves the store (topic gone, id remembered as deleted) before renaming dirs `-delete`
(startup deletes dirs of deleted ids); the partition dir rename to `-delete` is atomic and
startup finishes the deletion. Retention/truncation of a compacted log run between
`cleaner.abort_and_pause_cleaning(tp)` and `cleaner.resume_cleaning(tp)` (seed 001).

Concurrency: `_lock` (Kafka's logCreationOrDeletionLock) serialises create/delete/alter/startup/
shutdown; each Log has its own lock for appends, retention and truncation. Never call blocking
methods (startup, shutdown, cleanup_logs, flush_*, checkpoint_*, create/delete) on the event loop.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import time as _time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable

from kompakt.config.broker_config import LONG_MAX
from kompakt.config.topic_config import LogConfig, validate_topic_configs
from kompakt.protocol.errors import (InvalidPartitionsError, InvalidTopicExceptionError, KafkaError,
                                     KafkaStorageErrorError, TopicAlreadyExistsError,
                                     UnknownTopicOrPartitionError)
from kompakt.storage import TopicPartition
from kompakt.storage import retention
from kompakt.storage.alter_log_dirs import ReplicaAlterLogDirs, parent_dir, parse_future_dir
from kompakt.storage.checkpoint import (LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
                                        TMP_SUFFIX, OffsetCheckpointFile, fsync_dir)
from kompakt.storage.log_dirs import (CLEAN_SHUTDOWN_FILE, DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, LOCK_FILE,
                                      META_PROPERTIES_FILE, STRAY_DIR_SUFFIX, LogDirError, LogDirLockedError,
                                      create_and_validate_dirs, load_meta_properties, lock_dir,
                                      parse_partition_dir, partition_dir_name, read_and_clear_clean_shutdown,
                                      unique_dir_name, unlock_dir, write_clean_shutdown)
from kompakt.storage.faults import is_disk_full
from kompakt.storage.group_commit import GroupCommit, pending_acks
from kompakt.storage.log import ROLL_HERE, ROLL_LATER
from kompakt.storage.log_tasks import DeletionQueue, LogTasks
from kompakt.storage.log_writer import LogWriter
from kompakt.storage.validation_pool import ValidationPool
from kompakt.storage.producer_state import sync_snapshot
from kompakt.storage import files as fs
from kompakt.storage.topic_store import (STORE_FILE, TopicMeta, TopicStore, colliding_topic,
                                         random_topic_id, uuid_to_str,
                                         validate_topic_name)

log = logging.getLogger(__name__)

# Shutdown's passes (flush every log, close it writing its producer snapshot, sync the snapshots)
# only wait on the disk: they run this many at a time per dir (at least
# num.recovery.threads.per.data.dir), so the disk merges their work. Two at a time, with a sync
# inside each close, 10 000 partitions took 3.7-4.6 s to shut down on a 2-vCPU VM.
SHUTDOWN_SYNC_THREADS = 16

_KNOWN_ROOT_FILES = {LOCK_FILE, CLEAN_SHUTDOWN_FILE, META_PROPERTIES_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
                     LOG_START_OFFSET_CHECKPOINT_FILE, "cleaner-offset-checkpoint",
                     "replication-offset-checkpoint", "bootstrap.checkpoint", STORE_FILE}

__all__ = ["LogManager", "TopicMeta", "TopicPartition", "LogDirLockedError", "LogDirError",
           "CLEAN_SHUTDOWN_FILE", "LOCK_FILE", "parse_partition_dir", "partition_dir_name"]


class LogManager:
    """All logs of this node; see the module docstring."""

    def __init__(self, config, *, time=_time, cleaner=None):
        self.config = config
        # Files other packages keep in a log dir's root (the broker's state files: ACLs, producer
        # id block, dynamic configs, ...): not ours to repair, and not foreign either.
        self.owned_root_files: set[str] = set()
        self.time = time
        self.cleaner = cleaner
        # called after an append to a partition (fetch long-poll wake-up), and for each partition
        # of a deleted topic (its parked fetches answer now)
        self.append_listener: Callable[[TopicPartition], None] | None = None
        self.log_dirs: list[str] = []
        self.offline_dirs: list[str] = []
        self.cluster_id: str | None = None
        self.directory_ids: dict[str, str] = {}
        # topic-metadata changes saved since this process started (DescribeQuorum derives the
        # end offset of the metadata log a KRaft node would have from it: handlers/describe_quorum.py)
        self.metadata_changes = 0
        self.had_clean_shutdown: dict[str, bool] = {}
        self.repairs: list[str] = []  # what startup repaired, for logs and tests
        self._lock = threading.RLock()
        self._config_cache: dict | None = None   # see _shared_config
        self._offline_lock = threading.Lock()
        self._logs: dict[TopicPartition, Any] = {}
        # partitions of the topic store not found on disk at start-up while a log dir was offline:
        # their log is most likely in that dir, so none is created elsewhere (Kafka's getOrCreateLog
        # refuses a not-new log while a dir is offline); they answer KAFKA_STORAGE_ERROR
        self._unloaded: set[TopicPartition] = set()
        self._topics: dict[str, TopicMeta] = {}
        self._deleted_topic_ids: set[uuid.UUID] = set()
        self._store: TopicStore | None = None
        self._lock_fds: dict[str, int] = {}
        self._deletions = DeletionQueue()
        self._tasks = LogTasks(self._now)
        self.writer = LogWriter()   # appends and rolls the event loop hands over (storage.log_writer)
        # large produced batches validated beside the loop (storage.validation_pool)
        self.validation = ValidationPool(int(config.get("kompakt.produce.validation.threads", 0)),
                                         int(config.get("kompakt.produce.validation.offload.bytes", 65536)))
        # partitions moving to another log dir (AlterReplicaLogDirs): their `-future` logs and the
        # thread copying them (storage.alter_log_dirs)
        self.alter_log_dirs = ReplicaAlterLogDirs(self)
        # acks=all and the coordinators' writes answered once synced; high watermark = durable offset
        self.durable_acks = bool(config.get("kompakt.durable.acks.enable", True))
        self._group_commits: dict[str, GroupCommit] = {}   # log dir -> its flusher
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._shut_down = False
        self._stats = {"retention_deleted_segments_total": 0, "retention_deleted_bytes_total": 0,
                       "flushes_total": 0, "flush_seconds_total": 0.0, "startup_seconds": 0.0}

    # ---- public views ----------------------------------------------------------------------------
    @property
    def topics(self) -> dict[str, TopicMeta]:
        return dict(self._topics)

    def get_log(self, tp) -> Any | None:
        return self._logs.get(TopicPartition(*tp))

    def future_logs(self) -> dict[TopicPartition, Any]:
        """The `-future` log of every partition moving to another log dir (AlterReplicaLogDirs)."""
        return self.alter_log_dirs.future_logs()

    def alter_replica_log_dir(self, tp, dest: str) -> None:
        """Move a partition to log dir `dest` while it serves (storage.alter_log_dirs); raises
        the KafkaError the partition answers. Blocking: run in a thread."""
        self.alter_log_dirs.alter(tp, dest)

    def all_logs(self) -> dict[TopicPartition, Any]:
        """Every online log (the logs of an offline dir are left out: nothing may touch them)."""
        return {tp: plog for tp, plog in list(self._logs.items()) if not plog.offline}

    def is_offline(self, tp) -> bool:
        """Whether the partition exists but its log dir is offline (failed since start, or offline
        at start-up with the partition's log not found in the live dirs)."""
        tp = TopicPartition(*tp)
        plog = self._logs.get(tp)
        return plog.offline if plog is not None else tp in self._unloaded

    # ---- log dir failure ---------------------------------------------------------------------------
    def handle_io_error(self, d: str, exc: BaseException, doing: str, *, failed_sync: bool = False) -> None:
        """An I/O error in log dir `d` (Kafka's LogDirFailureChannel + handleLogDirFailure).

        A full disk (ENOSPC, EDQUOT) is not a failing disk: the write that hit it failed and was
        undone (the producer gets KAFKA_STORAGE_ERROR and retries), nothing else changes, and
        writes succeed again once space returns. (Kafka takes the dir offline for that too; with one
        node there is no replica to move leadership to, so offline would mean a restart to recover.)
        Not so a failed sync (`failed_sync`: fsync/fdatasync of written data, whatever the errno):
        Linux may have dropped the pages it could not write back and marked them clean, so the
        next sync of the file succeeds without them (PostgreSQL's "fsyncgate", which made it stop
        retrying fsync). Syncing again and acknowledging would answer for bytes that may not exist:
        the dir goes offline, as Kafka's flush on any IOException (LogDirFailureChannel).
        Any other error takes the whole dir offline at once: one ERROR line, its logs closed
        without a flush (whatever is not on disk is recovered at the next start, which finds no
        clean-shutdown marker there), its partitions answer KAFKA_STORAGE_ERROR and Metadata shows
        them offline, the cleaner and background tasks leave them alone; the other dirs go on.
        Callable from any thread; idempotent."""
        d = os.path.abspath(d)
        if is_disk_full(exc) and not failed_sync:
            log.warning("disk full in log dir %s while %s: %s", d, doing, exc)
            return
        with self._offline_lock:
            if d in self.offline_dirs or d not in self.log_dirs:
                return
            self.offline_dirs.append(d)
            self.log_dirs = [x for x in self.log_dirs if x != d]
            logs = self._logs_in_dir(d)
            for plog in logs.values():
                plog.offline = True
        log.error("Error while %s in dir %s: %s. Log dir %s is offline: its %d partitions answer "
                  "KAFKA_STORAGE_ERROR until the broker restarts with the disk fixed (the other dirs "
                  "keep serving)", doing, d, exc, d, len(logs))
        for tp, plog in logs.items():
            try:
                plog.close_handlers()
            except Exception:  # noqa: BLE001 - a failing disk: closing may fail too
                pass
        if self.cleaner is not None:
            cleaner = self.cleaner

            def stop_cleaning() -> None:
                for tp in logs:
                    try:
                        cleaner.abort_cleaning(tp)
                    except Exception:  # noqa: BLE001
                        log.debug("aborting the clean of %s-%d on offline dir %s failed", tp.topic, tp.partition, d)
            self._tasks.run_in_thread(stop_cleaning)

    def log_config(self, topic: str) -> LogConfig:
        meta = self._topics.get(topic)
        return self._config_for(meta.configs if meta else {})

    def notify_append(self, tp, plog=None) -> None:
        """After an append: with durable acks the log joins its flusher's next round (readers hear
        once it is synced, `_on_durable`); without, readers hear now."""
        if self.durable_acks:
            if plog is None:
                plog = self._logs.get(TopicPartition(*tp))
            commit = plog.group_commit if plog is not None else None
            if commit is not None:
                commit.request(plog)
                return
        self._wake_readers(tp)

    def _wake_readers(self, tp) -> None:
        listener = self.append_listener
        if listener is not None:
            listener(TopicPartition(*tp))

    def _on_durable(self, plogs: list) -> None:
        """On the loop, after a group-commit round moved these logs' high watermarks."""
        listener = self.append_listener
        if listener is not None:
            for plog in plogs:
                listener(plog.tp)

    async def wait_durable(self, plog, offset: int) -> None:
        """Return once `plog` is synced below `offset` (acks=all, the coordinators' writes); at
        once with durable acks off. Raises KafkaStorageErrorError when the sync failed."""
        commit = plog.group_commit
        if commit is None or plog.durable_offset >= offset:
            return
        await commit.wait(plog, offset)

    def _group_commit_for(self, d: str) -> GroupCommit:
        commit = self._group_commits.get(d)
        if commit is None:
            def failed(plog, exc: BaseException) -> None:
                if isinstance(exc, OSError):
                    self.handle_io_error(d, exc, f"syncing {plog.dir}", failed_sync=True)
                else:
                    log.error("group commit sync of %s failed: %s", plog.dir, exc)
            commit = self._group_commits.setdefault(
                d, GroupCommit(d, on_error=failed, on_durable=self._on_durable, native=True))
            if self._loop is not None:
                commit.attach(self._loop)
        return commit

    def append_as_leader(self, tp, records, **kw):
        """Append to a partition and wake fetch long-polls: the seam of the synchronous appends on
        the event loop (group and transaction coordinators, markers), so there a roll it needs is
        left to the log writer (Log.ROLL_LATER); elsewhere (no loop in this thread) it rolls here."""
        plog = self.get_log(tp)
        if plog is None:
            if self.is_offline(tp):
                raise KafkaStorageErrorError(f"{tp[0]}-{tp[1]} is in an offline log directory")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {tp[0]}-{tp[1]}")
        roll = ROLL_LATER if asyncio._get_running_loop() is not None else ROLL_HERE
        info = plog.append_as_leader(records, roll=roll, **kw)
        self.notify_append(tp, plog)
        if plog.group_commit is not None:
            acks = pending_acks.get()
            if acks is not None:        # the request answers once this is durable (broker/network/dispatch.py)
                acks.append((plog, info.last_offset + 1))
        return info

    def stats(self) -> dict[str, Any]:
        """Counters for /metrics (Kafka: kafka.log:type=LogManager,..., LogFlushStats): cumulative
        `*_total` figures since start, plus the current offline dir count and pending deletions."""
        out = dict(self._stats)
        out["offline_log_dirs"] = len(self.offline_dirs)
        out["startup_repairs"] = len(self.repairs)
        out["deleted_dirs_total"] = self._deletions.deleted_dirs_total
        out["deleted_segments_unlinked_total"] = self._deletions.unlinked_segments_total
        out["pending_dir_deletions"], out["pending_segment_deletions"] = self._deletions.pending()
        out.update(self.alter_log_dirs.stats())
        commits = [c.stats() for c in list(self._group_commits.values())]
        for key in ("rounds_total", "synced_logs_total", "acks_total", "round_seconds_total",
                    "wait_seconds_total", "queue_seconds_total", "answer_lag_seconds_total"):
            out["group_commit_" + key] = sum(c[key] for c in commits)
        out["group_commit_max_acks_per_round"] = max((c["max_acks_per_round"] for c in commits), default=0)
        return out

    def partitions_per_dir(self) -> dict[str, int]:
        counts = {d: 0 for d in self.log_dirs}
        for plog in list(self._logs.values()):
            parent = os.path.dirname(os.path.abspath(plog.dir))
            counts[parent] = counts.get(parent, 0) + 1
        return counts

    def _now(self) -> int:
        return int(self.time.time() * 1000)

    def _shared_config(self, overrides: dict[str, str]) -> LogConfig:
        """While start-up loads the logs or a topic's partitions are created (`_config_cache` is a
        dict then): one LogConfig object for every log with the same overrides, built once, not
        once per partition (10 000 partitions built 10 000 equal configs). Otherwise a fresh one:
        dynamic broker defaults may have changed since."""
        cache = self._config_cache
        if cache is None:
            return self._config_for(overrides)
        key = tuple(sorted(overrides.items()))
        cfg = cache.get(key)
        if cfg is None:       # two loader threads may both build it: either copy is right
            cfg = cache[key] = self._config_for(overrides)
        return cfg

    def _broker_default_config(self) -> LogConfig:
        return LogConfig.from_overrides({}, self.config)

    def _config_for(self, overrides: dict[str, str]) -> LogConfig:
        """LogConfig for stored overrides, leniently (LogConfig.from_stored): a stored key that no
        longer parses is dropped (logged), no combination is checked; never raises."""
        def dropped(key, value, exc):
            log.error("ignoring stored topic config %s=%s: %s", key, value, exc)
        return LogConfig.from_stored(overrides, self.config, on_dropped=dropped)

    # ---- startup ---------------------------------------------------------------------------------
    def startup(self) -> None:
        """Validate and lock dirs, read meta.properties, load every log (blocking: run in a thread)."""
        with self._lock:
            if self._started:
                return
            t0 = _time.monotonic()
            self._create_and_validate_dirs()
            self._lock_dirs()
            # Loading keeps ~30 objects per partition alive and makes little garbage: with the cyclic
            # GC on, every 25% of growth triggered a full collection over all of them (six at
            # 10 000 partitions, 1.3 s). It runs once, at the end.
            try:
                with _cyclic_gc_paused(collect_after=True):
                    self._load_meta_properties()
                    self._store = self._find_store()
                    self._topics, self._deleted_topic_ids, ok = self._store.load()
                    self._load_logs()
                    self._reconcile_topics(store_ok=ok)
                    self._drop_cleaner_checkpoints_elsewhere()
            except BaseException:
                self._close_logs_quietly()
                self._unlock_dirs()
                raise
            self._started = True
            self._stats["startup_seconds"] = _time.monotonic() - t0
            log.info("loaded %d logs in %d topics from %s in %.2f s", len(self._logs), len(self._topics),
                     ", ".join(self.log_dirs), self._stats["startup_seconds"])

    def _find_store(self) -> TopicStore:
        """The topic store lives in the first log dir; if log.dirs were reordered, move it there."""
        first = TopicStore(self.log_dirs[0])
        if first.exists():
            return first
        for d in self.log_dirs[1:]:
            other = TopicStore(d)
            if other.exists():
                topics, deleted, ok = other.load()
                if ok:
                    first.save(topics, deleted)
                    fs.unlink(other.path)
                    fsync_dir(d)
                    self._repaired(f"moved the topic store from {d} to the first log dir {self.log_dirs[0]}")
                    return first
        return first

    def _create_and_validate_dirs(self) -> None:
        self.log_dirs, self.offline_dirs = create_and_validate_dirs(self.config.log_dirs)

    def _lock_dirs(self) -> None:
        for d in self.log_dirs:
            try:
                self._lock_fds[d] = lock_dir(d)
            except LogDirLockedError:
                self._unlock_dirs()
                raise

    def _unlock_dirs(self) -> None:
        for d, fd in list(self._lock_fds.items()):
            unlock_dir(fd)
            del self._lock_fds[d]

    def _load_meta_properties(self) -> None:
        self.cluster_id, self.directory_ids = load_meta_properties(
            self.log_dirs, self.config["cluster.id"], self.config.node_id)

    def _scan_dir(self, d: str, futures: list) -> list[tuple[str, TopicPartition]]:
        """Partition dirs to load; `-future` dirs added to `futures`; queue `-delete` dirs;
        report foreign entries."""
        found = []
        with os.scandir(d) as it:     # entry types come with the read: no stat per partition dir
            listing = sorted((e.name, e.is_dir()) for e in it)
        for name, is_dir in listing:
            path = os.path.join(d, name)
            if is_dir:
                if name.endswith(DELETE_DIR_SUFFIX):
                    self._queue_dir_delete(path, "left over from a deletion before the last shutdown")
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX) and parse_future_dir(name) is not None:
                    futures.append((path, parse_future_dir(name)))
                    continue
                if name.endswith(STRAY_DIR_SUFFIX) or name.endswith(FUTURE_DIR_SUFFIX):
                    log.warning("%s: leaving %s alone (stray or future replica dir)", d, name)
                    continue
                tp = parse_partition_dir(name)
                if tp is None:
                    if name != "__cluster_metadata-0":
                        log.warning("%s: foreign directory %s is not a partition (topic-n); left alone", d, name)
                    continue
                found.append((path, tp))
            elif name.endswith(TMP_SUFFIX) and name[: -len(TMP_SUFFIX)] in _KNOWN_ROOT_FILES:
                fs.unlink(path)
                self._repaired(f"{d}: deleted unfinished write {name}")
            elif name not in _KNOWN_ROOT_FILES and name.removesuffix(TMP_SUFFIX) not in self.owned_root_files:
                log.warning("%s: foreign file %s left alone", d, name)
        return found

    def _repaired(self, msg: str) -> None:
        self.repairs.append(msg)
        log.warning("%s", msg)

    def _load_logs(self) -> None:
        threads = self.config["num.recovery.threads.per.data.dir"]
        pools: list[ThreadPoolExecutor] = []
        jobs: list[tuple[str, TopicPartition, Any]] = []
        futures: list[tuple[str, TopicPartition, dict, dict, bool]] = []
        self._config_cache = {}
        try:
            for d in self.log_dirs:
                clean = read_and_clear_clean_shutdown(d)
                self.had_clean_shutdown[d] = clean
                recovery_points = OffsetCheckpointFile(os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE)).read()
                log_starts = OffsetCheckpointFile(os.path.join(d, LOG_START_OFFSET_CHECKPOINT_FILE)).read()
                pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"log-recovery-{d}")
                pools.append(pool)
                found_futures: list = []
                found = self._scan_dir(d, found_futures)
                futures += [(path, tp, recovery_points, log_starts, clean) for path, tp in found_futures]
                if found:          # Kafka's two lines; a new, empty dir has nothing to recover or skip
                    log.info("%s %d logs in %s since %s", "skipping recovery of" if clean else "recovering",
                             len(found), d, "a clean shutdown marker was found" if clean
                             else "no clean shutdown marker was found (unflushed segments are checked)")
                for path, tp in found:
                    load, stored_id = self._should_load(path, tp)
                    if not load:
                        continue
                    fut = pool.submit(self._open_log, path, tp, recovery_points.get(tp, 0),
                                      log_starts.get(tp), clean, stored_topic_id=stored_id)
                    jobs.append((path, tp, fut))
            failures = []
            step = max(1, len(jobs) // 10)  # progress every ~10% (Kafka: remainingLogsToRecover)
            for done, (path, tp, fut) in enumerate(jobs, start=1):
                try:
                    plog = fut.result()
                    if done % step == 0 or done == len(jobs):
                        log.info("loaded %d/%d logs", done, len(jobs))
                except Exception as exc:  # noqa: BLE001 - reported together below
                    failures.append(f"{path}: {exc.__class__.__name__}: {exc}")
                    continue
                if tp in self._logs:
                    other = self._logs[tp].dir
                    plog.close_handlers()
                    raise LogDirError(f"Duplicate log directories for {tp.topic}-{tp.partition} are found in "
                                      f"both {other} and {path}. Recover by deleting one of them.")
                self._logs[tp] = plog
            if failures:
                raise LogDirError("could not load partition logs: " + "; ".join(failures))
            self._load_future_logs(futures)
        finally:
            for pool in pools:
                pool.shutdown(wait=True)
            self._config_cache = None

    def _should_load(self, path: str, tp: TopicPartition) -> tuple[bool, Any]:
        """(False, _) (and the dir handled) for partitions of deleted topics or another topic id;
        else (True, the id partition.metadata holds, or UNREAD when it does not parse: the loader
        reports that)."""
        from kompakt.storage.loader import UNREAD
        from kompakt.storage.loader import read_partition_metadata as read_strict
        try:
            stored_id = read_strict(path)      # unreadable: the loader repairs it and says so, once
        except (ValueError, UnicodeDecodeError):
            return True, UNREAD
        if stored_id is not None and stored_id in self._deleted_topic_ids:
            self._repaired(f"{path}: partition of deleted topic id {uuid_to_str(stored_id)}; deleting it")
            self._rename_for_delete(path, tp)
            return False, None
        meta = self._topics.get(tp.topic)
        if meta is not None and stored_id is not None and stored_id != meta.topic_id:
            stray = unique_dir_name(path, STRAY_DIR_SUFFIX)
            fs.replace(path, stray)
            fsync_dir(os.path.dirname(path))
            self._repaired(f"{path}: topic id {uuid_to_str(stored_id)} differs from topic {tp.topic}'s id "
                           f"{uuid_to_str(meta.topic_id)}; moved aside to {stray}, not loaded")
            return False, None
        return True, stored_id

    def _load_future_logs(self, futures: list) -> None:
        """`-future` dirs of moves the last run did not finish (recovery rules in
        storage.alter_log_dirs): beside a live log the move resumes; without one (the crash came
        after the current dir was renamed `-delete`) the future is renamed live and loaded as the
        partition's log, unless a log dir is offline (the current may be there: left alone)."""
        seen: dict[TopicPartition, str] = {}
        for path, tp, recovery_points, log_starts, clean in futures:
            if tp in seen:
                raise LogDirError(f"Duplicate log directories found: {path}, {seen[tp]}")
            seen[tp] = path
            load, stored_id = self._should_load(path, tp)
            if not load:
                continue
            d = parent_dir(path)
            current = self._logs.get(tp)
            if current is None and self.offline_dirs:
                log.error("%s: future log of %s-%d without a live log while log dirs %s are offline: "
                          "left alone until they return", path, tp.topic, tp.partition, ", ".join(self.offline_dirs))
                continue
            if current is not None and parent_dir(current.dir) == d:
                self._repaired(f"{path}: future log in the dir of the live log; deleting it")
                self._queue_dir_delete(path, "a future log beside its live log")
                continue
            if current is None:
                live = os.path.join(d, partition_dir_name(tp))
                fs.replace(path, live)
                fsync_dir(d)
                self._repaired(f"{path}: the move of {tp.topic}-{tp.partition} was interrupted after its "
                               f"current log was renamed for deletion; renamed the future log live to {live}")
                path = live
            plog = self._open_log(path, tp, recovery_points.get(tp, 0), log_starts.get(tp), clean,
                                  stored_topic_id=stored_id)
            if current is None:
                self._logs[tp] = plog
            else:
                self.alter_log_dirs.resume(tp, plog, current)

    def _drop_cleaner_checkpoints_elsewhere(self) -> None:
        """A move interrupted between its last renames (storage.alter_log_dirs, step 5) leaves the
        partition's cleaner-offset entry in its old dir, where it would win over the live one if
        that dir comes later in log.dirs: keep each dir's entries for the logs in it only."""
        if self.cleaner is None:
            return
        for d in self.log_dirs:
            self.cleaner.retain_checkpoints(d, set(self._logs_in_dir(d)))

    def _open_log(self, path: str, tp: TopicPartition, recovery_point: int, log_start: int | None,
                  clean: bool, topic_id: uuid.UUID | None = None, stored_topic_id=None):
        from kompakt.storage.log import Log
        meta = self._topics.get(tp.topic)
        cfg = self._shared_config(meta.configs if meta else {})
        plog = Log.open(path, cfg, topic_id=topic_id or (meta.topic_id if meta else None),
                        log_start_offset=log_start, recovery_point=recovery_point,
                        had_clean_shutdown=clean, time=self.time,
                        producer_id_expiration_ms=self.config["producer.id.expiration.ms"], tp=tp,
                        **({} if stored_topic_id is None else {"stored_topic_id": stored_topic_id}))
        for msg in getattr(plog, "repairs", []):
            self.repairs.append(f"{path}: {msg}")
        self._install_hooks(plog)
        return plog

    def _install_hooks(self, plog) -> None:
        if self.durable_acks:
            plog.hw_is_durable = True
            plog.group_commit = self._group_commit_for(os.path.dirname(os.path.abspath(plog.dir)))
            if plog.durable_offset < plog.log_end_offset:
                # An unclean shutdown left a tail that may be in the page cache only: sync it here,
                # in the loading thread, so the high watermark is the log end from the first
                # request (handed to the first round instead, a consumer reading right after the
                # restart saw the high watermark at the recovery point and stopped there). A sync
                # that fails goes to the round, which retries it and reports the failure.
                try:
                    plog.sync_data()
                except OSError:
                    plog.group_commit.request(plog)
        plog.on_segments_deleted = lambda segs, _log=plog: self._schedule_segment_delete(_log, segs)
        plog.on_roll = self._on_roll
        plog.on_roll_due = self._on_roll_due
        plog.on_io_error = lambda _log, exc, doing: self.handle_io_error(
            os.path.dirname(os.path.abspath(_log.dir)), exc, doing)

    def _reconcile_topics(self, store_ok: bool) -> None:
        """Make the topic store and the partition dirs agree (see the module docstring's crash rules)."""
        changed = not store_ok and bool(self._logs)
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in self._logs:
            by_topic.setdefault(tp.topic, []).append(tp)
        for topic, tps in sorted(by_topic.items()):
            meta = self._topics.get(topic)
            highest = max(tp.partition for tp in tps)
            if meta is None:
                ids = {self._logs[tp].topic_id for tp in tps if self._logs[tp].topic_id is not None}
                if store_ok and not ids:
                    self._set_aside_deleted(topic, tps)
                    continue
                topic_id = ids.pop() if len(ids) == 1 else random_topic_id()
                meta = TopicMeta(topic, topic_id, highest + 1, {})
                self._topics[topic] = meta
                changed = True
                self._repaired(f"topic {topic} found on disk but not in the topic store: adopted with "
                               f"{meta.partitions} partitions, id {uuid_to_str(topic_id)} and default configs")
            elif highest >= meta.partitions:
                self._repaired(f"topic {topic}: partition {highest} on disk beyond the stored count "
                               f"{meta.partitions}; count raised")
                meta.partitions = highest + 1
                changed = True
            for tp in tps:
                if self._logs[tp].topic_id is None:
                    self._logs[tp].topic_id = meta.topic_id
        for topic, meta in sorted(self._topics.items()):
            missing = [TopicPartition(topic, p) for p in range(meta.partitions)
                       if TopicPartition(topic, p) not in self._logs]
            if missing and self.offline_dirs:
                self._unloaded.update(missing)
                log.error("partitions %s are not in the live log dirs and log dirs %s are offline: "
                          "they are offline (KAFKA_STORAGE_ERROR), not created empty elsewhere, until "
                          "the broker restarts with those dirs back", ", ".join(f"{t}-{p}" for t, p in missing),
                          ", ".join(self.offline_dirs))
                continue
            for tp in missing:
                self._repaired(f"{topic}-{tp.partition}: in the topic store but not on disk; created empty")
            if missing:
                self._create_logs(missing, meta)
        live_ids = {m.topic_id for m in self._topics.values()}
        lingering = self._deleted_topic_ids - live_ids
        if lingering and not self.offline_dirs:  # every dir of a deleted id was queued for deletion
            # by _should_load (a dir offline now may still hold some: keep the ids until it returns)
            self._deleted_topic_ids = set()
            changed = True
        if changed:
            self._save_store()

    def _set_aside_deleted(self, topic: str, tps: list) -> None:
        """Partition dirs of a topic the (valid) topic store lacks, none with a readable
        partition.metadata: the remains of a topic deleted just before a power cut (creation
        syncs the store before it makes dirs; deletion saves the store, then renames the dirs, and
        partition.metadata is written unsynced). Moved aside `-stray`, not loaded, not adopted:
        adopting would bring the deleted topic back; as Kafka's stray logs, never deleted here."""
        for tp in tps:
            plog = self._logs.pop(tp)
            plog.close()
            stray = unique_dir_name(plog.dir, STRAY_DIR_SUFFIX)
            fs.replace(plog.dir, stray)
            fsync_dir(os.path.dirname(plog.dir))
            self._repaired(f"{plog.dir}: topic {topic} is not in the topic store and the dir has no readable "
                           f"partition.metadata (a topic deleted before a crash); moved aside to {stray}, not loaded")

    # ---- topics ------------------------------------------------------------------------------------
    def _save_store(self) -> None:
        if self._store is None:
            raise KafkaStorageErrorError("the log manager has not started")
        try:
            self._store.save(self._topics, self._deleted_topic_ids)
        except OSError as exc:
            raise KafkaStorageErrorError(f"cannot write topic metadata {self._store.path}: {exc}") from exc
        self.metadata_changes += 1

    def _next_dir(self, counts: dict[str, int]) -> str:
        """The live dir holding the fewest partitions (`counts`, kept up to date by the caller:
        counting every log for every new partition made creating n partitions O(n^2))."""
        d = min(self.log_dirs, key=lambda d: (counts.get(d, 0), self.log_dirs.index(d)))
        counts[d] = counts.get(d, 0) + 1
        return d

    def _create_logs(self, tps, meta: TopicMeta) -> None:
        """The partition dirs of a new topic or new partitions. Nothing is fsynced per partition:
        the topic store was synced first, and start-up makes a missing dir, partition.metadata or
        first leader epoch again from it; each log dir used is fsynced once at the end."""
        counts = self.partitions_per_dir()
        used = set()
        self._config_cache = {}
        try:
            for tp in tps:
                used.add(os.path.dirname(self._create_log(tp, meta, self._next_dir(counts)).dir))
        finally:
            self._config_cache = None
        for d in used:
            try:
                fsync_dir(d)
            except OSError as exc:
                raise KafkaStorageErrorError(f"cannot sync log dir {d}: {exc}") from exc

    def _create_log(self, tp: TopicPartition, meta: TopicMeta, d: str):
        from kompakt.storage.loader import write_partition_metadata
        path = os.path.join(d, partition_dir_name(tp))
        try:
            os.makedirs(path, exist_ok=True)
            write_partition_metadata(path, meta.topic_id, sync=False)
            plog = self._open_log(path, tp, 0, None, True, topic_id=meta.topic_id, stored_topic_id=meta.topic_id)
            # the leader epoch starts here, as Kafka's makeLeader assigns it: written now, in the
            # creating thread, not on the first append (the event loop, with an fsync)
            plog.leader_epoch_cache.assign(0, plog.log_end_offset, sync=False)
        except OSError as exc:
            raise KafkaStorageErrorError(f"cannot create log {path}: {exc}") from exc
        self._logs[tp] = plog
        log.info("created log for partition %s-%d in %s (topic id %s)", tp.topic, tp.partition, d,
                 uuid_to_str(meta.topic_id))
        return plog

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     *, topic_id: uuid.UUID | None = None) -> TopicMeta:
        """Create a topic: validate, save metadata, create its partition logs. Raises KafkaError."""
        validate_topic_configs(configs or {})  # refuses null values before they become "None"
        configs = {k: str(v) for k, v in (configs or {}).items()}
        validate_topic_name(name)
        if partitions is None or partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        LogConfig.from_overrides(configs, self.config)  # raises InvalidConfigError
        with self._lock:
            self._check_started()
            if name in self._topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            other = colliding_topic(name, self._topics)
            if other is not None:
                raise InvalidTopicExceptionError(f"Topic '{name}' collides with existing topic: {other}")
            meta = TopicMeta(name, topic_id or random_topic_id(), partitions, configs)
            self._topics[name] = meta
            try:
                self._save_store()  # step 1: metadata first (a crash here re-creates dirs at startup)
            except KafkaError:
                del self._topics[name]
                raise
            try:
                # step 2: the partition dirs
                self._create_logs([TopicPartition(name, p) for p in range(partitions)], meta)
            except KafkaError:
                self._abandon_partial_topic(meta)
                raise
            log.info("created topic %s with %d partitions, id %s, configs %s", name, partitions,
                     uuid_to_str(meta.topic_id), configs or "{}")
            return meta

    def _abandon_partial_topic(self, meta: TopicMeta) -> None:
        for p in range(meta.partitions):
            plog = self._logs.pop(TopicPartition(meta.name, p), None)
            if plog is not None:
                plog.close_handlers()
                fs.rmtree(plog.dir, ignore_errors=True)
        self._topics.pop(meta.name, None)
        try:
            self._save_store()
        except KafkaError:
            log.exception("could not roll back the topic store after failing to create %s", meta.name)

    def create_partitions(self, name: str, new_total: int) -> TopicMeta:
        with self._lock:
            self._check_started()
            meta = self._topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            if new_total == meta.partitions:
                raise InvalidPartitionsError(f"Topic already has {meta.partitions} partitions.")
            if new_total < meta.partitions:
                raise InvalidPartitionsError(f"Topic currently has {meta.partitions} partitions, which is "
                                             f"higher than the requested {new_total}.")
            old = meta.partitions
            meta.partitions = new_total
            try:
                self._save_store()
            except KafkaError:
                meta.partitions = old
                raise
            self._create_logs([TopicPartition(name, p) for p in range(old, new_total)], meta)
            log.info("topic %s grew from %d to %d partitions", name, old, new_total)
            return meta

    def alter_topic_config(self, name: str, configs: dict[str, str]) -> TopicMeta:
        """Replace a topic's config overrides (validated) and apply them to its live logs."""
        validate_topic_configs(configs)
        configs = {k: str(v) for k, v in configs.items()}
        new_config = LogConfig.from_overrides(configs, self.config)
        with self._lock:
            self._check_started()
            meta = self._topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            old = meta.configs
            meta.configs = configs
            try:
                self._save_store()
            except KafkaError:
                meta.configs = old
                raise
            futures = self.future_logs()
            for p in range(meta.partitions):
                for plog in (self._logs.get(TopicPartition(name, p)), futures.get(TopicPartition(name, p))):
                    if plog is not None:
                        plog.update_config(new_config)
            log.info("topic %s configs now %s", name, configs or "{}")
            return meta

    def reconfigure_defaults(self) -> int:
        """Dynamic broker configs changed (config/dynamic.py): re-derive every live log's LogConfig
        from its topic's overrides over the new broker defaults (topics that override a key keep
        their value) and give the logs' producer state the new producer.id.expiration.ms, as
        Kafka's DynamicLogConfig.updateLogsConfig does. Returns how many logs were updated."""
        with self._lock:
            expiration = self.config["producer.id.expiration.ms"]
            configs = {name: self._config_for(meta.configs) for name, meta in self._topics.items()}
            n = 0
            for tp, plog in list(self._logs.items()) + list(self.future_logs().items()):
                new_config = configs.get(tp.topic)
                if new_config is not None:
                    plog.update_config(new_config)
                    n += 1
                plog.producer_state.producer_id_expiration_ms = expiration
            log.info("broker log defaults changed: %d logs re-configured", n)
            return n

    def delete_topic(self, name: str) -> None:
        """Delete a topic: metadata first, then each partition dir renamed `-delete` (unlinked later)."""
        with self._lock:
            self._check_started()
            meta = self._topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            del self._topics[name]
            self._deleted_topic_ids.add(meta.topic_id)
            try:
                self._save_store()  # step 1
            except KafkaError:
                self._topics[name] = meta
                self._deleted_topic_ids.discard(meta.topic_id)
                raise
            dirs, unreachable = set(), False
            for p in range(meta.partitions):  # step 2
                tp = TopicPartition(name, p)
                self.alter_log_dirs.cancel(tp, "its topic was deleted")
                plog = self._logs.pop(tp, None)
                if plog is None:
                    unreachable |= tp in self._unloaded
                    self._unloaded.discard(tp)
                    continue
                dirs.add(os.path.dirname(os.path.abspath(plog.dir)))
                self._delete_partition_log(tp, plog)
            if not unreachable:   # else a dir offline now holds some: the id stays deleted for its return
                self._deleted_topic_ids.discard(meta.topic_id)  # every dir is now `-delete`
                self._save_store()
            for d in dirs:
                self._write_checkpoints_for_dir(d)
            log.info("deleted topic %s (id %s)", name, uuid_to_str(meta.topic_id))
        for p in range(meta.partitions):
            # a wake-up for fetches parked on it: they re-read and answer UNKNOWN_TOPIC_OR_PARTITION
            # now, not at their max_wait (Kafka's DelayedFetch)
            self._wake_readers(TopicPartition(name, p))

    def _delete_partition_log(self, tp: TopicPartition, plog) -> None:
        parent = os.path.dirname(os.path.abspath(plog.dir))
        if self.cleaner is not None:
            self.cleaner.abort_cleaning(tp)
        with plog.lock:
            plog.close_handlers()
            target = unique_dir_name(plog.dir, DELETE_DIR_SUFFIX)
            try:
                plog.rename_dir(target)
            except OSError as exc:
                raise KafkaStorageErrorError(f"cannot rename {plog.dir} for deletion: {exc}") from exc
        if self.cleaner is not None:
            try:
                self.cleaner.update_checkpoints(parent, partition_to_remove=tp)
            except Exception:  # noqa: BLE001 - the cleaner re-reads its checkpoint; never block deletion
                log.exception("cleaner checkpoint update for deleted %s-%d failed", tp.topic, tp.partition)
        self._queue_dir_delete(target, "topic deletion")

    def _rename_for_delete(self, path: str, tp: TopicPartition) -> None:
        target = unique_dir_name(path, DELETE_DIR_SUFFIX)
        fs.replace(path, target)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        self._queue_dir_delete(target, "partition of a deleted topic")

    def _queue_dir_delete(self, path: str, why: str) -> None:
        delay = self._broker_default_config().file_delete_delay_ms
        self._deletions.add_dir(path, self._now() + delay)
        log.info("scheduled deletion of %s in %d ms (%s)", path, delay, why)
        self._tasks.kick()

    def _check_started(self) -> None:
        if not self._started or self._shut_down:
            raise KafkaStorageErrorError("the log manager is not running")

    # ---- truncation (cleaner-coordinated) -----------------------------------------------------------
    def truncate_to(self, tp, offset: int) -> bool:
        tp = TopicPartition(*tp)
        plog = self.get_log(tp)
        if plog is None:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition}")
        pause = self.cleaner is not None
        if pause:
            self.cleaner.abort_and_pause_cleaning(tp)
        try:
            truncated = plog.truncate_to(offset)
            if truncated and pause:
                self.cleaner.maybe_truncate_checkpoint(tp, plog.active_segment.base_offset)
            return truncated
        finally:
            if pause:
                self.cleaner.resume_cleaning(tp)

    # ---- retention ---------------------------------------------------------------------------------
    def cleanup_logs(self) -> int:
        """One retention pass over every log; returns how many segments were deleted."""
        now = self._now()
        total = 0
        for tp, plog in list(self._logs.items()):
            try:
                total += self._cleanup_log(tp, plog, now)
            except KafkaError as exc:
                log.warning("retention of %s-%d failed: %s", tp.topic, tp.partition, exc)
        if total:
            log.info("log retention deleted %d segments", total)
        return total

    def _cleanup_log(self, tp: TopicPartition, plog, now: int) -> int:
        with plog.lock:
            if plog.closed or not retention.plan_for_log(plog, now):
                return 0
        pause = self.cleaner is not None and plog.config.compact
        if pause:  # the cleaner may be rewriting these segments: stop it first (blocking)
            self.cleaner.abort_and_pause_cleaning(tp)
        try:
            deleted = 0
            with plog.lock:
                if plog.closed:
                    return 0
                plan = retention.plan_for_log(plog, now)  # again: the log moved while we paused
                for reason, segs in plan.steps:
                    deleted += plog.delete_segments(segs, reason)
                self._stats["retention_deleted_segments_total"] += deleted
                self._stats["retention_deleted_bytes_total"] += plan.bytes if deleted else 0
            return deleted
        finally:
            if pause:
                self.cleaner.resume_cleaning(tp)

    # ---- deferred deletion ---------------------------------------------------------------------------
    def _schedule_segment_delete(self, plog, segments: list) -> None:
        self._deletions.add_segments(segments, self._now() + plog.config.file_delete_delay_ms)
        self._tasks.kick()

    def run_due_segment_deletions(self, now_ms: int | None = None) -> int:
        """Unlink `.deleted` segments whose file.delete.delay.ms has passed; returns how many."""
        return self._deletions.run_due_segments(self._now() if now_ms is None else now_ms)

    def delete_logs(self, now_ms: int | None = None) -> int:
        """Remove `-delete` partition dirs whose delay has passed; returns how many."""
        return self._deletions.run_due_dirs(self._now() if now_ms is None else now_ms)

    def _run_deletions(self) -> None:
        now = self._now()
        self._deletions.run_due_segments(now)
        self._deletions.run_due_dirs(now)

    # ---- flush and checkpoints ------------------------------------------------------------------------
    def flush_dirty_logs(self) -> int:
        """fsync logs dirty for at least their flush.ms (Kafka's kafka-log-flusher); returns how many."""
        now = self._now()
        flushed = 0
        for tp, plog in list(self._logs.items()):
            if plog.closed or plog.config.flush_ms == LONG_MAX:
                continue
            dirty = plog.recovery_point < plog.log_end_offset or plog.needs_flush_dir
            if dirty and now - plog.last_flush_time >= plog.config.flush_ms:
                try:
                    t0 = _time.perf_counter()
                    plog.flush()
                    self._stats["flush_seconds_total"] += _time.perf_counter() - t0
                    self._stats["flushes_total"] += 1
                    flushed += 1
                except OSError as exc:
                    self.handle_io_error(os.path.dirname(os.path.abspath(plog.dir)), exc, f"flushing {plog.dir}",
                                         failed_sync=True)
                except KafkaError as exc:
                    log.error("flush of %s-%d failed: %s", tp.topic, tp.partition, exc)
        return flushed

    def _logs_in_dir(self, d: str) -> dict[TopicPartition, Any]:
        """The logs in dir `d`, future logs included (a partition's future is never in the dir
        of its current log, so a dir holds at most one of them per partition, as in Kafka's
        checkpoints)."""
        out = {tp: plog for tp, plog in list(self._logs.items())
               if os.path.dirname(os.path.abspath(plog.dir)) == d}
        for tp, future in self.alter_log_dirs.future_logs().items():
            if parent_dir(future.dir) == d:
                out[tp] = future
        return out

    def _write_checkpoint(self, d: str, name: str, attr: str) -> None:
        try:
            OffsetCheckpointFile(os.path.join(d, name)).write(
                {tp: getattr(plog, attr) for tp, plog in self._logs_in_dir(d).items()})
        except OSError as exc:
            self.handle_io_error(d, exc, f"writing {name}")
            raise

    def checkpoint_recovery_offsets(self) -> None:
        """Write each dir's recovery-point checkpoint, first moving the recovery point of every
        log that lags its durable offset (Log.flush up to it: the `.log` bytes are synced already
        by the group commit, so this syncs the indexes). Recovery after a cut re-reads everything
        above the checkpointed recovery point: without this that was everything since the last
        roll (up to segment.bytes per log, whatever was synced); with it, at most what arrived in
        one log.flush.offset.checkpoint.interval.ms. Logs with nothing new are not touched."""
        for tp, plog in list(self._logs.items()):
            if plog.closed or plog.offline or plog.recovery_point >= plog.durable_offset:
                continue
            try:
                plog.flush(plog.durable_offset)
            except OSError as exc:
                self.handle_io_error(os.path.dirname(os.path.abspath(plog.dir)), exc, f"flushing {plog.dir}",
                                     failed_sync=True)
            except (KafkaError, ValueError) as exc:      # closed meanwhile (deleted, moved): skip it
                log.debug("recovery-point flush of %s-%d skipped: %s", tp.topic, tp.partition, exc)
        self._checkpoint_live_dirs(RECOVERY_POINT_CHECKPOINT_FILE, "recovery_point")

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint_live_dirs(LOG_START_OFFSET_CHECKPOINT_FILE, "log_start_offset")

    def _checkpoint_live_dirs(self, name: str, attr: str) -> None:
        for d in list(self.log_dirs):
            try:
                self._write_checkpoint(d, name, attr)
            except OSError:
                pass   # handled (a full disk: next time; a failing one: the dir is offline now)

    def _write_checkpoints_for_dir(self, d: str) -> None:
        self._write_checkpoint(d, RECOVERY_POINT_CHECKPOINT_FILE, "recovery_point")
        self._write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT_FILE, "log_start_offset")

    def remove_expired_producers(self) -> int:
        now = self._now()
        removed = 0
        for plog in list(self._logs.values()):
            if not plog.closed:
                removed += plog.remove_expired_producers(now)
        return removed

    def _on_roll_due(self, plog, base_offset: int) -> None:
        """A synchronous append on the loop left its log's roll for later (Log.ROLL_LATER): the
        log writer rolls it, or this thread when there is no loop here."""
        if not self.writer.run_later(plog, lambda: plog.roll_if_due(base_offset)):
            plog.roll_if_due(base_offset)

    def _on_roll(self, plog, new_offset: int) -> None:
        """After a roll, flush the log up to the new segment in a worker (Kafka's roll hook)."""
        def flush_upto() -> None:
            try:
                if not plog.closed:
                    plog.flush(new_offset)
            except OSError as exc:
                self.handle_io_error(os.path.dirname(os.path.abspath(plog.dir)), exc, f"flushing {plog.dir}",
                                     failed_sync=True)
            except KafkaError as exc:
                log.warning("flush after roll of %s failed: %s", plog.dir, exc)

        self._tasks.run_in_thread(flush_upto)  # no loop yet/any more: the shutdown flush covers it

    # ---- background tasks -------------------------------------------------------------------------------
    def start_background(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Schedule the periodic tasks (module docstring's table) on `loop`; call from the loop's thread."""
        cfg = self.config
        self._loop = loop = loop or asyncio.get_event_loop()
        for commit in list(self._group_commits.values()):
            commit.attach(loop)
        periodic = [
            ("kafka-log-retention", self.cleanup_logs, lambda: cfg["log.retention.check.interval.ms"]),
            ("kafka-log-flusher", self.flush_dirty_logs, self._flush_check_ms),
            ("kafka-recovery-point-checkpoint", self.checkpoint_recovery_offsets,
             lambda: cfg["log.flush.offset.checkpoint.interval.ms"]),
            ("kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
             lambda: cfg["log.flush.start.offset.checkpoint.interval.ms"]),
            ("kafka-producer-id-expiration", self.remove_expired_producers,
             lambda: cfg["producer.id.expiration.check.interval.ms"]),
        ]
        self._tasks.start(loop, periodic, self._run_deletions,
                          self._deletions.next_due_ms, cfg["log.initial.task.delay.ms"])
        self.alter_log_dirs.start()

    def _flush_check_ms(self) -> int:
        interval = self.config["log.flush.scheduler.interval.ms"]
        if interval != LONG_MAX:
            return interval
        finite = [p.config.flush_ms for p in list(self._logs.values()) if p.config.flush_ms != LONG_MAX]
        return max(10, min(finite)) if finite else LONG_MAX

    async def stop_background(self) -> None:
        await asyncio.to_thread(self.alter_log_dirs.stop)
        await self._tasks.stop()

    # ---- shutdown --------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker, unlock dirs."""
        self.alter_log_dirs.stop()   # before the lock (a swap takes it); moves resume at the next start
        with self._lock:
            if not self._started or self._shut_down:
                self._unlock_dirs()
                return
            self._shut_down = True
            self.writer.shutdown()     # appends and rolls handed over finish before logs close
            self.validation.shutdown()
            for commit in list(self._group_commits.values()):
                commit.close()         # the last round runs; the closes below sync the rest
            threads = self.config["num.recovery.threads.per.data.dir"]
            errors = []
            t0 = _time.monotonic()
            snapshots = 0
            for d in self.log_dirs:
                dir_errors = []
                # The passes allocate a future per log and keep them to the end of the pass: with the
                # cyclic GC on, that growth set off full collections over every log's objects
                # (0.5-0.7 s of a 10 000-partition stop, by gc.callbacks); what the passes drop
                # is freed by reference counting.
                with _cyclic_gc_paused(collect_after=False):
                    snapshots += self._close_logs_in_dir(d, threads, dir_errors)
                try:
                    self._write_checkpoints_for_dir(d)
                    if not dir_errors:  # a log that did not close cleanly is recovered next start
                        write_clean_shutdown(d)
                except OSError as exc:
                    dir_errors.append(f"{d}: {exc}")
                errors += dir_errors
            self._unlock_dirs()
            if errors:
                log.error("unclean log shutdown (next start recovers): %s", "; ".join(errors))
            else:
                log.info("shut down %d logs cleanly in %.2f s (%d producer snapshots written)",
                         len(self._logs), _time.monotonic() - t0, snapshots)

    def _close_logs_in_dir(self, d: str, threads: int, errors: list) -> int:
        """Flush and close every log of `d` (Kafka's flush(true) then close), adding a line to
        `errors` per log that failed; returns how many producer snapshots were written.

        Three passes over one pool of max(threads, SHUTDOWN_SYNC_THREADS): flush every log; close
        every flushed log, its producer snapshot written but not synced; then sync those
        snapshots. Every pass only waits on the disk (fsyncs, file creations), so many at once let
        the disk merge them; and the first snapshot sync commits the file creations of all, where
        a sync inside each close paid one commit per partition. The caller writes the
        clean-shutdown marker only after this returned without errors: every snapshot it relies
        on is durable by then. (The index trims at close are not synced: loading drops an index's
        zero tail.)"""
        logs = self._logs_in_dir(d)
        with ThreadPoolExecutor(max_workers=max(threads, SHUTDOWN_SYNC_THREADS),
                                thread_name_prefix=f"log-closing-{d}") as pool:
            def each(fn, items) -> list:
                futures = [(pool.submit(fn, item), tp) for item, tp in items]
                done = []
                for fut, tp in futures:
                    if fut.exception() is not None:
                        errors.append(f"{tp.topic}-{tp.partition}: {fut.exception()}")
                    else:
                        done.append((fut.result(), tp))
                return done
            def flush(plog):
                plog.flush()
                return plog
            flushed = each(flush, ((plog, tp) for tp, plog in logs.items()))
            written = each(lambda plog: plog.close(sync_snapshot=False), flushed)
            synced = each(sync_snapshot, [(path, tp) for path, tp in written if path is not None])
        return len(synced)

    def crash(self) -> None:
        """Drop the manager as a killed process would, for crash tests: its threads stop (the
        log-dir mover after its current step, the writer after what it was handed, the group-commit
        flushers without another round), every log's files close unflushed, and the dir locks
        go, so another LogManager can start on the dirs and recover. No checkpoint and no
        clean-shutdown marker is written; a later `shutdown()` does nothing. The periodic tasks of
        `start_background` are the caller's to stop first (`stop_background`)."""
        self.alter_log_dirs.stop()
        with self._lock:
            self._shut_down = True
            self.writer.shutdown()
            self.validation.shutdown()
            for commit in list(self._group_commits.values()):
                commit.abandon()
            self._close_logs_quietly()
            self._unlock_dirs()

    def _close_logs_quietly(self) -> None:
        for plog in list(self._logs.values()):
            try:
                plog.close_handlers()
            except Exception:  # noqa: BLE001
                pass
        self._logs.clear()


def describe_partition_placement(manager: LogManager) -> dict[str, list[str]]:
    """dir -> sorted partition names, for operators and tests."""
    out: dict[str, list[str]] = {d: [] for d in manager.log_dirs}
    for tp, plog in manager.all_logs().items():
        out.setdefault(os.path.dirname(os.path.abspath(plog.dir)), []).append(partition_dir_name(tp))
    return {d: sorted(v) for d, v in out.items()}


@contextmanager
def _cyclic_gc_paused(collect_after: bool):
    """The cyclic GC off for a bulk pass over every log (reference counting still frees what the
    pass drops), back on afterwards if it was on, with one collection when `collect_after`."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            if collect_after:
                gc.collect()
