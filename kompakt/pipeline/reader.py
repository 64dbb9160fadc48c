"""Pure-Python reading of Kafka log dirs: find partitions and segments, plan splits, decode records.

Role: everything the `kompakt` data source, the jobs and `verify` need to read Kafka's on-disk
layout without Spark and without touching the files (read-only: never resizes, trims or renames;
safe on a live broker's directories). Spark code lives in source.py; this module never imports it.

Layout read (owned and documented byte by byte by kompakt.storage):

    <log dir>/<topic>-<partition>/            partition dir (`-delete`, `-stray`, `-future` skipped)
        <20-digit base offset>.log            v2 record batches back to back (kompakt.protocol.records)
        <20-digit base offset>.index          8-byte entries: relative last offset int32, position int32
        <20-digit base offset>.timeindex      12-byte entries: max timestamp int64, relative offset int32
    <log dir>/cleaner-offset-checkpoint       "0\\n<n>\\n<topic> <partition> <first dirty offset>\\n..."
    <log dir>/log-start-offset-checkpoint     same format, <log start offset>: records below it were
                                              deleted (DeleteRecords, retention) though their
                                              segment may remain; no consumer reads them
    <staging dir>/compact.json + segments     a `pipeline compact` output, read as the partition
                                              its manifest names (jobs/compact.py)

Index entry (o, p) of kompakt.storage.offset_index: the batch starting at position p ends with
offset o, so every offset > o lives at a position >= p; every p is a batch boundary. Time index
entry (t, o): the largest timestamp up to offset o is t, so no record at an offset <= o has a
timestamp > t. The active segment's indexes may carry a preallocated zero tail: we stop at the
first entry that does not strictly increase.

A split is a list of chunks (segment file, start position, end position); chunk bounds are batch
boundaries taken from the `.index` (or 0 and the file size), so a split can cover several small
segments or a slice of a large one, and every batch belongs to exactly one split.

Invariants: a corrupt batch (CRC mismatch, impossible length, undecodable records) is never
returned as data: it raises CorruptSegmentError naming the file and position, or with
corrupt="skip" it is counted in `ReadStats.corrupt_batches` and reading resumes after it when its
length field leads to a valid batch, else at the next index boundary. A torn tail of the *last* segment of a partition (a write in progress) is not an error, nor is
the zero tail of a preallocated one (batch length 0: the end of the written data),
also when the write completed between planning and reading. Records below a partition's log start
offset (its log dir's log-start-offset-checkpoint) are not returned, as a consumer never reads them.
Segments are listed as the storage loader would load them mid-swap (`.swap` rolled forward over
the live segments it covers, or back when a `.cleaned` remains; `.deleted` ignored), and a chunk
is read from the very file planned (by inode; under its `.deleted` or post-swap name if renamed
since), never from another file that took its name.
Records come out in offset order; the light path (keys and offsets only, for narrow schemas)
yields the same rows as a full decode for every column it fills.
"""
from __future__ import annotations

import mmap
import os
import re
import struct
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

from kompakt.protocol import records as R
from kompakt.protocol.errors import CorruptMessageError

OFFSET_INDEX_ENTRY = ">ii"
TIME_INDEX_ENTRY = ">qi"
TXN_CONTROL_KEY = ">hh"  # control record key: version int16, type int16 (0 ABORT, 1 COMMIT)
assert struct.calcsize(OFFSET_INDEX_ENTRY) == 8
assert struct.calcsize(TIME_INDEX_ENTRY) == 12
assert struct.calcsize(TXN_CONTROL_KEY) == 4
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
SWAP_RE = re.compile(r"^(\d{20})\.log\.swap$")        # cleaner output being swapped in
CLEANED_RE = re.compile(r"^(\d{20})\.(?:log|index|timeindex|txnindex)\.cleaned$")  # not yet swapped in (any kind: the loader's rule)
SWAP_SUFFIX, DELETED_SUFFIX = ".swap", ".deleted"
PARTITION_RE = re.compile(r"^(.+)-(\d+)$")
SKIPPED_DIR_SUFFIXES = ("-delete", "-stray", "-future")
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
STAGING_MANIFEST = "compact.json"
DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024


class CorruptSegmentError(CorruptMessageError):
    """A batch in a segment file is corrupt; the message names the file, position and reason."""

    def __init__(self, message: str, path: str | None = None, position: int | None = None):
        super().__init__(message)
        self.path = path
        self.position = position

    def __reduce__(self):
        return (CorruptSegmentError, (self.message, self.path, self.position))


class Segment(NamedTuple):
    base_offset: int
    log_path: str
    size: int
    ino: int = -1       # the file's inode when listed (-1: unknown); see open_planned

    def _sibling(self, ext: str) -> str:
        if self.log_path.endswith(".log" + SWAP_SUFFIX):
            return self.log_path[:-9] + ext + SWAP_SUFFIX
        return self.log_path[:-4] + ext

    @property
    def index_path(self) -> str:
        return self._sibling(".index")

    @property
    def timeindex_path(self) -> str:
        return self._sibling(".timeindex")


class PartitionDir(NamedTuple):
    topic: str
    partition: int
    path: str


class Chunk(NamedTuple):
    log_path: str
    base_offset: int
    start: int          # a batch boundary
    end: int            # a batch boundary or the file size
    is_last: bool       # last segment of the partition: a torn tail is a write in progress
    ino: int = -1       # the planned file's inode (-1: whatever is at log_path); see open_planned


@dataclass
class Split:
    topic: str
    partition: int
    chunks: list[Chunk]
    bytes: int = 0
    # read_committed: {producer_id: sorted [(first_offset, last_offset), ...]} and the LSO
    aborted: dict | None = None
    last_stable_offset: int | None = None
    # records below it were deleted (DeleteRecords, retention): never returned
    log_start_offset: int | None = None


@dataclass
class ReadStats:
    batches: int = 0
    records: int = 0
    corrupt_batches: int = 0
    corrupt_positions: list = field(default_factory=list)


# ------------------------------------------------------------------------------------------
# Finding partitions and segments

def _is_partition_dir(path: str) -> bool:
    name = os.path.basename(os.path.normpath(path))
    if not PARTITION_RE.match(name) or name.endswith(SKIPPED_DIR_SUFFIXES) or "." in name.rsplit("-", 1)[1]:
        return False
    return os.path.isdir(path) and any(SEGMENT_RE.match(f) or SWAP_RE.match(f) for f in os.listdir(path))


def _partition_of(path: str) -> PartitionDir:
    m = PARTITION_RE.match(os.path.basename(os.path.normpath(path)))
    return PartitionDir(m.group(1), int(m.group(2)), os.path.normpath(path))


def _staging_partition(path: str) -> PartitionDir | None:
    """A `compact` staging dir (segments + compact.json) reads as the partition it was made from."""
    manifest = os.path.join(path, STAGING_MANIFEST)
    if not os.path.isfile(manifest):
        return None
    import json

    with open(manifest) as f:
        m = json.load(f)
    return PartitionDir(m["topic"], int(m["partition"]), path)


def find_partitions(paths, topics=None, partitions=None) -> list[PartitionDir]:
    """Partition dirs under `paths`: each a log dir, a partition dir, `<log dir>/<topic>`, or a
    `compact` staging dir (read as the partition named in its compact.json).

    `topics` / `partitions` (collections or None) restrict the result; sorted by (topic, partition).
    """
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p]
    found: dict[tuple[str, int], PartitionDir] = {}
    for path in paths:
        path = os.path.normpath(path)
        staged = _staging_partition(path)
        if staged is not None:
            cands = [staged]
        elif _is_partition_dir(path):
            cands = [_partition_of(path)]
        elif os.path.isdir(path):
            cands = [_partition_of(os.path.join(path, n)) for n in sorted(os.listdir(path))
                     if _is_partition_dir(os.path.join(path, n))]
        else:
            parent, topic = os.path.split(path)
            if not os.path.isdir(parent):
                raise FileNotFoundError(f"no log dir, partition dir or topic at {path}")
            cands = [p for p in (_partition_of(os.path.join(parent, n)) for n in sorted(os.listdir(parent))
                                 if _is_partition_dir(os.path.join(parent, n))) if p.topic == topic]
            if not cands:
                # say both readings of PATH: a mistyped log dir ("kompakt-dta") is the likelier one
                raise FileNotFoundError(f"{path} does not exist, nor is it <log dir>/<topic>: "
                                        f"{parent or '.'} holds no partition dir of a topic {topic!r}")
        for p in cands:
            if topics is not None and p.topic not in topics:
                continue
            if partitions is not None and p.partition not in partitions:
                continue
            found.setdefault((p.topic, p.partition), p)
    return [found[k] for k in sorted(found)]


def list_segments(partition_dir: str) -> list[Segment]:
    """The partition's segments as the broker's log holds them, also in the middle of a cleaner
    swap (or after a crash in one), by the rules the storage loader applies at start-up: `.swap`
    segments at or above a remaining `.cleaned` one are rolled back (ignored); the other `.swap`
    segments replace the live segments whose base offsets they cover. Files renamed away while
    listing (retention, the swap's `.deleted` step) are not segments of the log any more."""
    live, swaps, cleaned = [], [], []
    for name in os.listdir(partition_dir):
        m = SEGMENT_RE.match(name) or SWAP_RE.match(name)
        if m:
            path = os.path.join(partition_dir, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            (swaps if name.endswith(SWAP_SUFFIX) else live).append(
                Segment(int(m.group(1)), path, st.st_size, st.st_ino))
        elif CLEANED_RE.match(name):
            cleaned.append(int(name[:20]))
    if cleaned:
        swaps = [s for s in swaps if s.base_offset < min(cleaned)]
    if swaps:
        swaps.sort()
        lo, hi = swaps[0].base_offset, _next_offset(swaps[-1])
        live = [s for s in live if not lo <= s.base_offset < hi]
    return sorted(live + swaps)


def _next_offset(seg: Segment) -> int:
    nxt = seg.base_offset
    try:
        buf, f = open_planned(seg.log_path, seg.ino)
    except FileNotFoundError:
        return nxt
    try:
        for _, h in _iter_batches_lenient(buf):
            nxt = h.next_offset
    finally:
        _unmap(buf, f)
    return nxt


def read_offset_index(seg: Segment) -> tuple[array, array]:
    """(absolute last offsets, positions) of the valid entries of the segment's `.index`."""
    offs, poss = array("q"), array("q")
    try:
        with open(seg.index_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return offs, poss
    prev_o, prev_p = -1, -1
    for rel, pos in struct.iter_unpack(OFFSET_INDEX_ENTRY, raw[: len(raw) - len(raw) % 8]):
        if rel <= prev_o or pos <= prev_p or pos >= seg.size:
            break  # zero tail of a preallocated index, or garbage: the valid prefix ends here
        offs.append(seg.base_offset + rel)
        poss.append(pos)
        prev_o, prev_p = rel, pos
    return offs, poss


def read_time_index(seg: Segment) -> tuple[array, array]:
    """(max timestamps, absolute offsets) of the valid entries of the segment's `.timeindex`."""
    tss, offs = array("q"), array("q")
    try:
        with open(seg.timeindex_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return tss, offs
    prev_t, prev_o = None, -1
    for ts, rel in struct.iter_unpack(TIME_INDEX_ENTRY, raw[: len(raw) - len(raw) % 12]):
        if (prev_t is not None and ts <= prev_t) or rel < prev_o or (ts == 0 and rel == 0 and prev_t is not None):
            break
        tss.append(ts)
        offs.append(seg.base_offset + rel)
        prev_t, prev_o = ts, rel
    return tss, offs


def read_cleaner_checkpoint(log_dir: str) -> dict[tuple[str, int], int]:
    """`cleaner-offset-checkpoint` of a log dir: (topic, partition) -> first dirty offset."""
    return read_offset_checkpoint(log_dir, CLEANER_CHECKPOINT)


def partition_log_start(part: PartitionDir) -> int | None:
    """The partition's log start offset from its log dir's `log-start-offset-checkpoint` (None for
    a staging dir or when not checkpointed). DeleteRecords and retention move it, possibly into the
    middle of a segment that stays on disk; the broker checkpoints it periodically and at shutdown."""
    if os.path.isfile(os.path.join(part.path, STAGING_MANIFEST)):
        return None
    return read_offset_checkpoint(os.path.dirname(part.path), LOG_START_CHECKPOINT).get((part.topic, part.partition))


def read_offset_checkpoint(log_dir: str, name: str) -> dict[tuple[str, int], int]:
    """A per-log-dir offset checkpoint file: (topic, partition) -> offset."""
    out: dict[tuple[str, int], int] = {}
    try:
        with open(os.path.join(log_dir, name)) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return out
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


# ------------------------------------------------------------------------------------------
# Planning

@dataclass
class Bounds:
    """Pushed-down ranges (inclusive); None = unbounded."""
    min_offset: int | None = None
    max_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None

    def empty(self) -> bool:
        return ((self.min_offset is not None and self.max_offset is not None and self.min_offset > self.max_offset)
                or (self.min_timestamp is not None and self.max_timestamp is not None
                    and self.min_timestamp > self.max_timestamp))


def segment_chunks(seg: Segment, next_base: int | None, is_last: bool, bounds: Bounds,
                    split_bytes: int) -> list[Chunk]:
    """Byte ranges of one segment that may hold rows within `bounds`, cut at index boundaries."""
    if seg.size == 0:
        return []
    if bounds.min_offset is not None and next_base is not None and next_base <= bounds.min_offset:
        return []
    if bounds.max_offset is not None and seg.base_offset > bounds.max_offset:
        return []
    start, end = 0, seg.size
    offs, poss = read_offset_index(seg)
    if bounds.min_timestamp is not None:
        tss, toffs = read_time_index(seg)
        if tss and not is_last and next_base is not None and tss[-1] < bounds.min_timestamp:
            return []  # the closed segment's max timestamp (its last time index entry) is too old
        i = bisect_left(tss, bounds.min_timestamp) - 1
        if i >= 0:
            # no record at an offset <= toffs[i] reaches min_timestamp: start after that offset
            j = bisect_right(offs, toffs[i]) - 1
            if j >= 0:
                start = max(start, poss[j])
    if bounds.min_offset is not None:
        j = bisect_right(offs, bounds.min_offset - 1) - 1  # entries ending below min_offset
        if j >= 0:
            start = max(start, poss[j])
    if bounds.max_offset is not None:
        j = bisect_right(offs, bounds.max_offset)  # first entry ending past max_offset...
        if j + 1 < len(poss):
            end = min(end, poss[j + 1])  # ...its batch holds it at the latest; the next one is past
    if start >= end:
        return []
    cuts = [start]
    lo = bisect_right(poss, start)
    for p in poss[lo:]:
        if p >= end:
            break
        if p - cuts[-1] >= split_bytes:
            cuts.append(p)
    cuts.append(end)
    return [Chunk(seg.log_path, seg.base_offset, a, b, is_last, seg.ino) for a, b in zip(cuts, cuts[1:])]


def plan_splits(parts: list[PartitionDir], bounds: Bounds | None = None,
                split_bytes: int = DEFAULT_SPLIT_BYTES, read_committed: bool = False,
                log_start: bool = True) -> list[Split]:
    """Splits of about `split_bytes` (never across partitions), skipping what `bounds` excludes.

    With `log_start` (the default) records below each partition's checkpointed log start offset
    are excluded too (a consumer's view); False reads every record on disk (compaction's input,
    verify's raw comparison).

    With `read_committed` each split carries its partition's aborted transactions and LSO (used
    to drop them, or with read_committed=False in iter_split_records to mark rows `is_aborted`).
    """
    bounds = bounds or Bounds()
    out: list[Split] = []
    if bounds.empty():
        return out
    for p in parts:
        segs = list_segments(p.path)
        aborted = lso = None
        if read_committed:
            aborted, lso = scan_transactions(segs)
        start = partition_log_start(p) if log_start else None
        pbounds = bounds
        if start is not None and (bounds.min_offset is None or bounds.min_offset < start):
            pbounds = Bounds(start, bounds.max_offset, bounds.min_timestamp, bounds.max_timestamp)
            if pbounds.empty():
                continue
        cur = Split(p.topic, p.partition, [], 0, aborted, lso, start)
        for i, seg in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            for ch in segment_chunks(seg, nxt, nxt is None, pbounds, split_bytes):
                size = ch.end - ch.start
                if cur.chunks and cur.bytes + size > split_bytes:
                    out.append(cur)
                    cur = Split(p.topic, p.partition, [], 0, aborted, lso, start)
                cur.chunks.append(ch)
                cur.bytes += size
        if cur.chunks:
            out.append(cur)
    return out


# ------------------------------------------------------------------------------------------
# Transactions (read_committed)

class SegmentGoneError(FileNotFoundError):
    """A planned segment file is gone (retention or a cleaner swap unlinked it) before it was read."""


def open_planned(path: str, ino: int = -1):
    """The mapped bytes (and file) of the segment planned at `path` with inode `ino` (find_planned)."""
    return _map_file(find_planned(path, ino))


def find_planned(path: str, ino: int = -1):
    """The open file of the segment planned at `path` with inode `ino`.

    A live broker renames segments under a reader: retention and a cleaner swap rename old
    segments `.deleted` (unlinked later: log.segment.delete.delay.ms), a swap renames `.swap` ->
    `.log`, and a cleaned segment may take the name of one it replaced. The planned file is found
    by its inode among those names, so positions planned on it are read from it."""
    names = [path, path + DELETED_SUFFIX]
    if path.endswith(SWAP_SUFFIX):
        names += [path[:-len(SWAP_SUFFIX)], path[:-len(SWAP_SUFFIX)] + DELETED_SUFFIX]
    for name in names:
        try:
            f = open(name, "rb")
        except FileNotFoundError:
            continue
        if ino < 0 or os.fstat(f.fileno()).st_ino == ino:
            return f
        f.close()
    raise SegmentGoneError(f"segment {path} was deleted or replaced (retention or the cleaner) after the "
                           "read was planned and is no longer on disk: read again")


def _unmap(buf, f) -> None:
    if isinstance(buf, mmap.mmap):
        try:
            buf.close()
        except BufferError:
            pass  # a memoryview of a record still alive: the GC closes the map later
    f.close()


def _map_file(f):
    try:
        if os.fstat(f.fileno()).st_size == 0:
            return b"", f
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), f
    except Exception:
        f.close()
        raise


def control_type(buf, pos: int, header: R.BatchHeader) -> int | None:
    """ABORT (0) or COMMIT (1) for a transaction marker batch, None for other control records."""
    recs = R.decode_records(buf, pos, header)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return None
    return struct.unpack_from(TXN_CONTROL_KEY, recs[0].key)[1]


def scan_transactions(segs: list[Segment]) -> tuple[dict, int | None]:
    """Aborted transactions per producer and the last stable offset, from batch headers.

    A transaction runs from a producer's first transactional batch after its previous marker to
    its next marker; an ABORT marker aborts it. A transaction with no marker yet bounds the LSO:
    read_committed never reads at or past the first offset of an open transaction (Kafka's rule).
    """
    open_first: dict[int, int] = {}
    aborted: dict[int, list] = {}
    for seg in segs:
        try:
            buf, f = open_planned(seg.log_path, seg.ino)
        except SegmentGoneError:
            continue  # deleted since listed: retention (its transactions are below the log start)
        try:
            for pos, h in _iter_batches_lenient(buf):
                if not h.is_transactional:
                    continue
                if h.is_control:
                    first = open_first.pop(h.producer_id, h.base_offset)
                    if control_type(buf, pos, h) == CONTROL_ABORT:
                        aborted.setdefault(h.producer_id, []).append((first, h.base_offset))
                else:
                    open_first.setdefault(h.producer_id, h.base_offset)
        finally:
            _unmap(buf, f)
    lso = min(open_first.values()) if open_first else None
    return aborted, lso


def _iter_batches_lenient(buf):
    try:
        yield from R.iter_batches(buf)
    except R.CorruptRecordError:
        return


def is_aborted(aborted: dict, producer_id: int, offset: int) -> bool:
    ranges = aborted.get(producer_id)
    if not ranges:
        return False
    i = bisect_right(ranges, (offset, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= offset <= ranges[i][1]


# ------------------------------------------------------------------------------------------
# Reading batches

class BatchView(NamedTuple):
    path: str
    position: int
    header: R.BatchHeader
    buf: object  # the mapped file; valid only while iterating


def iter_chunk_batches(chunk: Chunk, *, corrupt: str = "fail", stats: ReadStats | None = None,
                       next_boundaries=None) -> Iterator[BatchView]:
    """Batches of one chunk with a valid CRC, in file order (see the module invariants)."""
    stats = stats if stats is not None else ReadStats()
    buf, f = open_planned(chunk.log_path, chunk.ino)
    try:
        pos = chunk.start
        end = min(chunk.end, len(buf))
        boundaries = None
        while pos < end:
            bad = None
            if chunk.is_last and _zeroed_tail(buf, pos):
                break  # the unwritten rest of a preallocated active segment (or one a crash left)
            # the last chunk ends at the file size seen when planning: a batch torn then may be
            # whole now, so its header is read past the chunk's end (the file grew)
            avail = len(buf) if chunk.is_last else end
            try:
                h = R.read_header(buf, pos) if avail - pos >= R.BATCH_OVERHEAD else None
            except R.CorruptRecordError as e:
                h, bad = None, str(e)
            if h is None and bad is None:
                if _torn_tail(chunk, buf):
                    break  # torn tail of the active segment: a write in progress
                bad = f"{end - pos} trailing bytes, shorter than a batch header"
            elif h is not None:
                if h.magic != R.CURRENT_MAGIC:
                    bad = f"magic {h.magic}, expected {R.CURRENT_MAGIC}"
                elif h.size < R.BATCH_OVERHEAD:
                    bad = f"batch length {h.batch_length} below the minimum"
                elif pos + h.size > len(buf):
                    if _torn_tail(chunk, buf):
                        break
                    bad = f"batch of {h.size} bytes runs past the end of the file ({len(buf)} bytes)"
                elif not R.valid_crc(buf, pos, h):
                    bad = f"CRC mismatch (stored {h.crc:#010x}, computed {R.compute_crc(buf, pos, h):#010x})"
            if bad is None:
                stats.batches += 1
                yield BatchView(chunk.log_path, pos, h, buf)
                pos += h.size
                continue
            msg = (f"corrupt batch in {chunk.log_path} at position {pos}"
                   + (f" (base offset {h.base_offset})" if h is not None else "") + f": {bad}")
            if corrupt != "skip":
                raise CorruptSegmentError(msg, chunk.log_path, pos)
            stats.corrupt_batches += 1
            stats.corrupt_positions.append((chunk.log_path, pos))
            # the length field is not under the CRC: trust it only if a valid batch (or the end of
            # the chunk) follows; else resume at the next batch boundary the offset index knows
            if h is not None and R.BATCH_OVERHEAD <= h.size and pos + h.size <= end:
                nxt = pos + h.size
                if nxt == end or _valid_batch_at(buf, nxt, len(buf)):
                    pos = nxt
                    continue
            if boundaries is None:
                boundaries = read_offset_index(Segment(chunk.base_offset, chunk.log_path, len(buf)))[1]
            j = bisect_right(boundaries, pos)
            pos = boundaries[j] if j < len(boundaries) and boundaries[j] < end else end
    finally:
        _unmap(buf, f)


def _zeroed_tail(buf, pos: int) -> bool:
    """A batch length of 0 where a batch would start: the zero tail of a preallocated segment
    (`preallocate` / log.preallocate), where the written data ends; the storage engine's recovery
    cuts the segment there too (LogSegment.recover)."""
    return len(buf) - pos >= R.LOG_OVERHEAD and buf[pos + 8:pos + 12] == b"\0\0\0\0"


def _torn_tail(chunk: Chunk, buf) -> bool:
    """A batch running past the file's end in this chunk is a write in progress: the chunk ends at
    the file's end, or at the size planned before the file grew (no batch boundary there)."""
    return chunk.is_last and (chunk.end >= len(buf) or not _valid_batch_at(buf, chunk.end, len(buf)))


def _valid_batch_at(buf, pos: int, size: int) -> bool:
    if size - pos < R.BATCH_OVERHEAD:
        return False
    try:
        h = R.read_header(buf, pos)
    except R.CorruptRecordError:
        return False
    return (h.magic == R.CURRENT_MAGIC and h.size >= R.BATCH_OVERHEAD and pos + h.size <= size
            and R.valid_crc(buf, pos, h))


class RecordRow(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list
    is_tombstone: bool
    is_control: bool
    producer_id: int
    batch_base_offset: int
    segment: str
    # extras (selectable by name through a user-given schema)
    delete_horizon_ms: int
    is_transactional: bool
    compression: int
    record_bytes: float
    batch_position: int
    is_aborted: bool


# columns the light path fills (no value, headers or record timestamps decoded)
LIGHT_COLUMNS = frozenset({"topic", "partition", "offset", "key", "is_tombstone", "is_control", "producer_id",
                           "batch_base_offset", "segment", "delete_horizon_ms", "is_transactional",
                           "compression", "record_bytes", "batch_position", "is_aborted", "timestamp_type"})


def iter_split_records(split: Split, *, corrupt: str = "fail", read_committed: bool = False,
                       bounds: Bounds | None = None, stats: ReadStats | None = None,
                       light: bool = False, control: bool | None = None) -> Iterator[RecordRow]:
    """Every record of a split, in offset order, honouring read_committed and `bounds` exactly.

    control: whether control records (transaction markers) are rows. None (the storage view of
    the internal jobs): yes, unless read_committed. False: never, as no consumer sees them as
    records. True: yes in both levels (read_committed: those below the last stable offset).

    light=True (only for LIGHT_COLUMNS and no timestamp bounds): records are walked with the
    cleaner's key/offset fast path; value, headers and timestamp come back as None, [], -1.
    """
    bounds = bounds or Bounds()
    stats = stats if stats is not None else ReadStats()
    lo_off, hi_off = bounds.min_offset, bounds.max_offset
    if split.log_start_offset is not None and (lo_off is None or lo_off < split.log_start_offset):
        lo_off = split.log_start_offset  # deleted records: no consumer reads them
    lo_ts, hi_ts = bounds.min_timestamp, bounds.max_timestamp
    lso = split.last_stable_offset if read_committed else None
    aborted = split.aborted or {}
    if control is None:
        control = not read_committed
    for chunk in split.chunks:
        seg_name = chunk.log_path
        for bv in iter_chunk_batches(chunk, corrupt=corrupt, stats=stats):
            h = bv.header
            if h.is_control and not control:
                continue
            if lo_off is not None and h.last_offset < lo_off:
                continue
            if hi_off is not None and h.base_offset > hi_off:
                break
            if lo_ts is not None and h.max_timestamp < lo_ts and h.timestamp_type == 0 and not h.is_control:
                continue
            aborted_batch = bool(h.is_transactional and not h.is_control and aborted
                                 and is_aborted(aborted, h.producer_id, h.base_offset))
            if read_committed and (aborted_batch or (lso is not None and h.base_offset >= lso)):
                continue
            try:
                if light and lo_ts is None and hi_ts is None:
                    items = list(R.iter_keys_offsets(bv.buf, bv.position, h))
                    rb = h.size / max(1, len(items))
                    for off, key, tomb in items:
                        if (lo_off is not None and off < lo_off) or (hi_off is not None and off > hi_off):
                            continue
                        stats.records += 1
                        yield RecordRow(split.topic, split.partition, off, -1, h.timestamp_type, key, None, [],
                                        tomb and not h.is_control, h.is_control, h.producer_id, h.base_offset,
                                        seg_name, h.delete_horizon_ms, h.is_transactional, h.compression, rb,
                                        bv.position, aborted_batch)
                    continue
                recs = R.decode_records(bv.buf, bv.position, h)
            except (R.CorruptRecordError, Exception) as e:
                msg = f"corrupt batch in {seg_name} at position {bv.position} (base offset {h.base_offset}): {e}"
                if corrupt != "skip":
                    raise CorruptSegmentError(msg, seg_name, bv.position) from None
                stats.corrupt_batches += 1
                stats.corrupt_positions.append((seg_name, bv.position))
                continue
            rb = h.size / max(1, len(recs))
            log_append = h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
            base_ts = h.base_timestamp
            for r in recs:
                off = h.base_offset + r.offset_delta
                if lo_off is not None and off < lo_off:
                    continue
                if hi_off is not None and off > hi_off:
                    break
                ts = h.max_timestamp if log_append else base_ts + r.timestamp_delta
                if (lo_ts is not None and ts < lo_ts) or (hi_ts is not None and ts > hi_ts):
                    continue
                stats.records += 1
                yield RecordRow(split.topic, split.partition, off, ts, h.timestamp_type, r.key, r.value,
                                r.headers, r.value is None and not h.is_control, h.is_control,
                                h.producer_id, h.base_offset, seg_name, h.delete_horizon_ms,
                                h.is_transactional, h.compression, rb, bv.position, aborted_batch)


def read_partition(part: PartitionDir, *, log_start: bool = True, **kw) -> list[RecordRow]:
    """All records of one partition (for tests, verify and small jobs); kwargs of iter_split_records."""
    rows: list[RecordRow] = []
    for split in plan_splits([part], kw.get("bounds"), read_committed=kw.get("read_committed", False),
                             log_start=log_start):
        rows.extend(iter_split_records(split, **kw))
    return rows
