"""The payload table: decompressed records of the compressed batches ahead of a native range loop.

Role: the compiled range loops (kompakt/native/cleaner.c) keep compressed batches in C but leave
the codecs to Python (the same codec calls as the pure-Python seam, so both write the same bytes).
When a loop meets a compressed batch missing from the table it returns RC_PAYLOAD with the batch's
position; `fill` then decompresses the compressed batches from there on (one codec call each, a
zero-copy view of the mapped segment as input) until MAX_BATCHES or MAX_BYTES of records, and the
loop resumes. Control and transactional batches are skipped (the loops hand those to Python
whole), and so, in pass 1, are batches outside [start, end) of the offsets being mapped.

Invariants: positions in the table ascend; every pointer stays valid until the next `fill` (the
table holds the bytes objects); memory is bounded by MAX_BYTES plus one batch's records. A payload
the codec refuses is entered with length -1 and its error kept: the loop reports RC_PAYLOAD_ERROR
only if it reaches that batch (after its CRC check, like the Python seam), and `error(pos)` is
then raised, so a bad batch past where the clean stops changes nothing.
"""
from __future__ import annotations

import ctypes
import struct

from kompakt.protocol.records import CorruptRecordError, decompress

MAX_BATCHES = 256
MAX_BYTES = 4 << 20
_PEEK = struct.Struct(">qi9xhi")     # baseOffset, batchLength, attributes, lastOffsetDelta
assert _PEEK.size == 27
_CODEC, _CONTROL_OR_TXN = 0x07, 0x30


class PayloadTable:
    def __init__(self):
        self.pos = (ctypes.c_int64 * MAX_BATCHES)()
        self.ptr = (ctypes.c_char_p * MAX_BATCHES)()
        self.len = (ctypes.c_int64 * MAX_BATCHES)()
        self.n = 0
        self._held: list = []
        self._errors: dict[int, Exception] = {}

    def fill(self, mm, size: int, pos: int, start: int | None = None, end: int | None = None) -> None:
        """Decompress the compressed data batches of mm[pos:size] (see the module docstring)."""
        view = memoryview(mm)
        held = []
        errors = {}
        n = total = 0
        try:
            while n < MAX_BATCHES and total < MAX_BYTES and size - pos >= 61:
                base, length, attrs, last_delta = _PEEK.unpack_from(mm, pos)
                bsize = length + 12
                if bsize < 61 or pos + bsize > size:
                    break                       # the loop reports the torn batch itself
                if start is not None and base + last_delta < start:
                    pos += bsize
                    continue
                if end is not None and base >= end:
                    break
                codec = attrs & _CODEC
                if codec and not attrs & _CONTROL_OR_TXN:
                    if bsize == 61:             # an empty batch with the codec bit: no records
                        data = b""
                    else:
                        try:
                            with view[pos + 61:pos + bsize] as chunk:   # released even if kept by a traceback
                                data = decompress(codec, chunk)
                        except CorruptRecordError as exc:
                            data = None
                            errors[pos] = CorruptRecordError(str(exc))
                    self.pos[n] = pos
                    self.ptr[n] = data
                    self.len[n] = -1 if data is None else len(data)
                    held.append(data)
                    n += 1
                    total += len(data or b"")
                pos += bsize
        finally:
            view.release()
        self.n = n
        self._held = held
        self._errors = errors

    def error(self, pos: int) -> Exception:
        return self._errors.get(pos) or CorruptRecordError(f"no payload for the batch at position {pos}")

    def clear(self) -> None:
        self.n = 0
        self._held = []
        self._errors = {}
