"""A transaction whose markers are due while one of its partitions' log dir is offline, with real
processes: the broker dies right after PrepareCommit is written (crash point
`txn_prepare_written`, kompakt/storage/faults.py), restarts with the second log dir unusable, and
later restarts with that dir back.

Kafka: a partition whose log dir is offline has no leader (its log is not created anywhere else:
LogManager.getOrCreateLog refuses a not-new partition while a dir is offline), so the marker
channel keeps its marker in the unknown-leader queue and retries; only a partition whose topic is
gone is skipped (TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue). So the transaction
stays PrepareCommit, the partition answers KAFKA_STORAGE_ERROR, and once the dir is back the
COMMIT marker lands in the partition's own log: read_committed readers see the records and the
last stable offset moves past them."""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
import pytest

from txn_support import DEADLINE_S, create_topics, marker_kinds, read_values, txn_broker
from wire_support import Wire, req

from kompakt.protocol.txn_records import partition_for

CRASH_ENV = "TEST_KOMPAKT_CRASH_AT"
STORAGE_ERROR = 56


def placement(log_dirs):
    """partition dir name -> the log dir holding it."""
    return {name: d for d in log_dirs if os.path.isdir(d)
            for name in os.listdir(d) if os.path.isdir(os.path.join(d, name))}


def txn_state(port: int, tid: str) -> str:
    w = Wire(port)
    try:
        [state] = w.call(req(65, transactional_ids=[tid]), 0).transaction_states
    finally:
        w.close()
    assert state.error_code == 0, state
    return state.transaction_state


def produce_error(port: int, topic: str, partition: int) -> int:
    from kafka.protocol.producer.produce import ProduceRequest
    from kompakt.protocol.records import build_batch
    T = ProduceRequest.TopicProduceData
    w = Wire(port)
    try:
        r = w.call(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=build_batch([(b"k", b"v")]))])]), 8)
    finally:
        w.close()
    return r.responses[0].partition_responses[0].error_code


@pytest.mark.slow
def test_markers_wait_for_a_partition_whose_log_dir_is_offline(tmp_path, monkeypatch):
    d1, d2 = str(tmp_path / "disk1"), str(tmp_path / "disk2")
    monkeypatch.setenv(CRASH_ENV, "txn_prepare_written")
    # four state partitions over both dirs: the state of the live ones must load with some offline
    b = txn_broker(tmp_path / "b", **{"log.dirs": f"{d1},{d2}", "transaction.state.log.num.partitions": "4"})
    create_topics(b.bootstrap, {"t": 4})
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "off", "message.timeout.ms": 10000})
    p.init_transactions(DEADLINE_S)
    where = placement([d1, d2])
    # the dir holding the coordinator's and the groups' partitions stays; the other goes offline
    keep = where[f"__transaction_state-{partition_for('off', 4)}"]
    lose = d2 if keep == d1 else d1
    assert any(where[f"__transaction_state-{i}"] == lose for i in range(4)), where
    stays = next(i for i in range(4) if where[f"t-{i}"] == keep)
    goes = next(i for i in range(4) if where[f"t-{i}"] == lose)
    p.begin_transaction()
    p.produce("t", value=b"kept", partition=stays)
    p.produce("t", value=b"lost-for-now", partition=goes)
    assert p.flush(DEADLINE_S) == 0
    try:
        p.commit_transaction(1)            # the broker dies once PrepareCommit is written
    except ck.KafkaException:
        pass
    deadline = time.monotonic() + DEADLINE_S
    while b.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not b.running, "the armed crash point was not reached"
    b.proc.wait()
    monkeypatch.delenv(CRASH_ENV)

    os.rename(lose, lose + ".away")        # the disk is gone: a file stands where the dir was
    with open(lose, "w") as f:
        f.write("not a dir")
    b.start()
    # the partition is offline: not recreated empty elsewhere, its marker waits
    assert f"t-{goes}" not in os.listdir(keep)
    assert produce_error(b.port, "t", goes) == STORAGE_ERROR
    time.sleep(1.5)                        # a marker retry or two (every second)
    assert txn_state(b.port, "off") == "PrepareCommit"
    assert marker_kinds(keep, "t", stays) == ["COMMIT"]
    b.stop()

    os.unlink(lose)
    os.rename(lose + ".away", lose)        # the disk is back
    b.start()
    deadline = time.monotonic() + DEADLINE_S
    while txn_state(b.port, "off") != "CompleteCommit" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert txn_state(b.port, "off") == "CompleteCommit"
    assert marker_kinds(lose, "t", goes) == ["COMMIT"]
    got = read_values(b.bootstrap, [("t", stays), ("t", goes)], committed=True, expect=2)
    assert got == {("t", stays): [b"kept"], ("t", goes): [b"lost-for-now"]}
    b.stop()
