"""One log segment: a `.log` file of v2 record batches plus its `.index`, `.timeindex` and `.txnindex`.

Role: append validated batches (offsets already assigned) and keep the sparse indexes; read whole
batches from an offset; translate offsets to file positions; recover (validate every batch and
rebuild the indexes) after an unclean shutdown; truncate; rename with suffixes; flush; delete.

Files (Kafka's layout): `<base offset as 20 digits>.log`, `.index`, `.timeindex` and (only once an
aborted transaction's marker lands here, see txn_index.py) `.txnindex`, each optionally
followed by a suffix while in transit: `.deleted` (waiting for its unlink), `.cleaned` (cleaner
output being written), `.swap` (cleaner output being swapped in). Example:
`00000000000000001000.log.swap`. The `.log` file is the concatenation of v2 batches exactly as
Kafka writes them (see `kompakt.protocol.records` for the batch layout); nothing else is in it.

Scanning reads only the first 43 bytes of each batch header (`HEADER_PREFIX_FORMAT`: baseOffset,
batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
maxTimestamp), which is all that offset translation and timestamp bookkeeping need.

Invariants:
- offsets in the file strictly increase batch after batch, all >= base_offset, and
  `last offset - base_offset` fits in int32 (the index's relative offsets);
- an index entry (o, p) is added when more than `index.interval.bytes` were appended since the
  previous entry: o = a batch's last offset, p = that batch's position (per batch, as Kafka 4);
- `max_timestamp_so_far` / `offset_of_max_timestamp_so_far` describe the whole file; the time
  index's last entry equals them once the segment is inactive.
Not thread-safe on its own: the owning Log serialises mutations under its lock. Reads are pread
calls on an fd that stays open until `delete()`, so they may run beside appends.

Disk blocks ahead (files.reserve): an append of at least RESERVE_MIN_APPEND bytes that reaches
past the blocks reserved so far reserves, beyond it, room for RESERVE_AHEAD_APPENDS more appends
of its size (at most RESERVE_MAX_AHEAD, and not past the log's segment.bytes, where the segment
rolls), without changing the file's size or bytes. A busy
partition's page-cache writes then fill allocated blocks instead of making ext4 reserve each
block as it goes (a quarter of the write's CPU: bench/RESULTS.md, 2026-11-28 loop CPU section).
Small appends reserve nothing. What is left past the end is freed when the segment becomes
inactive or closes (a same-size ftruncate; a crash may leave a reservation behind: freed at the
next roll or close, found by the file's block count). Nobody reading the file can tell: the
size and every byte are what Kafka's would be. Near a full disk (storage/files.py's floor) no
reservation is made, so the space held ahead never fails another partition's append.

Descriptors: the `.log` is opened on first use (an append, a read, a flush of written bytes), not
when the segment object is made, so a broker holding 10 000 idle partitions holds no descriptor
for them; once opened it stays open until close/delete. The indexes keep none (offset_index.py).
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time as _time
from array import array

from kompakt.protocol import records as R
from kompakt.protocol.txn_records import decode_marker
from kompakt.storage.faults import check_io
from kompakt.storage.file_records import FileRecords
from kompakt.storage.offset_index import INT32_MAX, IndexOffsetOverflowError, OffsetIndex, round_down
from kompakt.storage.time_index import NO_TIMESTAMP, TimeIndex
from kompakt.storage.txn_index import AbortedTxn, TransactionIndex
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SNAPSHOT_SUFFIX = ".snapshot"

HEADER_PREFIX_FORMAT = ">qiibIhiqq"
HEADER_PREFIX_SIZE = 43
assert struct.calcsize(HEADER_PREFIX_FORMAT) == HEADER_PREFIX_SIZE
_PREFIX = struct.Struct(HEADER_PREFIX_FORMAT)
_LENGTH = struct.Struct(">i")
RECOVER_CHUNK = 8 * 1024 * 1024
_OPEN_LOCK = threading.Lock()
SCAN_WINDOW = 16 * 1024  # header scan window: covers the default 4 KiB index interval
# Reads from this size up may come back as FileRecords (read(as_file=True)): below it a pread and
# one socket write cost less than sendfile's extra calls.
FILE_RECORDS_MIN = 64 * 1024
# Disk blocks reserved ahead of large appends (module docstring).
RESERVE_MIN_APPEND = 64 * 1024
RESERVE_AHEAD_APPENDS = 4
RESERVE_MAX_AHEAD = 8 * 1024 * 1024
_NO_RESERVE = 1 << 62      # _reserved_end once reserving failed here: never tried again
# a trimmed .log holds at most its bytes' blocks plus a few of the file system's own (extent tree)
_TRIM_SLACK = 1024 * 1024


class LogSegmentOffsetOverflowError(Exception):
    """An append whose offsets do not fit this segment's 32-bit relative offsets."""


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded offset used in every segment and snapshot file name."""
    return f"{offset:020d}"


def log_file(dir: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir, filename_prefix(offset) + LOG_SUFFIX + suffix)


def index_file(dir: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir, filename_prefix(offset) + INDEX_SUFFIX + suffix)


def time_index_file(dir: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir, filename_prefix(offset) + TIME_INDEX_SUFFIX + suffix)


def txn_index_file(dir: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir, filename_prefix(offset) + TXN_INDEX_SUFFIX + suffix)


def offset_from_filename(name: str) -> int:
    return int(os.path.basename(name).split(".", 1)[0])


def _pwrite_all(fd: int, data, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        pos += n
        view = view[n:]


def time_waited_for_roll(rolling_based_timestamp: int | None, created_ms: int, now_ms: int,
                         message_timestamp: int) -> int:
    """How long a segment has waited for a time roll: from its first batch's timestamp to the new
    messages' (or from its creation to now when the first batch has none)."""
    if rolling_based_timestamp is not None and rolling_based_timestamp >= 0:
        return message_timestamp - rolling_based_timestamp
    return now_ms - created_ms


def should_roll(size: int, base_offset: int, rolling_based_timestamp: int | None, created_ms: int,
                roll_jitter_ms: int, indexes_full: bool, *, segment_bytes: int, max_segment_ms: int,
                messages_size: int, max_timestamp_in_messages: int, max_offset_in_messages: int,
                now_ms: int) -> bool:
    """Kafka's LogSegment.shouldRoll as a pure function (also replayed by cleaner/whatif.py): the
    new messages do not fit segment.bytes, the segment has waited segment.ms (minus its jitter;
    max.compaction.lag.ms when smaller on a compacted topic), an index is full, or an offset would
    not fit a relative index entry."""
    reached_roll_ms = time_waited_for_roll(rolling_based_timestamp, created_ms, now_ms,
                                           max_timestamp_in_messages) > max_segment_ms - roll_jitter_ms
    return (size > segment_bytes - messages_size
            or (size > 0 and reached_roll_ms)
            or indexes_full
            or not 0 <= max_offset_in_messages - base_offset <= INT32_MAX)


class SegmentOffsetOverflowError(Exception):
    """A valid batch of the segment holds an offset its relative offsets cannot express."""

    def __init__(self, segment: "LogSegment", offset: int):
        super().__init__(f"segment {segment.log_path} (base offset {segment.base_offset}) holds "
                         f"offset {offset}, which its relative offsets cannot express")
        self.base_offset = segment.base_offset


class LogSegment:
    """See module docstring."""

    def __init__(self, dir: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, roll_jitter_ms: int = 0,
                 time=_time, suffix: str = ""):
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self._time = time
        self.suffix = suffix
        self.log_path = log_file(dir, base_offset, suffix)
        self._fd_raw = -1         # opened on first use (`_fd`), -1 again once closed
        self._reserved_end = 0    # file offset up to which blocks were reserved (files.reserve)
        self._closed = False
        try:
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self.size = 0         # a new segment: its file exists from now on, unopened
            os.close(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
        self.offset_index = OffsetIndex(index_file(dir, base_offset, suffix), base_offset, max_index_size)
        self.time_index = TimeIndex(time_index_file(dir, base_offset, suffix), base_offset, max_index_size)
        self.txn_index = TransactionIndex(txn_index_file(dir, base_offset, suffix), base_offset)
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        ts, off = self.time_index.last_entry()
        if ts >= 0:
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, off
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self.created = int(self._time.time() * 1000)
        self._dirty = False  # bytes written since the last flush
        self.recovered_next_offset: int | None = None   # set by recover()

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def open(cls, dir: str, base_offset: int, config, *, time=_time, suffix: str = "",
             roll_jitter_ms: int = 0) -> "LogSegment":
        """Open or create a segment with a LogConfig's index settings."""
        return cls(dir, base_offset, index_interval_bytes=config.index_interval_bytes,
                   max_index_size=config.segment_index_bytes, roll_jitter_ms=roll_jitter_ms,
                   time=time, suffix=suffix)

    @property
    def _fd(self) -> int:
        """The `.log` descriptor, opened on first use (see the module docstring)."""
        fd = self._fd_raw
        if fd >= 0:
            return fd
        if self._closed:
            raise ValueError(f"segment {self.log_path} is closed")
        with _OPEN_LOCK:          # a fetch thread and the loop may both ask first
            if self._fd_raw < 0:
                self._fd_raw = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            return self._fd_raw

    # ---- properties ------------------------------------------------------------------------------
    @property
    def last_modified(self) -> int:
        """mtime of the .log file in ms (Kafka's LogSegment.lastModified)."""
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or lastModified when no batch has a timestamp (retention age)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def indexes_full(self) -> bool:
        return self.offset_index.is_full() or self.time_index.is_full()

    def rolling_based_timestamp(self) -> int | None:
        """The first batch's max timestamp, loaded lazily (segment.ms rolls are measured from it)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            hdr = self._read_prefix(0)
            if hdr is not None:  # kept even when -1 (no timestamp): read once, not every append
                self._rolling_based_timestamp = hdr[8]
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        return time_waited_for_roll(self.rolling_based_timestamp(), self.created, now_ms, message_timestamp)

    def should_roll(self, *, segment_bytes: int, max_segment_ms: int, messages_size: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int, now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll (the rule is `should_roll` below)."""
        return should_roll(self.size, self.base_offset, self.rolling_based_timestamp(), self.created,
                           self.roll_jitter_ms, self.indexes_full(), segment_bytes=segment_bytes,
                           max_segment_ms=max_segment_ms, messages_size=messages_size,
                           max_timestamp_in_messages=max_timestamp_in_messages,
                           max_offset_in_messages=max_offset_in_messages, now_ms=now_ms)

    # ---- append ----------------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int,
               records, *, segment_bytes: int | None = None) -> None:
        """Append batches whose offsets are assigned (Kafka 4's LogSegment.append).

        Per batch: the max timestamp and the offset holding it (the batch's last offset, Kafka's
        "shallow" offset) are tracked, and an index entry (batch last offset, batch position) is
        added when more than index.interval.bytes were appended since the previous entry.
        """
        n = len(records)
        if n == 0:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {largest_offset} in segment {self.log_path}")
        position = self.size
        check_io(self.log_path)
        fd = self._fd
        if n >= RESERVE_MIN_APPEND and position + n > self._reserved_end:
            self._reserve(fd, position, n, segment_bytes)
        _pwrite_all(fd, records, position)
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self.size = position + n
        self._dirty = True
        try:
            self._index_appended(records, position)
        except OSError:
            # An index write failed (a full or failing disk): the append did not happen. The
            # bytes past `size` are overwritten by the next append or cut by recovery/close; an
            # offset-index entry already written for them goes too.
            self.size = position
            try:
                self.offset_index.truncate_to(_PREFIX.unpack_from(records, 0)[0])
            except OSError:
                pass
            raise

    def _reserve(self, fd: int, position: int, n: int, segment_bytes: int | None) -> None:
        """Reserve the blocks of this append and of the next few of its size, never past
        `segment_bytes` (the log's segment.bytes: the segment rolls before it grows that large,
        so room beyond it would only be held until the roll frees it) (module docstring)."""
        start = max(position, self._reserved_end)
        end = position + n + min(RESERVE_AHEAD_APPENDS * n, RESERVE_MAX_AHEAD)
        if segment_bytes is not None:
            end = min(end, max(position + n, segment_bytes))
        reserved = fs.reserve(fd, start, end - start)
        if reserved is not None:           # None: the disk is near full, asked again next time
            self._reserved_end = end if reserved else _NO_RESERVE

    def _index_appended(self, records, position: int) -> None:
        n = len(records)
        p = 0
        while n - p >= HEADER_PREFIX_SIZE:
            hdr = _PREFIX.unpack_from(records, p)
            size = hdr[1] + R.LOG_OVERHEAD
            last = hdr[0] + hdr[6]
            if hdr[8] > self.max_timestamp_so_far:
                self.max_timestamp_so_far = hdr[8]
                self.offset_of_max_timestamp_so_far = last
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last, position + p)
                self.time_index.maybe_append(self.max_timestamp_so_far,
                                             self.offset_of_max_timestamp_so_far)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size
            p += size

    # ---- reading ---------------------------------------------------------------------------------
    def _read_prefix(self, pos: int):
        check_io(self.log_path)
        raw = os.pread(self._fd, HEADER_PREFIX_SIZE, pos)
        if len(raw) < HEADER_PREFIX_SIZE:
            return None
        return _PREFIX.unpack(raw)

    def read_bytes(self, pos: int, size: int) -> bytes:
        check_io(self.log_path)
        return os.pread(self._fd, size, pos)

    def _locate(self, offset: int, starting_position: int = 0):
        """(position, batch size, window, window start) of the first batch whose last offset >=
        offset, or None. Headers are scanned in SCAN_WINDOW reads from the index position (one
        pread for the usual index.interval.bytes gap); the window is returned so a small read
        can be served from it without another syscall."""
        check_io(self.log_path)
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, starting_position)
        size = self.size
        unpack = _PREFIX.unpack_from
        while pos + HEADER_PREFIX_SIZE <= size:
            win = os.pread(self._fd, min(SCAN_WINDOW, size - pos), pos)
            n = len(win)
            p = 0
            while n - p >= HEADER_PREFIX_SIZE:
                hdr = unpack(win, p)
                batch_size = hdr[1] + R.LOG_OVERHEAD
                if hdr[0] + hdr[6] >= offset:
                    return pos + p, batch_size, win, pos
                if batch_size < R.BATCH_OVERHEAD:
                    return None
                p += batch_size
            if p == 0:
                return None
            pos += p
        return None

    def update_txn_index(self, completed, last_stable_offset: int) -> None:
        """Index an aborted transaction whose marker was just appended here (Kafka's updateTxnIndex)."""
        if completed.is_aborted:
            self.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                             completed.last_offset, last_stable_offset))

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int):
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    def translate_offset(self, offset: int, starting_position: int = 0):
        """(position, batch size) of the first batch whose last offset >= offset, or None."""
        found = self._locate(offset, starting_position)
        return None if found is None else found[:2]

    def position_below(self, offset: int) -> int:
        """The file position where the batches this segment holds at or above `offset` begin: the
        end of the whole batches whose base offset is below it (a batch that starts below and
        ends at or above `offset` counts as below, as Log.read's cut has it); the segment's size
        when every batch is below. A Fetch's bound (the high watermark, the last stable offset)
        as a `max_position`, found from the offset index and one scan window."""
        found = self._locate(offset)
        if found is None:
            return self.size
        pos, size, win, win_start = found
        return pos + size if _PREFIX.unpack_from(win, pos - win_start)[0] < offset else pos

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one: bool = False, as_file: bool = False):
        """Whole batches from the batch holding `start_offset`: (position, bytes) or None.

        Returns None when no batch in this segment ends at or after start_offset. At most
        `max_size` bytes unless `min_one` and the first batch alone is larger (then that batch).
        `max_position` bounds the read (e.g. the position of the high watermark). With `as_file`,
        a read of FILE_RECORDS_MIN bytes or more comes back as a FileRecords (the range, not its
        bytes: a plaintext Fetch sends it with sendfile); smaller ones are bytes either way.
        """
        if max_size < 0:
            raise ValueError(f"Invalid max size {max_size} for log read from segment {self.log_path}")
        found = self._locate(start_offset)
        if found is None:
            return None
        pos, first_size, win, win_start = found
        limit = self.size if max_position is None else min(max_position, self.size)
        budget = max(max_size, first_size) if min_one else max_size
        want = min(limit - pos, budget)
        if want < first_size:
            return pos, b""
        at = pos - win_start
        if at + want <= len(win):
            data = win[at:at + want]           # small reads: served from the scan window
            return pos, data[:_whole_batches(data)]
        # Find where the last whole batch ends before reading, so the pread is exact (slicing a
        # 1 MiB read would copy it again). Index entries are batch starts: the headers are walked
        # only from the last entry inside the range (about index.interval.bytes of them), not from
        # the first batch (thousands in a 1 MiB fetch).
        limit = pos + want
        end, last = self._whole_batches_end(max(self.offset_index.floor_position(limit), pos), limit)
        if as_file and end - pos >= FILE_RECORDS_MIN:
            if last < 0:                       # the walk began at the batch crossing `limit`
                last = self._whole_batches_end(max(self.offset_index.floor_position(end - 1), pos), end)[1]
            try:
                return pos, FileRecords(self._fd, pos, end - pos, last)
            except OSError:                    # out of descriptors (EMFILE): the bytes, not a failed disk
                pass
        return pos, os.pread(self._fd, end - pos, pos)

    def _whole_batches_end(self, pos: int, limit: int) -> tuple[int, int]:
        """(end, start) of the last whole batch at or before `limit`, walking batch headers from
        the batch start `pos` in SCAN_WINDOW reads (a batch larger than the window is stepped over
        unread); (pos, -1) when none fits from `pos`."""
        unpack = _LENGTH.unpack_from
        last = -1
        while limit - pos >= R.LOG_OVERHEAD:
            win = os.pread(self._fd, min(SCAN_WINDOW, limit - pos), pos)
            n = len(win)
            p = 0
            while n - p >= R.LOG_OVERHEAD:
                size = unpack(win, p + 8)[0] + R.LOG_OVERHEAD
                if size < R.BATCH_OVERHEAD or pos + p + size > limit:
                    return pos + p, last
                last = pos + p
                p += size
            if p == 0:
                break
            pos += p
        return pos, last

    def read_next_offset(self) -> int:
        """Offset after the last batch (base_offset when empty): scan from the last index entry."""
        next_offset = self.base_offset
        for _, hdr in self.iter_headers(self.offset_index.last_entry()[1]):
            next_offset = hdr[0] + hdr[6] + 1
        return next_offset

    def iter_headers(self, start_pos: int = 0):
        """(position, header prefix tuple) of each complete batch from start_pos (cheap scan)."""
        pos = start_pos
        size = self.size
        while pos + HEADER_PREFIX_SIZE <= size:
            hdr = self._read_prefix(pos)
            batch_size = hdr[1] + R.LOG_OVERHEAD
            if batch_size < R.BATCH_OVERHEAD or pos + batch_size > size:
                return
            yield pos, hdr
            pos += batch_size

    def iter_batches(self, start_pos: int = 0, chunk: int = RECOVER_CHUNK):
        """(position, BatchHeader, buffer, offset in buffer) for each complete batch, read in chunks."""
        pos = start_pos
        size = self.size
        while pos < size:
            want = min(chunk, size - pos)
            buf = os.pread(self._fd, want, pos)
            if len(buf) < R.LOG_OVERHEAD:
                return
            p = 0
            advanced = False
            while len(buf) - p >= R.BATCH_OVERHEAD:
                hdr = R.read_header(buf, p)
                bsize = hdr.size
                if bsize < R.BATCH_OVERHEAD:
                    return
                if p + bsize > len(buf):
                    break
                yield pos + p, hdr, buf, p
                p += bsize
                advanced = True
            if not advanced:
                (length,) = _LENGTH.unpack_from(buf, 8)
                bsize = length + R.LOG_OVERHEAD
                if bsize < R.BATCH_OVERHEAD or pos + bsize > size or bsize <= chunk:
                    return
                chunk = bsize
                continue
            pos += p

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int):
        """(timestamp, offset) of the first record with timestamp >= target at/after starting_offset."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        for bpos, hdr, buf, p in self.iter_batches(pos, chunk=256 * 1024):
            if hdr.max_timestamp < timestamp or hdr.last_offset < starting_offset:
                continue
            for rec in R.decode_records(buf, p, hdr):
                offset = hdr.base_offset + rec.offset_delta
                ts = R.record_timestamp(hdr, rec)
                if ts >= timestamp and offset >= starting_offset:
                    return ts, offset
        return None

    # ---- recovery --------------------------------------------------------------------------------
    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index cannot belong to this .log file."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def recover(self, producer_state=None, leader_epoch_cache=None, index_size: int | None = None,
                split_overflow: bool = False) -> int:
        """Validate every batch, rebuild both indexes, truncate at the first invalid batch.

        A batch is valid when its length is at least the header size, it lies within the file,
        magic is 2, the CRC32C matches, its offsets are >= base_offset, strictly after the previous
        batch and convertible to relative offsets. Returns the number of bytes truncated.
        Producer state and the leader-epoch cache (if given) are fed every valid batch; with a
        producer state (holding the transactions open at this segment's base offset) the
        `.txnindex` is rebuilt too, from the markers that complete aborted transactions.
        split_overflow: a valid batch whose last offset does not fit the segment's relative offsets
        (e.g. below the base offset the file name says) raises SegmentOffsetOverflowError instead
        of truncating there, nothing changed (Kafka's LogSegmentOffsetOverflowException: the
        loader splits the segment).
        The index entries are collected in memory and written once (`SparseIndex.rebuild`: an
        index the crash left intact is not rewritten); the index files end trimmed to their
        entries, or `index_size` bytes long (the active segment's preallocation).
        """
        aborted: list[AbortedTxn] = []
        max_offset_entries = round_down(self.max_index_size, 8) // 8
        max_time_entries = round_down(self.max_index_size, 12) // 12 - 1   # one slot kept for the final entry
        off_rel, off_pos = array("i"), array("i")
        time_ts, time_rel = array("q"), array("i")
        valid_bytes = 0
        last_index_entry = 0
        max_ts = NO_TIMESTAMP
        offset_of_max_ts = self.base_offset
        base = self.base_offset
        next_expected = base
        reason = None
        size = self.size
        pos = 0
        chunk = RECOVER_CHUNK
        while pos < size and reason is None:
            buf = os.pread(self._fd, min(chunk, size - pos), pos)
            p = 0
            n = len(buf)
            while reason is None:
                if n - p < R.LOG_OVERHEAD:
                    break
                (length,) = _LENGTH.unpack_from(buf, p + 8)
                bsize = length + R.LOG_OVERHEAD
                if bsize < R.BATCH_OVERHEAD:
                    reason = ("zeroed tail (preallocated or never written)" if length == 0
                              else f"batch length {length} below the minimum")
                    break
                if pos + p + bsize > size:
                    reason = f"batch of {bsize} bytes extends past the end of the file (torn write)"
                    break
                if p + bsize > n:
                    break
                hdr = R.read_header(buf, p)
                if hdr.magic != R.CURRENT_MAGIC:
                    reason = f"magic {hdr.magic}"
                elif not R.valid_crc(buf, p, hdr):
                    reason = "CRC32C mismatch"
                elif (split_overflow and hdr.last_offset_delta >= 0
                      and not self.can_convert_to_relative_offset(hdr.last_offset)):
                    raise SegmentOffsetOverflowError(self, hdr.last_offset)
                elif hdr.base_offset < next_expected or hdr.last_offset_delta < 0:
                    reason = (f"offsets {hdr.base_offset}..{hdr.last_offset} do not follow "
                              f"{next_expected - 1}")
                elif not self.can_convert_to_relative_offset(hdr.last_offset):
                    reason = f"offset {hdr.last_offset} overflows the segment's relative offsets"
                if reason is not None:
                    break
                bpos = pos + p
                last = hdr.last_offset
                if hdr.max_timestamp > max_ts:
                    max_ts = hdr.max_timestamp
                    offset_of_max_ts = last
                if bpos - last_index_entry > self.index_interval_bytes:
                    # as OffsetIndex.append / TimeIndex.maybe_append would (Kafka's recover)
                    if len(off_rel) >= max_offset_entries:
                        raise ValueError(f"Attempt to append to a full index (size = {len(off_rel)}) "
                                         f"{self.offset_index.path}.")
                    off_rel.append(last - base)
                    off_pos.append(bpos)
                    if len(time_ts) >= max_time_entries:
                        raise ValueError(f"Attempt to append to a full time index (size = "
                                         f"{len(time_ts)}) {self.time_index.path}.")
                    if max_ts > (time_ts[-1] if time_ts else NO_TIMESTAMP):
                        time_ts.append(max_ts)
                        time_rel.append(offset_of_max_ts - base)
                    last_index_entry = bpos
                if leader_epoch_cache is not None and hdr.partition_leader_epoch >= 0:
                    leader_epoch_cache.assign(hdr.partition_leader_epoch, hdr.base_offset)
                if producer_state is not None:
                    replay_batch(producer_state, buf, p, hdr, aborted)
                next_expected = last + 1
                valid_bytes = bpos + bsize
                p += bsize
            if reason is None:
                if p == 0:
                    if n - p >= R.LOG_OVERHEAD:
                        chunk = max(chunk, bsize)  # one batch larger than the chunk
                        continue
                    break
                pos += p
        truncated = size - valid_bytes
        if truncated > 0:
            log.warning("Found invalid batch in %s at position %d (%s); truncating %d bytes",
                        self.log_path, valid_bytes, reason or "incomplete batch", truncated)
            os.ftruncate(self._fd, valid_bytes)
            self.size = valid_bytes
        # The next flush syncs what was recovered, changed or not (Kafka's flush forces every file):
        # after a crash these bytes may be only in the page cache of the process that died, and that
        # flush moves the recovery point past them (shutdown's, the clean-shutdown marker).
        self._dirty = True
        if max_ts > (time_ts[-1] if time_ts else NO_TIMESTAMP):   # the final entry (skips the full check)
            time_ts.append(max_ts)
            time_rel.append(offset_of_max_ts - base)
        self.max_timestamp_so_far = max_ts
        self.offset_of_max_timestamp_so_far = offset_of_max_ts
        self.max_index_size = self.max_index_size if index_size is None else index_size
        self.offset_index.rebuild((off_rel, off_pos), index_size)
        self.time_index.rebuild((time_ts, time_rel), index_size)
        if producer_state is not None:
            self.txn_index.write_all(aborted)
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry if valid_bytes else 0
        self._rolling_based_timestamp = None
        self.recovered_next_offset = next_expected   # the loader's log end, without another scan
        return truncated

    # ---- truncation ------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= offset; returns bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = 0
        if found is not None:
            pos = found[0]
            removed = self.size - pos
            os.ftruncate(self._fd, pos)     # frees any blocks reserved past pos as well
            self._reserved_end = 0
            self.size = pos
            self._dirty = True
        if self.size == 0:
            self.created = int(self._time.time() * 1000)
            self._rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        self.reload_max_timestamp()
        return removed

    def reload_max_timestamp(self) -> None:
        """Recompute max_timestamp_so_far from the time index plus a scan of the unindexed tail.

        The time index's last entry covers every batch up to the last offset-index entry (both
        are written together), so only the batches after that position are read: at most about
        index.interval.bytes. Used after truncation and for an active segment loaded without
        recovery (its final time-index entry is only written at roll/close).
        """
        ts, off = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, off
        for _, hdr in self.iter_headers(self.offset_index.last_entry()[1]):
            if hdr[8] > self.max_timestamp_so_far:
                self.max_timestamp_so_far = hdr[8]
                self.offset_of_max_timestamp_so_far = hdr[0] + hdr[6]

    # ---- lifecycle -------------------------------------------------------------------------------
    def resize_indexes(self, size: int) -> None:
        self.max_index_size = size
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def preallocate(self, size: int) -> None:
        """log.preallocate / preallocate: reserve `size` bytes for a new, empty .log file (the
        zero tail is trimmed at roll and close; recovery cuts it after a crash)."""
        if self.size == 0 and size > 0 and os.fstat(self._fd).st_size == 0:
            os.posix_fallocate(self._fd, 0, size) if hasattr(os, "posix_fallocate") \
                else os.ftruncate(self._fd, size)
            self._reserved_end = size      # appends need no reservation of their own

    def _trim_log_file(self) -> None:
        # an unopened .log was not preallocated or written by this process: nothing to trim
        if self._fd_raw < 0:
            return
        st = os.fstat(self._fd_raw)
        if st.st_size > self.size:
            os.ftruncate(self._fd_raw, self.size)
            self._dirty = True
        elif self.size < self._reserved_end < _NO_RESERVE or st.st_blocks * 512 > self.size + _TRIM_SLACK:
            # blocks reserved past the end (by us, or by a run that crashed): the same size,
            # so nothing to sync; only the file system's free space changes
            os.ftruncate(self._fd_raw, self.size)
        self._reserved_end = 0

    def _append_final_time_entry(self) -> None:
        # Cheap when the time index is not loaded: last_entry() reads one entry.
        if self.max_timestamp_so_far > self.time_index.last_entry()[0]:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)

    def on_become_inactive(self) -> None:
        """Called at roll: final max-timestamp entry, indexes and a preallocated .log trimmed."""
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log_file()

    def flush(self) -> None:
        """Make the .log and both indexes durable (fdatasync: data and size; skipped when clean)."""
        if self._closed:
            return
        self.sync_data()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def sync_data(self) -> None:
        """Make the `.log` bytes durable, not the indexes (group commit, storage/group_commit.py):
        recovery rebuilds the indexes of every segment above the recovery point from the `.log`,
        which `flush` leaves behind. The dirty flag is cleared before the fdatasync, so whatever
        was written before it is covered and an append racing it marks the file dirty again."""
        if self._closed:
            return
        check_io(self.log_path)
        if self._dirty:
            self._dirty = False
            fs.fdatasync(self._fd)

    def sync_descriptor(self) -> int | None:
        """For a sync made by another thread (the group commit's native rounds): None when nothing
        was written since the last `sync_data` or `flush`, else a duplicate of the `.log`
        descriptor for the caller to fdatasync and close. Unlike `sync_data` it leaves the dirty
        flag set (so later native rounds sync this file again until a flush clears it): the sync runs
        later, after the flush lock is released, and a `flush` or `close` in between must not
        take the flag as "already synced" and skip its own fsync (then move the recovery and
        durable offsets past bytes no sync covered yet). The duplicate keeps the file's open
        description, so the sync reaches this file even if the segment closes meanwhile."""
        if self._closed:
            return None
        check_io(self.log_path)
        if not self._dirty:
            return None
        return os.dup(self._fd)

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename .log/.index/.timeindex from `old_suffix` to `new_suffix` (each rename atomic)."""
        def renamed(path: str) -> str:
            if not path.endswith(old_suffix) and old_suffix:
                raise ValueError(f"Expected {path} to end with {old_suffix!r}")
            stem = path[: len(path) - len(old_suffix)] if old_suffix else path
            return stem + new_suffix
        new_log = renamed(self.log_path)
        fs.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self.suffix = new_suffix

    def update_dir(self, new_dir: str) -> None:
        """The partition directory was renamed (e.g. to `-delete`): point paths at it."""
        for attr_owner, attr in ((self, "log_path"), (self.offset_index, "path"), (self.time_index, "path"),
                                 (self.txn_index, "path")):
            setattr(attr_owner, attr, os.path.join(new_dir, os.path.basename(getattr(attr_owner, attr))))
        self.dir = new_dir

    def close(self) -> None:
        """Record the final timestamp entry, trim the indexes, fsync and close the files."""
        if self._closed:
            return
        try:
            self._append_final_time_entry()
        except (ValueError, IndexOffsetOverflowError) as exc:   # a bad batch the loader trusted (clean marker)
            log.warning("could not write final time index entry of %s: %s", self.log_path, exc)
        self.offset_index.close()
        self.time_index.close()
        self._trim_log_file()
        if self._dirty:
            fs.fsync(self._fd)
        self._close_fd()

    def _close_fd(self) -> None:
        self._closed = True
        if self._fd_raw >= 0:
            os.close(self._fd_raw)
            self._fd_raw = -1

    def close_handlers(self) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._close_fd()

    @property
    def closed(self) -> bool:
        return self._closed

    def delete(self) -> None:
        """Close and unlink every file of the segment (missing files are fine)."""
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                fs.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log_path!r})"


def replay_batch(producer_state, buf, pos: int, hdr, aborted: list | None = None):
    """Feed one batch read from a segment to `producer_state`; when it is a marker that completes
    an aborted transaction, its `.txnindex` entry is appended to `aborted`. Returns the
    CompletedTxn (already completed in the producer state) or None."""
    marker = None
    if hdr.is_control and hdr.producer_id >= 0:
        try:
            marker = decode_marker(buf, pos, hdr)
        except (ValueError, EOFError, R.CorruptRecordError) as exc:
            log.warning("unreadable control batch at offset %d: %s", hdr.base_offset, exc)
    done = producer_state.update_from_batch(hdr, marker)
    if done is not None:
        if done.is_aborted and aborted is not None:
            aborted.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                      producer_state.last_stable_offset_after(done)))
        producer_state.complete_txn(done)
    return done


def _whole_batches(data: bytes) -> int:
    """Length of the longest prefix of `data` made of complete batches."""
    n = len(data)
    p = 0
    unpack = _LENGTH.unpack_from
    while n - p >= R.LOG_OVERHEAD:
        size = unpack(data, p + 8)[0] + R.LOG_OVERHEAD
        if size < R.BATCH_OVERHEAD or p + size > n:
            break
        p += size
    return p
