"""kafka-python 3.x against a real broker: every codec it supports, offsets, a restart.

kafka-python enables idempotence by default, so these also go through InitProducerId and the
producer-state sequence checks on every produce.
"""
import time

import kafka.codec
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
DEADLINE_S = 30.0


def keyed(n, prefix="v"):
    return [(f"key-{i % 13}".encode(), f"{prefix}-{i}".encode() * (1 + i % 4),
             [("seq", str(i).encode())]) for i in range(n)]


def produce(bootstrap, topic, messages, **conf):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **conf)
    try:
        futures = [p.send(topic, key=k, value=v, headers=h) for k, v, h in messages]
        p.flush(DEADLINE_S)
        return [f.get(timeout=DEADLINE_S) for f in futures]      # RecordMetadata, in send order
    finally:
        p.close()


def consume(bootstrap, topic, partitions, count):
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in partitions]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                got.extend(records)
    finally:
        c.close()
    assert len(got) == count, f"consumed {len(got)} of {count}"
    return got


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_every_codec_round_trips_keyed_messages(module_broker, codec):
    if codec == "snappy" and not kafka.codec.has_snappy():
        pytest.fail("python-snappy missing: install the test extras (pip install -e '.[test]')")
    topic = f"kp-{codec or 'none'}"
    sent = keyed(200)
    meta = produce(module_broker.bootstrap, topic, sent, compression_type=codec)
    got = consume(module_broker.bootstrap, topic, [0, 1, 2], len(sent))
    by_partition = {}
    for md, (key, value, headers) in zip(meta, sent):   # futures resolve in send order
        by_partition.setdefault(md.partition, []).append((md.offset, key, value, headers))
    assert len(by_partition) > 1
    for partition, expected in by_partition.items():
        msgs = sorted((r for r in got if r.partition == partition), key=lambda r: r.offset)
        assert [o for o, *_ in expected] == list(range(len(expected)))
        assert [(r.offset, r.key, r.value, r.headers) for r in msgs] == expected


def test_list_offsets(module_broker):
    topic = "kp-offsets"
    base = int(time.time() * 1000) - 60_000
    p = KafkaProducer(bootstrap_servers=module_broker.bootstrap, linger_ms=0)
    for i in range(6):
        p.send(topic, key=b"k", value=b"v", partition=1, timestamp_ms=base + i * 1000).get(DEADLINE_S)
    p.close()
    c = KafkaConsumer(bootstrap_servers=module_broker.bootstrap)
    try:
        tp = TopicPartition(topic, 1)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 6}
        found = c.offsets_for_times({tp: base + 2500})[tp]
        assert (found.offset, found.timestamp) == (3, base + 3000)
        assert c.offsets_for_times({tp: base + 10**7})[tp] is None
    finally:
        c.close()


def test_data_survives_sigkill_restart(start_broker):
    b = start_broker(num_partitions=1, offsets_topic_num_partitions=1)
    sent = keyed(150)
    produce(b.bootstrap, "kp-durable", sent, compression_type="gzip")
    b.restart(kill=True)
    got = consume(b.bootstrap, "kp-durable", [0], len(sent))
    assert [(r.offset, r.key, r.value) for r in sorted(got, key=lambda r: r.offset)] == \
           [(i, k, v) for i, (k, v, _) in enumerate(sent)]
