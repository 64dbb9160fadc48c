"""Test harness for the admin handler tests: a real Broker (real LogManager on a tmp dir) without
sockets, driven frame by frame through its Dispatcher, so a test feeds request bytes and reads the
exact response bytes a client would.

Helpers build Kafka encodings for golden bytes: `s16(text)` (int16-length string), `cs(text)`
(compact string, uvarint length + 1), `frame_size(b)`.
"""
from __future__ import annotations

import struct

import pytest

from kompakt.broker.server import Broker
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition


def s16(text: str | None) -> bytes:
    """Non-flexible (nullable) string: int16 length, -1 for null."""
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def cs(text: str | None) -> bytes:
    """Compact (nullable) string: uvarint(length + 1), 0 for null (lengths < 127 here)."""
    if text is None:
        return b"\x00"
    data = text.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


class Harness:
    def __init__(self, tmp_path, **config):
        props = {"log.dirs": str(tmp_path / "data"), "node.id": "1", "log.cleaner.enable": "false",
                 "metrics.port": "0", "listeners": "PLAINTEXT://127.0.0.1:0"}
        props.update(config)
        self.broker = Broker(BrokerConfig(props))
        self.lm = self.broker.log_manager
        self.lm.startup()
        # What Broker.start() would set after binding: the address clients are told.
        self.broker.cluster_id = getattr(self.lm, "cluster_id", None) or "kompakt-test-cluster"
        self.broker.advertised = ("127.0.0.1", 19092)

    async def send(self, frame: bytes) -> bytes:
        """One request frame (no size prefix) in, the framed response bytes out."""
        dispatcher = self.broker.dispatcher
        prepared = dispatcher.prepare(bytearray(frame))
        if isinstance(prepared, (bytes, bytearray)):
            return bytes(prepared)
        ctx, module, request = prepared
        out = await dispatcher.run(ctx, module, request)
        if isinstance(out, list):                # Fetch's zero-copy answer: a list of buffers
            return b"".join(bytes(chunk) for chunk in out)
        return bytes(out)

    async def call(self, request, version: int, correlation_id: int = 1):
        """Encode a kafka-python request object, run it, decode the response object."""
        request.API_VERSION = version
        request.with_header(correlation_id=correlation_id, client_id="test")
        out = await self.send(bytes(request.encode(header=True)))
        from kompakt.protocol import registry
        response_cls = registry.API[request.API_KEY].response
        return response_cls.decode(out[4:], version=version, header=True)

    def create(self, name: str, partitions: int = 1, configs: dict | None = None):
        return self.lm.create_topic(name, partitions, configs or {})

    def append(self, topic: str, partition: int, n: int) -> None:
        log = self.lm.get_log(TopicPartition(topic, partition))
        log.append_as_leader(bytearray(build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)])))
        log.sync_data()   # readable now: the high watermark is the durable offset (group commit)

    def close(self) -> None:
        self.lm.shutdown()


@pytest.fixture
def h(tmp_path):
    """A Harness with default broker config; test modules import this fixture by name."""
    harness = Harness(tmp_path)
    yield harness
    harness.close()
