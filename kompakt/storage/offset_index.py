"""The sparse offset index of one segment: `<20-digit base offset>.index`.

Role: map an offset to a file position in the segment's `.log` so a fetch starts reading close to
the batch it wants instead of scanning the segment from byte 0.

On-disk format (Kafka's `OffsetIndex`, byte for byte), a flat array of 8-byte entries, big-endian:

    offset  size  field
    0       4     relative offset   int32  = entry offset - segment base offset
    4       4     position          int32  = byte position of a batch in the .log file

An entry (o, p) says: the batch starting at position p ends with offset o (o = the *last* offset
of the append that wrote it), so every offset > o lives at a position >= p. Entries are strictly
increasing in both fields. The first batch of a segment is never indexed (entries are added only
after `index.interval.bytes` bytes were appended), so no entry has position 0 and trailing (0, 0)
entries are always preallocation.

The file of the active segment is preallocated to `segment.index.bytes` rounded down to a multiple
of 8 (a sparse file: zeros, no disk blocks) and trimmed to its entries on roll and close, so a
cleanly closed index is exactly `8 * entries` bytes. After a crash the active index may still
carry its zero tail; loading drops trailing all-zero entries (they can never be valid entries).

Invariants: `entries <= max_entries`; relative offsets fit in int32; lookups use binary search
over `array('i')` copies of the two columns (no per-entry Python objects, so a 10 MiB index costs
10 MiB of memory, not 100).

Descriptors: an index holds no file descriptor between operations. Each entry is written at once
(pwrite) through a descriptor opened for that write and closed after it (about 6 us more than a
kept descriptor, once per index.interval.bytes appended), so entries are in the file as soon as
they are in memory, as with Kafka's memory-mapped indexes, yet a broker with 10 000 partitions
holds one descriptor per written `.log` instead of three (Kafka's indexes hold none either: a
mapping needs no descriptor in Java; Python 3.11's mmap keeps a duplicate).

Sanity check on load (Kafka's): file length a multiple of 8, and the last offset >= base offset;
we also check that the last position is within the log file (the caller passes its size).
"""
from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

from kompakt.storage.faults import check_io
from kompakt.storage import files as fs

ENTRY_FORMAT = ">ii"
ENTRY_SIZE = 8
assert struct.calcsize(ENTRY_FORMAT) == ENTRY_SIZE
_ENTRY = struct.Struct(ENTRY_FORMAT)
INT32_MAX = 2**31 - 1
_LITTLE = sys.byteorder == "little"


class CorruptIndexError(Exception):
    """An index file failed its sanity check; the segment rebuilds it from the .log file."""


class IndexOffsetOverflowError(Exception):
    """An offset does not fit the index's 32-bit relative offset; the log must roll first."""


def round_down(value: int, multiple: int) -> int:
    return (value // multiple) * multiple


_PAGE = 4096
_ZERO_PAGE = bytes(_PAGE)
_SCAN_CHUNK = 64 * 1024


def _data_end(fd: int, length: int) -> int:
    """End of the written part of a sparse (preallocated) file, rounded up to whole entries.

    SEEK_HOLE finds the first hole, so a crashed active index does not make us read megabytes of
    preallocated zeros. A file system that reports no hole (FUSE ones such as LazyFS, NFS, or a
    file system without sparse files: the whole file reads as data) is scanned instead for its
    first all-zero page, the same boundary a hole would give (no valid entry is a page of zeros):
    without it every crashed active index cost a 10 MiB read, 0.25 s a log under LazyFS.
    """
    try:
        end = os.lseek(fd, 0, os.SEEK_HOLE)
    except (OSError, AttributeError):
        end = length
    if end >= length > _SCAN_CHUNK:
        end = _first_zero_page(fd, length)
    return -(-end // (ENTRY_SIZE * 3)) * (ENTRY_SIZE * 3)  # a multiple of both entry sizes


def _first_zero_page(fd: int, length: int) -> int:
    """Offset of the first page-aligned all-zero page (or `length`), reading only up to it."""
    pos = 0
    while pos < length:
        chunk = os.pread(fd, min(_SCAN_CHUNK, length - pos), pos)
        if not chunk:
            break
        for off in range(0, len(chunk) - _PAGE + 1, _PAGE):
            if chunk[off:off + _PAGE] == _ZERO_PAGE:
                return pos + off
        pos += len(chunk)
    return length


def _unpack_column(raw: bytes, typecode: str) -> array:
    col = array(typecode)
    col.frombytes(raw)
    if _LITTLE:
        col.byteswap()
    return col


class SparseIndex:
    """File mechanics shared by the offset and time indexes: a flat array of fixed-size entries,
    preallocated while active, trimmed when inactive.

    Columns (`array`s, one per field; `_rel` the relative offsets is always one of them) are
    loaded lazily, like Kafka's LazyIndex: opening a log with thousands of segments reads no index
    file; the sanity check and `last_entry` of an unloaded index read just the entries they need.
    """

    entry_size = ENTRY_SIZE
    REL = 0  # position of the relative-offset column in the columns tuple

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024,
                 writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._dirty = False  # written since the last flush
        self._cols: tuple | None = None
        self._peeked: dict[int, bytes] = {}   # entries _peek_entry read while unloaded
        self._closed = False
        try:
            self._length = os.stat(path).st_size
        except FileNotFoundError:
            self._length = 0
        if self._length == 0:
            if max_index_size < self.entry_size:
                raise ValueError(f"Invalid max index size {max_index_size} for {path}: "
                                 f"must be at least {self.entry_size}")
            self._length = round_down(max_index_size, self.entry_size)
            with self._file() as fd:
                if writable:
                    os.ftruncate(fd, self._length)
            self._cols = self._empty_columns()

    def _file(self):
        """A descriptor for one operation, closed after it (see the module docstring)."""
        if self._closed:
            raise ValueError(f"index {self.path} is closed")
        flags = (os.O_RDWR | os.O_CREAT) if self.writable else os.O_RDONLY
        return _Descriptor(os.open(self.path, flags, 0o644))

    def _empty_columns(self) -> tuple:
        raise NotImplementedError

    def _parse(self, raw: bytes) -> tuple:
        raise NotImplementedError

    def _columns(self) -> tuple:
        """The columns, read from the file on first use."""
        if self._cols is None:
            with self._file() as fd:
                n = min(self._length, _data_end(fd, self._length)) // self.entry_size
                self._cols = self._parse(os.pread(fd, n * self.entry_size, 0) if n else b"")
        return self._cols

    @property
    def loaded(self) -> bool:
        return self._cols is not None

    @property
    def _rel(self) -> array:
        return self._columns()[self.REL]

    def _peek_entry(self, n: int) -> bytes | None:
        """Raw entry n (negative: from the end of the file) of an unloaded index, or None when the
        index is loaded or that slot is zero (a preallocated tail needs a full load)."""
        if self._cols is not None or self._length < self.entry_size:
            return None
        count = self._length // self.entry_size
        pos = (n % count) * self.entry_size
        raw = self._peeked.get(pos)
        if raw is None:   # an unloaded index is never written (writes load it first): read once
            with open(self.path, "rb") as f:
                f.seek(pos)
                raw = self._peeked[pos] = f.read(self.entry_size)
        return raw if len(raw) == self.entry_size and raw.count(0) != self.entry_size else None

    @property
    def entries(self) -> int:
        return len(self._rel)

    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    @property
    def max_index_size(self) -> int:
        return self._length

    @property
    def size_in_bytes(self) -> int:
        return len(self._rel) * self.entry_size

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset` (Kafka's truncateTo)."""
        rel = offset - self.base_offset
        self._truncate_to_entries(bisect_right(self._rel, rel - 1) if rel > 0 else 0)

    def _truncate_to_entries(self, n: int) -> None:
        if n >= len(self._rel):
            return
        for col in self._columns():
            del col[n:]  # noqa: the columns are mutated in place
        if self.writable:
            # Zero the dropped entries so a crash never resurrects them, keep the preallocation.
            with self._file() as fd:
                os.ftruncate(fd, n * self.entry_size)
                os.ftruncate(fd, self._length)
            self._dirty = True

    def reset(self) -> None:
        self._truncate_to_entries(0)

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to whole entries, never below the entries)."""
        new_length = max(round_down(new_size, self.entry_size), len(self._rel) * self.entry_size)
        if new_length == self._length:
            return False
        if self.writable:
            if self._closed:
                raise ValueError(f"index {self.path} is closed")
            try:
                os.truncate(self.path, new_length)   # one call: no descriptor to open and close
            except FileNotFoundError:
                with self._file() as fd:             # (re)created, as a write through _file would
                    os.ftruncate(fd, new_length)
            self._dirty = True
        self._length = new_length
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(len(self._rel) * self.entry_size)

    def rebuild(self, cols: tuple, size: int | None = None) -> bool:
        """Replace every entry by `cols` (columns as `_parse` returns them), the file then `size`
        bytes long (None: trimmed to the entries; never shorter than them): what a reset, the
        appends and a resize would leave (recovery's rebuild), but the file is read once and only
        what differs is written. An index that survived a crash intact (the usual case) is not
        written at all, but still synced by the next flush. True when the file changed."""
        es = self.entry_size
        new = self._pack(cols)
        n = len(new) // es
        length = max(round_down(size, es) if size is not None else 0, n * es)
        changed = False
        with self._file() as fd:
            old = os.pread(fd, min(self._length, _data_end(fd, self._length)), 0) if self._length else b""
            old = old[:-(-len(old.rstrip(b"\x00")) // es) * es]   # whole entries, zero tail dropped
            if old.startswith(new):
                same = n
            elif new.startswith(old):
                same = len(old) // es
            else:
                same = 0
            if self.writable:
                current = max(self._length, len(new))
                if same < n:
                    os.pwrite(fd, new[same * es:], same * es)
                    changed = True
                if len(old) > len(new):
                    os.ftruncate(fd, len(new))   # zero the stale entries: a crash must not bring them back
                    current = len(new)
                    changed = True
                if current != length:
                    os.ftruncate(fd, length)
                    changed = True
        self._cols = cols
        self._peeked = {}
        self._length = length
        if self.writable:
            # synced at the next flush even when nothing was written: after a crash the bytes read
            # back may be only in the page cache of the process that died
            self._dirty = True
        return changed

    def _pack(self, cols: tuple) -> bytes:
        raise NotImplementedError

    def _write_entry(self, packed: bytes) -> None:
        """Write one entry after the last (called before the columns take it)."""
        check_io(self.path)
        with self._file() as fd:
            os.pwrite(fd, packed, len(self._rel) * self.entry_size)
        self._dirty = True

    def flush(self) -> None:
        """fdatasync when something changed since the last flush (most flushes add no entry);
        any descriptor of the file syncs its data."""
        if self.writable and self._dirty and not self._closed:
            self._dirty = False
            with self._file() as fd:
                fs.fdatasync(fd)

    def rename_to(self, new_path: str) -> None:
        if os.path.exists(self.path):
            fs.replace(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        """Trim to the entries (an index never loaded is untouched: nothing to trim) and close."""
        if not self._closed:
            if self.writable and self._cols is not None:
                self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Stop using the file without trimming (it is about to be deleted)."""
        self._closed = True

    def delete(self) -> bool:
        self.close_handler()
        try:
            fs.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, entries={self.entries})"


class _Descriptor(int):
    """An fd usable as a context manager that closes it."""

    def __enter__(self) -> int:
        return int(self)

    def __exit__(self, *exc) -> None:
        os.close(self)


class OffsetIndex(SparseIndex):
    """Offset -> position index of one segment (see module docstring for the format)."""

    entry_size = ENTRY_SIZE

    def _empty_columns(self) -> tuple:
        return array("i"), array("i")

    def _parse(self, raw: bytes) -> tuple:
        # Drop the all-zero tail of a preallocated file left by a crash (C-speed rstrip).
        n = -(-len(raw.rstrip(b"\x00")) // ENTRY_SIZE)
        pairs = _unpack_column(raw[:n * ENTRY_SIZE], "i")
        return pairs[0::2], pairs[1::2]

    @property
    def _pos(self) -> array:
        return self._columns()[1]

    def _pack(self, cols: tuple) -> bytes:
        rel, pos = cols
        pairs = array("i", bytes(len(rel) * ENTRY_SIZE))
        pairs[0::2] = rel
        pairs[1::2] = pos
        if _LITTLE:
            pairs.byteswap()
        return pairs.tobytes()

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError if the file cannot be this segment's index (reads one entry
        when the index is not loaded)."""
        if self._length % ENTRY_SIZE:
            raise CorruptIndexError(f"Index file {self.path} is corrupt, found {self._length} bytes "
                                    f"which is neither positive nor a multiple of {ENTRY_SIZE}")
        raw = self._peek_entry(-1)
        if raw is not None:
            last_rel, last_pos = _ENTRY.unpack(raw)
        elif self._rel:
            last_rel, last_pos = self._rel[-1], self._pos[-1]
        else:
            return
        if last_rel < 0:
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) has non-zero size "
                                    f"but the last offset is {self.base_offset + last_rel} which is "
                                    f"less than the base offset {self.base_offset}.")
        if last_pos < 0 or (log_size is not None and last_pos >= log_size):
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) points at position "
                                    f"{last_pos}, outside the log ({log_size} bytes).")

    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def last_entry(self) -> tuple[int, int]:
        raw = self._peek_entry(-1)
        if raw is not None:
            rel, pos = _ENTRY.unpack(raw)
            return self.base_offset + rel, pos
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + self._rel[n], self._pos[n]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base, 0)."""
        rel = target_offset - self.base_offset
        if rel < 0 or not self._rel:
            return self.base_offset, 0
        i = bisect_right(self._rel, rel) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= `position`, or -1 (no such entry)."""
        pos = self._pos
        i = bisect_right(pos, position) - 1
        return pos[i] if i >= 0 else -1

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            raise ValueError(f"Attempt to append an offset ({offset}) to position {self.entries} "
                             f"no larger than the last offset appended ({self.last_offset}) to "
                             f"{self.path}.")
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetOverflowError(f"Integer overflow for offset: {offset} ({self.path})")
        if self.is_full():
            raise ValueError(f"Attempt to append to a full index (size = {self.entries}) {self.path}.")
        self._write_entry(_ENTRY.pack(rel, position))
        self._rel.append(rel)
        self._pos.append(position)
