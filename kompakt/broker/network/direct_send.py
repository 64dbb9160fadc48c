"""Zero-copy output: a connection's answers written on its socket by us, file ranges with sendfile.

Role: a Fetch answer on a plaintext connection carries storage FileRecords (ranges of segment
files) in place of record bytes. The event loop's transports cannot send a file (uvloop has no
native loop.sendfile; asyncio's falls back to reading the file through Python), so while such an
answer goes out the connection writes its socket itself: the buffers before, between and after
the ranges with sendmsg (MSG_MORE while a range follows, so a partition's header and its records
share packets), each range with os.sendfile from the segment's page cache to the socket, no
Python buffer and no copy in user space. Kafka sends fetches the same way (FileRecords.writeTo,
FileChannel.transferTo).

Invariants (broker/network/connection.py keeps them):
  * bytes never interleave: a DirectSender starts only when the transport's write buffer is empty,
    and while it holds anything every later answer of the connection goes through it, in order;
    the transport gets nothing until it has drained;
  * back-pressure: when the socket is full (EAGAIN) the sender waits for it to become writable
    (a writer callback on a duplicate of the socket's descriptor: the loop refuses callbacks on a
    descriptor its transport owns) and `blocked` is true, which pauses reading the connection just
    as the transport's pause_writing does;
  * the duplicate descriptor and every FileRecords' descriptor are closed when the sender drains,
    fails or is closed (`close`), so the socket shuts when the transport closes it;
  * a failure (peer gone, a segment file shorter than its range) calls `on_failed`: the
    connection is aborted, since a frame cut short cannot be finished any other way.
"""
from __future__ import annotations

import collections
import os
import socket

from kompakt.storage.file_records import FileRecords

MAX_IOV = 64                               # buffers per sendmsg (Linux allows 1024)


class DirectSender:
    __slots__ = ("queue", "sock", "fd", "loop", "blocked", "on_blocked", "on_drained", "on_failed")

    def __init__(self, loop, fd: int, on_blocked, on_drained, on_failed):
        """`fd`: the connection's socket (a duplicate is taken; the transport keeps the original)."""
        self.sock = socket.socket(fileno=os.dup(fd))
        self.sock.setblocking(False)         # (shares the transport's file status: already so)
        self.fd = self.sock.fileno()
        self.loop = loop
        self.queue: collections.deque = collections.deque()
        self.blocked = False
        self.on_blocked = on_blocked        # called when the socket filled up (reading should pause)
        self.on_drained = on_drained        # called once everything was sent (the sender is closed)
        self.on_failed = on_failed          # called with the OSError (the sender is closed)

    def send(self, buffers) -> None:
        """Queue `buffers` (bytes-like and FileRecords, in order) and send what the socket takes."""
        self.queue.extend(buffers)
        if not self.blocked:
            self._pump()

    def _pump(self) -> None:
        try:
            self._send_all()
        except BlockingIOError:
            if not self.blocked:
                self.blocked = True
                self.loop.add_writer(self.fd, self._pump)
                self.on_blocked()
            return
        except OSError as exc:
            self.close()
            self.on_failed(exc)
            return
        self.close()
        self.on_drained()

    def _send_all(self) -> None:
        """Send the queue until it is empty (returns) or the socket is full (BlockingIOError)."""
        queue, sock, fd = self.queue, self.sock, self.fd
        while queue:
            head = queue[0]
            if type(head) is FileRecords:
                n = os.sendfile(fd, head.fd, head.position + head.sent, head.size - head.sent)
                if n == 0:
                    raise OSError(f"segment file shorter than the range being sent ({head.sent} of {head.size} bytes)")
                head.sent += n
                if head.sent == head.size:
                    queue.popleft()
                    head.close()
                continue
            batch = []
            for b in queue:
                if type(b) is FileRecords or len(batch) == MAX_IOV:
                    break
                batch.append(b)
            n = sock.sendmsg(batch, (), socket.MSG_MORE if len(batch) < len(queue) else 0)
            while queue and type(queue[0]) is not FileRecords and len(queue[0]) <= n:
                n -= len(queue.popleft())
            if n:
                queue[0] = memoryview(queue[0]).cast("B")[n:]

    def close(self) -> None:
        """Stop: unregister, close the duplicate descriptor and the queued ranges' descriptors."""
        if self.blocked:
            self.blocked = False
            self.loop.remove_writer(self.fd)
        for b in self.queue:
            if type(b) is FileRecords:
                b.close()
        self.queue.clear()
        if self.fd >= 0:
            self.fd = -1
            self.sock.close()
