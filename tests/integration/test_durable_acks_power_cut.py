"""A power cut right after acknowledgements (the page-cache model, kompakt/storage/power_cut.py)
under a real broker process with the default settings (durable acks, no flush.* key): every
record acknowledged to an acks=all producer, every committed offset and a committed transaction
survive; with durable acks off the same cut loses them (so the model does cut what is unsynced).
A sync that fails (EIO, or ENOSPC from write-back) fails the acks=all requests it covered with
KAFKA_STORAGE_ERROR and takes the log dir offline, so nothing is acknowledged after it although
the next sync would succeed; every record acknowledged before it survives the cut."""
from __future__ import annotations

import os
import re

import confluent_kafka as ck
import pytest
from compaction_support import create_topic, read_partition

WAIT_S = 30


def produce_acked(bootstrap, topic, n, partitions):
    """n records over `partitions`, idempotent acks=all; the (partition, offset, value) acknowledged."""
    acked = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2})

    def cb(err, msg):
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.value()))
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions, on_delivery=cb)
        p.poll(0)
    assert p.flush(WAIT_S) == 0
    return sorted(acked)


def commit(bootstrap, group, topic, offset):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[ck.TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap, group, topic):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([ck.TopicPartition(topic, 0)], timeout=WAIT_S)[0].offset
    finally:
        c.close()


def transact(bootstrap, topic, values):
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "cut-tx", "linger.ms": 2})
    p.init_transactions(WAIT_S)
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v, partition=0)
    p.commit_transaction(WAIT_S)


def read_committed(bootstrap, topic):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        out = []
        while True:
            m = c.poll(WAIT_S)
            assert m is not None, "no end of partition"
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                return out
            out.append(m.value())
    finally:
        c.close()


def values(bootstrap, topic, partitions):
    return sorted((p, off, v) for p in range(partitions) for off, _, v in read_partition(bootstrap, topic, p))


def test_a_power_cut_right_after_the_acknowledgements_keeps_every_acknowledged_record_and_commit(start_broker):
    b = start_broker(power=True)
    create_topic(b.bootstrap, "cut", {}, partitions=3)
    create_topic(b.bootstrap, "txn", {})
    acked = produce_acked(b.bootstrap, "cut", 300, 3)
    commit(b.bootstrap, "g", "cut", 123)
    transact(b.bootstrap, "txn", [b"t1", b"t2"])
    b.cut()
    b.start()
    assert values(b.bootstrap, "cut", 3) == acked
    assert committed(b.bootstrap, "g", "cut") == 123
    assert read_committed(b.bootstrap, "txn") == [b"t1", b"t2"]


def test_with_durable_acks_off_the_same_cut_takes_acknowledged_records_back(start_broker):
    b = start_broker(power=True, config={"kompakt.durable.acks.enable": "false"})
    create_topic(b.bootstrap, "cut", {}, partitions=3)
    acked = produce_acked(b.bootstrap, "cut", 300, 3)
    commit(b.bootstrap, "g", "cut", 123)
    b.cut()
    b.start()
    assert len(values(b.bootstrap, "cut", 3)) < len(acked)
    assert committed(b.bootstrap, "g", "cut") != 123


def produce_one(bootstrap, topic, value, timeout_ms=30_000):
    """One acks=all record, never retried: its delivery error (None when acknowledged)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retries": 0,
                     "enable.idempotence": False, "message.timeout.ms": timeout_ms})
    out = []
    p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: out.append(err))
    assert p.flush(WAIT_S) == 0
    return out[0]


@pytest.mark.parametrize("errno_name", ["EIO", "ENOSPC"])
def test_a_failed_sync_fails_its_acks_and_takes_the_log_dir_offline_never_acknowledging_after_it(
        start_broker, monkeypatch, errno_name):
    # the 3rd sync of the partition's segment fails once (TEST_KOMPAKT_SYNC_ERROR, storage/faults.py);
    # every later sync would succeed, as Linux's next fsync after a lost write-back does
    monkeypatch.setenv("TEST_KOMPAKT_SYNC_ERROR", f"{os.path.join('doomed-0', '0' * 20)}.log:3:{errno_name}")
    b = start_broker(power=True)
    create_topic(b.bootstrap, "doomed", {})
    acked, err = [], None
    for i in range(3):
        err = produce_one(b.bootstrap, "doomed", b"v%d" % i)
        if err is not None:
            break
        acked.append(b"v%d" % i)
    assert acked and err is not None and err.code() == ck.KafkaError.KAFKA_STORAGE_ERROR, err
    # the dir is offline: nothing more is acknowledged there, although the disk would sync again
    again = produce_one(b.bootstrap, "doomed", b"after", timeout_ms=3000)
    assert again is not None, "acknowledged after a failed sync"
    assert re.search(r"Log dir \S+ is offline", b.log_text()), b.log_text()[-3000:]
    b.cut()
    monkeypatch.delenv("TEST_KOMPAKT_SYNC_ERROR")
    b.start()
    assert [v for _, _, v in read_partition(b.bootstrap, "doomed")][:len(acked)] == acked
