"""aiokafka 0.14 against a real broker (non-flexible versions only: Metadata <= 5, Produce <= 7,
Fetch <= 11, ApiVersions <= 2): every codec, offsets, a graceful restart."""
import asyncio
import time

import aiokafka
import pytest
from aiokafka import TopicPartition

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
DEADLINE_S = 30.0


def keyed(n, prefix="v"):
    return [(f"key-{i % 11}".encode(), f"{prefix}-{i}".encode() * (1 + i % 3),
             [("seq", str(i).encode())]) for i in range(n)]


async def produce(bootstrap, topic, messages, **conf):
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **conf)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, headers=h) for k, v, h in messages]
        return [await f for f in futures]
    finally:
        await p.stop()


async def consume(bootstrap, topic, partitions, count):
    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                  enable_auto_commit=False)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=500)).values():
                got.extend(records)
    finally:
        await c.stop()
    assert len(got) == count, f"consumed {len(got)} of {count}"
    return got


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
async def test_every_codec_round_trips_keyed_messages(module_broker, codec):
    topic = f"ak-{codec or 'none'}"
    sent = keyed(200)
    meta = await produce(module_broker.bootstrap, topic, sent, compression_type=codec)
    got = await consume(module_broker.bootstrap, topic, [0, 1, 2], len(sent))
    by_partition = {}
    for md, (key, value, headers) in zip(meta, sent):
        by_partition.setdefault(md.partition, []).append((md.offset, key, value, tuple(headers)))
    assert len(by_partition) > 1
    for partition, expected in by_partition.items():
        msgs = sorted((r for r in got if r.partition == partition), key=lambda r: r.offset)
        assert [o for o, *_ in expected] == list(range(len(expected)))
        assert [(r.offset, r.key, r.value, tuple(r.headers)) for r in msgs] == expected


async def test_list_offsets(module_broker):
    topic = "ak-offsets"
    base = int(time.time() * 1000) - 60_000
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=module_broker.bootstrap)
    await p.start()
    try:
        for i in range(5):
            await p.send_and_wait(topic, b"v", key=b"k", partition=2, timestamp_ms=base + i * 1000)
    finally:
        await p.stop()
    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=module_broker.bootstrap)
    await c.start()
    try:
        tp = TopicPartition(topic, 2)
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: 5}
        found = (await c.offsets_for_times({tp: base + 1500}))[tp]
        assert (found.offset, found.timestamp) == (2, base + 2000)
    finally:
        await c.stop()


async def test_data_survives_graceful_restart(start_broker):
    b = start_broker(num_partitions=1, offsets_topic_num_partitions=1)
    sent = keyed(120)
    await produce(b.bootstrap, "ak-durable", sent, compression_type="zstd")
    await asyncio.to_thread(b.restart)
    got = await consume(b.bootstrap, "ak-durable", [0], len(sent))
    assert [(r.offset, r.value) for r in sorted(got, key=lambda r: r.offset)] == \
           [(i, v) for i, (_, v, _) in enumerate(sent)]
