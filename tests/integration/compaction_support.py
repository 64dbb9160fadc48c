"""Helpers for the compaction integration tests: produce keyed records, read a partition fully,
poll the admin API, and compare with a model."""
from __future__ import annotations

import json
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap, name, configs, partitions=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name]
    fut.result(30)


def produce(bootstrap, topic, records, partition=0, batch_size=16384):
    """records: [(key bytes, value bytes|None)]; returns [(offset, key, value)] as assigned."""
    out = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                  "batch.size": batch_size})

    def cb(err, msg):
        assert err is None, err
        out.append((msg.offset(), msg.key(), msg.value()))

    for k, v in records:
        p.produce(topic, key=k, value=v, partition=partition, on_delivery=cb)
        p.poll(0)
    assert p.flush(30) == 0
    out.sort()
    return out


def read_partition(bootstrap, topic, partition=0, timeout_s=90.0):
    """Every record of the partition from the beginning up to its high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, low)])
        out = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:   # _PARTITION_EOF
                    if not out or out[-1][0] >= high - 1 or msg.offset() >= high:
                        return out
                    continue
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
            if msg.offset() >= high - 1:
                return out
        raise AssertionError(f"could not read {topic}-{partition} to {high} in {timeout_s}s: {len(out)} records")
    finally:
        c.close()


def admin_get(broker, path):
    with urllib.request.urlopen(f"{broker.metrics_url}{path}", timeout=10) as r:
        return json.loads(r.read())


def cleaner_point(broker, topic, partition=0):
    doc = admin_get(broker, f"/v1/partitions/{topic}/{partition}")
    c = doc.get("cleaner") or {}
    return c.get("cleaner_point", c.get("first_dirty_offset", 0)) or 0


def check_against_model(produced, got):
    """Offsets increase, each record is what was produced at its offset, each key's latest is there."""
    by_offset = {o: (k, v) for o, k, v in produced}
    offs = [o for o, _, _ in got]
    assert offs == sorted(offs) and len(offs) == len(set(offs)), "offsets out of order or duplicated"
    for o, k, v in got:
        assert by_offset[o] == (k, v), f"record at {o} is not what was produced"
    latest = {}
    for o, k, v in produced:
        latest[k] = (o, v)
    present = {o for o in offs}
    for k, (o, v) in latest.items():
        assert o in present, f"latest record of {k!r} (offset {o}) is missing"
