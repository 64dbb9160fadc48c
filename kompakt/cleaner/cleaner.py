"""Cleaner: the two-pass clean of one log, run inside a worker process over immutable segment files.

Role: Kafka's Cleaner.doClean -> buildOffsetMap -> groupSegmentsBySize -> cleanSegments, minus the
swap. Input is a `CleanJob` (plain data: paths, sizes, offsets, config values, the clock reading);
output is `.cleaned` segment files next to the originals plus a `CleanResult` naming, for each
group, the cleaned base offset and the old segments it replaces. The broker process swaps them in
(`manager.swap_in`, under the log's lock) so appends and reads never wait for a clean.

Only the segments below the first uncleanable offset are read; they are immutable (never the active
segment; retention, truncation and deletion abort the clean before touching them), so a worker can
read them without any lock. Per-batch work goes through `batch_ops` (the seam); when its compiled
implementation is loaded, whole segment ranges go through the range loops of
kompakt/native/cleaner.c (every non-control, non-transactional batch, compressed ones included:
their records are decompressed ahead by `payloads.PayloadTable`, and a rebuilt batch comes back
once for its codec, RC_COMPRESS), and only the other batches come back here one at a time; both
paths write byte-identical output, every codec (tests/cleaner/test_native.py).

Files written per group (Kafka's layout, suffix `.cleaned` after the extension):

    <base:020d>.log.cleaned        retained batches, byte for byte or rebuilt by batch_ops
    <base:020d>.index.cleaned      offset index: entries (relative offset int32, position int32),
                                   one when more than index.interval.bytes were written since the last
    <base:020d>.timeindex.cleaned  time index: entries (timestamp int64, relative offset int32) when the
                                   max timestamp so far grew, plus a final entry (Kafka's
                                   onBecomeInactiveSegment)
    <base:020d>.txnindex.cleaned   aborted transactions kept (34-byte entries, kompakt.storage.txn_index),
                                   only when there is one
All are flushed and fsynced before the result is reported; the .log's mtime is set to the
last replaced segment's (Kafka keeps the last-modified time of the originals for retention).

Abort: `check_done()` is called between batches (every CHECK_EVERY batches, and whenever
RANGE_BUDGET bytes were read since the last check, counted across calls so batches the native
loops hand back one at a time are counted too) and inside throttle sleeps; it raises
CleaningAbortedError, and every `.cleaned` file this clean wrote is deleted.

Transactions (Kafka's Cleaner + CleanedTransactionMetadata; the cleanable range never reaches the
last stable offset, so every transaction in it is decided): a header-only prescan of the whole
log finds the markers (producer id, offset, COMMIT/ABORT) and each producer's last batch. Data
batches whose next marker is an ABORT are dropped (and never mapped). A marker may go only when
this pass read no batch of its transaction (`TxnCleanState`: a batch read counts even if this
pass removes it, so a marker outlives its transaction's batches by one pass), and then only once
its delete horizon (stamped, like a tombstone's, the first time it may go) has passed. The last
batch of each producer is kept, empty if need be, so its sequence state survives; so is the
batch whose next offset is the first uncleanable offset (last-offset information). Each cleaned
group gets a `.txnindex.cleaned` holding the log's index entries of the ABORT markers it keeps
whose transaction still had batches in this pass (Kafka rewrites the index the same way).
"""
from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import struct
import logging
import time as _time
from dataclasses import dataclass, field

from kompakt.cleaner import batch_ops, guarantees
from kompakt.cleaner import native as N
from kompakt.cleaner import rules
from kompakt.cleaner.batch_ops import (CONTROL_MASK, H_ATTRS, H_BASE_OFFSET, H_COUNT, H_LAST_DELTA,
                                       H_LENGTH, H_MAX_TS, H_PEPOCH, H_PID, HEADER, HEADER_SIZE,
                                       TRANSACTIONAL_MASK)
from kompakt.cleaner.payloads import PayloadTable
from kompakt.cleaner.stats import CleanerStats
from kompakt.storage import faults
from kompakt.storage.txn_index import ENTRY_SIZE, AbortedTxn, decode_entries
from kompakt.protocol.records import compress
from kompakt.storage import files as fs

log = logging.getLogger("kompakt.cleaner")

CLEANED_SUFFIX = ".cleaned"
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
assert OFFSET_ENTRY.size == 8 and TIME_ENTRY.size == 12
INT32_MAX = 2**31 - 1
CHECK_EVERY = 64
RANGE_BUDGET = 1 << 20        # bytes a native range call handles between abort checks
OUT_CAP = 4 << 20             # output buffer of the native filter
STAGE_CAP = 4 << 20           # records of one rebuilt batch awaiting its codec (larger: Python path)
INDEX_CAP = 8192              # index entries buffered by the native filter
ABORT_MARKER = 0
COMMIT_MARKER = 1


class CleaningAbortedError(Exception):
    """The clean of a partition was aborted (pause/abort from the broker); output is deleted."""


@dataclass
class SegmentInfo:
    base_offset: int
    log_path: str
    size: int                  # bytes of the .log when the job was made
    offset_index_bytes: int = 0
    time_index_bytes: int = 0
    last_modified: float = 0.0


@dataclass
class CleanJob:
    tp: tuple
    dir: str
    segments: list             # SegmentInfo of every segment with base < first_uncleanable_offset
    tail: list                 # SegmentInfo of the rest (active included), read for the prescan only
    first_dirty_offset: int
    first_uncleanable_offset: int
    log_start_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int = 1 << 30
    max_index_size: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    target_codec: int | None = None
    # pid -> (last data offset or -1, producer epoch); None: derive from the prescan
    active_producers: dict | None = None
    # share of the input's batches the guarantee check reads back (guarantees.py; 0: no check)
    guarantee_check_ratio: float = 0.0
    # the group-safe horizon offset: tombstones and markers of a batch ending at or past it stay,
    # whatever their delete horizon (rules.tombstones_removable); the broker computes it from the
    # committed offsets of kompakt.tombstone.retention.groups, LONG_MAX when the topic names none
    group_horizon_offset: int = rules.NO_GROUP_HORIZON


@dataclass
class CleanedGroup:
    base_offset: int
    replaces: list             # base offsets of the replaced segments
    log_path: str              # the .log.cleaned
    size: int


@dataclass
class CleanResult:
    tp: tuple
    end_offset: int            # the new first dirty offset (cleaner point)
    groups: list = field(default_factory=list)
    stats: CleanerStats = field(default_factory=CleanerStats)
    map_size: int = 0
    group_horizon_offset: int | None = None   # the job's, None when no group held tombstones back
    guarantee: object = None                  # guarantees.CheckReport when the job asked for the check


def segment_file(dir_: str, base_offset: int, ext: str, suffix: str = "") -> str:
    return os.path.join(dir_, f"{base_offset:020d}{ext}{suffix}")


# ---------------------------------------------------------------------------------------------
# file access

class _Mapped:
    """A view of the first `size` bytes of a segment's .log (a private mapping: never written)."""

    def __init__(self, path: str, size: int, want_address: bool = False):
        self.size = 0
        self.mm = None
        self.address = None
        self._anchor = None
        self._f = open(path, "rb")
        real = os.fstat(self._f.fileno()).st_size
        self.size = min(size, real)
        if self.size > 0:
            if want_address:
                # copy-on-write mapping: writable as far as ctypes is concerned, the file is never touched
                self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_COPY)
                self._anchor = ctypes.c_char.from_buffer(self.mm)
                self.address = ctypes.addressof(self._anchor)
            else:
                self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)

    def close(self):
        self._anchor = None
        self.address = None
        if self.mm is not None:
            self.mm.close()
        self._f.close()

    def batches(self, start_pos: int = 0, strict: bool = True):
        """(position, header tuple) of each complete batch. A segment being cleaned is immutable and
        whole, so bytes that are not a whole batch (a batchLength, outside the CRC, below the header
        or past the end) are corruption: CorruptBatchError, never a silent end of the segment (the
        swap would drop every batch after it). `strict=False` (the prescan) just stops there."""
        pos = start_pos
        for at, h in batch_ops.walk_headers(self.mm, start_pos, self.size):
            yield at, h
            pos = at + h[H_LENGTH] + 12
        if strict and pos != self.size:
            raise self.torn(pos)

    def verified(self, pos: int, h, size: int):
        """The bytes of the batch at pos (header h, `size` bytes), its CRC checked."""
        raw = self.mm[pos:pos + size]
        batch_ops.verify_crc(raw, h, f" in {self._f.name}")
        return raw

    def torn(self, pos: int) -> batch_ops.CorruptBatchError:
        return batch_ops.CorruptBatchError(f"no whole batch at position {pos} of {self._f.name} "
                                           f"({self.size} bytes): corrupt batch length")


def prescan(segments) -> tuple[dict, dict]:
    """Markers per producer and last batch per producer (see prescan_counting); used by pipeline/."""
    markers, last, _ = prescan_counting(segments)
    return markers, last


def prescan_counting(segments, dirty_start: int = 0, dirty_end: int = -1,
                     want_last: bool = True) -> tuple[dict, dict, int]:
    """Markers per producer {pid: ([offsets], [types])}, last batch per producer
    {pid: (last offset of its last data batch or -1 if it has none, latest epoch)} (only with
    want_last; Kafka's lastRecordsOfActiveProducers: a marker updates the epoch only) over every
    segment, and the number
    of records in batches reaching into [dirty_start, dirty_end) (bounds the keys of pass 1);
    headers only (the native seam walks them in C)."""
    markers: dict = {}
    last: dict = {}
    dirty_records = 0
    lib = batch_ops._LIB
    for seg in segments:
        try:
            f = _Mapped(seg.log_path, seg.size, want_address=lib is not None)
        except FileNotFoundError:
            continue
        try:
            if f.mm is None:
                continue
            if lib is None:
                dirty_records += _prescan_py(f, markers, last, dirty_start, dirty_end)
            else:
                dirty_records += _prescan_native(lib, f, markers, last, dirty_start, dirty_end, want_last)
        finally:
            f.close()
    return markers, last, dirty_records


def _add_marker(markers, f, pos, h) -> None:
    kind = batch_ops.control_type(f.mm[pos:pos + h[H_LENGTH] + 12], h)
    offs, types = markers.setdefault(h[H_PID], ([], []))
    offs.append(h[H_BASE_OFFSET])
    types.append(kind)


def _prescan_py(f, markers, last, dirty_start, dirty_end) -> int:
    dirty_records = 0
    for pos, h in f.batches(strict=False):
        if dirty_start <= h[H_BASE_OFFSET] + h[H_LAST_DELTA] and h[H_BASE_OFFSET] < dirty_end:
            dirty_records += h[H_COUNT]
        pid = h[H_PID]
        if pid < 0:
            continue
        if h[H_ATTRS] & CONTROL_MASK:
            _add_marker(markers, f, pos, h)
            prev = last.get(pid)      # a marker moves the epoch, not the last data offset (Kafka's entry)
            last[pid] = (prev[0] if prev else -1, h[H_PEPOCH])
        else:
            last[pid] = (h[H_BASE_OFFSET] + h[H_LAST_DELTA], h[H_PEPOCH])
    return dirty_records


_PRESCAN_CAP = 4096


def _prescan_native(lib, f, markers, last, dirty_start, dirty_end, want_last) -> int:
    io = (ctypes.c_int64 * 4)()
    ctrl = (ctypes.c_int64 * _PRESCAN_CAP)()
    pids = (ctypes.c_int64 * (3 * _PRESCAN_CAP))()
    while True:
        rc = lib.km_prescan(f.address, f.size, dirty_start, dirty_end, ctrl, _PRESCAN_CAP, pids, _PRESCAN_CAP,
                            1 if want_last else 0, io)
        for i in range(io[2]):
            pos = ctrl[i]
            _add_marker(markers, f, pos, HEADER.unpack_from(f.mm, pos))
        if io[3]:
            flat = pids[:3 * io[3]]
            pid_l = flat[0::3]
            data = {p: o for p, o in zip(pid_l, flat[1::3]) if o >= 0}    # markers come as -1
            for p, e in dict(zip(pid_l, flat[2::3])).items():
                o = data.get(p)
                if o is None:
                    prev = last.get(p)
                    o = prev[0] if prev else -1
                last[p] = (o, e)
        if rc == N.RC_END:
            return io[1]


def _is_aborted(markers: dict, h) -> bool:
    if not h[H_ATTRS] & TRANSACTIONAL_MASK:
        return False
    m = markers.get(h[H_PID])
    if m is None:
        return False
    offs, types = m
    i = bisect.bisect_right(offs, h[H_BASE_OFFSET])
    return i < len(offs) and types[i] == ABORT_MARKER


class TxnCleanState:
    """Kafka's CleanedTransactionMetadata for one clean: which transactions this pass has read
    batches of (carried from group to group), deciding whether a marker may go, and the index
    entries the group being written keeps."""

    def __init__(self, index_entries: dict | None = None):
        self.committed: set = set()      # producers with a non-aborted transactional batch read
        self.aborted: dict = {}          # producer -> first aborted batch offset read
        self.index_entries = index_entries or {}   # (producer, marker offset) -> AbortedTxn
        self.cleaned_index: list = []    # entries for the group being written

    def on_batch(self, pid: int, base_offset: int, aborted: bool) -> None:
        if aborted:
            self.aborted.setdefault(pid, base_offset)
        else:
            self.committed.add(pid)

    def on_marker(self, pid: int, offset: int, kind: int) -> bool:
        """Whether the marker may go (Kafka's onControlBatchRead); an ABORT kept because its
        transaction had batches in this pass keeps its index entry."""
        if kind == ABORT_MARKER:
            first = self.aborted.pop(pid, None)
            if first is None:
                return True
            self.cleaned_index.append(self.index_entries.get((pid, offset))
                                      or AbortedTxn(pid, first, offset, offset + 1))
            return False
        if kind == COMMIT_MARKER:
            if pid in self.committed:
                self.committed.discard(pid)
                return False
            return True
        return kind < 0          # an emptied marker was cleaned already; an unknown type stays

    def seed(self, pid: int, first: int, aborted: bool) -> None:
        """A transaction whose batches before this range count as read (the pipeline's buckets)."""
        self.on_batch(pid, first, aborted)


def read_txn_indexes(segments) -> dict:
    """(producer, marker offset) -> AbortedTxn from the `.txnindex` beside each segment."""
    out = {}
    for seg in segments:
        if not seg.log_path.endswith(".log"):
            continue
        path = seg.log_path[: -len(".log")] + ".txnindex"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        for e in decode_entries(data[: len(data) - len(data) % ENTRY_SIZE], path):
            out[(e.producer_id, e.last_offset)] = e
    return out


# ---------------------------------------------------------------------------------------------
# the clean

class _Pace:
    """The pacing of the Python batch loops of both passes: check_done() every CHECK_EVERY batches
    (and every RANGE_BUDGET bytes, Cleaner._progress), the throttle once per MiB of `chunk` (bytes
    read, plus in pass 2 bytes written), and once more for the rest at done()."""

    __slots__ = ("_cleaner", "_n", "chunk")

    def __init__(self, cleaner):
        self._cleaner = cleaner
        self._n = 0
        self.chunk = 0

    def read(self, size: int) -> None:
        """Before each batch of `size` bytes."""
        c = self._cleaner
        self._n += 1
        if self._n % CHECK_EVERY == 0:
            c.check_done()
        c._progress(size)
        self.chunk += size
        if self.chunk >= 1 << 20:
            c._throttle(self.chunk)
            self.chunk = 0

    def done(self) -> None:
        self._cleaner._throttle(self.chunk)


class Cleaner:
    """One worker's cleaner: its offset map, throttle, clock and abort check, reused across logs."""

    def __init__(self, worker_id: int, offset_map, throttler=None, check_done=None,
                 monotonic=_time.monotonic):
        self.id = worker_id
        self.offset_map = offset_map
        self.throttler = throttler
        self.check_done = check_done or (lambda: None)
        self.monotonic = monotonic
        self._unchecked = 0            # bytes read since the last check_done()
        self._payloads = PayloadTable()  # decompressed records ahead of the native range loops

    def _progress(self, nbytes: int) -> None:
        """check_done() every RANGE_BUDGET bytes read by the Python loops (their batch counts
        restart with every batch the native range loops hand back)."""
        self._unchecked += nbytes
        if self._unchecked >= RANGE_BUDGET:
            self._unchecked = 0
            self.check_done()

    def _throttle(self, n: int) -> None:
        if self.throttler is not None:
            self.throttler.maybe_throttle(n, self.check_done)

    def clean(self, job: CleanJob) -> CleanResult:
        stats = CleanerStats(monotonic=self.monotonic)
        self._unchecked = 0
        markers, last_batches, dirty_records = prescan_counting(
            list(job.segments) + list(job.tail), job.first_dirty_offset, job.first_uncleanable_offset,
            want_last=job.active_producers is None)
        producers = job.active_producers if job.active_producers is not None else last_batches
        self.build_offset_map(job, markers, stats, dirty_records)
        omap = self.offset_map
        end_offset = omap.latest_offset + 1 if omap.latest_offset >= 0 else job.first_dirty_offset
        end_offset = max(end_offset, job.first_dirty_offset)
        stats.index_done()
        to_clean = [s for s in job.segments if s.base_offset < end_offset]
        groups = group_segments_by_size(to_clean, job.segment_bytes, job.max_index_size,
                                        job.first_uncleanable_offset)
        result = CleanResult(job.tp, end_offset, stats=stats, map_size=omap.size,
                             group_horizon_offset=(None if job.group_horizon_offset == rules.NO_GROUP_HORIZON
                                                   else job.group_horizon_offset))
        txn_state = TxnCleanState(read_txn_indexes(list(job.segments) + list(job.tail)))
        written: list[str] = []
        try:
            for group in groups:
                result.groups.append(self.clean_segments(job, group, markers, producers, txn_state,
                                                         stats, written))
            stats.buffer_utilization = omap.utilization()
            stats.all_done()
            _break_for_test(result)
            if job.guarantee_check_ratio > 0:
                # before anything is swapped in: the broker refuses output with a violation
                result.guarantee = guarantees.check_clean(
                    job, result, omap, job.guarantee_check_ratio, is_aborted=lambda h: _is_aborted(markers, h),
                    check_done=self.check_done, monotonic=self.monotonic)
        except BaseException:
            for path in written:
                _unlink(path)
            raise
        return result

    # pass 1 ------------------------------------------------------------------------------------
    def build_offset_map(self, job: CleanJob, markers: dict, stats: CleanerStats,
                         dirty_records: int | None = None) -> bool:
        omap = self.offset_map
        omap.clear(dirty_records)
        start = job.first_dirty_offset
        end = job.first_uncleanable_offset
        limit = omap.max_desired_size
        dirty = [s for i, s in enumerate(job.segments)
                 if s.base_offset < end and _next_base(job.segments, i, end) > start]
        for i, seg in enumerate(dirty):
            next_base = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            self.check_done()
            if self._map_segment(seg, start, end, limit, markers, stats):
                log.debug("Cleaner %d: Offset map is full, %d segments fully mapped, segment with base "
                          "offset %d is partially mapped", self.id, i, seg.base_offset)
                return True
            omap.update_latest_offset(next_base - 1)
        return False

    def _map_segment(self, seg: SegmentInfo, start: int, end: int, limit: int, markers, stats) -> bool:
        lib = batch_ops._LIB
        f = _Mapped(seg.log_path, seg.size, want_address=lib is not None)
        try:
            if f.mm is None:
                return False
            if lib is None:
                return self._map_batches(f, f.batches(), start, end, limit, markers, stats)
            omap = self.offset_map
            io = (ctypes.c_int64 * 9)()
            tbl = self._payloads
            tbl.clear()
            while True:
                io[0], io[1] = omap.size, omap.latest_offset
                io[2] = io[3] = io[5] = io[6] = io[7] = 0
                rc = lib.km_index_range(f.address, f.size, start, end, omap.address, omap.slots, limit,
                                        RANGE_BUDGET, io, tbl.pos, tbl.ptr, tbl.len, tbl.n)
                omap.size, omap.latest_offset = io[0], io[1]
                omap.probes += io[3]
                omap.lookups += io[5]
                stats.map_messages_read += io[5]
                stats.map_bytes_read += io[6]
                self._throttle(io[6])
                pos = io[4]
                if rc == N.RC_END and pos != f.size:
                    raise f.torn(pos)
                if rc in (N.RC_END, N.RC_STOP):
                    return False
                if rc == N.RC_FULL:
                    return True
                if rc == N.RC_BUDGET:
                    self.check_done()
                    continue
                if rc == N.RC_PAYLOAD:
                    tbl.fill(f.mm, f.size, pos, start, end)
                    io[8] = 0
                    continue
                if rc == N.RC_CORRUPT:
                    raise batch_ops.CorruptBatchError(f"corrupt batch at position {pos} of {seg.log_path} "
                                                      "(CRC or record layout)")
                if rc == N.RC_PAYLOAD_ERROR:
                    raise _undecompressable(f, pos, tbl)
                # RC_PYTHON: one batch the Python code handles (control, transactional)
                h = HEADER.unpack_from(f.mm, pos)
                size = h[H_LENGTH] + 12
                if self._map_batches(f, [(pos, h)], start, end, limit, markers, stats):
                    return True
                io[4] = pos + size
        finally:
            self._payloads.clear()
            f.close()

    def _map_batches(self, f, batches, start: int, end: int, limit: int, markers, stats) -> bool:
        omap = self.offset_map
        pace = _Pace(self)
        for pos, h in batches:
            last = h[H_BASE_OFFSET] + h[H_LAST_DELTA]
            if last < start:
                continue
            if h[H_BASE_OFFSET] >= end:
                break
            size = h[H_LENGTH] + 12
            pace.read(size)
            stats.map_bytes_read += size
            raw = f.verified(pos, h, size)
            if h[H_ATTRS] & CONTROL_MASK or _is_aborted(markers, h):
                stats.map_messages_read += h[H_COUNT]
            else:
                read, _, full = batch_ops.index_batch(raw, h, omap, start, limit)
                stats.map_messages_read += read
                if full:
                    return True
            omap.update_latest_offset(last)
        pace.done()
        return False

    # pass 2 ------------------------------------------------------------------------------------
    def clean_segments(self, job: CleanJob, group: list, markers, producers, txn_state, stats,
                       written: list) -> CleanedGroup:
        base = group[0].base_offset
        log_path = segment_file(job.dir, base, ".log", CLEANED_SUFFIX)
        idx_path = segment_file(job.dir, base, ".index", CLEANED_SUFFIX)
        tim_path = segment_file(job.dir, base, ".timeindex", CLEANED_SUFFIX)
        txn_path = segment_file(job.dir, base, ".txnindex", CLEANED_SUFFIX)
        for p in (log_path, idx_path, tim_path, txn_path):
            _unlink(p)
            written.append(p)
        txn_state.cleaned_index = []
        w = _SegmentWriter(log_path, base, job.index_interval_bytes)
        lib = batch_ops._LIB
        try:
            for seg in group:
                f = _Mapped(seg.log_path, seg.size, want_address=lib is not None)
                try:
                    if f.mm is None:
                        continue
                    if lib is None:
                        self._filter_batches(job, f, f.batches(), w, markers, producers, txn_state, stats)
                    else:
                        self._filter_native(lib, job, f, w, markers, producers, txn_state, stats)
                finally:
                    f.close()
            w.close()
        except BaseException:
            w.abandon()
            raise
        files = [(idx_path, w.offset_entries), (tim_path, w.time_entries)]
        if txn_state.cleaned_index:
            entries = sorted(txn_state.cleaned_index, key=lambda e: e.last_offset)
            files.append((txn_path, b"".join(e.encode() for e in entries)))
        for path, content in files:
            with open(path, "wb") as fh:
                fh.write(content)
                fh.flush()
                fs.fsync(fh.fileno())
        mtime = group[-1].last_modified
        if mtime:
            os.utime(log_path, (mtime, mtime))
        return CleanedGroup(base, [s.base_offset for s in group], log_path, w.st[0])

    def _filter_batches(self, job, f, batches, w, markers, producers, txn_state, stats) -> None:
        pace = _Pace(self)
        for pos, h in batches:
            size = h[H_LENGTH] + 12
            pace.read(size)
            raw = f.verified(pos, h, size)
            res = self._filter(raw, h, markers, producers, txn_state, job.now_ms, job.delete_retention_ms,
                               job.first_uncleanable_offset, job.target_codec, job.group_horizon_offset)
            stats.messages_read += res.read
            stats.bytes_read += size
            stats.invalid_messages += res.keyless
            stats.tombstones_retained += res.tombstones
            stats.tombstones_held_back += res.held
            if res.output is None:
                continue
            data = res.output
            last = h[H_BASE_OFFSET] + h[H_LAST_DELTA]
            if last - w.base > INT32_MAX:
                raise ValueError(f"offset {last} does not fit the index of cleaned segment {w.base}")
            bts = h[H_MAX_TS] if res.copied else HEADER.unpack_from(data, 0)[H_MAX_TS]
            w.write(data, last, bts)
            stats.messages_written += res.retained
            stats.bytes_written += len(data)
            pace.chunk += len(data)   # written bytes count toward the throttle too
        pace.done()

    def _filter_native(self, lib, job, f, w, markers, producers, txn_state, stats) -> None:
        st = w.st
        st[10] = 0
        st[18] = 0
        st[19] = -1
        keep = sorted(p[0] for p in producers.values() if p[0] >= 0)
        keep_arr = (ctypes.c_int64 * max(len(keep), 1))(*keep)
        target = -1 if job.target_codec is None else job.target_codec
        self._payloads.clear()
        try:
            self._filter_range(lib, job, f, w, (keep_arr, len(keep), target), markers, producers, txn_state, stats)
        finally:
            self._payloads.clear()

    def _filter_range(self, lib, job, f, w, keep_target, markers, producers, txn_state, stats) -> None:
        """km_filter_range over one segment, doing in Python what it hands back (see native/cleaner.c)."""
        omap, st, tbl = self.offset_map, w.st, self._payloads
        keep_arr, n_keep, target = keep_target
        pending = None       # the staged batch's records, compressed (RC_COMPRESS)
        while True:
            for i in range(11, 18):
                st[i] = 0
            rc = lib.km_filter_range(f.address, f.size, omap.address, omap.slots, omap.latest_offset, job.now_ms,
                                     job.group_horizon_offset, job.first_uncleanable_offset, keep_arr, n_keep,
                                     w.out, OUT_CAP, w.oidx, INDEX_CAP, w.tidx, INDEX_CAP, RANGE_BUDGET, st,
                                     tbl.pos, tbl.ptr, tbl.len, tbl.n, target, w.stage, STAGE_CAP,
                                     pending, -1 if pending is None else len(pending))
            if st[19] < 0:
                pending = None
            stats.messages_read += st[11]
            stats.bytes_read += st[12]
            stats.messages_written += st[13]
            stats.bytes_written += st[14]
            stats.invalid_messages += st[15]
            stats.tombstones_retained += st[16]
            omap.probes += st[17]
            self._throttle(st[12] + st[14])
            pos = st[10]
            if rc == N.RC_END:
                if pos != f.size:
                    raise f.torn(pos)
                w.flush_native()
                return
            if rc == N.RC_BUDGET:
                self.check_done()
                continue
            if rc == N.RC_PAYLOAD:
                tbl.fill(f.mm, f.size, pos)
                st[18] = 0
                continue
            if rc == N.RC_COMPRESS:
                pending = compress(st[22] & batch_ops.COMPRESSION_MASK, ctypes.string_at(w.stage, st[23]))
                continue
            if rc == N.RC_FLUSH and (st[9] or st[7] or st[8]):
                w.flush_native()
                continue
            if rc == N.RC_CORRUPT:
                raise batch_ops.CorruptBatchError(f"corrupt batch at position {pos} of {f._f.name} "
                                                  "(CRC or record layout)")
            if rc == N.RC_OVERFLOW:
                raise ValueError(f"an offset at position {pos} of {f._f.name} does not fit the index of "
                                 f"cleaned segment {w.base}")
            if rc == N.RC_PAYLOAD_ERROR:
                raise _undecompressable(f, pos, tbl)
            w.flush_native()
            h = HEADER.unpack_from(f.mm, pos)
            if pending is not None:
                # the staged batch, compressed, does not fit the empty output buffer: written from here
                stats.bytes_written += w.write_staged(h, pending)
                stats.messages_written += st[20]
                pending = None
            else:
                # RC_PYTHON (or a batch larger than the output buffer): this one batch in Python
                self._filter_batches(job, f, [(pos, h)], w, markers, producers, txn_state, stats)
            st[10] = pos + h[H_LENGTH] + 12

    def _filter(self, raw, h, markers, producers, txn_state, now_ms, drm, upper, codec,
                gho=rules.NO_GROUP_HORIZON):
        attrs = h[H_ATTRS]
        pid = h[H_PID]
        last = h[H_BASE_OFFSET] + h[H_LAST_DELTA]
        retain_empty = False
        if pid >= 0:
            p = producers.get(pid)
            if p is not None:
                if p[0] >= 0:
                    retain_empty = last == p[0]
                else:
                    retain_empty = bool(attrs & CONTROL_MASK) and h[H_PEPOCH] == p[1]
        if last + 1 == upper:
            retain_empty = True
        if attrs & CONTROL_MASK:
            # a marker may go once this pass read no batch of its transaction and its horizon passed
            can_discard = txn_state.on_marker(pid, h[H_BASE_OFFSET], batch_ops.control_type(raw, h))
            has_horizon = bool(attrs & batch_ops.DELETE_HORIZON_MASK)
            removable = rules.tombstones_removable(has_horizon, h[batch_ops.H_BASE_TS], last, now_ms, gho)
            res = batch_ops.filter_batch(raw, h, self.offset_map, now_ms, drm,
                                         discard_records=can_discard and removable,
                                         retain_empty=retain_empty, stamp_marker=can_discard,
                                         target_codec=None)
            if can_discard and rules.held_back(has_horizon, h[batch_ops.H_BASE_TS], last, now_ms, gho):
                res.held = res.retained
            return res
        aborted = _is_aborted(markers, h)
        if attrs & TRANSACTIONAL_MASK:
            txn_state.on_batch(pid, h[H_BASE_OFFSET], aborted)     # Kafka's onBatchRead
        if aborted:
            return batch_ops.filter_batch(raw, h, self.offset_map, now_ms, drm, discard_records=True,
                                          retain_empty=retain_empty)
        return batch_ops.filter_batch(raw, h, self.offset_map, now_ms, drm, retain_empty=retain_empty,
                                      target_codec=codec, group_horizon_offset=gho)


class _SegmentWriter:
    """The `.log.cleaned` file being written plus its index bookkeeping (LogSegment.append's rule),
    shared by the Python path and the native range loop through the int64 array `st` (layout in
    native.c, km_filter_range)."""

    def __init__(self, log_path: str, base: int, index_interval_bytes: int):
        self.base = base
        self.file = open(log_path, "wb", buffering=1 << 20)
        self.st = (ctypes.c_int64 * 24)()
        self.st[2] = -1            # max timestamp so far
        self.st[3] = base          # its offset
        self.st[4] = -1            # timestamp of the last time-index entry
        self.st[5] = base
        self.st[6] = index_interval_bytes
        self.offset_entries = bytearray()
        self.time_entries = bytearray()
        self.st[19] = -1           # no batch staged for compression
        self.out = self.oidx = self.tidx = self.stage = None
        if batch_ops._LIB is not None:
            self.out = ctypes.create_string_buffer(OUT_CAP)
            self.stage = ctypes.create_string_buffer(STAGE_CAP)
            self.oidx = ctypes.create_string_buffer(8 * INDEX_CAP)
            self.tidx = ctypes.create_string_buffer(12 * INDEX_CAP)

    def flush_native(self) -> None:
        st = self.st
        if st[9]:
            self.file.write(ctypes.string_at(self.out, st[9]))
            st[9] = 0
        if st[7]:
            self.offset_entries += ctypes.string_at(self.oidx, 8 * st[7])
            st[7] = 0
        if st[8]:
            self.time_entries += ctypes.string_at(self.tidx, 12 * st[8])
            st[8] = 0

    def write_staged(self, h, payload) -> int:
        """Write the batch km_filter_range staged (st[19..22]) with its compressed records; its size."""
        st = self.st
        data = batch_ops.build_header_bytes(h[H_BASE_OFFSET], h[batch_ops.H_EPOCH], st[22], h[H_LAST_DELTA],
                                            h[batch_ops.H_BASE_TS], st[21], h[H_PID], h[H_PEPOCH],
                                            h[batch_ops.H_BASE_SEQ], st[20], payload)
        self.write(data, h[H_BASE_OFFSET] + h[H_LAST_DELTA], st[21])
        st[19] = -1
        return len(data)

    def write(self, data, last: int, max_ts: int) -> None:
        st = self.st
        if max_ts > st[2]:
            st[2] = max_ts
            st[3] = last
        if st[1] > st[6]:
            self.offset_entries += OFFSET_ENTRY.pack(last - self.base, st[0])
            if st[2] > st[4]:
                self.time_entries += TIME_ENTRY.pack(st[2], st[3] - self.base)
                st[4] = st[2]
            st[1] = 0
        self.file.write(data)
        st[0] += len(data)
        st[1] += len(data)

    def close(self) -> None:
        self.flush_native()
        st = self.st
        if st[2] > st[4] and st[0] > 0:      # Kafka's final entry when the segment becomes inactive
            self.time_entries += TIME_ENTRY.pack(st[2], st[3] - self.base)
        self.file.flush()
        fs.fsync(self.file.fileno())
        self.file.close()

    def abandon(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass


def _undecompressable(f, pos: int, tbl) -> batch_ops.CorruptBatchError:
    return batch_ops.CorruptBatchError(f"the batch at position {pos} of {f._f.name} does not decompress "
                                       f"({tbl.error(pos)})")


def _break_for_test(result) -> None:
    """Test seam (kompakt/storage/faults.py, TEST_KOMPAKT_CLEANER_BREAK=drop_last_batch): the clean
    loses the last batch it wrote (the newest records of the first group), a broken clean the
    guarantee check must catch before the swap (tests only)."""
    if not faults.cleaner_break("drop_last_batch") or not result.groups:
        return
    g = result.groups[0]
    with open(g.log_path, "r+b") as f:
        data = f.read()
        last = None
        for last, _ in batch_ops.walk_headers(data, 0, len(data)):
            pass
        if last is not None:
            f.truncate(last)
            g.size = last
    log.error("test hook %s=drop_last_batch: the clean of %s dropped its last batch",
              faults.CLEANER_BREAK_ENV, result.tp)


def _next_base(segments, i, end):
    return segments[i + 1].base_offset if i + 1 < len(segments) else end


def group_segments_by_size(segments: list, max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list:
    """Kafka's groupSegmentsBySize: consecutive segments whose log bytes, offset-index bytes and
    time-index bytes each stay within the limits and whose offsets span at most 2^31 - 1."""
    groups = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        idx = segments[i].offset_index_bytes
        tidx = segments[i].time_index_bytes
        i += 1
        while i < n:
            s = segments[i]
            last_of_s = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if not (log_size + s.size <= max_size and idx + s.offset_index_bytes <= max_index_size
                    and tidx + s.time_index_bytes <= max_index_size
                    and (s.size == 0 or last_of_s - group[0].base_offset <= INT32_MAX)):
                break
            group.append(s)
            log_size += s.size
            idx += s.offset_index_bytes
            tidx += s.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def _unlink(path: str) -> None:
    try:
        fs.unlink(path)
    except FileNotFoundError:
        pass


def delete_cleaned_files(dir_: str) -> int:
    """Remove every `.cleaned` file of a partition dir (partial output of an aborted clean)."""
    n = 0
    try:
        names = os.listdir(dir_)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            _unlink(os.path.join(dir_, name))
            n += 1
    return n
