"""The sparse time index of one segment: `<20-digit base offset>.timeindex`.

Role: map a timestamp to an offset for ListOffsets by timestamp (offset_for_timestamp) without
reading the segment's batches.

On-disk format (Kafka's `TimeIndex`, byte for byte), a flat array of 12-byte entries, big-endian:

    offset  size  field
    0       8     timestamp        int64  = largest timestamp seen in the segment so far
    8       4     relative offset  int32  = offset of that timestamp - segment base offset

Entries are appended together with offset-index entries, but only when the timestamp grows, so
timestamps and offsets are both strictly increasing. When a segment becomes inactive (roll,
close) one final entry with the segment's max timestamp is appended even if the index is "full"
(Kafka reserves one slot: the index counts as full at `max_entries - 1`), which is how a reopened
segment learns its largest timestamp without scanning.

Preallocation, trimming, zero-tail handling and memory layout as in `offset_index`: two `array`
columns ('q' timestamps, 'i' relative offsets), binary search for lookups.

Sanity check on load (Kafka's): length a multiple of 12; last timestamp >= first timestamp;
last offset >= base offset.
"""
from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right

from kompakt.storage.offset_index import (INT32_MAX, CorruptIndexError, IndexOffsetOverflowError,
                                          SparseIndex)

ENTRY_FORMAT = ">qi"
ENTRY_SIZE = 12
assert struct.calcsize(ENTRY_FORMAT) == ENTRY_SIZE
_ENTRY = struct.Struct(ENTRY_FORMAT)
NO_TIMESTAMP = -1
_LITTLE = sys.byteorder == "little"


class TimeIndex(SparseIndex):
    """Timestamp -> offset index of one segment (see module docstring for the format)."""

    entry_size = ENTRY_SIZE

    REL = 1

    def _empty_columns(self) -> tuple:
        return array("q"), array("i")

    def _parse(self, raw: bytes) -> tuple:
        # Drop the all-zero tail of a preallocated file left by a crash (C-speed rstrip); slot 0
        # stays even when zero: (timestamp 0, base offset) can be a real entry.
        n = -(-len(raw.rstrip(b"\x00")) // ENTRY_SIZE)
        if n == 0 and len(raw) >= ENTRY_SIZE:
            n = 1
        raw = raw[:n * ENTRY_SIZE]
        ts = array("q")
        rel = array("i")
        if n:
            ts.frombytes(_gather(raw, 0, 8))
            rel.frombytes(_gather(raw, 8, 4))
            if _LITTLE:
                ts.byteswap()
                rel.byteswap()
        return ts, rel

    @property
    def _ts(self) -> array:
        return self._columns()[0]

    def _pack(self, cols: tuple) -> bytes:
        ts, rel = array("q", cols[0]), array("i", cols[1])
        if _LITTLE:
            ts.byteswap()
            rel.byteswap()
        out = bytearray(len(ts) * ENTRY_SIZE)
        _scatter(out, ts.tobytes(), 0, 8)
        _scatter(out, rel.tobytes(), 8, 4)
        return bytes(out)

    def sanity_check(self) -> None:
        """Kafka's checks; reads the first and last entries only when the index is not loaded."""
        if self._length % ENTRY_SIZE:
            raise CorruptIndexError(f"Time index file {self.path} is corrupt, found {self._length} "
                                    f"bytes which is neither positive nor a multiple of {ENTRY_SIZE}")
        first, last = self._peek_entry(0), self._peek_entry(-1)
        if first is not None and last is not None:
            first_ts = _ENTRY.unpack(first)[0]
            last_ts, last_rel = _ENTRY.unpack(last)
        elif self._ts:
            first_ts, last_ts, last_rel = self._ts[0], self._ts[-1], self._rel[-1]
        else:
            return
        if last_ts < first_ts:
            raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has "
                                    f"non-zero size but the last timestamp is {last_ts} which "
                                    f"is less than the first timestamp {first_ts}")
        if last_rel < 0:
            raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has "
                                    f"non-zero size but the last offset is {self.base_offset + last_rel} "
                                    f"which is less than the base offset {self.base_offset}")

    def is_full(self) -> bool:
        # One slot stays free for the final entry written when the segment becomes inactive.
        return len(self._ts) >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        raw = self._peek_entry(-1)
        if raw is not None:
            ts, rel = _ENTRY.unpack(raw)
            return ts, self.base_offset + rel
        if not self._ts:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def entry(self, n: int) -> tuple[int, int]:
        return self._ts[n], self.base_offset + self._rel[n]

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base)."""
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if timestamp is larger than the last entry's."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"Attempt to append to a full time index (size = {self.entries}) "
                             f"{self.path}.")
        last_ts, last_off = self.last_entry()
        if self._ts and offset < last_off:
            raise ValueError(f"Attempt to append an offset ({offset}) to slot {self.entries} no "
                             f"larger than the last offset appended ({last_off}) to {self.path}.")
        if self._ts and timestamp < last_ts:
            raise ValueError(f"Attempt to append a timestamp ({timestamp}) to slot {self.entries} "
                             f"no larger than the last timestamp appended ({last_ts}) to {self.path}.")
        if timestamp <= last_ts:
            return
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetOverflowError(f"Integer overflow for offset: {offset} ({self.path})")
        if len(self._ts) >= self.max_entries:
            self.resize(self._length + ENTRY_SIZE)  # the reserved slot of a trimmed index
        self._write_entry(_ENTRY.pack(timestamp, rel))
        self._ts.append(timestamp)
        self._rel.append(rel)


def _scatter(out: bytearray, column: bytes, start: int, width: int) -> None:
    """The inverse of `_gather`: lay `column`'s `width`-byte fields into every 12-byte entry."""
    for j in range(width):
        out[start + j::ENTRY_SIZE] = column[j::width]


def _gather(raw: bytes, start: int, width: int) -> bytes:
    """The `width`-byte field at `start` of every 12-byte entry, concatenated (strided C copies)."""
    n = len(raw) // ENTRY_SIZE
    out = bytearray(n * width)
    for j in range(width):
        out[j::width] = raw[start + j::ENTRY_SIZE]
    return bytes(out)
