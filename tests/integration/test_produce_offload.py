"""Produce with validation beside the event loop (storage/validation_pool.py), over TCP to a real
broker whose pool takes every batch of 4 KiB or more (kompakt.produce.validation.offload.bytes=4096,
two threads) whose topics are compacted or recompress (so their large compressed batches need a
codec): the pool's threads do the work (their OS name shows in /proc), and what clients see
is what the in-loop path gives: offsets in arrival order on a connection, idempotent producers
racing on one partition each in sequence, a corrupt batch answered CORRUPT_MESSAGE with the same
message, record errors listed per record, the topic's codec stored after recompression, and the
partitions of a request that mixes large and small batches appended in request order.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import confluent_kafka as ck
import pytest

from broker_process import BrokerProcess
from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode as EC, KafkaError
from kompakt.storage.log_validator import validate_and_assign
from kompakt.storage.validation_pool import THREAD_NAME
from wire_support import Wire, create_topics, end_offset, produce, req

OFFLOAD = 4096


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("offload"), {
        "num.partitions": "1", "offsets.topic.num.partitions": "1",
        "kompakt.produce.validation.threads": "2", "kompakt.produce.validation.offload.bytes": str(OFFLOAD)})
    yield proc.start()
    proc.stop()             # kills it and fails the teardown if it does not stop


@pytest.fixture(scope="module")
def wire(pooled):
    w = Wire(pooled.port)
    # compacted or recompressing topics: their large compressed batches need a codec, so the pool
    # takes them (a batch that needs only its CRC stays on the loop)
    create_topics(w, {"off-order": {"cleanup.policy": "compact"}, "off-racing": {"cleanup.policy": "compact"},
                      "off-compact": {"cleanup.policy": "compact"}, "off-recompress": {"compression.type": "zstd"}})
    create_topics(w, {"off-multi": {"cleanup.policy": "compact"}}, partitions=3)
    yield w
    w.close()


def pool_threads(pid: int) -> int:
    """Threads of the broker process named as the validation pool names its own."""
    return sum(1 for task in Path(f"/proc/{pid}/task").iterdir()
               if Path(task, "comm").read_bytes().strip() == THREAD_NAME)


def values(first: int, n: int) -> list[bytes]:
    """Values of `n` records numbered from `first`: compressible, yet 200 random bytes each, so a
    batch of 50 stays above OFFLOAD in any codec."""
    return [b"%08d" % (first + i) + os.urandom(200) + b"." * 800 for i in range(n)]


def big_batch(first: int, n: int = 50, codec: int = R.COMPRESSION_ZSTD, keys=True) -> bytes:
    now = int(time.time() * 1000)
    data = R.build_batch([(b"k%d" % (first + i) if keys else None, v, None, now)
                          for i, v in enumerate(values(first, n))], compression=codec)
    assert len(data) >= OFFLOAD
    return data


def consume(bootstrap: str, topic: str, n: int, partition: int = 0) -> list:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"off-{topic}", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, partition, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            assert m.error() is None, m.error()
            got.append(m)
    c.close()
    assert len(got) == n
    return got


@pytest.mark.parametrize("codec", [R.COMPRESSION_ZSTD, R.COMPRESSION_LZ4], ids=["zstd", "lz4"])
def test_large_batches_pipelined_on_one_connection_get_offsets_in_arrival_order(pooled, wire, codec):
    before = end_offset(wire, "off-order")
    P = registry.API[0].request.TopicProduceData
    batches = [big_batch(i * 50, codec=codec) for i in range(5)]
    answers = wire.pipeline([(req(0, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P(name="off-order", partition_data=[P.PartitionProduceData(index=0, records=b)])]), 9) for b in batches])
    parts = [a.responses[0].partition_responses[0] for a in answers]
    assert [(p.error_code, p.base_offset) for p in parts] == [(0, before + 50 * i) for i in range(5)]
    assert pool_threads(pooled.pid) >= 1                     # the pool's threads did the checks
    got = consume(pooled.bootstrap, "off-order", before + 250)[before:]
    assert [m.value()[:8] for m in got] == [b"%08d" % i for i in range(250)]
    assert [m.offset() for m in got] == list(range(before, before + 250))


def test_idempotent_producers_racing_on_one_partition_each_stay_in_sequence(pooled):
    # three idempotent producers, batches of ~50 KiB of zstd on a compacted topic, each decompressed
    # and checked on the pool: a reordered
    # append would break a producer's sequence (OUT_OF_ORDER_SEQUENCE_NUMBER fails its delivery)
    n = 1500
    errors: list = []

    def run(name: str) -> None:
        p = ck.Producer({"bootstrap.servers": pooled.bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": "zstd", "linger.ms": 20, "batch.size": 200_000,
                         "max.in.flight.requests.per.connection": 5})
        for i, v in enumerate(values(0, n)):
            p.produce("off-racing", v, name.encode(), on_delivery=lambda err, _m: err and errors.append(err))
            if i % 200 == 0:
                p.poll(0)
        assert p.flush(60) == 0

    threads = [threading.Thread(target=run, args=(f"p{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    got = consume(pooled.bootstrap, "off-racing", 3 * n)
    assert [m.offset() for m in got] == list(range(3 * n))
    for name in (b"p0", b"p1", b"p2"):
        assert [m.value()[:8] for m in got if m.key() == name] == [b"%08d" % i for i in range(n)]


def _expected_error(data: bytes, topic: str, config: LogConfig) -> KafkaError:
    """What the in-loop validation raises for `data` (the answer before the pool existed)."""
    with pytest.raises(KafkaError) as exc:
        validate_and_assign(bytearray(data), next_offset=0, config=config, now_ms=int(time.time() * 1000),
                            topic_partition=f"{topic}-0")
    return exc.value


def test_a_large_batch_with_a_bad_crc_is_corrupt_message_as_on_the_loop(wire):
    bad = bytearray(big_batch(0, codec=R.COMPRESSION_LZ4))         # to be recompressed: on the pool
    bad[-10] ^= 0xFF
    before = end_offset(wire, "off-recompress")
    p = produce(wire, "off-recompress", bytes(bad))
    expected = _expected_error(bad, "off-recompress", LogConfig.from_overrides({"compression.type": "zstd"}))
    assert (p.error_code, p.error_message) == (EC.CORRUPT_MESSAGE, expected.message)
    assert "CRC mismatch" in p.error_message
    assert end_offset(wire, "off-recompress") == before


def test_a_large_batch_that_does_not_decompress_is_corrupt_message_as_on_the_loop(wire):
    # a compacted topic reads every record, so the pool decompresses: a broken zstd frame under a
    # valid CRC is CORRUPT_MESSAGE, with the message the loop gives
    bad = bytearray(big_batch(0))
    bad[R.RECORDS_POS + 4:R.RECORDS_POS + 12] = b"\xff" * 8
    R.rewrite_crc(bad, 0, len(bad))
    before = end_offset(wire, "off-compact")
    p = produce(wire, "off-compact", bytes(bad))
    expected = _expected_error(bad, "off-compact", LogConfig.from_overrides({"cleanup.policy": "compact"}))
    assert (p.error_code, p.error_message) == (EC.CORRUPT_MESSAGE, expected.message)
    assert end_offset(wire, "off-compact") == before


def test_keyless_records_in_a_large_compressed_batch_are_listed_per_record(wire):
    data = R.build_batch([(None if i in (3, 17) else b"k%d" % i, v, None, int(time.time() * 1000))
                          for i, v in enumerate(values(0, 50))], compression=R.COMPRESSION_LZ4)
    assert len(data) >= OFFLOAD
    before = end_offset(wire, "off-compact")
    p = produce(wire, "off-compact", data)
    assert p.error_code == EC.INVALID_RECORD
    assert [e.batch_index for e in p.record_errors] == [3, 17]
    assert end_offset(wire, "off-compact") == before
    assert produce(wire, "off-compact", big_batch(0, codec=R.COMPRESSION_LZ4)).error_code == 0


def test_a_large_batch_is_stored_in_the_topic_codec(pooled, wire):
    first = end_offset(wire, "off-recompress")
    p = produce(wire, "off-recompress", big_batch(0, codec=R.COMPRESSION_LZ4))
    assert (p.error_code, p.base_offset) == (0, first)
    segment = Path(pooled.log_dir, "off-recompress-0", "00000000000000000000.log").read_bytes()
    stored = [h for _, h in R.iter_batches(segment)]
    assert [(h.base_offset, h.compression, h.records_count) for h in stored][-1] == (first, R.COMPRESSION_ZSTD, 50)
    got = consume(pooled.bootstrap, "off-recompress", first + 50)[first:]
    assert [m.value()[:8] for m in got] == [b"%08d" % i for i in range(50)]


def test_a_request_mixing_large_and_small_batches_appends_every_partition(wire):
    P = registry.API[0].request.TopicProduceData
    small = R.build_batch([(b"k", b"v", None, int(time.time() * 1000))])

    def send():
        answer = wire.call(req(0, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            P(name="off-multi", partition_data=[P.PartitionProduceData(index=0, records=big_batch(0)),
                                                P.PartitionProduceData(index=1, records=small),
                                                P.PartitionProduceData(index=2, records=big_batch(0))])]), 9)
        return [(p.index, p.error_code, p.base_offset) for p in answer.responses[0].partition_responses]

    assert send() == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert send() == [(0, 0, 50), (1, 0, 1), (2, 0, 50)]
