"""The pipeline against a real broker (tests/integration's start_broker fixture) and real clients:
read the log dir the broker wrote and compare with a pure-Python read; compact it, adopt offline
with `kompakt compact-adopt`, restart, and consume the compacted partition with confluent-kafka;
stream the live topic with availableNow and a checkpoint."""
from __future__ import annotations

import time
import urllib.error

import pytest

from kompakt import cli
from kompakt.pipeline import reader as rd

from .conftest import stream_once

pytestmark = pytest.mark.spark
N = 600
KEYS = 50


def _admin_create(bootstrap, topic, partitions, configs):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic]
    fut.result(30)


def _produce(bootstrap, topic, records, **conf):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for part, key, value in records:
        p.produce(topic, key=key, value=value, partition=part, headers=[("h", b"x")])
    assert p.flush(30) == 0


def _consume_all(bootstrap, topic, partition, end):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            if c.position([TopicPartition(topic, partition)])[0].offset >= end:
                break
            continue
        assert m.error() is None, m.error()
        out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def test_broker_written_log_compact_adopt_and_consume(spark, start_broker, tmp_path):
    b = start_broker()
    # small segments so most of the log is cleanable; a long min.compaction.lag.ms keeps the
    # broker's own cleaner away, so what gets compacted is the pipeline's doing
    _admin_create(b.bootstrap, "kv", 2, {"cleanup.policy": "compact", "internal.segment.bytes": "2000",
                                         "min.compaction.lag.ms": "86400000", "delete.retention.ms": "1000"})
    recs = [(i % 2, b"k%d" % (i % KEYS), None if i % 11 == 10 else b"v%d" % i) for i in range(N)]
    _produce(b.bootstrap, "kv", recs, **{"compression.type": "zstd", "batch.num.messages": 20})
    b.stop()

    # 1. the broker's files read by Spark equal the pure-Python read
    df = spark.read.format("kompakt").load(b.log_dir).where("topic = 'kv'")
    spark_rows = sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())
    py_rows = sorted((p.partition, r.offset, r.key, r.value)
                     for p in rd.find_partitions(b.log_dir, {"kv"}) for r in rd.read_partition(p))
    assert spark_rows == py_rows and len(spark_rows) == N

    # 2. compact partition 0 with the CLI, verify, adopt offline, restart
    staging = str(tmp_path / "staging")
    assert cli.main(["pipeline", "compact", b.log_dir, "--topic", "kv", "--partition", "0",
                     "--output", staging, "--delete-retention-ms", "1000"]) == 0
    assert cli.main(["pipeline", "verify", staging, "--source", b.log_dir]) == 0
    part0 = [(o, k, v) for p, o, k, v in py_rows if p == 0]
    end = rd.list_segments(f"{b.log_dir}/kv-0")[-1].base_offset
    assert end > N // 4
    latest = {}
    for o, k, v in part0:
        if o < end:
            latest[k] = o
    model = [(o, k, v) for o, k, v in part0 if o >= end or latest[k] == o]
    assert cli.main(["compact-adopt", b.log_dir, staging]) == 0
    b.start()
    # 3. a real client reads exactly the model: latest per key below end, tombstones included
    got = _consume_all(b.bootstrap, "kv", 0, N // 2)
    assert got == model and len(got) < len(part0)
    assert _consume_all(b.bootstrap, "kv", 1, N // 2) == [(o, k, v) for p, o, k, v in py_rows if p == 1]


def test_stream_available_now_with_checkpoint(spark, start_broker, tmp_path):
    b = start_broker()
    _admin_create(b.bootstrap, "ev", 2, {})
    _produce(b.bootstrap, "ev", [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(40)])
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run_once():
        stream_once(spark, b.bootstrap, "ev", out, ckpt)

    run_once()
    first = sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(out).collect())
    assert len(first) == 40 and {p for p, _, _ in first} == {0, 1}
    _produce(b.bootstrap, "ev", [(1, b"late", b"late-%d" % i) for i in range(5)])
    run_once()
    rows = spark.read.parquet(out).collect()
    assert len(rows) == 45  # the checkpoint resumed: nothing read twice
    assert sorted(r.value for r in rows if r.key == b"late") == [b"late-%d" % i for i in range(5)]


def test_online_adopt_through_the_admin_api(spark, start_broker, tmp_path):
    import json
    import urllib.request

    b = start_broker()
    _admin_create(b.bootstrap, "on", 1, {"cleanup.policy": "compact", "internal.segment.bytes": "1500",
                                         "min.compaction.lag.ms": "86400000"})
    recs = [(0, b"k%d" % (i % 20), b"v%d" % i) for i in range(300)]
    _produce(b.bootstrap, "on", recs, **{"batch.num.messages": 10})
    # compact the live partition's closed segments; the broker keeps running and appending
    staging = str(tmp_path / "staging")
    assert cli.main(["pipeline", "compact", b.log_dir, "--topic", "on", "--partition", "0", "--output", staging]) == 0
    end = json.load(open(f"{staging}/compact.json"))["end"]
    _produce(b.bootstrap, "on", [(0, b"k1", b"after")])
    req = urllib.request.Request(f"{b.metrics_url}/v1/partitions/on/0/adopt", method="POST",
                                 data=json.dumps({"staging_dir": staging}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
    latest = {}
    for i, (_, k, _) in enumerate(recs):
        if i < end:
            latest[k] = i
    model = [(i, k, v) for i, (_, k, v) in enumerate(recs) if i >= end or latest[k] == i] + [(300, b"k1", b"after")]
    assert _consume_all(b.bootstrap, "on", 0, 301) == model
    # a second adoption of the same staging dir is refused: the live segments changed
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 409
