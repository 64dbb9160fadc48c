"""AlterReplicaLogDirs (key 34) against a real `kompakt serve` with two log dirs.

* kafka-python's admin `alter_replica_log_dirs` moves a partition from one dir to the other while a
  confluent-kafka producer (idempotent, acks=all) and consumer run: DescribeLogDirs (kafka-python's
  `describe_log_dirs`) shows the future replica in the destination with its size and offset lag
  during the move (the copy is throttled by replica.alter.log.dirs.io.max.bytes.per.second, set
  at run time, so the move lasts a few seconds), then the partition there alone; /metrics counts
  the move in progress, then completed; the consumer gets every acknowledged record once, in
  offset order, values as produced.
* A power cut (the page-cache model of kompakt/storage/power_cut.py: what was not synced is lost)
  at each step of the move (crash points in kompakt/storage/alter_log_dirs.py), and a SIGKILL
  mid-copy, then a restart on the same files: every acknowledged record is read back once, the
  move finishes (a future beside its live log resumes; one without is renamed live), one live copy
  is left.
* Compaction: cleaning of the partition is paused (the cleaner's state machine shows Paused(1))
  while it moves and resumes after; its cleaner-offset-checkpoint entry moves to the new dir's
  file, and the next clean goes on from it there.
* The wire codes, per partition: unknown or relative dir LOG_DIR_NOT_FOUND, offline dir
  KAFKA_STORAGE_ERROR, unknown partition UNKNOWN_TOPIC_OR_PARTITION, the dir it is in NONE, a
  topic name too long for a `-future` dir INVALID_TOPIC_EXCEPTION. (CLUSTER_AUTHORIZATION_FAILED
  is in test_security_api_table.py.)
"""
from __future__ import annotations

import os
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as ConsumerTopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import NoError

from compaction_support import admin_get, check_against_model, create_topic, produce, read_partition
from kompakt.testing.poll import wait_until
from broker_process import BrokerProcess
from kompakt.protocol.errors import ErrorCode as EC
from wire_support import Wire, req, sub

NODE = 1


def two_dirs(base) -> list[str]:
    return [str(base / "dir-a"), str(base / "dir-b")]


def live_copies(dirs, name) -> list[str]:
    return [d for d in dirs if os.path.isdir(os.path.join(d, name))]


def leftovers(dirs, prefix) -> list[str]:
    return [n for d in dirs for n in os.listdir(d) if n.startswith(prefix + ".") or
            (n.startswith(prefix) and n.endswith(("-future", "-delete")))]


def alter(port: int, topic: str, partition: int, path: str, version: int = 2) -> int:
    D = sub(34, "AlterReplicaLogDir")
    T = sub(34, "AlterReplicaLogDir", "AlterReplicaLogDirTopic")
    w = Wire(port)
    try:
        r = w.call(req(34, dirs=[D(path=path, topics=[T(name=topic, partitions=[partition])])]), version)
    finally:
        w.close()
    [(name, [(index, code)])] = [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                                 for t in r.results]
    assert (name, index) == (topic, partition)
    return code


def metrics(b) -> dict[str, float]:
    """The unlabelled samples of the broker's /metrics."""
    with urllib.request.urlopen(f"{b.metrics_url}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.partition(" ") for line in lines)
            if name and not name.startswith("#") and "{" not in name}


def future_entries(admin, topic):
    """(log dir, is_future_key, size, offset lag) of every replica of topic-0 DescribeLogDirs lists."""
    out = []
    for broker in admin.describe_log_dirs():
        for d in broker["log_dirs"]:
            for t in d["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        out.append((d["log_dir"], p["is_future_key"], p["partition_size"], p["offset_lag"]))
    return sorted(out)


def test_a_partition_moves_under_a_running_producer_and_consumer(start_broker, tmp_path):
    dirs = two_dirs(tmp_path)
    b = start_broker(config={"log.dirs": ",".join(dirs), "log.segment.delete.delay.ms": "0",
                             "offsets.topic.num.partitions": "1"})
    create_topic(b.bootstrap, "live", {"internal.segment.bytes": str(256 << 10)})
    [src] = live_copies(dirs, "live-0")
    dest = next(d for d in dirs if d != src)
    acked: list[tuple[int, bytes]] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.size": 65536})

    def delivered(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.value()))

    pad = b"x" * 1000
    for i in range(5000):                                 # ~5 MB: the throttled move takes ~2.5 s
        producer.produce("live", value=b"%d-" % i + pad, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0

    def keep_producing():
        i = 5000
        while not stop.is_set():
            producer.produce("live", value=b"%d-" % i + pad, partition=0, on_delivery=delivered)
            producer.poll(0.002)
            i += 1
        producer.flush(60)

    consumed: list[tuple[int, bytes]] = []
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "mover", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([ConsumerTopicPartition("live", 0, 0)])

    def keep_consuming():
        while not stop.is_set() or len(consumed) < len(acked):
            for msg in consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                consumed.append((msg.offset(), msg.value()))
            if stop.is_set() and time.monotonic() > deadline:
                break

    deadline = float("inf")
    threads = [threading.Thread(target=keep_producing), threading.Thread(target=keep_consuming)]
    for t in threads:
        t.start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        # the copy throttled at run time (a dynamic broker config, as Kafka's), so the move lasts
        # long enough to be seen
        throttled = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(NODE), configs={
            "replica.alter.log.dirs.io.max.bytes.per.second": str(2 << 20)})], incremental=True)
        assert throttled == {"broker": {str(NODE): "OK"}}
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("live", 0, NODE): dest})
        assert result == {TopicPartitionReplica("live", 0, NODE): NoError}
        # during the move: the future replica in the destination, with a size and a lag
        seen = []
        wait_until(lambda: seen.append(future_entries(admin, "live")) or any(
            f and d == dest and size > 0 and lag > 0 for d, f, size, lag in seen[-1]), "the future replica to show")
        during = next(e for e in seen if any(f for _, f, _, _ in e))
        assert (src, False) in [(d, f) for d, f, _, _ in during]
        moving = metrics(b)
        assert moving["kompakt_log_dir_moves"] == 1 and moving["kompakt_log_dir_move_max_lag"] >= 0
        # then the partition in the destination alone
        wait_until(lambda: future_entries(admin, "live")[:1] == [(dest, False) + future_entries(admin, "live")[0][2:]]
                   and len(future_entries(admin, "live")) == 1, "the move to finish", timeout=120)
        wait_until(lambda: metrics(b)["kompakt_log_dir_moves_completed_total"] == 1, "the move to count")
        assert metrics(b)["kompakt_log_dir_moves"] == 0
        time.sleep(0.5)                                   # producing goes on after the swap
    finally:
        stop.set()
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(120)
        consumer.close()
        admin.close()
    assert live_copies(dirs, "live-0") == [dest]
    wait_until(lambda: not leftovers(dirs, "live-0"), "the old copy to be deleted")
    acked.sort()
    assert len(acked) > 5000 and [o for o, _ in acked] == list(range(len(acked)))
    assert consumed == acked                              # nothing lost, nothing twice, in order
    assert [int(v.split(b"-")[0]) for _, v in acked] == list(range(len(acked)))


POINTS = ["alter_dir_future_created", "alter_dir_copying:2", "alter_dir_future_synced",
          "alter_dir_current_renamed", "alter_dir_future_renamed"]
# a power cut at every step (what was not synced is lost: the harsher crash); a plain SIGKILL
# (the page cache survives) mid-copy, where the future keeps its unsynced tail too
CRASHES = [(point, "power") for point in POINTS] + [("alter_dir_copying:2", "kill")]


@pytest.mark.parametrize("point,crash", CRASHES)
def test_a_crash_at_each_step_loses_nothing_and_leaves_one_copy(start_broker, tmp_path, monkeypatch, point, crash):
    dirs = two_dirs(tmp_path / "broker0" / "kompakt-data")     # under the log dir the power model keeps
    for d in dirs:
        os.makedirs(d)                            # there before the broker, as an operator's mounts
    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", point)
    # every append synced, so acknowledged means on disk whatever the acks handling does
    b = start_broker(power=crash == "power", config={"log.dirs": ",".join(dirs), "log.segment.delete.delay.ms": "0",
                                                    "log.flush.interval.messages": "1",
                                                    "offsets.topic.num.partitions": "1"})
    create_topic(b.bootstrap, "crash", {"internal.segment.bytes": str(256 << 10)})
    [src] = live_copies(dirs, "crash-0")
    dest = next(d for d in dirs if d != src)
    produced = produce(b.bootstrap, "crash", [(b"k%d" % i, b"v%d-" % i + b"y" * 500) for i in range(3000)])
    try:
        alter(b.port, "crash", 0, dest)
    except (OSError, AssertionError):
        pass                                      # the crash came before the answer
    wait_until(lambda: b.proc.poll() is not None, f"the broker to die at {point}")
    assert "killing the broker" in b.log_text() or "power" in b.log_text()
    if crash == "power":
        b.restore_after_crash()                   # the dirs as the power cut leaves them
    monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT")
    b.start()
    check_against_model(produced, read_partition(b.bootstrap, "crash"))
    # the move finishes by itself (resumed, or the future renamed live) and one copy is left
    wait_until(lambda: live_copies(dirs, "crash-0") == [dest] and not leftovers(dirs, "crash-0"),
               "the move to finish after the restart")
    check_against_model(produced, read_partition(b.bootstrap, "crash"))


@pytest.fixture(scope="module")
def codes_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("alter-codes")
    dirs = two_dirs(base)
    offline = str(base / "not-a-dir")
    open(offline, "w").close()                    # a file: the dir is offline from the start
    proc = BrokerProcess(base, {"log.dirs": ",".join(dirs + [offline])})
    proc.start()
    create_topic(proc.bootstrap, "codes", {})
    yield proc, dirs, offline
    proc.stop()


@pytest.mark.parametrize("version", [1, 2])
def test_per_partition_error_codes(codes_broker, version):
    proc, dirs, offline = codes_broker
    [src] = live_copies(dirs, "codes-0")
    other = next(d for d in dirs if d != src)
    assert alter(proc.port, "codes", 0, "/no/such/dir", version) == EC.LOG_DIR_NOT_FOUND
    assert alter(proc.port, "codes", 0, os.path.relpath(src), version) == EC.LOG_DIR_NOT_FOUND
    assert alter(proc.port, "codes", 0, offline, version) == EC.KAFKA_STORAGE_ERROR
    assert alter(proc.port, "missing", 0, src, version) == EC.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(proc.port, "codes", 7, src, version) == EC.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(proc.port, "t" * 240, 0, src, version) == EC.INVALID_TOPIC_EXCEPTION
    assert alter(proc.port, "codes", 0, src, version) == EC.NONE          # where it is: nothing to do
    # a new future log is refused while a log dir is offline (Kafka's getOrCreateLog)
    assert alter(proc.port, "codes", 0, other, version) == EC.KAFKA_STORAGE_ERROR
    assert live_copies(dirs, "codes-0") == [src] and not leftovers(dirs, "codes-0")


def compact(b, topic) -> int:
    """Clean now through the admin API (waits up to 30 s); the HTTP status."""
    url = f"{b.metrics_url}/v1/partitions/{topic}/0/compact?wait=30"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b""), timeout=60) as r:
        return r.status


def test_cleaning_pauses_for_the_move_and_its_checkpoint_follows_the_partition(start_broker, tmp_path):
    dirs = two_dirs(tmp_path)
    b = start_broker(config={"log.dirs": ",".join(dirs), "log.segment.delete.delay.ms": "0",
                             "log.cleaner.backoff.ms": "3600000"})
    create_topic(b.bootstrap, "kept", {"cleanup.policy": "compact", "internal.segment.bytes": "20000",
                                       "min.cleanable.dirty.ratio": "0.01"})
    [src] = live_copies(dirs, "kept-0")
    dest = next(d for d in dirs if d != src)
    produced = produce(b.bootstrap, "kept", [(b"k%d" % (i % 50), b"v%d-" % i + b"z" * 200) for i in range(3000)],
                       batch_size=4000)
    assert compact(b, "kept") == 200
    point = cleaner_checkpoint(src, "kept")
    assert point is not None and point > 0
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(NODE), configs={
            "replica.alter.log.dirs.io.max.bytes.per.second": str(100 << 10)})], incremental=True)
        assert admin.alter_replica_log_dirs({TopicPartitionReplica("kept", 0, NODE): dest}) == {
            TopicPartitionReplica("kept", 0, NODE): NoError}
        # while the copy runs, the cleaner's state machine holds the partition Paused
        wait_until(lambda: admin_get(b, "/v1/partitions/kept/0")["cleaner"]["state"] == "Paused(1)",
                   "cleaning to be paused for the move")
        assert any(f for _, f, _, _ in future_entries(admin, "kept"))
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(NODE), configs={
            "replica.alter.log.dirs.io.max.bytes.per.second": str(1 << 40)})], incremental=True)
        wait_until(lambda: live_copies(dirs, "kept-0") == [dest] and not leftovers(dirs, "kept-0"),
                   "the move to finish")
    finally:
        admin.close()
    # the cleaner's offset moved with the partition (the old dir's entry goes, and cleaning
    # resumes, in the swap's last step: moments after the renames), and cleaning goes on from it
    wait_until(lambda: admin_get(b, "/v1/partitions/kept/0")["cleaner"]["state"] == "None",
               "cleaning to resume after the move")
    assert cleaner_checkpoint(dest, "kept") == point and cleaner_checkpoint(src, "kept") is None
    more = produce(b.bootstrap, "kept", [(b"k%d" % (i % 50), b"w%d-" % i + b"z" * 200) for i in range(3000)],
                   batch_size=4000)
    assert compact(b, "kept") == 200
    assert cleaner_checkpoint(dest, "kept") > point and cleaner_checkpoint(src, "kept") is None
    check_against_model(produced + more, read_partition(b.bootstrap, "kept"))


def cleaner_checkpoint(log_dir, topic):
    path = os.path.join(log_dir, "cleaner-offset-checkpoint")
    if not os.path.exists(path):
        return None
    for line in open(path).read().split("\n")[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return None
