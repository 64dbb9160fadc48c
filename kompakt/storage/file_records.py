"""A range of whole record batches in a segment file, for sending without reading it (Kafka's FileRecords).

Role: what `LogSegment.read(..., as_file=True)` returns for a large read instead of the bytes:
the file, a position and a size. The Fetch answer carries it in place of the record bytes
(len() is all protocol/codec.py asks of records); a plaintext connection then sends it with
os.sendfile, so the kernel copies page cache to socket and the bytes never pass through Python
(broker/network/direct_send.py). Anything that needs the bytes themselves calls `read()`.

Invariants: the range holds whole batches only, below the high watermark at read time (the
segment walked their headers). It keeps its own duplicate of the segment's descriptor, so a
segment closed, deleted by retention or replaced by the cleaner meanwhile still reads as it
was: the descriptor holds the old inode, and its bytes in [position, position + size) are never
rewritten in place (segments only grow; a cleaned segment is a new file). A file truncated below
the range (recovery after a crash, never under a live reader in one process) shows as a short
read: `read()` raises, and a sender must drop the connection rather than send a short frame.
The descriptor is closed by `close()` or when the object goes away.
"""
from __future__ import annotations

import os
import struct

_BASE = struct.Struct(">q")                # baseOffset at byte 0 of a batch
_LAST_DELTA = struct.Struct(">i")          # lastOffsetDelta at byte 23 of a batch


class FileRecords:
    __slots__ = ("fd", "position", "size", "last_batch", "sent")

    def __init__(self, fd: int, position: int, size: int, last_batch: int):
        """`last_batch`: file position of the last batch in the range (its header is read for
        last_offset / last_base_offset without walking the range)."""
        self.fd = os.dup(fd)
        self.position = position
        self.size = size
        self.last_batch = last_batch
        self.sent = 0                      # bytes of the range a sender has put on the socket

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def read(self, start: int = 0) -> bytes:
        """The bytes of the range from `start` (relative), read from the file."""
        want = self.size - start
        data = os.pread(self.fd, want, self.position + start)
        if len(data) < want:                # truncated under us: see the module docstring
            raise OSError(f"segment file shorter than the range being sent ({len(data)} of {want} bytes)")
        return data

    def first_base_offset(self) -> int:
        return _BASE.unpack(os.pread(self.fd, 8, self.position))[0]

    def last_base_offset(self) -> int:
        return _BASE.unpack(os.pread(self.fd, 8, self.last_batch))[0]

    def last_offset(self) -> int:
        """The last offset of the last batch in the range (baseOffset + lastOffsetDelta)."""
        head = os.pread(self.fd, 27, self.last_batch)
        return _BASE.unpack_from(head, 0)[0] + _LAST_DELTA.unpack_from(head, 23)[0]

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        self.close()

    def __repr__(self) -> str:
        return f"FileRecords(fd={self.fd}, position={self.position}, size={self.size})"
