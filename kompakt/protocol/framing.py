"""Kafka request framing: a 4-byte big-endian size prefix, then that many bytes of request.

Role: turn a TCP byte stream into whole request frames, sans-io. The connection hands us the
socket's bytes (`feed`), or lets the event loop read straight into our buffer
(`get_buffer`/`buffer_updated`, the `asyncio.BufferedProtocol` shape); `next_frame()` pops each
complete frame.

Wire format (every request on a connection):

    offset  size  field
    0       4     int32 size    -- bytes that follow; 0 <= size <= socket.request.max.bytes
    4       size  request       -- request header + body (see codec.py)

Buffers: small frames accumulate in one reused `bytearray` (made at the first read, so the
thousands of idle connections a broker may hold cost no buffer) and are copied out (a small copy beats
keeping the shared buffer pinned by a handler still working on it). A frame larger than
`LARGE_FRAME` is read directly into a buffer of its own, handed out as a writable `memoryview` of
exactly `size` bytes: a 1 MiB produce request is read once and never copied again; the records go
to storage as views into it. When its request is answered the connection gives that buffer back
(`recycle`) and the next large frame reuses it: no fresh megabyte (and its page faults) per
produce request. At most `MAX_SPARES` buffers of at most `MAX_SPARE_BYTES` are kept.

Request memory (Kafka's memory pool, queued.max.request.bytes): a large frame's own buffer is made
only once `admit_large(size)` (given by the caller; None admits everything) says yes; while it
says no, the size prefix stays unconsumed, nothing is made and `next_frame` returns None - the
caller stops reading the socket until memory is freed, then calls `next_frame` again, which asks
again. Small frames live in the shared buffer, which exists anyway; the caller accounts for them
once complete.

Invariants: a frame handed out holds exactly one request (no size prefix) and is never touched by
the reader again until the caller recycles it, after which the caller must not use it or views
of it. A size < 0 or > max_bytes raises `InvalidFrameError` before any of the frame is buffered;
the caller closes the connection (Kafka's InvalidReceiveException), and the reader must not be
used afterwards.
"""
from __future__ import annotations

import struct

SIZE = struct.Struct(">i")
assert SIZE.size == 4

LARGE_FRAME = 64 * 1024          # frames above this get their own buffer
INITIAL_BUFFER = 32 * 1024       # the shared buffer, made at the first read; grows for a burst of small frames
MIN_READ = 16 * 1024             # never offer the loop less room than this
MAX_SPARES = 2                   # recycled large-frame buffers kept per connection
MAX_SPARE_BYTES = 16 * 1024 * 1024


class InvalidFrameError(Exception):
    """A size prefix out of range; the connection must be closed."""


class FrameReader:
    """Accumulates stream bytes and yields complete frames (payload without the size prefix)."""

    __slots__ = ("max_bytes", "admit_large", "_initial", "_buf", "_view", "_start", "_end", "_large", "_large_view",
                 "_large_fill", "_spares")

    def __init__(self, max_bytes: int = 104857600, initial: int = INITIAL_BUFFER, admit_large=None):
        self.max_bytes = max_bytes
        self.admit_large = admit_large   # (size) -> bool, asked before a large frame's buffer is made
        self._initial = initial
        self._buf = bytearray()          # allocated on the first read: an idle connection holds none
        self._view = memoryview(self._buf)
        self._start = 0      # first unconsumed byte
        self._end = 0        # end of received bytes
        self._large: bytearray | None = None   # frame being filled in place
        self._large_view: memoryview | None = None
        self._large_fill = 0
        self._spares: list[bytearray] = []

    # -- BufferedProtocol side ---------------------------------------------------------------
    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Writable room for the next read: the rest of a large frame, or the shared buffer's tail."""
        if self._large is not None:
            return self._large_view[self._large_fill:]
        if not self._buf:
            self._buf = bytearray(self._initial)
            self._view = memoryview(self._buf)
        if self._start == self._end:
            self._start = self._end = 0
        room = len(self._buf) - self._end
        if room < MIN_READ:
            self._compact(MIN_READ)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None:
            self._large_fill += nbytes
        else:
            self._end += nbytes

    # -- Protocol / test side ----------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in (for `asyncio.Protocol.data_received` and tests)."""
        data = memoryview(data)
        while len(data):
            dest = self.get_buffer(len(data))
            n = min(len(dest), len(data))
            dest[:n] = data[:n]
            self.buffer_updated(n)
            data = data[n:]

    # -- frames ---------------------------------------------------------------------------------
    def next_frame(self) -> bytearray | None:
        """The next complete frame, or None until more bytes arrive. Raises InvalidFrameError."""
        if self._large is not None:
            if self._large_fill < len(self._large_view):
                return None
            frame = self._large_view
            self._large = self._large_view = None
            self._large_fill = 0
            return frame
        avail = self._end - self._start
        if avail < 4:
            return None
        (size,) = SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > self.max_bytes:
            raise InvalidFrameError(
                f"Invalid receive (size = {size}; socket.request.max.bytes = {self.max_bytes})")
        body = self._start + 4
        if avail - 4 >= size:
            frame = self._buf[body:body + size]
            self._start = body + size
            return frame
        if size > LARGE_FRAME:
            # give the frame its own buffer (once there is memory for it) and move what we
            # already have into it
            admit = self.admit_large
            if admit is not None and not admit(size):
                return None
            have = avail - 4
            buf = self._spare(size)
            view = memoryview(buf)[:size]
            view[:have] = self._view[body:self._end]
            self._start = self._end = 0
            self._large, self._large_view, self._large_fill = buf, view, have
            return None
        if body + size > len(self._buf):
            self._compact(size + 4)
        return None

    def _spare(self, size: int) -> bytearray:
        """The smallest recycled buffer that holds `size` bytes, else a new one."""
        fits = [b for b in self._spares if len(b) >= size]
        if not fits:
            return bytearray(size)
        best = min(fits, key=len)
        self._spares.remove(best)
        return best

    def recycle(self, frame) -> None:
        """Take back a large frame's buffer once its request is done (no-op for small frames)."""
        if not isinstance(frame, memoryview):
            return
        buf = frame.obj
        if (isinstance(buf, bytearray) and buf is not self._buf and LARGE_FRAME < len(buf) <= MAX_SPARE_BYTES
                and len(self._spares) < MAX_SPARES and all(b is not buf for b in self._spares)):
            self._spares.append(buf)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as frames."""
        return (self._end - self._start) + self._large_fill

    def _compact(self, need: int) -> None:
        """Move unconsumed bytes to the front, growing the buffer if `need` bytes still won't fit."""
        pending = self._end - self._start
        if pending + need > len(self._buf):
            new = bytearray(max(len(self._buf) * 2, pending + need))
            new[:pending] = self._view[self._start:self._end]
            self._buf, self._view = new, memoryview(new)
        elif self._start:
            self._buf[:pending] = self._view[self._start:self._end]
        self._start, self._end = 0, pending


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix `payload` with its size (tests and clients of our own)."""
    return SIZE.pack(len(payload)) + bytes(payload)
