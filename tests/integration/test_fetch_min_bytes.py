"""Fetch's min_bytes never exceeds the bytes the fetch may return, as on Kafka.

Kafka's KafkaApis.handleFetchRequest caps the request's max_bytes by fetch.max.bytes and by the
client's quota window, then takes fetchMinBytes = min(request min_bytes, that cap): a fetch that
could never gather min_bytes within its max_bytes answers as soon as it has its max_bytes' worth
(here: the first batch, by the at-least-one-batch rule), instead of sitting out max_wait_ms with
the records already there. Over TCP against a real broker process, raw wire (wire_support).
"""
from __future__ import annotations

import pytest

from kompakt.protocol.records import build_batch
from wire_support import Wire, create_topics, produce, req, sub

MAX_WAIT_MS = 120_000        # far beyond the socket timeout: a fetch that waits it out fails the test


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port, timeout=30.0)
    yield w
    w.close()


def _fetch(topic: str, *, min_bytes: int, max_bytes: int):
    FT = sub(1, "FetchTopic")
    return req(1, replica_id=-1, max_wait_ms=MAX_WAIT_MS, min_bytes=min_bytes, max_bytes=max_bytes,
               isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
               topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                   partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                   log_start_offset=-1)])])


def test_min_bytes_above_max_bytes_answers_with_what_is_there(wire):
    create_topics(wire, {"minmax": {}})
    assert produce(wire, "minmax", build_batch([(b"k%d" % i, b"v" * 100) for i in range(10)])).error_code == 0
    # 1 MiB wanted, at most 1 KiB allowed: Kafka's fetchMinBytes is 1 KiB, and ~1.3 KiB is there
    fetched = wire.call(_fetch("minmax", min_bytes=1 << 20, max_bytes=1024), 11)
    part = fetched.responses[0].partitions[0]
    assert part.error_code == 0
    assert part.records, "the fetch waited for more than its max_bytes lets it return"
