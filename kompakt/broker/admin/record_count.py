"""How many records a partition holds, counted from batch headers, each segment counted once.

Kafka has no record count (its FAQ: "iterate"); web UIs for Kafka show end offset minus start
offset, which overcounts a compacted topic by every record the cleaner removed, the very figure
a Kompakt user looks at. So we count exactly, from the v2 batch headers (61 bytes each, one pread
a batch; records are decoded only in the one batch that straddles the log start offset), and keep
each segment's tally so that a page polling every few seconds reads only what was appended since
its last poll:

  * a tally belongs to one LogSegment object (a WeakKeyDictionary: a segment the cleaner replaced,
    or a deleted log's, takes its tally with it; a swapped-in segment is a new object, counted anew);
  * it covers the segment's first `position` bytes (whole batches) and is resumed from there while
    the file still holds the same last counted batch (one 61-byte pread compares its base offset
    and CRC: a truncated and rewritten segment is counted again from its start);
  * it depends on the log start offset only when that offset lies inside the segment (DeleteRecords
    or retention cut it), and then it records the log start it was counted from.

Invariants: counts are exactly what a read_uncommitted consumer reading from the log start gets
(control batches are not records; aborted records are); a segment replaced while it is counted
restarts the count (up to `attempts` times). Runs in a worker thread: it reads files. Tallies are
replaced whole (a new tuple), so two threads counting the same log at once stay correct.
"""
from __future__ import annotations

import os
import weakref
from typing import Any, NamedTuple

from kompakt.protocol.records import BATCH_OVERHEAD, decode_records, read_header


class _Tally(NamedTuple):
    floor: int          # the log start offset counted from, when it cut into the segment; else -1
    position: int       # bytes of whole batches counted
    last: tuple         # (position, base_offset, crc) of the last batch counted, or () for none
    records: int
    batches: int
    control_batches: int


_tallies: "weakref.WeakKeyDictionary[Any, _Tally]" = weakref.WeakKeyDictionary()


def count_records(lg: Any, attempts: int = 3) -> dict[str, int]:
    """{records, batches, control_batches, headers_read} from the log start offset to the log end.

    `headers_read` is what this call cost: the batch headers read from disk (0 when nothing was
    appended, cleaned or deleted since the last count of this log).
    """
    for attempt in range(attempts):
        start = lg.log_start_offset
        totals = {"records": 0, "batches": 0, "control_batches": 0, "headers_read": 0}
        try:
            for seg in list(lg.segments):
                tally, read = _count_segment(seg, start)
                totals["records"] += tally.records
                totals["batches"] += tally.batches
                totals["control_batches"] += tally.control_batches
                totals["headers_read"] += read
            return totals
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _count_segment(seg: Any, log_start: int) -> tuple[_Tally, int]:
    floor = log_start if log_start > seg.base_offset else -1
    size = seg.size
    fd = os.open(seg.log_path, os.O_RDONLY)
    try:
        tally = _tallies.get(seg)
        if tally is None or not _resumable(fd, tally, floor, size):
            tally = _Tally(floor, 0, (), 0, 0, 0)
        pos, last = tally.position, tally.last
        records, batches, controls, read = tally.records, tally.batches, tally.control_batches, 0
        while pos + BATCH_OVERHEAD <= size:
            head = os.pread(fd, BATCH_OVERHEAD, pos)
            if len(head) < BATCH_OVERHEAD:
                break
            h = read_header(head)
            if pos + h.size > size:
                break       # a batch being written: counted once whole
            read += 1
            if h.last_offset >= log_start:
                batches += 1
                if h.is_control:
                    controls += 1
                elif h.base_offset >= log_start:
                    records += h.records_count
                else:  # straddles the log start offset (DeleteRecords): count the records above it
                    batch = os.pread(fd, h.size, pos)
                    records += sum(1 for r in decode_records(batch, 0, h)
                                   if h.base_offset + r.offset_delta >= log_start)
            last = (pos, h.base_offset, h.crc)
            pos += h.size
    finally:
        os.close(fd)
    tally = _Tally(floor, pos, last, records, batches, controls)
    if read:
        _tallies[seg] = tally
    return tally, read


def _resumable(fd: int, tally: _Tally, floor: int, size: int) -> bool:
    """Whether `tally` still describes the start of this file, as counted from `floor`."""
    if tally.floor != floor or tally.position > size:
        return False
    if not tally.last:
        return True
    pos, base_offset, crc = tally.last
    head = os.pread(fd, BATCH_OVERHEAD, pos)
    if len(head) < BATCH_OVERHEAD:
        return False
    h = read_header(head)
    return h.base_offset == base_offset and h.crc == crc
