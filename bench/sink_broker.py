"""A broker that stores nothing: what a client can do when the broker takes (almost) no CPU.

    python bench/sink_broker.py --port PORT

Role: the third broker of `bench_produce_fetch.py --contention`. Its rates are the client's
ceiling on the same machine under the same load: no broker gets more from that client there, so
a goal of "N times Kafka's rate" can be checked against what is possible at all.

It speaks just enough of the Kafka protocol for confluent-kafka's AdminClient (CreateTopics),
producer and assign()-consumer: ApiVersions (v0-v2), Metadata (v1-v8), CreateTopics (v0-v4),
FindCoordinator (v0-v2: itself), Produce (v3-v8) and Fetch (v4-v11), plaintext, one node. Produce
is answered at once with success; per partition it keeps only the count of records (the high
watermark) and the largest batch it saw. Fetch answers with copies of that batch up to the high
watermark, their base offsets moved on (a batch's CRC does not cover its base offset), sent with
sendfile(2) from a file, as a zero-copy broker sends page-cached segments; a fetch with nothing to
send waits its max_wait_ms (at most 0.5 s), as a broker's long poll does.

One blocking thread per connection, so answers leave in request order; librdkafka has one fetch
in flight per connection, so a connection's file region of a partition is patched in place for
each answer after the last one left. Framing is Kompakt's FrameReader; encoders are Kompakt's
(kompakt.protocol.codec), hand-written layouts where none fits. Not a test double of Kompakt: a
measuring instrument, used only by the benchmarks.
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kompakt.protocol import codec                   # noqa: E402 - after the path set-up above
from kompakt.protocol.framing import FrameReader     # noqa: E402
from kompakt.protocol.framing import frame as framed  # noqa: E402

API_RANGES = [(0, 3, 8), (1, 4, 11), (3, 1, 8), (10, 0, 2), (18, 0, 2), (19, 0, 4)]
RECORDS_COUNT_AT = 57                                # a v2 batch's int32 record count
NULL_OPS = -2147483648                               # authorized operations: not asked


class SinkState:
    """What the sink keeps, shared by its connection threads."""

    def __init__(self, port: int):
        self.port = port
        self.lock = threading.Lock()
        self.topics: dict[str, int] = {}                            # name -> partitions
        self.high_watermark: dict[tuple[str, int], int] = {}
        self.batch: dict[tuple[str, int], tuple[bytes, int]] = {}   # -> (the largest batch, its records)


class SinkConnection:
    def __init__(self, conn: socket.socket, state: SinkState):
        self.conn = conn
        self.state = state
        self.fetch_fd = -1                           # this connection's file of fetch answers' batches
        self.written: dict[int, tuple[bytes, int, int]] = {}   # slot -> (batch, copies, where) written

    def serve(self) -> None:
        reader = FrameReader()
        conn = self.conn
        try:
            while True:
                view = reader.get_buffer(-1)
                n = conn.recv_into(view)
                if not n:
                    return
                reader.buffer_updated(n)
                while (frame := reader.next_frame()) is not None:
                    self._send(self.answer(frame))
                    reader.recycle(frame)
        except OSError:
            return
        finally:
            conn.close()
            if self.fetch_fd >= 0:
                os.close(self.fetch_fd)

    def _send(self, parts) -> None:
        for part in parts:
            if type(part) is _Range:
                off, left = part.offset, part.length
                while left:
                    n = os.sendfile(self.conn.fileno(), self.fetch_fd, off, left)
                    off, left = off + n, left - n
            else:
                self.conn.sendall(part)

    def answer(self, frame) -> list:
        header = codec.read_request_header(frame)
        key, version, corr = header.api_key, header.api_version, header.correlation_id
        if key == 18:
            if version > 2:                          # answered in v0's layout: the client retries lower
                return [codec.encode_api_versions_error(corr, 35, API_RANGES)]
            body = codec.encode_api_versions_error(corr, 0, API_RANGES)
            return [body if version == 0 else framed(body[4:] + struct.pack(">i", 0))]
        if key == 0:
            return self._produce(header, frame)
        request = codec.decode_request(header, frame)
        if key == 1:
            return self._fetch(header, request)
        if key == 3:
            return [framed(self._metadata(corr, version, request))]
        if key == 19:
            return [framed(self._create_topics(corr, version, request))]
        if key == 10:
            out = struct.pack(">i", corr)
            if version >= 1:
                out += struct.pack(">ihh", 0, 0, -1)     # throttle, error, message: null
            else:
                out += struct.pack(">h", 0)
            return [framed(out + struct.pack(">i", 0) + _string("127.0.0.1") + struct.pack(">i", self.state.port))]
        raise SystemExit(f"sink broker: no answer for {header}")

    def _produce(self, header, frame) -> list:
        request = codec.decode_produce(header, frame)
        state = self.state
        topics = []
        with state.lock:
            for topic in request.topics:
                parts = []
                for index, records in topic.partitions:
                    tp = (topic.name, index)
                    count = 0
                    if records is not None and len(records) > RECORDS_COUNT_AT + 4:
                        count = struct.unpack_from(">i", records, RECORDS_COUNT_AT)[0]
                        length = struct.unpack_from(">i", records, 8)[0] + 12      # its first batch
                        kept = state.batch.get(tp)
                        if kept is None or len(kept[0]) < length:
                            # the largest batch yet: fetch answers replay it (a client's first
                            # batches are small, its later ones as large as the flood makes them)
                            state.batch[tp] = (bytes(records[:length]), count)
                    base = state.high_watermark.get(tp, 0)
                    state.high_watermark[tp] = base + count
                    parts.append((index, 0, base, -1, 0, None))
                topics.append((topic.name, None, parts))
        if request.acks == 0:
            return []
        return [codec.encode_produce_response(header.correlation_id, header.api_version, topics)]

    def _fetch(self, header, request) -> list:
        results, slot, at = [], 0, 0
        if all(p.fetch_offset >= self.state.high_watermark.get((t.topic, p.partition), 0)
               for t in request.topics for p in t.partitions):
            # nothing to send: wait as a broker's long poll does (max_wait_ms), not answer at once
            # (the client would ask again in a busy loop); nothing arrives meanwhile in a benchmark
            time.sleep(min(request.max_wait_ms, 500) / 1000.0)
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                hw = self.state.high_watermark.get(tp, 0)
                records = b""                  # (None is a null MessageSet: librdkafka refuses it)
                if p.fetch_offset < hw and tp in self.state.batch:
                    records = self._records(slot, at, self.state.batch[tp], p.fetch_offset, hw,
                                            min(p.partition_max_bytes, request.max_bytes))
                    slot += 1
                    at += len(records)
                parts.append(codec.FetchPartitionResult(p.partition, 0, high_watermark=hw, last_stable_offset=hw,
                                                        log_start_offset=0, records=records))
            results.append(codec.FetchTopicResult(topic.topic, None, parts))
        return codec.encode_fetch_response(header.correlation_id, header.api_version, results)

    def _records(self, slot: int, start: int, kept: tuple[bytes, int], offset: int, hw: int,
                 max_bytes: int) -> "_Range":
        """Copies of the partition's kept batch from `offset` on, up to max_bytes and the high
        watermark, in the file from `start` on (where the answer's partitions before it end: the
        regions of one answer never overlap, whatever each partition's batch size). The copies
        are written again unless this slot's last ones were the same, at the same place."""
        batch, count = kept
        most = max(1, max_bytes // len(batch))
        k = max(1, min(most, -(-(hw - offset) // count)))
        if self.fetch_fd < 0:
            self.fetch_fd, path = tempfile.mkstemp(prefix="kompakt-sink-")
            os.unlink(path)
        if self.written.get(slot) != (batch, k, start):
            os.pwrite(self.fetch_fd, batch * k, start)
            self.written[slot] = (batch, k, start)
        for i in range(k):
            # the last copy ends at the high watermark (a broker's log holds nothing past it): it
            # may start below `offset`, whose records the client skips, as in a compacted log
            base = max(0, min(offset + i * count, hw - count))
            os.pwrite(self.fetch_fd, struct.pack(">q", base), start + i * len(batch))
        return _Range(start, k * len(batch))

    def _metadata(self, corr: int, version: int, request) -> bytes:
        state = self.state
        out = bytearray(struct.pack(">i", corr))
        if version >= 3:
            out += struct.pack(">i", 0)              # throttle
        out += struct.pack(">ii", 1, 0) + _string("127.0.0.1") + struct.pack(">ih", state.port, -1)   # rack null
        if version >= 2:
            out += _string("sink")                   # cluster id
        out += struct.pack(">i", 0)                  # controller
        with state.lock:
            names = [t.name for t in request.topics] if request.topics is not None else list(state.topics)
            counts = [state.topics.get(name, 0) for name in names]
        out += struct.pack(">i", len(names))
        for name, n in zip(names, counts):
            out += struct.pack(">h", 0 if n else 3) + _string(name) + b"\x00" + struct.pack(">i", n)
            for p in range(n):
                out += struct.pack(">hii", 0, p, 0)
                if version >= 7:
                    out += struct.pack(">i", 0)      # leader epoch
                out += struct.pack(">iiii", 1, 0, 1, 0)   # replicas [0], isr [0]
                if version >= 5:
                    out += struct.pack(">i", 0)      # offline replicas: none
            if version >= 8:
                out += struct.pack(">i", NULL_OPS)
        if version >= 8:
            out += struct.pack(">i", NULL_OPS)
        return bytes(out)

    def _create_topics(self, corr: int, version: int, request) -> bytes:
        out = bytearray(struct.pack(">i", corr))
        if version >= 2:
            out += struct.pack(">i", 0)              # throttle
        out += struct.pack(">i", len(request.topics))
        with self.state.lock:
            for t in request.topics:
                code = 36 if t.name in self.state.topics else 0    # TOPIC_ALREADY_EXISTS
                if not code:
                    self.state.topics[t.name] = t.num_partitions if t.num_partitions > 0 else 1
                out += _string(t.name) + struct.pack(">h", code)
                if version >= 1:
                    out += struct.pack(">h", -1)     # error message: null
        return bytes(out)


class _Range:
    """A range of a connection's batches file, in place of record bytes in an answer's parts."""
    __slots__ = ("offset", "length")

    def __init__(self, offset: int, length: int):
        self.offset, self.length = offset, length

    def __len__(self) -> int:
        return self.length


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def serve(port: int) -> None:
    """Listen on 127.0.0.1:`port` and serve each connection on a thread of its own, forever."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(128)
    state = SinkState(ls.getsockname()[1])
    print(f"sink broker listening on 127.0.0.1:{state.port}", flush=True)
    while True:
        conn, _ = ls.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=SinkConnection(conn, state).serve, daemon=True).start()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    serve(ap.parse_args().port)
