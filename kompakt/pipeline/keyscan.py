"""Keyed data records of a split as Arrow record batches: what exact compaction groups by key.

Role: the `kompakt` source's `keyed_only` read (jobs/compact.py's input): for every record that
has a key, in a data batch whose transaction did not abort, with an offset within the bounds, the
columns key (binary), offset (int64), batch_base_offset (int64), in offset order. The compiled
seam (kompakt/native/keys.c, km_keys_range) walks whole chunks of the mapped segment and fills
the Arrow buffers itself; compressed batches are decompressed ahead by the cleaner's payload table
(one codec call per batch); everything it hands back (a transactional batch: aborted or not, a
batch its checks refuse, a torn tail) is read here through `reader.iter_chunk_batches`, with the
reader's own error messages. Without the compiled seam the reader's light path gives the same
rows (the reference; tests compare the two).

Invariants: a batch's rows are emitted whole or not at all; offsets ascend; memory is the output
buffers (grown only for a batch larger than them) plus the payload table.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from typing import Iterator

import pyarrow as pa

from kompakt import native
from kompakt.cleaner.payloads import PayloadTable
from kompakt.pipeline import reader as rd

COLUMNS = ("key", "offset", "batch_base_offset")
ARROW = {"key": pa.binary(), "offset": pa.int64(), "batch_base_offset": pa.int64()}
ROWS = 1 << 16
KEY_BYTES = 4 << 20
K_END, K_PYTHON, K_STOP, K_FLUSH, K_PAYLOAD, K_PAYLOAD_ERROR = 0, 2, 3, 4, 6, -4
LONG_MAX = 2**63 - 1


def _lib():
    return native.LIB


def iter_keyed_batches(split: rd.Split, columns, bounds: rd.Bounds | None = None, *,
                       read_committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the keyed data records of `split` (see the module docstring)."""
    unknown = [c for c in columns if c not in ARROW]
    if unknown:
        raise ValueError(f"keyed_only reads the columns {list(COLUMNS)}, not {unknown}")
    bounds = bounds or rd.Bounds()
    lo = bounds.min_offset if bounds.min_offset is not None else -1
    hi = bounds.max_offset if bounds.max_offset is not None else LONG_MAX
    if read_committed and split.last_stable_offset is not None:
        hi = min(hi, split.last_stable_offset - 1)
    schema = pa.schema([(c, ARROW[c]) for c in columns])
    lib = _lib()
    if lib is None or bounds.min_timestamp is not None or bounds.max_timestamp is not None:
        yield from _reference(split, columns, schema, lo, hi)
        return
    out = _Buffers()
    for chunk in split.chunks:
        yield from _scan_chunk(lib, chunk, split.aborted or {}, lo, hi, out, columns, schema)
    if out.rows:
        yield out.take(columns, schema)


def _reference(split, columns, schema, lo: int, hi: int):
    """The reader's light path, filtered to keyed data rows: no compiled code."""
    rows = []
    bounds = rd.Bounds(min_offset=lo if lo >= 0 else None, max_offset=hi if hi < LONG_MAX else None)
    for r in rd.iter_split_records(split, bounds=bounds, light=True):
        if r.key is not None and not r.is_control and not r.is_aborted:
            rows.append((r.key, r.offset, r.batch_base_offset))
            if len(rows) >= ROWS:
                yield _rows_batch(rows, columns, schema)
                rows = []
    if rows:
        yield _rows_batch(rows, columns, schema)


def _rows_batch(rows, columns, schema) -> pa.RecordBatch:
    cols = {"key": [r[0] for r in rows], "offset": [r[1] for r in rows],
            "batch_base_offset": [r[2] for r in rows]}
    return pa.RecordBatch.from_arrays([pa.array(cols[c], ARROW[c]) for c in columns], schema=schema)


class _Buffers:
    """The output columns km_keys_range fills: offsets, batch bases, key offsets (int32), key bytes."""

    def __init__(self, rows: int = ROWS, key_bytes: int = KEY_BYTES):
        self.cap_rows, self.cap_bytes = rows, key_bytes
        self.off = (ctypes.c_int64 * rows)()
        self.base = (ctypes.c_int64 * rows)()
        self.kofs = (ctypes.c_int32 * (rows + 1))()
        self.kdata = ctypes.create_string_buffer(key_bytes)
        self.io = (ctypes.c_int64 * 6)()

    @property
    def rows(self) -> int:
        return self.io[1]

    def grow(self) -> None:
        """Room for a batch larger than the buffers (called only when they are empty)."""
        self.__init__(self.cap_rows * 2, self.cap_bytes * 2)

    def take(self, columns, schema) -> pa.RecordBatch:
        n, nbytes = self.io[1], self.io[2]
        arrays = {
            "offset": lambda: pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(bytes(self.off)[:8 * n])]),
            "batch_base_offset": lambda: pa.Array.from_buffers(
                pa.int64(), n, [None, pa.py_buffer(bytes(self.base)[:8 * n])]),
            "key": lambda: pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(bytes(self.kofs)[:4 * (n + 1)]),
                                                                  pa.py_buffer(self.kdata.raw[:nbytes])]),
        }
        batch = pa.RecordBatch.from_arrays([arrays[c]() for c in columns], schema=schema)
        self.io[1] = self.io[2] = 0
        return batch


class _Map:
    """A chunk's segment mapped copy-on-write (the file is never written), with its address."""

    def __init__(self, path: str, ino: int = -1):
        self.f = rd.find_planned(path, ino)  # the planned file, also if renamed since
        self.size = 0
        self.mm = self.address = self._anchor = None
        try:
            self.size = os.fstat(self.f.fileno()).st_size
            if self.size:
                self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_COPY)
                self._anchor = ctypes.c_char.from_buffer(self.mm)
                self.address = ctypes.addressof(self._anchor)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._anchor = None
        if self.mm is not None:
            self.mm.close()
        self.f.close()


def _scan_chunk(lib, chunk: rd.Chunk, aborted: dict, lo: int, hi: int, out: _Buffers, columns, schema):
    m = _Map(chunk.log_path, chunk.ino)
    tbl = PayloadTable()
    try:
        end = min(chunk.end, m.size)
        io = out.io
        io[0] = chunk.start
        txn_ok = -1
        io[3] = 0
        while io[0] < end:
            rc = lib.km_keys_range(m.address, end, lo, hi, txn_ok, out.off, out.base, out.kofs, out.kdata,
                                   out.cap_rows, out.cap_bytes, tbl.pos, tbl.ptr, tbl.len, tbl.n, io)
            txn_ok = -1
            if rc in (K_END, K_STOP):
                return
            if rc == K_FLUSH:
                if out.rows:
                    yield out.take(columns, schema)
                else:
                    pos, cursor = io[0], io[3]
                    out.grow()
                    io = out.io
                    io[0], io[3] = pos, cursor
                continue
            if rc == K_PAYLOAD:
                tbl.fill(m.mm, end, io[0])
                io[3] = 0
                continue
            # K_PYTHON / K_PAYLOAD_ERROR: the reader reads this batch, with its checks and messages
            pos = io[0]
            h = _reader_header(chunk, pos)
            if h is None:
                return                      # a torn tail of the last segment: a write in progress
            if h.is_transactional and not h.is_control and not rd.is_aborted(aborted, h.producer_id, h.base_offset):
                txn_ok = pos                # a committed (or open) transaction's batch: C reads it
                continue
            if not h.is_transactional and not h.is_control:
                raise rd.CorruptSegmentError(f"corrupt batch in {chunk.log_path} at position {pos} (base offset "
                                             f"{h.base_offset}): its records do not parse or decompress",
                                             chunk.log_path, pos)
            io[0] = pos + h.size            # a control batch or aborted data: no rows
    finally:
        tbl.clear()
        m.close()


def _reader_header(chunk: rd.Chunk, pos: int):
    """The header of the batch at `pos` as the reader sees it (raises its CorruptSegmentError), None
    at a torn tail."""
    batches = rd.iter_chunk_batches(chunk._replace(start=pos))
    try:
        bv = next(batches, None)
        return None if bv is None else bv.header
    finally:
        batches.close()
