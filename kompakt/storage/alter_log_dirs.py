"""Moving a partition's log to another log dir while it serves (AlterReplicaLogDirs, KIP-113).

Role: Kafka's future replica on one node: LogManager.getOrCreateLog(isFuture=true) makes a
`<topic>-<n>.<32 hex>-future` dir in the destination dir, ReplicaAlterLogDirsThread copies the
current log into it and keeps it caught up while producers append, and
Partition.maybeReplaceCurrentWithFutureReplica + LogManager.replaceCurrentWithFutureLog swap it in
once both end at the same offset. The partition keeps serving throughout: the Log object the
handlers hold stays the same and takes over the future's segments at the swap (`Log.take_over`),
keeping its in-memory producer state (the `.snapshot` files on disk are the copy's, rebuilt from
the copied batches, as Kafka's future log's are).

The copy: one thread (`replica-alter-log-dirs`) steps through the moves in turn; each step reads at
most COPY_CHUNK_BYTES of whole batches from the current log at the future's log end offset and
appends them to the future with their offsets (`Log.append`: CRC checked, producer state,
transaction index and leader epochs replayed), so memory stays bounded and the event loop never
copies. The future follows the current's log start offset (retention, DeleteRecords) and end
(truncation). Cleaning of the partition is paused (`abort_and_pause_cleaning`) from the first
step to the end of the move, as Kafka's alterReplicaLogDirs does, so the copy never sees cleaned
segments swapped in under it; retention keeps running on the current log (the future follows).

Steps, each with what start-up does if the process dies right after it (crash point in brackets):
  1. make `<topic>-<n>.<uuid hex>-future` in the destination dir with its partition.metadata,
     fsync the destination dir, write its recovery-point and log-start checkpoints (which name
     the future under its partition, as Kafka checkpoints future logs) [alter_dir_future_created]
     -> the current dir is live: the future is loaded and the copy resumes from its end (as
        Kafka resumes ReplicaAlterLogDirsThread), after truncating it to the end the current log
        was loaded with (a tail the current lost in the crash must not survive in the copy).
  2. copy, chunk by chunk; the future is synced every SYNC_EVERY_BYTES copied (and a roll flushes
     it up to the new segment) [alter_dir_copying, `:n` = after the n-th chunk]
     -> as 1; the future's unsynced tail is recovered or truncated by the loader like any log's.
  3. write the destination dir's checkpoints (recovery point, log start, cleaner offset), copy
     and sync what came meanwhile; then under the partition's flush lock and lock (appends to it
     wait): copy the tail that came during that sync, write the current's leader epochs into the
     future dir if they differ, fsync the future's tail (and its dir when a segment was rolled),
     rewrite the log start checkpoint if it moved [alter_dir_future_synced]
     -> as 1 (nothing is left to copy; the swap runs again).
  4. rename the current dir to `<topic>-<n>.<uuid hex>-delete`, fsync the source dir
     [alter_dir_current_renamed]
     -> no live dir for the partition and one `-future` dir: the future is renamed live (step 5
        finished by the loader); it holds every record, synced in 3 before this rename. The
        `-delete` dir is deleted after log.segment.delete.delay.ms. (Only when every log dir is
        online: a `-future` without a live copy while a dir is offline is left alone, since the
        current may be on the offline dir; the partition stays offline until it returns.)
  5. rename the future dir to `<topic>-<n>`, fsync the destination dir [alter_dir_future_renamed]
     -> the live dir is in the destination; the `-delete` dir is deleted; the source dir's
        checkpoint entries for the partition are dropped at start-up (cleaner-offset-checkpoint:
        an entry left there would win over the live one when that dir comes later in log.dirs).
  6. in memory: the log takes over the future's segments, the old ones are closed, the source
     dir's checkpoints are rewritten without the partition, the `-delete` dir is queued for
     deletion, cleaning resumes.
Never two live copies: 4 is durable before 5 starts. Never lost records: the future is synced
(3) before the current stops being live (4).

A move is cancelled (its future renamed `-delete` and deleted later, cleaning resumed) when the
partition is asked to move back to its current dir or elsewhere, when its topic is deleted, or
when either dir fails (then its files are left to the next start).

Lock order: LogManager._lock, a move's `lock`, the current log's `_flush_lock`, its `lock`, the
future log's locks.
"""
from __future__ import annotations

import logging
import os
import string
import threading
import time as _time
from dataclasses import dataclass, field

from kompakt.config.broker_config import LONG_MAX
from kompakt.protocol.errors import (InvalidTopicExceptionError, KafkaError, KafkaStorageErrorError,
                                     LogDirNotFoundError, OffsetOutOfRangeError, UnknownTopicOrPartitionError)
from kompakt.storage import TopicPartition
from kompakt.storage.checkpoint import (LEADER_EPOCH_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
                                        LeaderEpochCheckpointFile, fsync_dir)
from kompakt.storage.faults import crash_point
from kompakt.storage.log_dirs import (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, parse_partition_dir,
                                      partition_dir_name, unique_dir_name)

log = logging.getLogger(__name__)

# One read of the current log per copy step (Kafka's replica.fetch.max.bytes default): the copy's
# memory bound, and how long a step keeps other moves waiting.
COPY_CHUNK_BYTES = 1 << 20
# The copy syncs the future log every this many bytes (in the copy thread): without it a move of a
# large partition leaves gigabytes of dirty pages, and the kernel then throttles every writer of
# the disk, the event loop's appends included (a 1 GB move on the project's VM: produce p50 442 ms
# during it); it also bounds what the loader recovers of the future after a crash.
SYNC_EVERY_BYTES = 32 << 20
_UUID_HEX = 32


def future_dir_name_fits(tp) -> bool:
    """Whether `<topic>-<n>.<32 hex>-future` fits a 255-byte file name (Kafka refuses the move of
    a longer one with INVALID_TOPIC_EXCEPTION, KAFKA-4893)."""
    return len(f"{tp[0]}-{tp[1]}.{'0' * _UUID_HEX}{FUTURE_DIR_SUFFIX}".encode()) <= 255


def parse_future_dir(name: str) -> TopicPartition | None:
    """`<topic>-<n>.<32 hex>-future` -> TopicPartition; None for any other name."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    base, dot, uid = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or len(uid) != _UUID_HEX or not set(uid) <= set(string.hexdigits):
        return None
    return parse_partition_dir(base)


def parent_dir(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


@dataclass(eq=False)
class FutureMove:
    """One partition on its way to `dest`: its future log and the copy's progress."""
    tp: TopicPartition
    future: object                     # storage.log.Log in `dest`
    dest: str
    resumed: bool = False              # loaded at start-up (not created by a request)
    lock: threading.Lock = field(default_factory=threading.Lock)
    paused: bool = False               # cleaning paused by this move (resumed when it ends)
    done: bool = False
    chunks: int = 0
    copied_bytes: int = 0
    unsynced_bytes: int = 0
    locked_ms: float = 0.0             # how long the swap held the partition (appends waited)


class ReplicaAlterLogDirs:
    """The moves in progress and the thread that copies them (Kafka's ReplicaAlterLogDirsManager
    with one ReplicaAlterLogDirsThread); owned by the LogManager (see the module docstring)."""

    def __init__(self, manager):
        self.manager = manager
        self._moves: dict[TopicPartition, FutureMove] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.completed_total = 0

    # ---- views ------------------------------------------------------------------------------------
    def future_logs(self) -> dict[TopicPartition, object]:
        """tp -> future log of every move in progress (DescribeLogDirs, checkpoints, shutdown)."""
        return {tp: m.future for tp, m in list(self._moves.items())}

    def moves(self) -> dict[TopicPartition, FutureMove]:
        return dict(self._moves)

    def stats(self) -> dict[str, int]:
        """For /metrics: moves in progress, the largest offset lag of a future log behind its
        partition's log (Kafka's ReplicaAlterLogDirsManager MaxLag), moves completed since start."""
        lags = []
        for tp, move in list(self._moves.items()):
            cur = self.manager.get_log(tp)
            if cur is not None:
                lags.append(max(0, cur.log_end_offset - move.future.log_end_offset))
        return {"log_dir_moves": len(lags), "log_dir_move_max_lag": max(lags, default=0),
                "log_dir_moves_completed_total": self.completed_total}

    # ---- the request (a worker thread; AlterReplicaLogDirs) ----------------------------------------
    def alter(self, tp, dest: str) -> None:
        """Move `tp` to log dir `dest` (an absolute path as configured), as Kafka's
        ReplicaManager.alterReplicaLogDirs: raises the KafkaError the partition answers.
        Asking for the dir the partition is in already succeeds and changes nothing (it cancels
        a move in progress elsewhere); asking again for the dir it is moving to changes nothing."""
        m = self.manager
        tp = TopicPartition(*tp)
        if not future_dir_name_fits(tp):
            raise InvalidTopicExceptionError("The topic name is too long.")
        configured = [os.path.abspath(d) for d in m.config.log_dirs]
        if dest not in configured:
            raise LogDirNotFoundError(f"Log dir {dest} is not found in the config.")
        with m._lock:
            m._check_started()
            offline = {os.path.abspath(d) for d in m.offline_dirs}
            if dest in offline:
                raise KafkaStorageErrorError(f"Log directory {dest} is offline")
            plog = m.get_log(tp)
            if plog is None or plog.offline:
                if plog is not None or m.is_offline(tp):
                    raise KafkaStorageErrorError(f"Partition {tp.topic}-{tp.partition} is offline")
                raise UnknownTopicOrPartitionError(
                    f"This server does not host this topic-partition: {tp.topic}-{tp.partition}")
            move = self._moves.get(tp)
            if move is not None and move.dest != dest:
                self._drop(move, f"it was asked to move to {dest} instead")
                move = None
            if parent_dir(plog.dir) == dest:
                log.info("%s-%d is in log dir %s already: nothing to move", tp.topic, tp.partition, dest)
                return
            if move is not None:
                return
            if offline:   # Kafka's getOrCreateLog: no future log while a dir is offline
                raise KafkaStorageErrorError(f"Can not create log for {tp.topic}-{tp.partition} because "
                                             f"log directories {','.join(sorted(offline))} are offline")
            self._create_future(tp, plog, dest)
        self._wake()

    def _create_future(self, tp: TopicPartition, plog, dest: str) -> FutureMove:
        """Step 1 (module docstring). Caller holds the LogManager's lock."""
        from kompakt.storage.loader import write_partition_metadata
        m = self.manager
        path = unique_dir_name(os.path.join(dest, partition_dir_name(tp)), FUTURE_DIR_SUFFIX)
        try:
            os.makedirs(path)
            write_partition_metadata(path, plog.topic_id)
            future = m._open_log(path, tp, 0, None, True, topic_id=plog.topic_id,
                                 stored_topic_id=plog.topic_id)
            fsync_dir(dest)
        except OSError as exc:
            m.handle_io_error(dest, exc, f"creating the future log {path}")
            raise KafkaStorageErrorError(f"cannot create the future log {path}: {exc}") from exc
        move = FutureMove(tp, future, dest)
        self._moves[tp] = move
        m._write_checkpoints_for_dir(dest)   # no stale entry of an earlier stay may apply to it
        crash_point("alter_dir_future_created")
        log.info("moving %s-%d from %s to %s: future log %s created", tp.topic, tp.partition,
                 parent_dir(plog.dir), dest, path)
        return move

    # ---- start-up -----------------------------------------------------------------------------------
    def resume(self, tp: TopicPartition, future, current) -> None:
        """A `-future` dir found at start-up beside a live current log: go on copying (recovery
        rule of steps 1-3). The future is first cut to the end the current was loaded with."""
        if future.log_end_offset > current.loaded_end_offset:
            future.truncate_to(current.loaded_end_offset)
        self._moves[tp] = FutureMove(tp, future, parent_dir(future.dir), resumed=True)
        log.info("resuming the move of %s-%d from %s to %s (future log at offset %d of %d)", tp.topic,
                 tp.partition, parent_dir(current.dir), parent_dir(future.dir), future.log_end_offset,
                 current.log_end_offset)

    # ---- the thread -----------------------------------------------------------------------------------
    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="replica-alter-log-dirs", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread after its current step (a chunk, or a swap); moves stay on disk and
        resume at the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._moves:
                    self._cond.wait()
                if self._stopping:
                    return
            self.step_all()

    def step_all(self) -> int:
        """One step of every move (the thread's loop; tests call it directly); returns how many
        moves remain."""
        for move in list(self._moves.values()):
            if self._stopping:
                break
            try:
                self.step(move)
            except Exception as exc:  # noqa: BLE001 - one move failing must not stop the others
                log.error("moving %s-%d to %s failed, the move is abandoned: %s", move.tp.topic,
                          move.tp.partition, move.dest, exc, exc_info=not isinstance(exc, KafkaError))
                self._abandon(move)
        return len(self._moves)

    def step(self, move: FutureMove) -> None:
        """Copy one chunk; swap once the future has caught up."""
        cleaner = self.manager.cleaner
        with move.lock:      # a move ended meanwhile must not pause cleaning for good
            if move.done:
                return
            if not move.paused:
                if cleaner is not None:
                    cleaner.abort_and_pause_cleaning(move.tp)
                move.paused = True
        started = _time.monotonic()
        caught_up, copied = self._copy_step(move)
        self._throttle(copied, started)   # outside the move's lock: a cancel never waits for it
        if caught_up:
            self._swap(move)

    # ---- step 2: the copy -----------------------------------------------------------------------------
    def _current(self, move: FutureMove):
        cur = self.manager.get_log(move.tp)
        fut = move.future
        if cur is None or cur.offline or cur.closed:
            raise KafkaStorageErrorError(f"the current log of {move.tp.topic}-{move.tp.partition} is gone")
        if fut.offline or fut.closed:
            raise KafkaStorageErrorError(f"the future log {fut.dir} is offline")
        return cur

    def _copy_step(self, move: FutureMove) -> tuple[bool, int]:
        """Copy at most one chunk; (whether the future reached the current's end as seen when the
        step began, bytes copied)."""
        copied = 0
        with move.lock:
            if move.done:
                return False, 0
            cur = self._current(move)
            fut = move.future
            with cur.lock:
                start, end = cur.log_start_offset, cur.log_end_offset
            _align(fut, start, end)
            if fut.log_end_offset < end:
                copied = _copy_chunk(cur, fut, start)
                move.copied_bytes += copied
                move.chunks += 1
                move.unsynced_bytes += copied
                crash_point("alter_dir_copying")
                if move.unsynced_bytes >= SYNC_EVERY_BYTES:
                    move.unsynced_bytes = 0
                    fut.flush()
            # caught up with the end seen at the start of the step: what arrived since is the
            # tail step 3 copies while appends wait
            return fut.log_end_offset >= end, copied

    def _throttle(self, copied: int, started: float) -> None:
        """Keep the copy of every move together under replica.alter.log.dirs.io.max.bytes.per.second
        (Kafka's replica-alter-log-dirs quota): a step that copied n bytes lasts at least n / rate
        seconds (the moves take their steps one at a time). Waits on the condition, so `stop`
        cuts it short."""
        rate = self.manager.config["replica.alter.log.dirs.io.max.bytes.per.second"]
        if rate >= LONG_MAX or copied <= 0:
            return
        wait = copied / rate - (_time.monotonic() - started)
        if wait > 0:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(wait)

    # ---- steps 3 to 6: the swap ---------------------------------------------------------------------
    def _swap(self, move: FutureMove) -> None:
        m = self.manager
        tp, fut, dest = move.tp, move.future, move.dest
        if move.done:
            return
        with m._lock:
            # checkpoints first, outside the partition's lock; step 3 rewrites the log start if it
            # moved since (a lower recovery point is only more recovery)
            self._write_dest_checkpoints(move)
            start_written = fut.log_start_offset
            with move.lock:
                if move.done:
                    return
                cur = self._current(move)
                source = parent_dir(cur.dir)
                # copy and sync what came meanwhile while appends go on, so that under the lock
                # only what arrives during this one flush is left to copy and sync
                _catch_up(cur, fut)
                fut.flush()
                with cur._flush_lock, cur.lock:
                    locked_at = _time.monotonic()
                    _catch_up(cur, fut)                                               # step 3
                    if fut.leader_epoch_cache.entries() != cur.leader_epoch_cache.entries():
                        LeaderEpochCheckpointFile(os.path.join(fut.dir, LEADER_EPOCH_CHECKPOINT_FILE)).write(
                            cur.leader_epoch_cache.entries(), sync=True)
                    fut.flush()
                    if fut.log_start_offset != start_written:
                        m._write_checkpoint(dest, LOG_START_OFFSET_CHECKPOINT_FILE, "log_start_offset")
                    crash_point("alter_dir_future_synced")
                    old_dir = cur.dir
                    try:
                        cur.rename_dir(unique_dir_name(cur.dir, DELETE_DIR_SUFFIX))  # step 4
                    except OSError as exc:
                        m.handle_io_error(source, exc, f"renaming {old_dir} for its move")
                        raise KafkaStorageErrorError(f"cannot rename {old_dir}: {exc}") from exc
                    crash_point("alter_dir_current_renamed")
                    try:
                        fut.rename_dir(os.path.join(dest, partition_dir_name(tp)))   # step 5
                    except OSError as exc:
                        self._undo_step_4(cur, old_dir, dest, exc)
                        raise KafkaStorageErrorError(f"cannot rename {fut.dir}: {exc}") from exc
                    crash_point("alter_dir_future_renamed")
                    deleted_dir = cur.dir
                    old_segments = cur.take_over(fut)                                # step 6
                move.locked_ms = (_time.monotonic() - locked_at) * 1000
                move.done = True
                self._moves.pop(tp, None)
            try:
                for seg in old_segments:
                    seg.close_handlers()
                m._queue_dir_delete(deleted_dir, f"replaced by the future log in {dest}")
                for d in (source, dest):
                    try:
                        m._write_checkpoints_for_dir(d)
                    except OSError:
                        pass   # handled (the dir's error); the next start reads what is there
                if m.cleaner is not None:
                    m.cleaner.update_checkpoints(source, partition_to_remove=tp)
            except Exception:  # noqa: BLE001 - the move is done: cleaning must resume whatever fails here
                log.exception("bookkeeping after moving %s-%d to %s failed (the next start redoes it)",
                              tp.topic, tp.partition, dest)
            finally:
                self._end(move)
        self.completed_total += 1
        log.info("moved %s-%d from %s to %s (%d bytes copied in %d chunks; appends waited %.1f ms for "
                 "the swap)", tp.topic, tp.partition, source, dest, move.copied_bytes, move.chunks, move.locked_ms)

    def _write_dest_checkpoints(self, move: FutureMove) -> None:
        m = self.manager
        m._write_checkpoints_for_dir(move.dest)
        if m.cleaner is not None:
            offset = m.cleaner.cleaner_checkpoint(move.tp)
            if offset is not None:
                m.cleaner.update_checkpoints(move.dest, partition_to_update=(move.tp, offset))

    def _undo_step_4(self, cur, old_dir: str, dest: str, exc: OSError) -> None:
        """Step 5 failed (the destination dir is failing): put the current dir back live."""
        m = self.manager
        m.handle_io_error(dest, exc, "renaming the future log live")
        try:
            cur.rename_dir(old_dir)
        except OSError as again:
            m.handle_io_error(parent_dir(old_dir), again, f"renaming {cur.dir} back to {old_dir}")

    # ---- ending a move ---------------------------------------------------------------------------------
    def cancel(self, tp, why: str) -> None:
        """Drop the move of `tp`, if any (topic deletion). Caller holds the LogManager's lock."""
        move = self._moves.get(TopicPartition(*tp))
        if move is not None:
            self._drop(move, why)

    def _drop(self, move: FutureMove, why: str) -> None:
        """Cancel a move: its future dir renamed `-delete` (deleted later), cleaning resumed."""
        m = self.manager
        with move.lock:
            if move.done:
                return
            move.done = True
            self._moves.pop(move.tp, None)
            fut = move.future
            fut.close_handlers()
            if not fut.offline:
                target = unique_dir_name(os.path.join(move.dest, partition_dir_name(move.tp)), DELETE_DIR_SUFFIX)
                try:
                    fut.rename_dir(target)
                    m._queue_dir_delete(target, "a cancelled move's future log")
                except OSError as exc:
                    m.handle_io_error(move.dest, exc, f"deleting the future log {fut.dir}")
        self._end(move)
        log.info("move of %s-%d to %s cancelled: %s", move.tp.topic, move.tp.partition, move.dest, why)

    def _abandon(self, move: FutureMove) -> None:
        """A move that failed: drop its future when both logs are healthy; when either dir failed,
        forget the move and leave its files to the next start (the future may be the only copy
        still readable)."""
        cur = self.manager.get_log(move.tp)
        if move.future.offline or cur is None or cur.offline:
            with move.lock:
                move.done = True
                self._moves.pop(move.tp, None)
            self._end(move)
        else:
            with self.manager._lock:
                self._drop(move, "it failed")

    def _end(self, move: FutureMove) -> None:
        if move.paused:
            move.paused = False
            if self.manager.cleaner is not None:
                self.manager.cleaner.resume_cleaning(move.tp)


def _align(fut, start: int, end: int) -> None:
    """Make the future fit the current log's [start, end) before copying on: cut what the current
    no longer has at its end (truncation), restart it empty at the current's start when that moved
    past it (retention, DeleteRecords) or when it is empty elsewhere, follow the log start."""
    if fut.log_end_offset > end:
        fut.truncate_to(end)
    if (fut.log_end_offset < start or fut.log_start_offset > start
            or (fut.size == 0 and fut.log_end_offset != start)):
        fut.truncate_fully_and_start_at(start)
    elif fut.log_start_offset < start:
        fut.maybe_increment_log_start_offset(start, "the current log's start moved")


def _catch_up(cur, fut) -> None:
    """Copy until the future reaches the current's end as seen on entry (all of it under the
    current's lock, where the end cannot move)."""
    end = cur.log_end_offset
    while True:
        _align(fut, cur.log_start_offset, cur.log_end_offset)
        if fut.log_end_offset >= end:
            return
        _copy_chunk(cur, fut, cur.log_start_offset)


def _copy_chunk(cur, fut, start: int) -> int:
    """Append the next batches of `cur` (at most COPY_CHUNK_BYTES, or one larger batch) to `fut`
    with their offsets; returns the bytes copied."""
    try:
        data = cur.read(fut.log_end_offset, COPY_CHUNK_BYTES).records
    except OffsetOutOfRangeError:
        return 0   # the log start moved past the future's end since: the next step aligns
    if not data:
        return 0
    from kompakt.protocol.records import peek_size_and_magic
    first = peek_size_and_magic(data, 0)[0]
    if first < fut.log_end_offset:
        if fut.size != 0:
            raise KafkaStorageErrorError(f"the batch at {first} of {cur.dir} overlaps the future log "
                                         f"{fut.dir} ending at {fut.log_end_offset}")
        # the log start is inside this batch: the future starts at the batch, as Kafka's
        # UnexpectedAppendOffsetException handling in appendRecordsToFollowerOrFutureReplica
        fut.truncate_fully_and_start_at(first)
    fut.append(data)
    if fut.log_start_offset < start <= fut.log_end_offset:
        fut.maybe_increment_log_start_offset(start, "the current log's start")
    return len(data)
