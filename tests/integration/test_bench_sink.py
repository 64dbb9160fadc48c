"""The sink broker of `bench_produce_fetch.py --contention` (bench/sink_broker.py) in short: the
real confluent-kafka client creates a topic on it, produces to it and reads back what it
produced, with the offsets a broker would give. The sink's rates are the ceiling the contention
benchmark sets every broker against, so a sink that answered wrongly (a client retrying, or
reading less than it produced) would make that ceiling a fiction."""
from __future__ import annotations

import os
import sys

import confluent_kafka as ck

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_produce_fetch as bench  # noqa: E402


def test_the_client_produces_to_the_sink_and_reads_it_back():
    sink = bench.SinkBroker()
    try:
        bench.create_topic(sink.bootstrap, "s", 2)
        value = b"v" * 1000
        p = ck.Producer({"bootstrap.servers": sink.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": False})
        delivered = []
        for i in range(3000):
            p.produce("s", value, partition=i % 2, on_delivery=lambda err, msg: delivered.append((err, msg.partition(),
                                                                                               msg.offset())))
        assert p.flush(30) == 0
        assert all(err is None for err, _, _ in delivered)
        for partition in (0, 1):        # offsets as a broker counts them: 0..1499 in each partition
            assert sorted(o for _, part, o in delivered if part == partition) == list(range(1500))

        got = _read_back(sink, "s", {0: 1500, 1: 1500}, value)
        for partition in (0, 1):        # from offset 0 on, one offset after another, none past the end
            assert got[partition] == list(range(1500))
        # an unknown topic is refused as a broker does (UNKNOWN_TOPIC_OR_PARTITION in Metadata)
        md = ck.admin.AdminClient({"bootstrap.servers": sink.bootstrap}).list_topics("nope", timeout=10)
        assert md.topics["nope"].error is not None
    finally:
        sink.stop()


def test_partitions_whose_batches_differ_in_size_read_back_exactly():
    """One Fetch answer carries copies of each partition's kept batch, each partition's in its own
    region of the sink's file. Partition 0 keeps a ~300 KB batch (three copies fit a 1 MiB
    answer), partition 1 a ~600 KB one: their regions must not overlap (they did when each
    partition's region started at its slot times its own copies' size, and librdkafka aborted on
    the answer or read records of the other partition)."""
    sink = bench.SinkBroker()
    try:
        bench.create_topic(sink.bootstrap, "u", 2)
        value = b"u" * 1000
        p = ck.Producer({"bootstrap.servers": sink.bootstrap, "acks": "1", "linger.ms": 100,
                         "enable.idempotence": False})
        for _ in range(3):                    # partition 0: three batches of 300 records
            for _ in range(300):
                p.produce("u", value, partition=0)
            assert p.flush(30) == 0
        for _ in range(600):                  # partition 1: one batch of 600
            p.produce("u", value, partition=1)
        assert p.flush(30) == 0
        want = {0: 900, 1: 600}
        assert _read_back(sink, "u", want, value) == {q: list(range(n)) for q, n in want.items()}
    finally:
        sink.stop()


def _read_back(sink, topic: str, want: dict[int, int], value: bytes) -> dict[int, list[int]]:
    """partition -> the offsets an assign()-consumer read from offset 0 until it had `want`
    records of each, every one of them `value`; fails when the sink stops answering."""
    c = ck.Consumer({"bootstrap.servers": sink.bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, q, 0) for q in want])
    got: dict[int, list[int]] = {q: [] for q in want}
    while any(len(got[q]) < n for q, n in want.items()):
        msgs = c.consume(500, 10)
        assert msgs, f"the sink stopped answering at {[len(v) for v in got.values()]} records"
        for m in msgs:
            assert m.error() is None, m.error()
            assert m.value() == value
            got[m.partition()].append(m.offset())
    c.close()
    return got
