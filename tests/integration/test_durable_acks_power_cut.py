"""A power cut right after acknowledgements (the page-cache model, kompakt/storage/power_cut.py)
under a real broker process with the default settings (durable acks, no flush.* key): every
record acknowledged to an acks=all producer, every committed offset and a committed transaction
survive; with durable acks off the same cut loses them (so the model does cut what is unsynced)."""
from __future__ import annotations

import confluent_kafka as ck
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
