"""Idempotent-producer state of one partition, and its `.snapshot` files.

Role: for every producer id that wrote to the partition, remember its epoch and the metadata of its
last 5 batches, so the log can (a) answer a retried batch with the offsets it got the first time
(duplicate detection), (b) refuse gaps (OUT_OF_ORDER_SEQUENCE_NUMBER) and (c) fence old epochs
(INVALID_PRODUCER_EPOCH). Kafka 4 rules (ProducerAppendInfo.checkProducerEpoch/checkSequence): an
older epoch is refused for client and coordinator appends; sequences are checked for client
appends only: a producer the partition does not know (no epoch) may start at any sequence; a new
epoch must start at sequence 0; otherwise the first sequence must be last + 1 (wrapping at int32
max to 0), where a known epoch with no batch left counts as last = -1.

Transactions (Kafka's ProducerAppendInfo/ProducerStateManager): a producer's first transactional
data batch opens its transaction (`current_txn_first_offset`, and an entry in `ongoing`, first
offset -> producer id); a non-transactional batch while one is open is refused
(INVALID_TXN_STATE); its COMMIT/ABORT marker (epoch checked too, and a coordinator epoch older than
the last one seen is TRANSACTION_COORDINATOR_FENCED) closes it and yields a `CompletedTxn`; the
log then writes the aborted ones to the segment's `.txnindex` with `last_stable_offset_after` and
calls `complete_txn`. The first offset of the oldest open transaction is the first unstable
offset, which bounds the partition's last stable offset. A marker of a producer with no open
transaction (an empty transaction) completes nothing. Verification (KIP-890 part 1): before the
first transactional batch of a transaction (one open at another epoch does not count) the broker asks the coordinator and holds a fresh
guard object from `start_verification`; the append must present that very guard, and a marker
for the producer drops it (a verification that raced with the end of the transaction is stale).

Snapshot file `<20-digit offset>.snapshot` (Kafka's ProducerStateManager format, version 1),
taken at segment roll and on close, named after the log end offset it reflects:

    offset  size  field
    0       2     version                    int16  = 1
    2       4     crc                        uint32 = CRC-32C of bytes [6, end)
    6       4     entry count                int32
    10      46*n  entries, each:
                  producer_id                int64
                  epoch                      int16
                  last_sequence              int32  (-1 when the entry has no batch)
                  last_offset                int64  (-1 when the entry has no batch)
                  offset_delta               int32  last_sequence - first sequence of that batch
                  timestamp                  int64  max timestamp of that batch
                  coordinator_epoch          int32  (-1: no transactions here)
                  current_txn_first_offset   int64  (-1: no transactions here)

Entries are written sorted by producer id. Loading picks the newest snapshot at or below the log
end offset, skips expired producers, and deletes a snapshot that fails its CRC (then tries the
previous one); the log then replays the batches after the snapshot's offset.

Which snapshot files exist is listed once, when the manager is made (the loader hands over what
its directory scan found), and kept in memory from then on, as Kafka's `snapshots` map: every
snapshot is written or deleted through this class. A snapshot is taken only at an offset past the
last one taken or loaded (Kafka's takeSnapshot: "if not a new offset, then it is not worth taking
another snapshot"), so closing a log that did not change since its last snapshot, or an empty
log, writes and syncs nothing. `write_snapshot` / `sync_snapshot` split a synced take in two so
the LogManager can write every partition's snapshot first and sync them afterwards, many at once.

Invariants: `map_end_offset` is the offset after the last batch applied; each entry keeps at most
`NUM_BATCHES_TO_RETAIN` batches, oldest first; nothing here mutates on a failed check.
"""
from __future__ import annotations

import logging
import os
import struct
import time as _time
from bisect import insort
from dataclasses import dataclass, field

import crc32c as _crc32c

from kompakt.protocol.errors import (InvalidProducerEpochError, InvalidTxnStateError,
                                     OutOfOrderSequenceNumberError, TransactionCoordinatorFencedError)
from kompakt.storage.segment import SNAPSHOT_SUFFIX, filename_prefix
from kompakt.storage.txn_index import CompletedTxn
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
PRODUCER_SNAPSHOT_VERSION = 1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

SNAPSHOT_HEADER_FORMAT = ">hIi"
SNAPSHOT_HEADER_SIZE = 10
SNAPSHOT_ENTRY_FORMAT = ">qhiqiqiq"
SNAPSHOT_ENTRY_SIZE = 46
assert struct.calcsize(SNAPSHOT_HEADER_FORMAT) == SNAPSHOT_HEADER_SIZE
assert struct.calcsize(SNAPSHOT_ENTRY_FORMAT) == SNAPSHOT_ENTRY_SIZE
_SNAP_HEADER = struct.Struct(SNAPSHOT_HEADER_FORMAT)
_SNAP_ENTRY = struct.Struct(SNAPSHOT_ENTRY_FORMAT)
CRC_START = 6


class CorruptSnapshotError(Exception):
    pass


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: list = field(default_factory=list)
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, list(self.batches),
                                  self.coordinator_epoch, self.current_txn_first_offset,
                                  self.last_timestamp)

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        if last_seq >= 0:
            self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
            if len(self.batches) > NUM_BATCHES_TO_RETAIN:
                del self.batches[0]
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def decrement_sequence(seq: int, decrement: int) -> int:
    return seq - decrement if seq >= decrement else INT32_MAX - (decrement - seq) + 1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_file(dir: str, offset: int) -> str:
    return os.path.join(dir, filename_prefix(offset) + SNAPSHOT_SUFFIX)


def encode_snapshot(entries) -> bytes:
    body = bytearray(struct.pack(">i", len(entries)))
    for e in sorted(entries, key=lambda e: e.producer_id):
        last = e.batches[-1] if e.batches else None
        body += _SNAP_ENTRY.pack(e.producer_id, e.producer_epoch,
                                 last.last_seq if last else NO_SEQUENCE,
                                 last.last_offset if last else -1,
                                 last.offset_delta if last else 0,
                                 last.timestamp if last else e.last_timestamp,
                                 e.coordinator_epoch, e.current_txn_first_offset)
    crc = _crc32c.crc32c(bytes(body))
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc) + bytes(body)


def decode_snapshot(data: bytes, path: str = "<bytes>") -> list[ProducerStateEntry]:
    if len(data) < SNAPSHOT_HEADER_SIZE:
        raise CorruptSnapshotError(f"Snapshot {path} is {len(data)} bytes, shorter than its header")
    version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot {path} has version {version}, expected "
                                   f"{PRODUCER_SNAPSHOT_VERSION}")
    computed = _crc32c.crc32c(data[CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"Snapshot {path} is corrupt (CRC is no longer valid). "
                                   f"Stored crc: {crc}. Computed crc: {computed}")
    if count < 0 or len(data) != SNAPSHOT_HEADER_SIZE + count * SNAPSHOT_ENTRY_SIZE:
        raise CorruptSnapshotError(f"Snapshot {path} declares {count} entries but holds "
                                   f"{len(data) - SNAPSHOT_HEADER_SIZE} bytes of entries")
    out = []
    for i in range(count):
        (pid, epoch, last_seq, last_offset, offset_delta, ts, coord_epoch,
         txn_first) = _SNAP_ENTRY.unpack_from(data, SNAPSHOT_HEADER_SIZE + i * SNAPSHOT_ENTRY_SIZE)
        entry = ProducerStateEntry(pid, epoch, [], coord_epoch, txn_first, ts)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, ts))
        out.append(entry)
    return out


def sync_snapshot(path: str) -> None:
    """fsync a snapshot written by `write_snapshot` (its data; the name came by rename, which a
    crash may undo: loading then uses the previous snapshot, as after a torn write)."""
    fs.fsync_path(path)


def list_snapshot_offsets(dir: str) -> list[int]:
    out = []
    try:
        names = os.listdir(dir)
    except FileNotFoundError:
        return out
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                out.append(int(stem))
    return sorted(out)


class ProducerStateManager:
    """Producer id -> ProducerStateEntry for one partition (see module docstring).

    `snapshot_offsets`: the offsets of the `.snapshot` files in `dir` when the caller has just
    listed it (the loader's scan); None lists the directory here."""

    def __init__(self, dir: str, *, producer_id_expiration_ms: int = 86_400_000, time=_time,
                 snapshot_offsets=None):
        self.dir = dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._time = time
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.last_snapshot_offset = 0
        self._kept_unsynced: int | None = None       # see replayed_to
        self._snapshots: list[int] = sorted(snapshot_offsets) if snapshot_offsets is not None \
            else list_snapshot_offsets(dir)
        self.ongoing: dict[int, int] = {}            # open transactions: first offset -> producer id
        self._first_undecided: int | None = None     # min(ongoing), kept up to date
        self.verification: dict[int, object] = {}    # producer id -> guard of a pending verification

    # ---- validation (no mutation) --------------------------------------------------------------
    def check_batches(self, batches, origin: str = "client", verification_guard=None):
        """Check each (header, first_offset, last_offset, marker) of an append in order; marker is
        (control type, coordinator epoch) for an end-transaction marker, else None.

        Returns (staged entries, duplicate BatchMetadata or None, [CompletedTxn]). Raises
        OutOfOrderSequenceNumber / InvalidProducerEpoch / InvalidTxnState /
        TransactionCoordinatorFenced; nothing is changed until `apply(staged)`.
        """
        staged: dict[int, ProducerStateEntry] = {}
        completed: list[CompletedTxn] = []
        for hdr, first_offset, last_offset, marker in batches:
            pid = hdr.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            if origin == "client" and current is not None and pid not in staged:
                dup = current.find_duplicate_batch(hdr.producer_epoch, hdr.base_sequence,
                                                   hdr.last_sequence)
                if dup is not None:
                    return staged, dup, completed
            entry = staged.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
                staged[pid] = entry
            if hdr.is_control:
                if origin != "replication":
                    self._check_epoch(entry, hdr.producer_epoch)
                    if marker is not None and entry.coordinator_epoch > marker[1]:
                        raise TransactionCoordinatorFencedError(
                            f"Invalid coordinator epoch for producerId {pid} at offset {first_offset}: "
                            f"{marker[1]} (zombie), {entry.coordinator_epoch} (current)")
                done = self._end_txn(entry, hdr, first_offset, marker)
                if done is not None:
                    completed.append(done)
                continue
            if origin != "replication":
                self._check_epoch(entry, hdr.producer_epoch)
                if origin == "client":
                    self._check_sequence(entry, hdr.producer_epoch, hdr.base_sequence)
                open_here = entry.current_txn_first_offset >= 0 and entry.producer_epoch == hdr.producer_epoch
                if (hdr.is_transactional and not open_here
                        and (verification_guard is None
                             or self.verification.get(pid) is not verification_guard)):
                    raise InvalidTxnStateError("Record was not part of an ongoing transaction")
            self._data_batch(entry, hdr, first_offset, last_offset)
        return staged, None, completed

    @staticmethod
    def _data_batch(entry: ProducerStateEntry, hdr, first_offset: int, last_offset: int) -> None:
        entry.add_batch(hdr.producer_epoch, hdr.last_sequence, last_offset,
                        last_offset - first_offset, hdr.max_timestamp)
        if entry.current_txn_first_offset >= 0 and not hdr.is_transactional:
            raise InvalidTxnStateError(f"Expected transactional write from producer {entry.producer_id} "
                                       f"at offset {first_offset}")
        if entry.current_txn_first_offset < 0 and hdr.is_transactional:
            entry.current_txn_first_offset = first_offset

    @staticmethod
    def _end_txn(entry: ProducerStateEntry, hdr, offset: int, marker) -> CompletedTxn | None:
        """A marker (None: an emptied one, which ends nothing) moves the epoch and closes the
        producer's open transaction, if any (Kafka's appendEndTxnMarker)."""
        if marker is None:
            return None
        done = None
        if entry.current_txn_first_offset >= 0:
            done = CompletedTxn(entry.producer_id, entry.current_txn_first_offset, offset, marker[0] == 0)
        if hdr.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = hdr.producer_epoch
        entry.coordinator_epoch = marker[1]
        entry.current_txn_first_offset = -1
        entry.last_timestamp = hdr.max_timestamp
        return done

    @staticmethod
    def _check_epoch(entry: ProducerStateEntry, epoch: int) -> None:
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {entry.producer_id} at offset {entry.last_data_offset} is "
                f"{epoch}, which is smaller than the last seen epoch {entry.producer_epoch}")

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, epoch: int, first_seq: int) -> None:
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"Invalid sequence number for new epoch of producer {entry.producer_id} at "
                    f"offset {entry.last_data_offset}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)")
            return
        last_seq = entry.last_seq
        # No epoch known (a new producer, or all its batches deleted by retention/DeleteRecords):
        # any sequence is accepted. A known epoch without a batch expects sequence 0.
        if entry.producer_epoch == NO_PRODUCER_EPOCH:
            return
        if not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {entry.producer_id} at offset "
                f"{entry.last_data_offset}: {first_seq} (incoming seq. number), {last_seq} "
                f"(current end sequence number)")

    def apply(self, staged: dict, map_end_offset: int) -> None:
        """Install checked entries; a transaction a data batch opened joins `ongoing`."""
        for pid, entry in staged.items():
            first = entry.current_txn_first_offset
            if first >= 0 and first not in self.ongoing:
                self._start_txn(first, pid)
                self.verification.pop(pid, None)   # verified once: the open transaction vouches now
            elif first < 0:
                self.verification.pop(pid, None)   # a marker: any verification in flight is stale
        self.producers.update(staged)
        self.map_end_offset = max(self.map_end_offset, map_end_offset)

    # ---- transactions ----------------------------------------------------------------------------
    def _start_txn(self, first_offset: int, pid: int) -> None:
        self.ongoing[first_offset] = pid
        if self._first_undecided is None or first_offset < self._first_undecided:
            self._first_undecided = first_offset

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction (Kafka's firstUndecidedOffset), or None."""
        return self._first_undecided

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is done (for its index entry): the first offset of the oldest
        other open transaction, else the offset after the marker (Kafka's lastStableOffset)."""
        others = [first for first, pid in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self.ongoing.pop(completed.first_offset, None) is None:
            log.warning("completed transaction %s was not open in %s", completed, self.dir)
        self._first_undecided = min(self.ongoing) if self.ongoing else None

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether `producer_epoch` of the producer has a transaction open here (Kafka 4's
        hasOngoingTransaction(producerId, producerEpoch): one opened by another epoch does not
        count, so a batch of a newer epoch is verified, never merged into it unasked)."""
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset >= 0 and e.producer_epoch == producer_epoch

    def start_verification(self, producer_id: int) -> object:
        """The guard a transactional append must present when its producer has no open
        transaction (reused while one is pending, like Kafka's VerificationStateEntry)."""
        guard = self.verification.get(producer_id)
        if guard is None:
            guard = self.verification[producer_id] = object()
        return guard

    def _rebuild_ongoing(self) -> None:
        self.ongoing = {e.current_txn_first_offset: pid for pid, e in self.producers.items()
                        if e.current_txn_first_offset >= 0}
        self._first_undecided = min(self.ongoing) if self.ongoing else None

    # ---- replay --------------------------------------------------------------------------------
    def update_from_batch(self, hdr, marker=None) -> CompletedTxn | None:
        """Apply a batch read from the log (recovery / replay): no checks. `marker` as in
        check_batches. Returns the transaction a marker completed (the caller indexes it and
        calls complete_txn)."""
        done = None
        pid = hdr.producer_id
        if pid >= 0:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            if hdr.is_control:
                done = self._end_txn(entry, hdr, hdr.base_offset, marker)
            else:
                entry.add_batch(hdr.producer_epoch, hdr.last_sequence, hdr.last_offset,
                                hdr.last_offset_delta, hdr.max_timestamp)
                if hdr.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = hdr.base_offset
                    self._start_txn(hdr.base_offset, pid)
        self.map_end_offset = hdr.last_offset + 1
        return done

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # ---- expiration ----------------------------------------------------------------------------
    def _expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset < 0 and \
            now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many were removed."""
        now = int(self._time.time() * 1000) if now_ms is None else now_ms
        gone = [pid for pid, e in self.producers.items() if self._expired(now, e)]
        for pid in gone:
            del self.producers[pid]
            self.verification.pop(pid, None)
        return len(gone)

    # ---- snapshots -----------------------------------------------------------------------------
    def take_snapshot(self, sync: bool = True) -> str | None:
        """Write `<map_end_offset>.snapshot` when map_end_offset is past the last snapshot taken
        or loaded (else nothing: Kafka's takeSnapshot). Returns the path written (or the one
        `replayed_to` kept, still to sync), or None."""
        path = self.write_snapshot()
        if path is not None and sync:
            sync_snapshot(path)
        return path

    def write_snapshot(self) -> str | None:
        """take_snapshot without its fsync (the caller syncs the path, `sync_snapshot`)."""
        offset = self.map_end_offset
        if offset <= self.last_snapshot_offset:
            if offset == self._kept_unsynced:        # nothing to write, but the caller syncs it
                self._kept_unsynced = None
                return snapshot_file(self.dir, offset)
            return None
        path = snapshot_file(self.dir, offset)
        tmp = path + ".tmp"
        data = encode_snapshot(list(self.producers.values()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        fs.replace(tmp, path)
        self.last_snapshot_offset = offset
        if offset not in self._snapshots:
            insort(self._snapshots, offset)
        return path

    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def load(self, log_start_offset: int, log_end_offset: int | None, now_ms: int | None = None,
             replay_to: int | None = None) -> int:
        """Forget everything, delete snapshots outside [log start, log end], load the newest one
        at or below `replay_to` (default: the log end; its open transactions become `ongoing`
        again). Newer snapshots up to the log end stay: they describe the same batches the replay
        from the loaded one goes through. log_end_offset None: not known yet (the loader
        recovers the log after this; `load_done` then drops the snapshots past its end).

        Returns the offset replay must start from (the snapshot's offset, else log_start_offset).
        """
        now = int(self._time.time() * 1000) if now_ms is None else now_ms
        upto = min(o for o in (replay_to, log_end_offset) if o is not None) \
            if replay_to is not None or log_end_offset is not None else None
        self.producers.clear()
        self.verification.clear()
        self._rebuild_ongoing()
        self.load_done(log_start_offset, log_end_offset)
        for off in reversed([o for o in self._snapshots if upto is None or o <= upto]):
            path = snapshot_file(self.dir, off)
            try:
                with open(path, "rb") as f:
                    entries = decode_snapshot(f.read(), path)
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("Failed to load producer snapshot from %s: %s; deleting it", path, exc)
                self._delete_snapshot(off)
                continue
            for e in entries:
                if not self._expired(now, e):
                    self.producers[e.producer_id] = e
            self._rebuild_ongoing()
            self.map_end_offset = self.last_snapshot_offset = off
            log.info("Loaded producer state from snapshot %s (%d producers)", path, len(self.producers))
            return off
        self.map_end_offset = self.last_snapshot_offset = log_start_offset
        return log_start_offset

    def load_done(self, log_start_offset: int, log_end_offset: int | None) -> None:
        """Delete the snapshots outside [log start, log end] (None: no upper bound)."""
        for off in list(self._snapshots):
            if off < log_start_offset or (log_end_offset is not None and off > log_end_offset):
                self._delete_snapshot(off)

    def replayed_to(self, offset: int) -> None:
        """The batches up to `offset` were replayed after `load`. A snapshot kept at exactly that
        offset that holds this very state (byte for byte what taking one now would write) counts
        as the last one taken, so the next take skips its write but still returns its path to be
        synced (after a crash its bytes may be only in the page cache of the process that died);
        one that differs (corrupt, stale) is deleted and the next take writes it again."""
        self.map_end_offset = offset
        if offset in self._snapshots and offset > self.last_snapshot_offset:
            try:
                with open(snapshot_file(self.dir, offset), "rb") as f:
                    same = f.read() == encode_snapshot(list(self.producers.values()))
            except OSError:
                same = False
            if same:
                self.last_snapshot_offset = self._kept_unsynced = offset
            else:
                self._delete_snapshot(offset)

    def _delete_snapshot(self, offset: int) -> None:
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        if offset == self._kept_unsynced:
            self._kept_unsynced = None
        if offset == self.last_snapshot_offset:
            self.last_snapshot_offset = -1   # gone: the next take writes one even at this offset
        try:
            fs.unlink(snapshot_file(self.dir, offset))
        except FileNotFoundError:
            pass

    def remove_stray_snapshots(self, segment_base_offsets) -> None:
        """Keep snapshots at segment base offsets plus the newest stray one above all segments."""
        bases = set(segment_base_offsets)
        max_base = max(bases) if bases else None
        strays = [off for off in self._snapshots if off not in bases]
        for off in strays[:-1]:
            self._delete_snapshot(off)
        if strays and max_base is not None and strays[-1] < max_base:
            self._delete_snapshot(strays[-1])

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.verification.clear()
        self._rebuild_ongoing()
        for off in list(self._snapshots):
            self._delete_snapshot(off)
        self.map_end_offset = self.last_snapshot_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Drop producers whose last batch is below the new log start (Kafka removes unreplicated txns only)."""
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    def move_to(self, new_dir: str) -> None:
        """Follow the log into another log dir (AlterReplicaLogDirs' swap): the `.snapshot` files
        are now the ones `new_dir` holds."""
        self.dir = new_dir
        self._snapshots = list_snapshot_offsets(new_dir)
        self.last_snapshot_offset = self._snapshots[-1] if self._snapshots else -1
        self._kept_unsynced = None

    def update_dir(self, new_dir: str) -> None:
        self.dir = new_dir
