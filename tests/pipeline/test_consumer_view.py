"""The `kompakt` data source against what a Kafka consumer reads from the same log, record by
record: a real broker, confluent-kafka producers (every codec in one segment, headers with null
values and repeated keys, null keys, tombstones, committed / aborted / still open transactions)
and DeleteRecords; confluent-kafka consumers in both isolation levels are the reference."""
from __future__ import annotations

import struct
import time

import pytest

from .conftest import stream_once

pytestmark = pytest.mark.spark
TOPIC = "cv"
DELETED_BELOW = 7


def _consume(bootstrap, isolation, topic=TOPIC):
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            break
        out.append((m.offset(), m.key(), m.value(), [tuple(h) for h in m.headers() or []],
                    m.timestamp()[0], m.timestamp()[1]))
    c.close()
    return out


def _consume_kafka_python(bootstrap, isolation):
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level=isolation)
    c.assign([tp])
    end = c.end_offsets([tp])[tp]
    out = []
    deadline = time.monotonic() + 60
    while c.position(tp) < end and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=500).values():
            out += [(m.offset, m.key, m.value, [tuple(h) for h in m.headers], m.timestamp_type + 1, m.timestamp)
                    for m in msgs]
    c.close()
    return out


def _produce_everything(bootstrap):
    from confluent_kafka import Producer

    # a LogAppendTime topic: rows carry the batch's max timestamp, as consumers see it
    for codec in ("gzip", "snappy", "lz4", "zstd", "none"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
        p.produce(TOPIC + "-la", partition=0, key=b"a", value=codec.encode(), timestamp=5)
        assert p.flush(30) == 0
    for codec in ("gzip", "snappy", "lz4", "zstd", "none"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(4):
            p.produce(TOPIC, partition=0, key=None if i == 2 else b"k%d" % (i % 2),
                      value=None if i == 3 else b"%s-%d" % (codec.encode(), i),
                      headers=[("h", None), ("h", b"2"), ("e", b"")] if i == 1 else None)
        assert p.flush(30) == 0

    def txn_producer(tid):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
        p.init_transactions(30)
        return p

    t = txn_producer("cv-1")
    t.begin_transaction()
    t.produce(TOPIC, partition=0, key=b"c", value=b"committed")
    t.commit_transaction(30)
    t.begin_transaction()
    t.produce(TOPIC, partition=0, key=b"a", value=b"aborted")
    t.flush(30)
    t.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(TOPIC, partition=0, key=b"p", value=b"before the open transaction")
    assert plain.flush(30) == 0
    still_open = txn_producer("cv-2")
    still_open.begin_transaction()
    still_open.produce(TOPIC, partition=0, key=b"o", value=b"open")
    still_open.flush(30)
    plain.produce(TOPIC, partition=0, key=b"p", value=b"past the LSO")
    assert plain.flush(30) == 0
    return still_open


def test_rows_are_what_a_consumer_reads_in_both_isolation_levels(spark, start_broker):
    """Also: transaction markers are rows only with include_control=true (count() = a consumer's)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = start_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, 1, 1, config={"internal.segment.bytes": "1200"}),
                                    NewTopic(TOPIC + "-la", 1, 1, config={"message.timestamp.type": "LogAppendTime"})
                                    ]).values():
        fut.result(30)
    still_open = _produce_everything(b.bootstrap)
    for fut in admin.delete_records([TopicPartition(TOPIC, 0, DELETED_BELOW)]).values():
        fut.result(30)
    expected = {iso: _consume(b.bootstrap, iso) for iso in ("read_uncommitted", "read_committed")}
    for iso, want in expected.items():  # kafka-python 3 reads the same
        assert _consume_kafka_python(b.bootstrap, iso) == want, iso
    log_append = _consume(b.bootstrap, "read_uncommitted", TOPIC + "-la")
    assert len(log_append) == 5 and {ts_type for *_, ts_type, _ in log_append} == {2}
    assert expected["read_uncommitted"][0][0] == DELETED_BELOW
    assert len(expected["read_committed"]) < len(expected["read_uncommitted"])
    wm = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
    _, end = wm.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    wm.close()
    # the offsets no consumer returns between the log start and the end are the two markers
    markers = sorted(set(range(DELETED_BELOW, end)) - {o for o, *_ in expected["read_uncommitted"]})
    assert len(markers) == 2, markers
    b.stop()  # checkpoints the log start offset (the broker also does so periodically)
    del still_open
    for iso, want in expected.items():
        # the default: control records are never rows (issue 10), so count() is a consumer's count
        df = spark.read.format("kompakt").option("isolation", iso).load(b.log_dir).where(f"topic = '{TOPIC}'")
        assert df.count() == len(want), iso
        got = [(r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers], r.timestamp_type + 1, r.timestamp)
               for r in df.orderBy("offset").collect()]
        assert got == want, iso
        assert df.where("is_control").count() == 0, iso
        # include_control=true: the COMMIT then ABORT marker (key: version 0, type 1 / 0) come back,
        # in both isolation levels (both are below the open transaction's first offset, the LSO)
        opted = (spark.read.format("kompakt").option("isolation", iso).option("include_control", "true")
                 .load(b.log_dir).where(f"topic = '{TOPIC}'"))
        assert opted.count() == len(want) + 2, iso
        assert [(r.offset, r.key) for r in opted.where("is_control").orderBy("offset").collect()] == [
            (markers[0], struct.pack(">hh", 0, 1)), (markers[1], struct.pack(">hh", 0, 0))], iso
        assert sorted(r.offset for r in opted.where("NOT is_control").collect()) == [o for o, *_ in want], iso
    df = spark.read.format("kompakt").load(b.log_dir).where(f"topic = '{TOPIC}-la'")
    assert [(r.offset, r.key, r.value, [], r.timestamp_type + 1, r.timestamp)
            for r in df.orderBy("offset").collect()] == log_append


def test_a_stream_resuming_below_the_log_start_reads_from_the_log_start(spark, start_broker, tmp_path):
    # retention or DeleteRecords moved the log start past the checkpointed offset between two runs:
    # the records from the log start on are still there for any consumer; the stream's consumer
    # reset to the latest offset on OFFSET_OUT_OF_RANGE and skipped them
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = start_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("st", 1, 1)])["st"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})

    def produce(lo, hi):
        for i in range(lo, hi):
            p.produce("st", partition=0, key=b"k", value=b"v%d" % i)
        assert p.flush(30) == 0

    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run_once():
        stream_once(spark, b.bootstrap, "st", out, ckpt)

    produce(0, 10)
    run_once()
    produce(10, 20)
    for fut in admin.delete_records([TopicPartition("st", 0, 15)]).values():
        fut.result(30)
    run_once()
    assert sorted(r.offset for r in spark.read.parquet(out).collect()) == list(range(10)) + list(range(15, 20))
