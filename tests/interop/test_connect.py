"""Kafka Connect in distributed mode against Kompakt: Apache Kafka's own worker (connect_support.py),
its compacted internal topics, FileStream source and sink through a worker kill, connector offsets
managed through the REST API (KIP-875), and Debezium's PostgreSQL connector capturing a real
PostgreSQL, through a worker kill, into a compacted topic that Kompakt's cleaner compacts and
`kompakt pipeline snapshot` turns back into the table.

One broker (conftest's `interop_broker`, a `kompakt serve` subprocess) and one worker per module:
the worker JVM is the cost (seconds to start), so the tests share it; the tests that kill it start
it again and leave it running for the next. PostgreSQL is Debian's server in a throw-away cluster
(postgres_support.py).
"""
from __future__ import annotations

import json
import subprocess
import time
from typing import NamedTuple

import pyarrow.parquet as pq
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from connect_support import ConnectWorker
from kompakt import cli
from kompakt.testing.poll import wait_until
from postgres_support import PostgresCluster

READ_TIMEOUT_S = 120.0     # bounds how long read_topic hangs when records never come


@pytest.fixture(scope="module")
def worker(interop_broker, tmp_path_factory):
    worker = ConnectWorker(tmp_path_factory.mktemp("connect-worker"), interop_broker.bootstrap).start()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def postgres():
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


def _consumer(broker, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kompakt-connect-tests",
                     "enable.auto.commit": False, "isolation.level": "read_committed", **extra})


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_topic(broker, topic: str, partitions: int = 1) -> list[Record]:
    """Every committed record of the topic (isolation.level=read_committed), partition by
    partition, from the start to the end offset."""
    consumer = _consumer(broker)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, \
                f"{topic}: read {len(out)} records in {READ_TIMEOUT_S:g}s, short of the end offsets {ends}"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
                continue
            # nothing more to poll: done once every position passed the end offset seen at the
            # start (the last offsets may be transaction markers, which are never delivered)
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(tps)):
                return out
    finally:
        consumer.close()


def committed_offset(broker, group: str, topic: str, partition: int = 0) -> int:
    consumer = _consumer(broker, **{"group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()


def wait_sink_committed(broker, worker, connector: str, topic: str) -> None:
    """Wait until a sink connector committed everything of partition 0: the offset after the
    last record (a sink task commits the offset after the last record it was given, so a
    transaction marker after it stays uncounted, as on Kafka)."""
    last = read_topic(broker, topic)[-1].offset
    group = f"connect-{connector}"
    wait_until(lambda: committed_offset(broker, group, topic) == last + 1,
               f"{connector}'s committed offset to reach {last + 1}", timeout=30,
               details=lambda: f"committed {committed_offset(broker, group, topic)}; worker log:\n{worker.log_tail()}")


def compact_internal_topics(broker, worker) -> int:
    """Kompakt's cleaner on every non-empty partition of the worker's internal topics (what a
    long-running broker does by itself); how many partitions were cleaned."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cleaned = 0
    for topic in worker.topics.values():
        for p in admin.list_topics(topic, timeout=10).topics[topic].partitions:
            if broker.records(topic, p):
                broker.compact(topic, p)
                cleaned += 1
    return cleaned


# -- the internal topics -------------------------------------------------------------------------
def test_internal_topics_are_created_compacted(interop_broker, worker):
    """The worker creates its config, offset and status topics through Admin (Kafka Connect's
    TopicAdmin) with cleanup.policy=compact and checks the policy back with DescribeConfigs; its
    defaults are 1, 25 and 5 partitions (DistributedConfig)."""
    admin = AdminClient({"bootstrap.servers": interop_broker.bootstrap})
    topics = worker.topics
    metadata = admin.list_topics(timeout=10).topics
    assert {kind: len(metadata[name].partitions) for kind, name in topics.items()} == \
        {"config": 1, "offset": 25, "status": 5}
    results = admin.describe_configs([ConfigResource("topic", name) for name in topics.values()])
    for resource, future in results.items():
        configs = future.result()
        assert configs["cleanup.policy"].value == "compact", resource.name
    # the worker's own record of itself went through them: its group is up and the REST API
    # reports the cluster it joined
    info = worker.rest("GET", "/")
    assert info["kafka_cluster_id"]


# -- FileStream: file -> topic -> file, through a kill ------------------------------------------------
def _lines(first: int, last: int) -> list[str]:
    return [f"line-{i:05d} {'x' * (i % 7)}" for i in range(first, last + 1)]


def test_filestream_resumes_exactly_after_a_worker_kill(interop_broker, worker, tmp_path):
    """A FileStream source reads a file into a topic, a sink writes the topic to another file.
    The sink is paused once it committed everything, Kompakt's cleaner compacts the worker's
    internal topics, the worker is SIGKILLed, the source file grows while it is down, and a new
    worker process restores everything from the compacted topics: both connectors (not posted
    again), the sink's PAUSED target state, the source's file position (no line read twice) and
    the sink's committed offset (no line written twice)."""
    interop_broker.create_topic("lines", partitions=1)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    first = _lines(1, 400)
    source_file.write_text("".join(line + "\n" for line in first))
    worker.put_connector("lines-source", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": str(source_file), "topic": "lines", "tasks.max": "1",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter"})
    worker.put_connector("lines-sink", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "file": str(sink_file), "topics": "lines", "tasks.max": "1",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter"})
    worker.wait_state("lines-source", "RUNNING")
    worker.wait_state("lines-sink", "RUNNING")

    def sink_lines():
        return sink_file.read_text().splitlines() if sink_file.exists() else []

    wait_until(lambda: len(sink_lines()) >= len(first), "the sink file to hold the first lines", timeout=60,
               details=lambda: f"{len(sink_lines())} lines; worker log:\n{worker.log_tail()}")
    assert sink_lines() == first
    wait_sink_committed(interop_broker, worker, "lines-sink", "lines")
    worker.rest("PUT", "/connectors/lines-sink/pause")
    worker.wait_state("lines-sink", "PAUSED")
    assert compact_internal_topics(interop_broker, worker) >= 3

    worker.kill()
    second = _lines(401, 1000)
    with open(source_file, "a") as f:
        f.write("".join(line + "\n" for line in second))
    worker.start()

    assert sorted(worker.rest("GET", "/connectors")) == ["lines-sink", "lines-source"]
    worker.wait_state("lines-sink", "PAUSED")
    worker.wait_state("lines-source", "RUNNING")
    expected = first + second
    wait_until(lambda: len(read_topic(interop_broker, "lines")) >= len(expected), "the source to read the new lines",
               timeout=60, details=lambda: f"worker log:\n{worker.log_tail()}")
    assert [r.value.decode() for r in read_topic(interop_broker, "lines")] == expected
    assert sink_lines() == first                    # paused: nothing written while down or since

    worker.rest("PUT", "/connectors/lines-sink/resume")
    wait_until(lambda: len(sink_lines()) >= len(expected), "the sink file to hold every line", timeout=60,
               details=lambda: f"{len(sink_lines())} lines; worker log:\n{worker.log_tail()}")
    wait_sink_committed(interop_broker, worker, "lines-sink", "lines")
    assert sink_lines() == expected
    for name in ("lines-source", "lines-sink"):
        worker.rest("DELETE", f"/connectors/{name}")


def test_connector_offsets_are_altered_and_reset_through_the_rest_api(interop_broker, worker, tmp_path):
    """KIP-875: a stopped connector's offsets are read, altered and reset through the REST API.
    For a sink the worker uses the consumer group's offsets (Admin listConsumerGroupOffsets,
    alterConsumerGroupOffsets, deleteConsumerGroups); for an exactly-once source it fences the
    task's transactional producers (Admin fenceProducers) and writes the offsets topic in a
    transaction. Resumed, the sink starts again at the offset it was given and the source reads
    its file again from the start."""
    interop_broker.create_topic("lines-875", partitions=1)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = _lines(1, 50)
    source_file.write_text("".join(line + "\n" for line in lines))
    strings = {"key.converter": "org.apache.kafka.connect.storage.StringConverter",
               "value.converter": "org.apache.kafka.connect.storage.StringConverter", "tasks.max": "1"}
    worker.put_connector("src-875", {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                                     "file": str(source_file), "topic": "lines-875", **strings})
    worker.put_connector("sink-875", {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                                      "file": str(sink_file), "topics": "lines-875", **strings})

    def sink_lines():
        return sink_file.read_text().splitlines() if sink_file.exists() else []

    wait_until(lambda: len(sink_lines()) >= len(lines), "the sink file to hold the lines", timeout=60,
               details=lambda: f"worker log:\n{worker.log_tail()}")
    wait_sink_committed(interop_broker, worker, "sink-875", "lines-875")
    for name in ("src-875", "sink-875"):
        worker.rest("PUT", f"/connectors/{name}/stop")
        worker.wait_state(name, "STOPPED")
    source_partition = {"filename": str(source_file)}
    sink_partition = {"kafka_topic": "lines-875", "kafka_partition": 0}
    assert worker.rest("GET", "/connectors/src-875/offsets")["offsets"] == \
        [{"partition": source_partition, "offset": {"position": source_file.stat().st_size}}]
    assert worker.rest("GET", "/connectors/sink-875/offsets")["offsets"] == \
        [{"partition": sink_partition, "offset": {"kafka_offset": len(lines)}}]

    worker.rest("PATCH", "/connectors/sink-875/offsets",
                {"offsets": [{"partition": sink_partition, "offset": {"kafka_offset": 10}}]})
    worker.rest("DELETE", "/connectors/src-875/offsets")
    assert worker.rest("GET", "/connectors/sink-875/offsets")["offsets"] == \
        [{"partition": sink_partition, "offset": {"kafka_offset": 10}}]
    assert worker.rest("GET", "/connectors/src-875/offsets")["offsets"] == []

    for name in ("src-875", "sink-875"):
        worker.rest("PUT", f"/connectors/{name}/resume")
    expected = lines + lines[10:] + lines
    wait_until(lambda: len(sink_lines()) >= len(expected), "the sink file to hold the lines again", timeout=60,
               details=lambda: f"{len(sink_lines())} lines; worker log:\n{worker.log_tail()}")
    assert [r.value.decode() for r in read_topic(interop_broker, "lines-875")] == lines + lines
    assert sink_lines() == expected
    for name in ("src-875", "sink-875"):
        worker.rest("DELETE", f"/connectors/{name}")


# -- Debezium PostgreSQL -> compacted topic -> cleaner -> snapshot == table ----------------------------
TABLE = "public.items"
TOPIC = "pg.public.items"
PARTITIONS = 3


def _table_rows(postgres) -> dict[int, dict]:
    rows = postgres.sql("SELECT row_to_json(i) FROM items i")
    return {row["id"]: row for row in (json.loads(r[0]) for r in rows)}


def _latest_per_key(records) -> dict[int, dict | None]:
    """key id -> the newest `after` image (None for a delete or a tombstone)."""
    latest = {}
    for _, _, key, value in records:
        event = json.loads(value) if value is not None else None
        latest[json.loads(key)["id"]] = event["after"] if event is not None else None
    return latest


def test_debezium_postgres_into_a_compacted_topic_snapshots_to_the_table(interop_broker, worker, postgres, spark,
                                                                          tmp_path):
    """Debezium's PostgreSQL connector (pgoutput, the built-in logical decoding plugin) takes an
    initial snapshot of a table, then streams inserts, updates and deletes into a compacted topic
    of three partitions that Connect creates; the worker is SIGKILLed in the middle of a burst of
    transactions and started again, and Debezium resumes from the position it stored in the
    offsets topic. Kompakt's cleaner compacts every partition: one record per key is left, a
    deleted row only as its tombstone. `kompakt pipeline snapshot` of the topic's files then
    equals the table: the decoded keys are its primary keys, each value's `after` image is its
    row."""
    postgres.sql("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int)")
    postgres.sql("INSERT INTO items SELECT g, 'item-' || g, g * 10 FROM generate_series(1, 40) g")
    worker.put_connector("pg", {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": str(postgres.port),
        "database.user": postgres.user, "database.password": "", "database.dbname": postgres.dbname,
        "topic.prefix": "pg", "table.include.list": TABLE, "plugin.name": "pgoutput",
        "slot.name": "kompakt_test", "publication.autocreate.mode": "filtered",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
        # Connect creates the change topic (Kafka Connect's topic.creation.* properties, KIP-158)
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": str(PARTITIONS),
        "topic.creation.default.cleanup.policy": "compact",
        "tasks.max": "1"})
    worker.wait_state("pg", "RUNNING")
    # streaming changes after the initial snapshot: inserts, updates (some rows many times, one
    # to NULL), deletes (Debezium writes a delete event and then a tombstone), a re-insert
    postgres.sql("INSERT INTO items SELECT g, 'item-' || g, g * 10 FROM generate_series(41, 60) g")
    for round_ in range(3):
        postgres.sql(f"UPDATE items SET qty = qty + {round_ + 1}, name = name || '.{round_}' WHERE id % 4 = 0")
    postgres.sql("UPDATE items SET qty = NULL WHERE id = 7")
    postgres.sql("DELETE FROM items WHERE id % 5 = 0")
    postgres.sql("INSERT INTO items VALUES (10, 'item-10-again', 1)")

    def change_events() -> int:
        try:
            return len(read_topic(interop_broker, TOPIC, PARTITIONS))
        except KafkaException:                      # the topic is not created yet
            return 0

    # 40 snapshot reads, 20 inserts, 3 x 15 updates, 1 update, 12 x (delete event + tombstone), 1 insert
    first_events = 40 + 20 + 45 + 1 + 24 + 1
    wait_until(lambda: change_events() >= first_events, "the first changes to be streamed", timeout=60, interval=0.5,
               details=lambda: f"{change_events()} events; worker log:\n{worker.log_tail()}")
    streamed = change_events()
    # 200 transactions, one after the other; the worker dies while they stream
    burst = subprocess.Popen(postgres.psql(
        "DO $$ BEGIN FOR i IN 100..299 LOOP "
        "INSERT INTO items VALUES (i, 'burst-' || i, i); "
        "UPDATE items SET qty = qty + 1 WHERE id = i - 50 OR id = i - 1; "
        "IF i % 3 = 0 THEN DELETE FROM items WHERE id = i - 2; END IF; "
        "COMMIT; PERFORM pg_sleep(0.01); END LOOP; END $$"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: change_events() >= streamed + 30, "the burst to be streaming", timeout=60, interval=0.1)
        worker.kill()
    finally:
        _, err = burst.communicate(timeout=120)
    assert burst.returncode == 0, err
    worker.start()
    worker.wait_state("pg", "RUNNING")
    table = _table_rows(postgres)
    ever_inserted = set(range(1, 61)) | set(range(100, 300))
    assert len(table) == 49 + 200 - len(range(102, 300, 3))

    def caught_up():
        try:
            latest = _latest_per_key(read_topic(interop_broker, TOPIC, PARTITIONS))
        except KafkaException:
            return False
        return {k: v for k, v in latest.items() if v is not None} == table

    wait_until(caught_up, "the change topic to catch up with the table", timeout=90, interval=0.5,
               details=lambda: f"worker log:\n{worker.log_tail()}")

    admin = AdminClient({"bootstrap.servers": interop_broker.bootstrap})
    config = admin.describe_configs([ConfigResource("topic", TOPIC)])
    assert next(iter(config.values())).result()["cleanup.policy"].value == "compact"

    before = {p: interop_broker.records(TOPIC, p) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        interop_broker.compact(TOPIC, p)
    after = {p: interop_broker.records(TOPIC, p) for p in range(PARTITIONS)}
    deleted = {k for k, v in _latest_per_key(read_topic(interop_broker, TOPIC, PARTITIONS)).items() if v is None}
    assert deleted == ever_inserted - set(table)
    for p in range(PARTITIONS):
        keys = [json.loads(r.key)["id"] for r in after[p]]
        assert len(keys) == len(set(keys)), f"partition {p} still holds a key twice after cleaning"
        # a deleted row is only its tombstone now (kept for delete.retention.ms)
        assert all(r.value is None for r in after[p] if json.loads(r.key)["id"] in deleted)
    assert sum(map(len, after.values())) == len(table) + len(deleted) < sum(map(len, before.values()))

    # the CLI in this process, on the suite's SparkSession (a second Spark JVM would cost more
    # than this whole test otherwise does)
    output = tmp_path / "snapshot"
    assert cli.main(["pipeline", "snapshot", "--topic", TOPIC, "--output", str(output), interop_broker.log_dir]) == 0
    snapshot = pq.read_table(output).to_pylist()
    assert len(snapshot) == len(table)
    rows = {}
    for row in snapshot:
        event = json.loads(row["value"])
        rows[json.loads(row["key"])["id"]] = event["after"]
        assert event["op"] in ("r", "c", "u")
    assert rows == table
    worker.rest("DELETE", "/connectors/pg")
