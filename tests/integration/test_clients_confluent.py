"""confluent-kafka (librdkafka) against a real broker: every codec, offsets, restarts."""
import time

import confluent_kafka as ck
import pytest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
DEADLINE_S = 30.0


def produce(bootstrap, topic, messages, **conf):
    """Produce (key, value, headers[, partition]) tuples; returns delivery reports in order."""
    reports = []

    def on_delivery(err, msg):
        assert err is None, err
        reports.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})
    for m in messages:
        key, value, headers = m[:3]
        kwargs = {"partition": m[3]} if len(m) > 3 else {}
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery, **kwargs)
    assert p.flush(DEADLINE_S) == 0
    assert len(reports) == len(messages)
    return reports


def consume(bootstrap, topic, partitions, count):
    """Read `count` messages from offset 0 of each partition; returns {partition: [msg]}."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    got: dict[int, list] = {p: [] for p in partitions}
    deadline = time.monotonic() + DEADLINE_S
    n = 0
    try:
        while n < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg)
            n += 1
    finally:
        c.close()
    assert n == count, f"consumed {n} of {count} messages"
    return got


def keyed(n, prefix="v"):
    return [(f"key-{i % 17}".encode(), f"{prefix}-{i}".encode() * (1 + i % 5),
             [("seq", str(i).encode()), ("codec", b"x")]) for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_keyed_messages(module_broker, codec):
    topic = f"ck-{codec}"
    sent = keyed(300)
    reports = produce(module_broker.bootstrap, topic, sent, **{"compression.type": codec})
    got = consume(module_broker.bootstrap, topic, [0, 1, 2], len(sent))
    index_of = {value: i for i, (_, value, _) in enumerate(sent)}
    by_partition: dict[int, list] = {}
    for partition, offset, key, value in sorted(reports):
        by_partition.setdefault(partition, []).append((offset, index_of[value]))
    assert len(by_partition) > 1, "keys should spread over partitions"
    for partition, expected in by_partition.items():
        order = [i for _, i in expected]
        assert order == sorted(order), "a partition keeps produce order"
        msgs = got[partition]
        # offsets dense from 0, and each offset holds the message the delivery report named
        assert [m.offset() for m in msgs] == list(range(len(expected)))
        assert [(m.offset(), m.key(), m.value(), m.headers()) for m in msgs] == \
               [(o, sent[i][0], sent[i][1], sent[i][2]) for o, i in expected]


def test_list_offsets_earliest_latest_and_by_time(module_broker):
    topic = "ck-offsets"
    base = int(time.time() * 1000) - 60_000
    msgs = [(b"k", f"v{i}".encode(), None, 0) for i in range(10)]
    p = ck.Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 0})
    for i, (k, v, _, part) in enumerate(msgs):
        p.produce(topic, key=k, value=v, partition=part, timestamp=base + i * 1000)
        p.flush(DEADLINE_S)                       # one batch per message: one timestamp each
    c = ck.Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "ck-offsets"})
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10) == (0, 10)
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 1), timeout=10) == (0, 0)
        # one partition per call: librdkafka merges duplicate partitions of one request
        for ts, offset in [(base + 3500, 4), (base, 0), (base + 9000, 9), (base + 10**7, -1)]:
            [found] = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=10)
            assert (ts, found.offset) == (ts, offset)
    finally:
        c.close()


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_data_survives_restart(start_broker, kill):
    b = start_broker(num_partitions=2, offsets_topic_num_partitions=1)
    first = keyed(400, "before")
    produce(b.bootstrap, "durable", first, **{"compression.type": "lz4"})
    b.restart(kill=kill)
    got = consume(b.bootstrap, "durable", [0, 1], len(first))
    assert sorted(m.value() for ms in got.values() for m in ms) == sorted(v for _, v, _ in first)
    # appends continue at the old log end offsets
    ends = {p: len(ms) for p, ms in got.items()}
    reports = produce(b.bootstrap, "durable", [(b"x", b"after", None, 0), (b"y", b"after", None, 1)])
    assert sorted((p, o) for p, o, _, _ in reports) == [(0, ends[0]), (1, ends[1])]
    # a graceful stop leaves the clean-shutdown marker: no recovery scan on the way back up
    restart_log = b.log_text().split("===== start #2")[1]
    assert ("skipping recovery of" in restart_log) is not kill, restart_log
    assert ("no clean shutdown marker was found" in restart_log) is kill, restart_log
