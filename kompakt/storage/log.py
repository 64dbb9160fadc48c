"""The log of one partition: an ordered list of segments, the last one active.

Role: Kafka's UnifiedLog + LocalLog for a single node. Appends (validated by log_validator, offsets
assigned here, producer sequences checked by producer_state), reads of whole batches, offset
lookups (earliest / latest / by timestamp / max timestamp), truncation, log-start advancement
(DeleteRecords, retention), rolling, flushing, segment deletion with the `.deleted` protocol and
the cleaner's crash-safe swap (`replace_segments`).

Offsets on a single node: the disk is the only replica, so the high watermark is the durable
offset (`durable_offset`: every batch below it is synced, the `.log` bytes and the directory entry
of their segment; a power cut cannot take it back) while `hw_is_durable` (the LogManager sets it
from kompakt.durable.acks.enable, on by default); with it off the high watermark is the log end
offset, as before durable acknowledgements (every append "replicated" at once). The durable offset
moves when the group commit (storage/group_commit.py, `sync_data`) or a flush (`flush`, which also
syncs the indexes and moves the recovery point) has synced up to it. Last stable offset = the
first offset of the oldest open transaction (no lower than the log start offset), never above
the high watermark (Kafka's: min(first unstable offset, high watermark)). Transactions (producer_state.py): a COMMIT/ABORT marker appended
here completes its producer's transaction; an aborted one is written to the active segment's
`.txnindex` (with the LSO it leaves) before the LSO moves past it, and `aborted_transactions`
finds the ones a read_committed fetch must be told about.

Rolls and the event loop: a roll creates files (three segment files and a producer snapshot: a
median 0.13 ms here, 4 ms at worst of 300, far more on a busy disk), which the broker's event loop
must not wait for. An append says where its roll may happen (`roll=`): ROLL_HERE rolls in the
calling thread (worker threads, tools); ROLL_ELSEWHERE raises RollRequired before anything changed
(the bytes given are left as they came), so the produce handler runs the append again on the log
writer (storage/log_writer.py); ROLL_LATER, for the synchronous appends on the loop that cannot
wait (group and transaction coordinators, markers), appends into the due segment while it
physically can (indexes not full, offsets and positions within int32) and has the `on_roll_due`
hook (the LogManager: the log writer) roll it right after, once - so such a segment may end past
segment.bytes or segment.ms by the appends that come before the writer rolls it (usually one batch:
the loop serves other requests meanwhile), as a Kafka segment ends past segment.bytes when one
batch is larger; offsets, order and contents are as Kafka's. A ROLL_LATER append that leaves an
index full has the writer roll too (any next append would roll); one that cannot fit at all (full
index, offsets or size past int32: only after the writer fell far behind) rolls in place. The roll
still holds `lock` while it creates files, so an append on the loop that finds the writer rolling
the same log waits for that one roll.

Concurrency: every mutation takes `lock` (a threading.RLock). Reads take it too (they are short:
an index lookup and one pread). `flush` collects the segments to sync under the lock and fsyncs
outside it, in the caller's thread (the LogManager calls it from a worker thread), so appends on
the event loop never wait for a disk sync; `_flush_lock` serialises flushes, and `close` takes it
first too (lock order: `_flush_lock`, then `lock`, then `_durable_lock`). The group commit's
`sync_data` takes `_flush_lock` only, never `lock` (see there). Segments removed from the log are renamed `.deleted`
at once and stay open until their files are unlinked (`on_segments_deleted` hook, set by the
LogManager to unlink after file.delete.delay.ms), so an in-flight read of them still works.

Invariants:
- segments are sorted by base offset and never overlap; there is always at least one segment;
- log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset;
  recovery_point <= durable_offset <= log_end_offset;
- every batch appended has offsets starting at the previous log end offset.
"""
from __future__ import annotations

import logging
import os
import threading
import time as _time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable

from kompakt.protocol import records as R
from kompakt.protocol.errors import (CorruptMessageError, InvalidProducerEpochError, InvalidRecordError,
                                     KafkaStorageErrorError, OffsetOutOfRangeError)
from kompakt.storage import loader as L
from kompakt.storage import segment as S
from kompakt.storage.checkpoint import fsync_dir
from kompakt.storage.faults import crash_point
from kompakt.storage.file_records import FileRecords
from kompakt.storage.offset_index import CorruptIndexError
from kompakt.storage.log_validator import Prepared, assign, prepare, validate_and_assign
from kompakt.protocol.txn_records import decode_marker
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

# Where an append may roll the log (see module docstring).
ROLL_HERE = "here"
ROLL_ELSEWHERE = "elsewhere"
ROLL_LATER = "later"

# Special ListOffsets timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class RollRequired(Exception):
    """An append with roll=ROLL_ELSEWHERE needs a new segment: nothing was appended; run it again
    where a roll may happen (the log writer)."""


@dataclass(slots=True)
class AppendInfo:
    """What the produce response needs (Kafka's LogAppendInfo)."""
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int          # -1 unless LogAppendTime
    log_start_offset: int
    records_count: int
    valid_bytes: int
    duplicate: bool = False

    @property
    def base_offset(self) -> int:
        return self.first_offset


@dataclass(slots=True)
class FetchData:
    """Result of Log.read: whole batches as bytes (or, read with as_file, a FileRecords), plus the
    partition's offsets at read time."""
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    log_end_offset: int
    first_batch_offset: int = -1


def parse_topic_partition(dir: str):
    """`<topic>-<partition>` (optionally with a `.<uuid>-delete` tail) -> TopicPartition."""
    from kompakt.storage import TopicPartition
    name = os.path.basename(os.path.normpath(dir))
    if name.endswith("-delete") and "." in name:
        name = name[: name.rindex(".")]
    topic, _, part = name.rpartition("-")
    if not topic or not part.isdigit():
        raise ValueError(f"Found directory {dir}, '{name}' is not in the form of topic-partition")
    return TopicPartition(topic, int(part))


SYNC_BUSY = object()   # Log.sync_plan: another thread holds the flush lock; ask again later


class SyncPlan:
    """What one log's sync must cover (Log.sync_plan): duplicated `.log` descriptors to fdatasync,
    the directory's to fsync (after a roll; -1: none), and the log end offset and truncation
    count seen when they were taken."""
    __slots__ = ("target", "truncations", "fds", "dir_fd", "dir_gen")

    def __init__(self, target: int, truncations: int):
        self.target = target
        self.truncations = truncations
        self.fds: list[int] = []
        self.dir_fd = -1
        self.dir_gen = -1        # Log._dir_gen when the directory's descriptor was taken (-1: none)

    def close(self) -> None:
        """Close every descriptor the plan holds (once the syncs are done, or on failure)."""
        for fd in self.fds + ([self.dir_fd] if self.dir_fd >= 0 else []):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds, self.dir_fd = [], -1


class Log:
    """One partition's log (see module docstring). Build with `Log.open`."""

    def __init__(self, dir: str, config, loaded: L.LoadedLog, *, tp=None, time=_time):
        self.dir = dir
        self.config = config
        self.tp = tp if tp is not None else _safe_tp(dir)
        self._tp_str = _tp_name(self.tp)
        self._time = time
        self.lock = threading.RLock()
        self._flush_lock = threading.Lock()
        # the group commit's sync reads offsets without `lock` (see sync_data); a truncation
        # counts itself here, at its start and end, so a sync it overlapped moves nothing
        self._durable_lock = threading.Lock()
        self._truncations = 0
        self._dir_gen = 0        # counts directory changes (_dir_changed), under _durable_lock
        self._segments: list[S.LogSegment] = list(loaded.segments)
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._next_offset = loaded.next_offset
        self.loaded_end_offset = loaded.next_offset   # below it, bytes came from disk (maybe cold)
        self.log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        # below it every batch is synced (module docstring); after an unclean shutdown the loaded
        # tail above the recovery point may be in the page cache only, until the LogManager syncs it while loading
        self.durable_offset = min(loaded.recovery_point, loaded.next_offset)
        self.hw_is_durable = False      # the LogManager turns it on (kompakt.durable.acks.enable)
        self.group_commit = None        # its log dir's flusher (storage/group_commit.py), likewise
        self.producer_state = loaded.producer_state
        self.leader_epoch_cache = loaded.leader_epoch_cache
        self.topic_id = loaded.topic_id
        self.repairs = loaded.repairs
        self.unflushed_messages = 0
        self.last_flush_time = self._now()
        # a new segment's name is durable only once the partition dir is synced (the first flush)
        self.needs_flush_dir = loaded.created_files
        self.closed = False
        self.offline = False      # its log dir failed (LogManager.handle_io_error): closed for good
        # Hooks the LogManager sets: unlink `.deleted` segments later; flush after a roll; an I/O
        # error (takes the log dir offline unless the disk is only full).
        self.on_segments_deleted: Callable[[list[S.LogSegment]], None] | None = None
        self.on_roll: Callable[["Log", int], None] | None = None
        self.on_io_error: Callable[["Log", OSError, str], None] | None = None
        # Where a ROLL_LATER append's roll goes (the LogManager: the log writer); None: at once.
        self.on_roll_due: Callable[["Log", int], None] | None = None
        self._roll_pending = -1   # base offset of the segment the writer was asked to roll
        self.active_segment.roll_jitter_ms = config.random_segment_jitter()

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def open(cls, dir: str, config, *, topic_id=None, log_start_offset: int | None = None,
             recovery_point: int = 0, had_clean_shutdown: bool = True, time=_time,
             producer_id_expiration_ms: int = 86_400_000, tp=None, stored_topic_id=L.UNREAD) -> "Log":
        """Open (creating if needed) the partition directory `dir`, repairing it as LogLoader does.
        stored_topic_id: what the caller already read from partition.metadata (read again if not)."""
        loaded = L.load_log(dir, config, log_start_offset_checkpoint=log_start_offset,
                            recovery_point_checkpoint=recovery_point,
                            had_clean_shutdown=had_clean_shutdown, topic_id=topic_id, time=time,
                            producer_id_expiration_ms=producer_id_expiration_ms,
                            stored_topic_id=stored_topic_id)
        return cls(dir, config, loaded, tp=tp, time=time)

    def _now(self) -> int:
        return int(self._time.time() * 1000)

    # ---- offsets ---------------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        """What consumers may read: the durable offset, or the log end offset with durable acks off."""
        return self.durable_offset if self.hw_is_durable else self._next_offset

    @property
    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        first = self.producer_state.first_undecided_offset()
        if first is None:
            return hw
        return min(max(first, self.log_start_offset), hw)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (the cleaner never passes it), or None."""
        first = self.producer_state.first_undecided_offset()
        return None if first is None else max(first, self.log_start_offset)

    @property
    def segments(self) -> list[S.LogSegment]:
        """Snapshot of the segment list, oldest first (the last is the active segment)."""
        return list(self._segments)

    @property
    def active_segment(self) -> S.LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch()

    def leader_epoch_for(self, offset: int) -> int:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) when unknown."""
        with self.lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self._next_offset)

    def update_config(self, config) -> None:
        """Live config change (AlterConfigs): new rolls, validation and indexes use it."""
        with self.lock:
            self.config = config
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    # ---- append ----------------------------------------------------------------------------------
    def prepare(self, records, *, origin: str = "client") -> Prepared:
        """The validation `append_as_leader` would do (checks, decompression, recompression:
        log_validator.prepare), on any thread and without the lock: it reads only the config,
        the clock and the bytes (never changes them). Hand the answer to `append_as_leader`
        (`prepared=`), which then only assigns offsets, unless the topic config changed since."""
        return prepare(records, config=self.config, now_ms=self._now(), origin=origin,
                       topic_partition=self._tp_str, next_offset=self._next_offset)

    def append_as_leader(self, records, *, leader_epoch: int = 0, origin: str = "client",
                         verification_guard=None, roll: str = ROLL_HERE,
                         prepared: Prepared | None = None) -> AppendInfo:
        """Validate one produced batch, assign offsets, append (Kafka's appendAsLeader).

        A transactional batch whose producer has no open transaction here must present the guard
        `start_verification` handed out (KIP-890: the coordinator confirmed the partition is in
        the transaction), else INVALID_TXN_STATE. A marker (origin "coordinator") completes its
        producer's transaction; an aborted one is indexed before the LSO moves past it. `roll`:
        where a roll may happen (module docstring); ROLL_ELSEWHERE may raise RollRequired.
        `prepared`: this batch validated already (`prepare`, on a worker thread).
        """
        if roll is ROLL_ELSEWHERE:
            # validation patches a writable view's batch header in place (offsets, epoch,
            # LogAppendTime; anything else it copies): keep the client's header so the append can
            # run again from the same bytes
            header = (bytes(records[:R.BATCH_OVERHEAD])
                      if isinstance(records, memoryview) and not records.readonly else None)
            try:
                return self._append_as_leader(records, leader_epoch, origin, verification_guard, roll,
                                              prepared)
            except RollRequired:
                if header is not None:
                    records[:len(header)] = header
                raise
        if roll is ROLL_LATER and self.on_roll_due is None:
            roll = ROLL_HERE
        return self._append_as_leader(records, leader_epoch, origin, verification_guard, roll, prepared)

    def _append_as_leader(self, records, leader_epoch: int, origin: str, verification_guard,
                          roll: str, prepared: Prepared | None = None) -> AppendInfo:
        due = -1
        with self.lock:
            self._check_open()
            now = self._now()
            if prepared is not None and prepared.config is self.config:
                vr = assign(prepared, records, next_offset=self._next_offset, leader_epoch=leader_epoch)
            else:                  # not prepared, or the topic config changed since: validate here
                vr = validate_and_assign(records, next_offset=self._next_offset, config=self.config,
                                         now_ms=now, leader_epoch=leader_epoch, origin=origin,
                                         topic_partition=self._tp_str)
            hdr = vr.header
            staged = None
            completed = ()
            psm = self.producer_state
            if hdr.producer_id >= 0:
                marker = decode_marker(vr.buffer, 0, hdr) if hdr.is_control else None
                staged, dup, completed = psm.check_batches(
                    [(hdr, vr.first_offset, vr.last_offset, marker)], origin, verification_guard)
                if dup is not None:
                    # Kafka answers the stored batch's timestamp as log_append_time, whatever
                    # the topic's timestamp type (UnifiedLog.append: setLogAppendTime(duplicate))
                    return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp,
                                      dup.last_offset, dup.timestamp, self.log_start_offset,
                                      dup.offset_delta + 1, 0, duplicate=True)
            due = self._append_validated(vr.buffer, vr.first_offset, vr.last_offset, vr.max_timestamp,
                                         vr.offset_of_max_timestamp, vr.records_count, now, roll)
            if due >= 0:
                if due == self._roll_pending:
                    due = -1                   # the writer has this roll queued already
                else:
                    self._roll_pending = due
            if staged:
                psm.apply(staged, self._next_offset)
            else:
                psm.map_end_offset = self._next_offset
            for done in completed:
                self._index_completed(done)
            if leader_epoch >= 0:
                self.leader_epoch_cache.assign(leader_epoch, vr.first_offset)
            info = AppendInfo(vr.first_offset, vr.last_offset, vr.max_timestamp,
                              vr.offset_of_max_timestamp, vr.log_append_time,
                              self.log_start_offset, vr.records_count, len(vr.buffer))
        if due >= 0:
            self.on_roll_due(self, due)
        self._maybe_flush_messages()
        return info

    def append(self, records, *, origin: str = "replication") -> AppendInfo | None:
        """Append batches that already carry their offsets (recovery tests, tools, the cleaner).

        Checks each batch's CRC and that offsets start at or after the log end offset and increase.
        """
        buf = bytes(records)
        with self.lock:
            self._check_open()
            batches = list(R.iter_batches(buf))
            consumed = batches[-1][0] + batches[-1][1].size if batches else 0
            if consumed != len(buf):
                raise CorruptMessageError(f"append to {_tp_name(self.tp)}: {len(buf) - consumed} "
                                          f"trailing bytes are not a complete batch")
            if not batches:
                return None
            expected = self._next_offset
            max_ts, off_max = R.NO_TIMESTAMP, -1
            for pos, hdr in batches:
                if hdr.magic != R.CURRENT_MAGIC or not R.valid_crc(buf, pos, hdr):
                    raise CorruptMessageError(f"batch at offset {hdr.base_offset} is corrupt")
                if hdr.base_offset < expected:
                    raise InvalidRecordError(
                        f"Out of order offsets in append to {_tp_name(self.tp)}: batch at "
                        f"{hdr.base_offset} but the log end offset is {expected}")
                expected = hdr.last_offset + 1
                if hdr.max_timestamp > max_ts:
                    max_ts, off_max = hdr.max_timestamp, hdr.last_offset
            first, last = batches[0][1].base_offset, batches[-1][1].last_offset
            count = sum(h.records_count for _, h in batches)
            self._append_validated(buf, first, last, max_ts, off_max, count, self._now())
            seg = self._segments[-1]
            for pos, hdr in batches:
                aborted: list = []
                S.replay_batch(self.producer_state, buf, pos, hdr, aborted)
                for entry in aborted:
                    seg.txn_index.append(entry)
                if hdr.partition_leader_epoch >= 0:
                    self.leader_epoch_cache.assign(hdr.partition_leader_epoch, hdr.base_offset)
            info = AppendInfo(first, last, max_ts, off_max, -1, self.log_start_offset, count, len(buf))
        self._maybe_flush_messages()
        return info

    def _index_completed(self, done) -> None:
        """Kafka's order: index entry (with the LSO it leaves) in the segment holding the marker,
        then the transaction leaves `ongoing`, so the LSO never passes an unindexed abort."""
        psm = self.producer_state
        try:
            self._segments[-1].update_txn_index(done, psm.last_stable_offset_after(done))
        except OSError as exc:
            raise KafkaStorageErrorError(f"Error while writing the transaction index of "
                                         f"{self._tp_str}: {exc}") from exc
        psm.complete_txn(done)

    # ---- transactions ------------------------------------------------------------------------------
    def start_verification(self, producer_id: int, producer_epoch: int):
        """The guard for a transactional append whose producer epoch has no open transaction
        here, or None when it has one (KIP-890 part 1; see producer_state.py). An epoch older than
        the partition's is refused at once, InvalidProducerEpochError, before the coordinator is
        asked (Kafka 4's maybeStartTransactionVerification)."""
        with self.lock:
            psm = self.producer_state
            entry = psm.producers.get(producer_id)
            if entry is not None and producer_epoch < entry.producer_epoch:
                raise InvalidProducerEpochError(
                    f"Epoch of producer {producer_id} is {producer_epoch}, which is smaller than the "
                    f"last seen epoch {entry.producer_epoch}")
            if psm.has_ongoing_transaction(producer_id, producer_epoch):
                return None
            return psm.start_verification(producer_id)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list:
        """AbortedTxn entries overlapping [fetch_offset, upper_bound_offset): the segment holding
        fetch_offset and the later ones, until an entry's LSO reaches the upper bound (Kafka's
        collectAbortedTransactions)."""
        with self.lock:
            i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
            out: list = []
            for seg in self._segments[i:]:
                found, complete = seg.collect_aborted_txns(fetch_offset, upper_bound_offset)
                out.extend(found)
                if complete:
                    break
            return out

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every open transaction, oldest first."""
        with self.lock:
            return sorted(((pid, first) for first, pid in self.producer_state.ongoing.items()),
                          key=lambda t: t[1])

    def _append_validated(self, buf, first: int, last: int, max_ts: int, offset_of_max: int,
                          count: int, now: int, roll: str = ROLL_HERE) -> int:
        """Append (rolling first if due, as `roll` allows); the base offset of a segment the
        log writer must roll now (ROLL_LATER), else -1."""
        due = -1
        try:
            seg = self._segments[-1]
            if seg.should_roll(segment_bytes=self.config.segment_bytes,
                               max_segment_ms=self.config.max_segment_ms(), messages_size=len(buf),
                               max_timestamp_in_messages=max_ts, max_offset_in_messages=last,
                               now_ms=now):
                if roll is ROLL_ELSEWHERE:
                    raise RollRequired(self._tp_str)
                if roll is ROLL_LATER and _can_take(seg, last, len(buf)):
                    due = seg.base_offset
                else:
                    seg = self.roll(first)
            seg.append(last, max_ts, offset_of_max, buf, segment_bytes=self.config.segment_bytes)
        except OSError as exc:
            raise self._io_failed(exc, f"appending to {self._tp_str}") from exc
        self._next_offset = last + 1
        self.unflushed_messages += count
        if roll is ROLL_LATER and due < 0 and seg.indexes_full():
            due = seg.base_offset          # any next append would roll: roll now, off the loop
        return due

    def _maybe_flush_messages(self) -> None:
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    # ---- roll ------------------------------------------------------------------------------------
    def roll(self, expected_next_offset: int | None = None) -> S.LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        with self.lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self._next_offset)
            active = self._segments[-1]
            if active.base_offset == new_offset and active.size == 0:
                return active  # rolling an empty segment onto itself changes nothing
            if new_offset < active.base_offset or (new_offset == active.base_offset):
                raise KafkaStorageErrorError(
                    f"Trying to roll a new log segment for {_tp_name(self.tp)} with start offset "
                    f"{new_offset} <= the active segment's base offset {active.base_offset}")
            for path in (S.log_file(self.dir, new_offset), S.index_file(self.dir, new_offset),
                         S.time_index_file(self.dir, new_offset)):
                if os.path.exists(path):
                    log.warning("%s: removing stale file %s before roll", self.dir, path)
                    fs.unlink(path)
            active.on_become_inactive()
            self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, new_offset)
            self.producer_state.take_snapshot(sync=False)
            seg = self._new_segment(new_offset)
            crash_point("segment_roll")
            self._segments.append(seg)
            self._bases.append(new_offset)
            self._roll_pending = -1
            self._dir_changed()
            hook = self.on_roll
        if hook is not None:
            hook(self, new_offset)
        return seg

    def roll_if_due(self, base_offset: int) -> bool:
        """The roll a ROLL_LATER append left for the log writer: roll the active segment if it is
        still the one at `base_offset` (a produce append may have rolled it first) and holds
        something. An I/O error goes to the error hook (the next append tries again)."""
        with self.lock:
            active = self._segments[-1]
            if self._roll_pending == base_offset:
                self._roll_pending = -1
            if self.closed or active.base_offset != base_offset or active.size == 0:
                return False
            try:
                self.roll()
            except OSError as exc:
                log.warning("%s", self._io_failed(exc, f"rolling {self._tp_str}"))
                return False
            return True

    def _new_segment(self, base_offset: int) -> S.LogSegment:
        c = self.config
        seg = S.LogSegment(self.dir, base_offset, index_interval_bytes=c.index_interval_bytes,
                           max_index_size=c.segment_index_bytes,
                           roll_jitter_ms=c.random_segment_jitter(), time=self._time)
        if getattr(c, "preallocate", False):
            seg.preallocate(c.segment_bytes)
        return seg

    # ---- read ------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one: bool = True, as_file: bool = False) -> FetchData:
        """Whole batches from the one holding `offset`, at most max_bytes (unless min_one).

        Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset]. Reading at the log
        end offset returns no records. `max_offset` (exclusive) keeps batches at or above it out.
        `as_file`: a large read's records may be a FileRecords (the file range, for sendfile; see
        LogSegment.read) instead of bytes.
        """
        with self.lock:
            leo = self._next_offset
            start = self.log_start_offset
            if offset < start or offset > leo:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {_tp_name(self.tp)}, but we "
                    f"only have log segments in the range {start} to {leo}.")
            self._check_open()
            data = b""
            if offset < leo and max_bytes >= 0 and (max_offset is None or offset < max_offset):
                i = max(bisect_right(self._bases, offset) - 1, 0)
                while i < len(self._segments):
                    try:
                        res = self._segments[i].read(offset, max_bytes, None, min_one, as_file)
                    except OSError as exc:
                        raise self._io_failed(exc, f"reading {self._tp_str}") from exc
                    if res is not None:
                        data = res[1]
                        break
                    i += 1
            if type(data) is FileRecords:
                try:
                    crosses = max_offset is not None and max_offset < leo and data.last_base_offset() >= max_offset
                except OSError as exc:
                    data.close()
                    raise self._io_failed(exc, f"reading {self._tp_str}") from exc
                if crosses:
                    # The range crosses the bound (a consumer at the tail: with durable acks the
                    # high watermark trails the log end by a group-commit round). Read again up to
                    # the bound's file position, so what is below it still goes out by sendfile
                    # instead of being copied into Python and cut (the bytes path below).
                    data.close()
                    segment = self._segments[i]
                    try:
                        res = segment.read(offset, max_bytes, segment.position_below(max_offset), min_one, as_file)
                        data = res[1] if res is not None else b""
                        if type(data) is FileRecords and data.last_base_offset() >= max_offset:
                            ranged, data = data, data.read()    # never past the bound, whatever the
                            ranged.close()                      # index said: the bytes path cuts it
                    except OSError as exc:
                        raise self._io_failed(exc, f"reading {self._tp_str}") from exc
                if type(data) is FileRecords:
                    return FetchData(data, self.high_watermark, start, self.last_stable_offset, leo,
                                     data.first_base_offset())
            if max_offset is not None and max_offset < leo and data:
                data = data[:_prefix_below(data, max_offset)]
            first = R.peek_size_and_magic(data, 0)[0] if len(data) >= 17 else -1
            return FetchData(data, self.high_watermark, start, self.last_stable_offset, leo, first)

    # ---- offset lookups --------------------------------------------------------------------------
    def earliest(self) -> tuple[int, int]:
        return self.log_start_offset, R.NO_TIMESTAMP

    def latest(self) -> tuple[int, int]:
        """ListOffsets LATEST for a consumer: the high watermark."""
        return self.high_watermark, R.NO_TIMESTAMP

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp in the log."""
        with self.lock:
            best = None
            for seg in self._segments:
                if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            if best is None:
                return None
            target = best.max_timestamp_so_far
            _, pos = best.offset_index.lookup(best.offset_of_max_timestamp_so_far)
            for p in (pos, 0):
                for _, hdr, buf, bp in best.iter_batches(p, chunk=256 * 1024):
                    if hdr.max_timestamp != target:
                        continue
                    if hdr.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME:
                        return hdr.base_offset, target
                    for rec in R.decode_records(buf, bp, hdr):
                        if R.record_timestamp(hdr, rec) == target:
                            return hdr.base_offset + rec.offset_delta, target
                    return hdr.last_offset, target
            return best.offset_of_max_timestamp_so_far, target

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= target (ListOffsets).

        Special targets: -2 earliest, -1 latest, -3 max timestamp, -4 earliest local, -5 latest
        tiered (= latest here). None when no record is that recent.
        """
        if timestamp == EARLIEST_TIMESTAMP or timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return self.earliest()
        if timestamp == LATEST_TIMESTAMP or timestamp == LATEST_TIERED_TIMESTAMP:
            return self.latest()
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        with self.lock:
            start = self.log_start_offset
            for seg in self._segments:
                if seg.largest_timestamp < timestamp or seg.size == 0:
                    continue
                found = seg.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found[1], found[0]
            return None

    # ---- truncation and log start ----------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or above `offset`; True when something was removed.

        Truncation works on whole batches: a batch holding `offset` is removed entirely, so the new
        log end offset is the end of the last batch left (<= offset).
        """
        if offset < 0:
            raise ValueError(f"Cannot truncate partition {_tp_name(self.tp)} to a negative offset ({offset}).")
        with self.lock:
            self._check_open()
            if offset >= self._next_offset:
                return False
            if offset <= self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self._count_truncation()
            doomed = [s for s in self._segments if s.base_offset > offset]
            self._remove_segments(doomed, "truncation")
            active = self._segments[-1]
            active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            with self._durable_lock:
                self._truncations += 1
                self._next_offset = active.read_next_offset()
                self.durable_offset = min(self.durable_offset, self._next_offset)
            self.log_start_offset = min(self.log_start_offset, self._next_offset)
            self.recovery_point = min(self.recovery_point, self._next_offset)
            self.leader_epoch_cache.truncate_from_end(self._next_offset)
            self._reload_producer_state()
            return True

    def _count_truncation(self) -> None:
        """A truncation starts: a group-commit sync running now must not move the durable offset
        (sync_data reads the offsets without `lock`)."""
        with self._durable_lock:
            self._truncations += 1

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log empty at `new_offset`."""
        with self.lock:
            self._check_open()
            self._count_truncation()
            self._remove_segments(list(self._segments), "truncate fully")
            seg = self._new_segment(new_offset)
            self._segments = [seg]
            self._bases = [new_offset]
            with self._durable_lock:
                self._truncations += 1
                self._next_offset = new_offset
                self.durable_offset = new_offset
            self.log_start_offset = new_offset
            self.recovery_point = new_offset
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)
            self._dir_changed()

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "") -> bool:
        """Raise the log start offset (never above the high watermark); True if it moved."""
        with self.lock:
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_log_start_offset} of partition "
                    f"{_tp_name(self.tp)} since it is larger than the high watermark {self.high_watermark}")
            if new_log_start_offset <= self.log_start_offset:
                return False
            log.info("%s: incrementing log start offset to %d due to %s", _tp_name(self.tp),
                     new_log_start_offset, reason or "request")
            self.log_start_offset = new_log_start_offset
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            self.producer_state.on_log_start_offset_incremented(new_log_start_offset)
            return True

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset` (-1 = high watermark); returns it."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"Cannot delete records of {_tp_name(self.tp)} before offset {offset}")
        self.maybe_increment_log_start_offset(target, "client delete records request")
        return self.log_start_offset

    # ---- segment deletion ------------------------------------------------------------------------
    def delete_segments(self, segments, reason: str = "") -> int:
        """Remove segments from the log (`.deleted` rename now, unlink via the hook or at once).

        Never leaves the log without a segment: if every segment goes, a new active segment is
        rolled first. The log start offset moves to the first remaining segment's base offset.
        Returns how many segments were removed. The renames are made durable (directory fsync,
        outside the lock) before it returns: after a power cut a deleted segment must not come
        back and move the log start offset below what was deleted.
        """
        with self.lock:
            self._check_open()
            wanted = [s for s in segments if s in self._segments]
            if not wanted:
                return 0
            if len(wanted) == len(self._segments):
                active = self._segments[-1]
                if active.size == 0 and active.base_offset == self._next_offset:
                    wanted = wanted[:-1]
                else:
                    self.roll()
            if not wanted:
                return 0
            self._remove_segments(wanted, reason)
            first = self._segments[0].base_offset
            if first > self.log_start_offset:
                self.maybe_increment_log_start_offset(min(first, self.high_watermark), "segment deletion")
            for s in wanted:
                self.producer_state._delete_snapshot(s.base_offset)
        fsync_dir(self.dir)
        return len(wanted)

    def _remove_segments(self, segs, reason: str) -> None:
        """Drop segs from the list, rename their files `.deleted`, hand them to the unlink hook."""
        if not segs:
            return
        doomed = set(id(s) for s in segs)
        self._segments = [s for s in self._segments if id(s) not in doomed]
        self._bases = [s.base_offset for s in self._segments]
        for s in segs:
            try:
                if not s.closed:
                    s.change_file_suffixes(s.suffix, S.DELETED_SUFFIX)
            except FileNotFoundError:
                pass
            crash_point("retention_delete")
            log.info("%s: scheduling deletion of segment %d (%s)", _tp_name(self.tp), s.base_offset, reason)
        self._dir_changed()
        hook = self.on_segments_deleted
        if hook is not None:
            hook(list(segs))
        else:
            for s in segs:
                s.delete()

    # ---- cleaner swap ----------------------------------------------------------------------------
    def replace_segments(self, new_segments, old_segments) -> None:
        """Swap cleaned segments in for old ones, crash-safely (Kafka's LocalLog.replaceSegments).

        `new_segments` are LogSegments written by the cleaner with suffix `.cleaned` and flushed.
        Steps, and what loading does if the process dies right after each:
          1. (caller) write and fsync `XXXX.log.cleaned` (+ indexes)
             -> crash: `.cleaned` files are deleted at load; the old segments stay.
          2. rename each new segment `.cleaned` -> `.swap`, highest base offset first
             -> crash mid-way: some `.cleaned` remain; the `.swap` files above the smallest
                `.cleaned` offset are deleted at load and the old segments stay (roll back).
             -> crash after: all new segments are `.swap`; load deletes the live segments their
                offsets cover and renames the `.swap` files live (roll forward).
             The directory is fsynced here: without it an OS crash could keep step 4's `.deleted`
             renames but lose these, leaving neither old nor new data.
          3. put the new segments into the in-memory segment list
          4. remove every old segment from the list and rename its files `.deleted` (unlinked
             later by the LogManager's delete-file task, or at once without one)
             -> crash: `.deleted` files are removed at load; `.swap` completed as above.
          5. rename each new segment `.swap` -> live (drop the suffix)
             -> crash: the remaining `.swap` files are completed at load as above.
          6. fsync the partition directory so the renames are durable.
        """
        new_segments = sorted(new_segments, key=lambda s: s.base_offset)
        with self.lock:
            self._check_open()
            for seg in new_segments:
                # The writer may not have built (good) indexes: check, rebuild if needed, trim.
                try:
                    seg.sanity_check()
                    if seg.size > 0 and (seg.time_index.entries == 0 or (
                            seg.offset_index.entries == 0 and seg.size > seg.index_interval_bytes)):
                        raise CorruptIndexError("indexes missing")
                except CorruptIndexError as exc:
                    log.info("%s: rebuilding indexes of cleaned segment %s (%s)", self.dir,
                             seg.log_path, exc)
                    seg.recover()
                seg.on_become_inactive()
            for seg in reversed(new_segments):                          # step 2
                if seg.suffix == S.CLEANED_SUFFIX:
                    seg.change_file_suffixes(S.CLEANED_SUFFIX, S.SWAP_SUFFIX)
                elif seg.suffix != S.SWAP_SUFFIX:
                    raise ValueError(f"replace_segments expects .cleaned segments, got {seg.log_path}")
            fsync_dir(self.dir)  # the .swap names must be durable before any old segment goes
            crash_point("swap_renamed")
            present = [s for s in old_segments if s in self._segments]
            new_bases = {s.base_offset for s in new_segments}
            kept = [s for s in self._segments                            # step 3
                    if s.base_offset not in new_bases and not any(s is o for o in present)]
            self._segments = sorted(kept + list(new_segments), key=lambda s: s.base_offset)
            self._bases = [s.base_offset for s in self._segments]
            for s in present:                                           # step 4
                s.change_file_suffixes(s.suffix, S.DELETED_SUFFIX)
            crash_point("swap_old_deleted")
            for seg in new_segments:                                    # step 5
                seg.change_file_suffixes(S.SWAP_SUFFIX, "")
            fsync_dir(self.dir)                                         # step 6
            hook = self.on_segments_deleted
            if present:
                log.info("%s: replaced %d segments with %d cleaned segments", _tp_name(self.tp),
                         len(present), len(new_segments))
            if hook is not None and present:
                hook(list(present))
            else:
                for s in present:
                    s.delete()

    # ---- flush and close -------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery_point, offset), then move the recovery point.

        Runs in the caller's thread; the fsyncs happen outside `lock` so appends go on meanwhile.
        """
        with self._flush_lock:
            with self.lock:
                target = self._next_offset if offset is None else min(offset, self._next_offset)
                rp = self.recovery_point
                if target <= rp and not self.needs_flush_dir:
                    return
                segs = []
                for i, s in enumerate(self._segments):
                    nxt = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else None
                    if s.base_offset < target and (nxt is None or nxt > rp):
                        segs.append(s)
                flush_dir = self.needs_flush_dir
                self.needs_flush_dir = False
                flushed_messages = self.unflushed_messages
            for s in segs:
                try:
                    s.flush()
                except (OSError, ValueError):
                    if not s.closed:
                        raise
            if flush_dir:
                fsync_dir(self.dir)
            with self.lock:
                if target > self.recovery_point:
                    self.recovery_point = min(target, self._next_offset)
                if self.recovery_point > self.durable_offset:
                    self.durable_offset = self.recovery_point
                if target >= self._next_offset:
                    self.unflushed_messages = max(0, self.unflushed_messages - flushed_messages)
                self.last_flush_time = self._now()

    def sync_data(self) -> int:
        """The group commit's sync (storage/group_commit.py): fdatasync the `.log` of every
        segment holding offsets at or above the durable offset, and the partition directory when
        it changed (a roll's new segment must be found after a cut), then move the durable offset
        to the log end offset seen before the syncs; returns the durable offset.

        Indexes are left to `flush` (recovery rebuilds them above the recovery point). Runs in the
        caller's thread (the group commit's) under `_flush_lock`, as `flush`, so `close` and
        `take_over` never change the files under it, and WITHOUT `lock`: an append holds `lock`
        through its validation and write (about 1 ms for 1 MB), and a flusher waiting for it
        before and after every fdatasync spent as long waiting as syncing. What it reads needs no
        lock: the log end offset is set after its bytes are written (so every byte below the
        target is in the page cache when the fdatasync starts), `_segments` is only ever appended
        to in place (a roll) or replaced by a new list, so the list read is a consistent
        snapshot, and a roll sets `needs_flush_dir` after creating its files (a flag cleared here
        before the directory sync covers any roll that set it). A truncation, the one move of the
        log end offset downwards, counts `_truncations` at its start and end (under
        `_durable_lock`): a sync it overlapped moves nothing (the next round does)."""
        with self._flush_lock:
            if self.closed:
                return self.durable_offset
            truncations = self._truncations
            target = self._next_offset
            durable = self.durable_offset
            flush_dir = self.needs_flush_dir
            if target <= durable and not flush_dir:
                return durable
            segs = self._segments_from(durable)
            if flush_dir:
                self.needs_flush_dir = False
            try:
                for s in segs:
                    try:
                        s.sync_data()
                    except (OSError, ValueError):
                        if not s.closed:       # closed meanwhile: deleted or swapped out, not ours
                            raise
                if flush_dir:
                    fsync_dir(self.dir)
            except BaseException:
                if flush_dir:
                    self._dir_changed()
                raise
            return self._advance_durable(target, truncations)

    def _dir_changed(self) -> None:
        """The partition directory changed (a file created, renamed or deleted): the next flush or
        sync fsyncs it. The generation lets a native round's finish clear the flag only when no
        change came after the directory descriptor its round synced (sync_finish)."""
        with self._durable_lock:
            self._dir_gen += 1
            self.needs_flush_dir = True

    def _segments_from(self, durable: int) -> list:
        """The segments holding offsets at or above `durable` (the ones a sync must cover);
        `_segments` is read once, a consistent snapshot (sync_data's docstring)."""
        segments = self._segments
        i = len(segments) - 1
        while i > 0 and segments[i].base_offset > durable:
            i -= 1
        return segments[i:]

    def _advance_durable(self, target: int, truncations: int) -> int:
        """After syncs that covered every byte below `target`: move the durable offset there,
        unless a truncation overlapped them (its count moved) or the log closed (its close
        synced everything and set the offset itself); returns the durable offset."""
        with self._durable_lock:
            if not self.closed and target > self.durable_offset and truncations == self._truncations:
                self.durable_offset = min(target, self._next_offset)
            return self.durable_offset

    def sync_plan(self) -> "SyncPlan | None":
        """`sync_data`'s first half, for the group commit's native rounds (its syncs run on a
        thread that never takes the GIL): what to sync for the durable offset to reach the log
        end offset seen now, as duplicated descriptors, or None when there is nothing to do. The
        same reads as `sync_data`, under `_flush_lock` for the moment they take (the syncs run
        after it is released: the duplicates keep each file's open description, so a close or
        take-over meanwhile changes nothing under them; `sync_finish` then moves nothing for a
        closed log). The caller syncs every descriptor (fdatasync; fsync for the directory),
        closes them and calls `sync_finish`. It runs on the event loop, so it never waits for
        `_flush_lock`: SYNC_BUSY when a flush, close or take-over holds it (the caller asks
        again a little later)."""
        if not self._flush_lock.acquire(blocking=False):
            return SYNC_BUSY
        try:
            if self.closed:
                return None
            target = self._next_offset
            durable = self.durable_offset
            with self._durable_lock:
                flush_dir, dir_gen = self.needs_flush_dir, self._dir_gen
            if target <= durable and not flush_dir:
                return None
            plan = SyncPlan(target, self._truncations)
            try:
                for s in self._segments_from(durable):
                    fd = s.sync_descriptor()
                    if fd is not None:
                        plan.fds.append(fd)
                if flush_dir:
                    # (the flag stays set until this plan's fsync has run: sync_finish clears it
                    # then, unless the directory changed again meanwhile; cleared here, a flush
                    # in between would skip its own fsync before this one ran, as with the
                    # segments' dirty flags)
                    try:
                        plan.dir_fd = os.open(self.dir, os.O_RDONLY)
                        plan.dir_gen = dir_gen
                    except OSError:
                        plan.dir_fd = -1      # (fsync_dir's way: a dir that cannot be opened is skipped)
            except BaseException:
                plan.close()
                raise
            return plan
        finally:
            self._flush_lock.release()

    def sync_finish(self, plan: SyncPlan) -> int:
        """`sync_data`'s second half: after every descriptor of `plan` synced without an error
        (and was closed), move the durable offset to the target the plan saw, unless a
        truncation overlapped it or the log closed (its close synced everything itself); and
        when the plan fsynced the directory and it has not changed since (its generation),
        the directory needs no more fsyncs. Before, nothing but a flush cleared the flag, and a
        log that never rolled had its directory fsynced in every native round, for ever."""
        durable = self._advance_durable(plan.target, plan.truncations)
        if plan.dir_gen >= 0:
            with self._durable_lock:
                if self._dir_gen == plan.dir_gen:
                    self.needs_flush_dir = False
        return durable

    def close(self, sync_snapshot: bool = True) -> str | None:
        """Snapshot producer state (only when it moved since the last snapshot, as Kafka), then
        close (trim indexes, fsync) every segment.

        sync_snapshot=False leaves the new snapshot unsynced and returns its path: the caller
        syncs it (`producer_state.sync_snapshot`) before anything may rely on it (the LogManager
        writes every partition's snapshot first, then syncs them together). Waits for a flush in
        flight (it clears the segments' dirty flags before its fsyncs, so a close beside it would
        skip the fsync and close the descriptors under it).

        A snapshot that cannot be written still lets the segments close, then raises (Kafka's
        close: the snapshot keeps the next start off the no-snapshot shortcut, so the LogManager
        must not write the clean-shutdown marker without it).
        """
        with self._flush_lock, self.lock:
            if self.closed:
                return None
            self.producer_state.map_end_offset = self._next_offset
            written = failed = None
            try:
                written = self.producer_state.take_snapshot(sync=sync_snapshot)
            except OSError as exc:
                failed = exc
            for seg in self._segments:
                seg.close()
            self.recovery_point = self.durable_offset = self._next_offset
            self.closed = True
            if failed is not None:
                raise OSError(failed.errno, f"{self.dir}: could not write producer snapshot: {failed}")
            return None if sync_snapshot else written

    def close_handlers(self) -> None:
        """Close file descriptors without flushing (the directory is being deleted)."""
        with self.lock:
            for seg in self._segments:
                seg.close_handlers()
            self.closed = True

    def rename_dir(self, new_dir: str) -> None:
        """Rename the partition directory (e.g. to `<topic>-<n>.<id>-delete`) and follow it."""
        with self.lock:
            fs.replace(self.dir, new_dir)
            self.dir = new_dir
            for seg in self._segments:
                seg.update_dir(new_dir)
            self.producer_state.update_dir(new_dir)
            self.leader_epoch_cache.update_dir(new_dir)
            fsync_dir(os.path.dirname(os.path.abspath(new_dir)))

    def take_over(self, future: "Log") -> list[S.LogSegment]:
        """AlterReplicaLogDirs' last step (storage/alter_log_dirs.py, step 6): go on with the
        future log's segments in its dir, keeping this object (the handlers hold it), its
        producer state (with the verification guards of transactions in flight; the snapshots on
        disk are now the future's) and its leader epochs (written into the future's dir by step 3
        when they differed). The caller holds this
        log's `_flush_lock` and `lock`, and the future ends at the same offset. Returns the old
        segments (their dir renamed `-delete`), for the caller to close; the future is closed."""
        with self.lock, future.lock:
            if future.log_end_offset != self._next_offset:
                raise KafkaStorageErrorError(
                    f"the future log of {self._tp_str} ends at {future.log_end_offset}, not at "
                    f"{self._next_offset}")
            old = self._segments
            self.dir = future.dir
            self._segments = list(future._segments)
            self._bases = list(future._bases)
            self.loaded_end_offset = future.loaded_end_offset
            self.recovery_point = future.recovery_point
            self.durable_offset = future.durable_offset     # the future's files are the ones now
            if future.group_commit is not None:             # its dir's flusher syncs them from now
                self.group_commit = future.group_commit
            self.unflushed_messages = future.unflushed_messages
            self.needs_flush_dir = False
            if future.needs_flush_dir:
                self._dir_changed()
            self.last_flush_time = future.last_flush_time
            self._roll_pending = -1
            self.producer_state.move_to(future.dir)
            self.leader_epoch_cache.update_dir(future.dir)
            future.closed = True
            return old

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        with self.lock:
            return self.producer_state.remove_expired_producers(now_ms)

    # ---- internals -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageErrorError(f"The log for partition {_tp_name(self.tp)} is closed.")

    def _io_failed(self, exc: OSError, doing: str) -> KafkaStorageErrorError:
        """Report an I/O error to the LogManager (the hook) and make the error the client sees."""
        hook = self.on_io_error
        if hook is not None:
            hook(self, exc, doing)
        return KafkaStorageErrorError(f"Error while {doing}: {exc}")

    def _reload_producer_state(self) -> None:
        psm = self.producer_state
        from_offset = psm.load(self.log_start_offset, self._next_offset)
        L.replay_producer_state(self._segments, psm, from_offset, self._next_offset)

    def __repr__(self) -> str:
        return (f"Log({_tp_name(self.tp)}, start={self.log_start_offset}, end={self._next_offset}, "
                f"segments={len(self._segments)})")


def _can_take(seg: S.LogSegment, last_offset: int, size: int) -> bool:
    """Whether `seg` can hold `size` more bytes up to `last_offset` at all (ROLL_LATER appends
    past segment.bytes / segment.ms; never past an index, a relative offset or an int32 position)."""
    return (not seg.indexes_full() and seg.can_convert_to_relative_offset(last_offset)
            and seg.size + size <= S.INT32_MAX)


def _tp_name(tp) -> str:
    if tp is None:
        return "?"
    return f"{tp[0]}-{tp[1]}"


def _safe_tp(dir: str):
    try:
        return parse_topic_partition(dir)
    except ValueError:
        return None


def _prefix_below(data: bytes, max_offset: int) -> int:
    """Length of the prefix of whole batches whose base offset is below max_offset."""
    p = 0
    n = len(data)
    while n - p >= R.BATCH_OVERHEAD:
        base, size, _ = R.peek_size_and_magic(data, p)
        if base >= max_offset or p + size > n:
            break
        p += size
    return p
