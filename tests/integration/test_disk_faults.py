"""Full and failing disks, against a real broker process.

* A full disk: an 8 MiB tmpfs mounted for the test (skipped, saying why, where mounting is not
  permitted), filled up beside the broker: produce gets KAFKA_STORAGE_ERROR, the cleaner abandons
  a clean that cannot write its `.cleaned` file and leaves the partition as it was (not marked
  uncleanable, no dir offline); once space returns writes and cleaning work again, and after a
  SIGKILL and restart everything acknowledged is there.
* A failing disk (Kafka's log-dir failure): two `log.dirs`; the storage file layer's test seam
  (TEST_KOMPAKT_IO_ERROR, kompakt/storage/faults.py) makes every file operation in one partition dir
  of the second log dir fail with EIO. The first produce there takes that whole log dir offline:
  its partitions answer KAFKA_STORAGE_ERROR, Metadata shows them without a leader and this node in
  offline_replicas, the offline-dirs metric counts it, one ERROR line says so, /ready names it,
  DescribeLogDirs reports it; the first dir keeps serving. After a restart with the disk "fixed",
  every acknowledged record is there.
* DescribeLogDirs through kafka-python's admin client: each dir, its partitions and their sizes.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import urllib.request

import pytest

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from compaction_support import check_against_model, produce, read_partition
from wire_support import Wire, req, sub
from kompakt.protocol.group_records import partition_for as group_partition
from kompakt.protocol.records import build_batch

STORAGE_ERROR = 56
LEADER_NOT_AVAILABLE = 5
COORDINATOR_NOT_AVAILABLE = 15


def raw_produce(port: int, topic: str, partition: int, value: bytes) -> int:
    """One Produce v8 of one record to one partition; the partition's error code."""
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=8, transactional_id=None, acks=-1, timeout_ms=5000,
                         topic_data=[T(name=topic, partition_data=[
                             T.PartitionProduceData(index=partition, records=build_batch([(b"k", value)]))])])
    req.with_header(correlation_id=7, client_id="raw")
    payload = bytes(req.encode(version=8, header=True))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "the broker closed the connection"
            buf += chunk
    resp = ProduceResponse.decode(buf[8:], version=8)      # size, correlation id, then the body
    return resp.responses[0].partition_responses[0].error_code


def produce_all(bootstrap: str, topic: str, partition: int, n: int) -> list[tuple[int, bytes]]:
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})

    def cb(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.value()))

    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d-%d" % (partition, i), partition=partition, on_delivery=cb)
    assert p.flush(30) == 0
    return sorted(acked)


def placement(log_dirs: list[str]) -> dict[str, str]:
    """partition dir name -> the log dir holding it."""
    return {name: d for d in log_dirs for name in os.listdir(d) if os.path.isdir(os.path.join(d, name))}


def offline_answers(port: int, topic: str, partition: int) -> dict[str, tuple]:
    """What each API that reads or writes one partition's log answers for it: (error code, the
    offsets it names). For a partition of an offline log dir Kafka answers KAFKA_STORAGE_ERROR
    (ReplicaManager.getPartitionOrError), never offsets it still has in memory."""
    w = Wire(port)
    try:
        F = sub(1, "FetchTopic")
        fetch = w.call(req(1, cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                           topics=[F(topic=topic, partitions=[F.FetchPartition(
                               partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])]), 12)
        f = fetch.responses[0].partitions[0]
        out = {"fetch": (f.error_code, f.high_watermark, f.last_stable_offset, f.log_start_offset)}
        L = sub(2, "ListOffsetsTopic")
        for ts, name in ((-2, "list_offsets_earliest"), (-1, "list_offsets_latest"), (0, "list_offsets_by_time")):
            lo = w.call(req(2, replica_id=-1, isolation_level=0, timeout_ms=5000, topics=[L(name=topic, partitions=[
                L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=ts,
                                       max_num_offsets=1)])]), 7)
            p = lo.topics[0].partitions[0]
            out[name] = (p.error_code, p.offset)
        E = sub(23, "OffsetForLeaderTopic")
        ep = w.call(req(23, replica_id=-1, topics=[E(topic=topic, partitions=[
            E.OffsetForLeaderPartition(partition=partition, current_leader_epoch=-1, leader_epoch=0)])]), 4)
        p = ep.topics[0].partitions[0]
        out["offset_for_leader_epoch"] = (p.error_code, p.end_offset)
        D = sub(21, "DeleteRecordsTopic")
        dr = w.call(req(21, topics=[D(name=topic, partitions=[D.DeleteRecordsPartition(
            partition_index=partition, offset=0)])], timeout_ms=10000), 2)    # changes nothing
        p = dr.topics[0].partitions[0]
        out["delete_records"] = (p.error_code, p.low_watermark)
        dp = w.call(req(61, topics=[sub(61, "TopicRequest")(name=topic, partition_indexes=[partition])]), 0)
        p = dp.topics[0].partitions[0]
        out["describe_producers"] = (p.error_code, len(p.active_producers))
        M = sub(27, "WritableTxnMarker")
        wm = w.call(req(27, markers=[M(producer_id=4242, producer_epoch=0, transaction_result=False,
                                       topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                                       coordinator_epoch=0, transaction_version=0)]), 1)
        out["write_txn_markers"] = (wm.markers[0].topics[0].partitions[0].error_code,)
        dt = w.call(req(75, topics=[sub(75, "TopicRequest")(name=topic)], response_partition_limit=100,
                        cursor=None), 0)
        p = [p for p in dt.topics[0].partitions if p.partition_index == partition][0]
        out["describe_topic_partitions"] = (p.leader_id, list(p.offline_replicas))
        return out
    finally:
        w.close()


def find_coordinator(port: int, group: str) -> int:
    w = Wire(port)
    try:
        return w.call(req(10, key_type=0, coordinator_keys=[group]), 4).coordinators[0].error_code
    finally:
        w.close()


def metric(b, name: str) -> float | None:
    with urllib.request.urlopen(f"{b.metrics_url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def test_an_io_error_takes_one_log_dir_offline_and_the_other_serves(start_broker, tmp_path, monkeypatch):
    d1, d2 = str(tmp_path / "disk1"), str(tmp_path / "disk2")
    # partitions are spread over the dirs in turn: doomed-1 lands in disk2 (checked below)
    monkeypatch.setenv("TEST_KOMPAKT_IO_ERROR", os.path.join(d2, "doomed-1", "0000"))
    b = start_broker(config={"log.dirs": f"{d1},{d2}", "offsets.topic.num.partitions": "4"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in admin.create_topics([NewTopic("kept", 2, 1), NewTopic("doomed", 2, 1)]).values():
        fut.result(30)
    assert find_coordinator(b.port, "g") == 0               # creates __consumer_offsets in both dirs
    where = placement([d1, d2])
    bad_dir_parts = {n for n, d in where.items() if d == os.path.abspath(d2)}
    assert bad_dir_parts, where
    assert "doomed-1" in bad_dir_parts, where
    doomed = 1
    kept_good = [p for p in (0, 1) if where[f"kept-{p}"] == os.path.abspath(d1)]
    kept_bad = [p for p in (0, 1) if where[f"kept-{p}"] == os.path.abspath(d2)]
    assert kept_good and kept_bad, where
    before = {p: produce_all(b.bootstrap, "kept", p, 50) for p in (0, 1)}

    # the first write into the failing partition dir: EIO -> the whole second dir goes offline
    assert raw_produce(b.port, "doomed", doomed, b"x") == STORAGE_ERROR
    assert raw_produce(b.port, "kept", kept_bad[0], b"x") == STORAGE_ERROR
    assert raw_produce(b.port, "kept", kept_good[0], b"y") == 0
    more = produce_all(b.bootstrap, "kept", kept_good[0], 20)
    assert len(more) == 20

    # every API on one partition's log answers KAFKA_STORAGE_ERROR for it, none from memory ...
    answers = offline_answers(b.port, "kept", kept_bad[0])
    assert answers == {"fetch": (STORAGE_ERROR, -1, -1, -1),
                       "list_offsets_earliest": (STORAGE_ERROR, -1), "list_offsets_latest": (STORAGE_ERROR, -1),
                       "list_offsets_by_time": (STORAGE_ERROR, -1),
                       "offset_for_leader_epoch": (STORAGE_ERROR, -1), "delete_records": (STORAGE_ERROR, -1),
                       "describe_producers": (STORAGE_ERROR, 0), "write_txn_markers": (STORAGE_ERROR,),
                       "describe_topic_partitions": (-1, [1])}, answers
    # ... while a partition of the other dir answers them
    served = offline_answers(b.port, "kept", kept_good[0])
    assert served["fetch"][:2] == (0, 71) and served["list_offsets_latest"] == (0, 71), served
    assert served["describe_producers"][0] == 0 and served["describe_topic_partitions"] == (1, [])
    assert served["list_offsets_earliest"] == (0, 0) and served["delete_records"] == (0, 0)

    # a group whose __consumer_offsets partition is offline has no coordinator (no leader)
    groups = {where[f"__consumer_offsets-{group_partition(g, 4)}"]: g for g in ("g0", "g1", "g2", "g3", "g4", "g5")}
    assert find_coordinator(b.port, groups[os.path.abspath(d2)]) == COORDINATOR_NOT_AVAILABLE
    assert find_coordinator(b.port, groups[os.path.abspath(d1)]) == 0

    md = admin.list_topics(timeout=10).topics["kept"].partitions
    bad = md[kept_bad[0]]
    assert (bad.leader, bad.error.code(), list(bad.isrs)) == (-1, LEADER_NOT_AVAILABLE, [])
    assert md[kept_good[0]].leader == 1 and md[kept_good[0]].error is None

    assert metric(b, "kompakt_log_manager_offline_dirs") == 1
    with urllib.request.urlopen(f"{b.metrics_url}/ready", timeout=10) as r:
        ready = json.loads(r.read())
    assert ready["ready"] is True and ready["offline_log_dirs"] == [os.path.abspath(d2)]
    text = b.log_text()
    assert text.count("is offline: its") == 1 and "ERROR" in text.split("is offline: its")[0].rsplit("\n", 1)[-1]

    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        [entry] = ka.describe_log_dirs()
    finally:
        ka.close()
    dirs = {r["log_dir"]: r for r in entry["log_dirs"]}
    assert dirs[os.path.abspath(d2)]["error_code"] == STORAGE_ERROR and dirs[os.path.abspath(d2)]["topics"] == []
    good = dirs[os.path.abspath(d1)]
    assert good["error_code"] == 0 and good["total_bytes"] > 0 and 0 <= good["usable_bytes"] <= good["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in good["topics"] for p in t["partitions"]}
    assert sizes[("kept", kept_good[0])] > 0
    assert set(sizes) == {(n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))
                          for n, d in where.items() if d == os.path.abspath(d1)}

    # the disk is "replaced": restart without the fault; everything acknowledged is there
    monkeypatch.delenv("TEST_KOMPAKT_IO_ERROR")
    b.restart(kill=True)
    for p in (0, 1):
        got = [(o, v) for o, _, v in read_partition(b.bootstrap, "kept", p)]
        expected = before[p] + (more if p == kept_good[0] else [])
        assert [x for x in got if x[1] != b"y"] == expected
    assert raw_produce(b.port, "doomed", doomed, b"z") == 0


def test_describe_log_dirs_filters_by_the_requested_partitions(start_broker, tmp_path):
    d1, d2 = str(tmp_path / "a"), str(tmp_path / "b")
    b = start_broker(config={"log.dirs": f"{d1},{d2}"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("t", 4, 1)])["t"].result(30)
    produce_all(b.bootstrap, "t", 2, 10)
    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        [everything] = ka.describe_log_dirs()
        [some] = ka.describe_log_dirs(topic_partitions={"t": [2, 3, 9]})
    finally:
        ka.close()
    listed = {(r["log_dir"], p["partition_index"]) for r in everything["log_dirs"] for t in r["topics"]
              for p in t["partitions"]}
    assert {p for _, p in listed} == {0, 1, 2, 3} and {d for d, _ in listed} == {os.path.abspath(d1), os.path.abspath(d2)}
    chosen = {p["partition_index"]: p["partition_size"] for r in some["log_dirs"] for t in r["topics"]
              for p in t["partitions"]}
    assert set(chosen) == {2, 3} and chosen[2] > 0 and chosen[3] == 0


# ------------------------------------------------------------------------------------ disk full
@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs mounted for the test (root can mount; CI runs as root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot make a small filesystem for the disk-full test")
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"mounting a size-limited tmpfs is not permitted here ({out.stderr.strip()}); "
                    "the disk-full test needs root or CAP_SYS_ADMIN")
    yield str(mnt)
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: str) -> int:
    """Write a file until the filesystem is full; its size."""
    n = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n += f.write(chunk)
            except OSError:
                break
        for size in (4096, 512, 1):          # the last scraps too
            while True:
                try:
                    n += f.write(b"\0" * size)
                except OSError:
                    break
    return n


def partition_files(d: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def compact_now(b, topic: str) -> dict:
    req = urllib.request.Request(f"{b.metrics_url}/v1/partitions/{topic}/0/compact?wait=60", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=90) as r:
        return json.loads(r.read())


def test_a_full_disk_refuses_writes_loses_nothing_and_recovers(start_broker, small_disk):
    b = start_broker(config={"log.dirs": small_disk, "log.cleaner.backoff.ms": "3600000",
                             "log.cleaner.dedupe.buffer.size": str(24 * 20_000)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topics = [NewTopic("events", 1, 1, config={"internal.segment.bytes": "100000"}),
              NewTopic("state", 1, 1, config={"cleanup.policy": "compact", "internal.segment.bytes": "40000",
                                              # only compact-now cleans it: no background clean races the checks
                                              "min.cleanable.dirty.ratio": "1"})]
    for fut in admin.create_topics(topics).values():
        fut.result(30)
    state = produce(b.bootstrap, "state", [(b"k%d" % (i % 50), b"v%05d" % i + b"s" * 100) for i in range(2000)])
    events = produce_all(b.bootstrap, "events", 0, 300)
    state_dir = os.path.join(small_disk, "state-0")
    assert len([n for n in os.listdir(state_dir) if n.endswith(".log")]) > 3

    filler = os.path.join(small_disk, "filler")
    assert fill(filler) > 0
    before = partition_files(state_dir)
    # produce: KAFKA_STORAGE_ERROR, and the log does not move
    assert raw_produce(b.port, "events", 0, b"no room" * 500) == STORAGE_ERROR
    assert raw_produce(b.port, "events", 0, b"no room" * 500) == STORAGE_ERROR
    # the cleaner cannot write its .cleaned file: the clean is abandoned, the partition unchanged
    outcome = compact_now(b, "state")
    assert outcome["stats"]["cleaned"] is False and "disk full" in outcome["stats"]["reason"], outcome
    assert partition_files(state_dir) == before
    with urllib.request.urlopen(f"{b.metrics_url}/v1/partitions/state/0", timeout=10) as r:
        assert not (json.loads(r.read()).get("cleaner") or {}).get("uncleanable")
    assert "is offline" not in b.log_text()                 # a full disk is not a failed disk
    assert metric(b, "kompakt_log_manager_offline_dirs") == 0

    # space returns: writes and cleaning work again, nothing acknowledged is lost
    os.unlink(filler)
    assert raw_produce(b.port, "events", 0, b"room again") == 0
    outcome = compact_now(b, "state")
    assert outcome["stats"].get("cleaned", True) is not False, outcome
    log_bytes = lambda files: sum(v for n, v in files.items() if n.endswith(".log"))  # noqa: E731
    assert log_bytes(partition_files(state_dir)) < log_bytes(before) / 2   # 50 keys left of 2000 records
    assert not [n for n in os.listdir(state_dir) if n.endswith((".cleaned", ".swap"))]
    more = produce_all(b.bootstrap, "events", 0, 10)

    def check():
        got = [(o, v) for o, _, v in read_partition(b.bootstrap, "events")]
        assert [x for x in got if x[1] != b"room again"] == events + more
        assert len(got) == len(events) + len(more) + 1
        check_against_model(state, read_partition(b.bootstrap, "state"))

    check()
    b.restart(kill=True)
    check()
