"""Power cuts under a real broker (the page-cache model of kompakt/storage/power_cut.py): after a cut
the broker starts on what was synced, with no manual step, and keeps what it acknowledged as durable."""
from __future__ import annotations

import os

import pytest
from compaction_support import create_topic, produce, read_partition
from kompakt.testing.poll import wait_until
from test_compaction_crash import SLOW_START, TOPIC_CONFIG, compact_now, restart_and_check

from kompakt.storage.topic_store import read_partition_metadata


def partition_dirs(log_dir):
    return sorted(n for n in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, n)))


def test_a_cut_after_acknowledged_appends_loses_nothing_and_leaves_no_empty_state_file(start_broker):
    # flush.messages=1: every append is synced before it is acknowledged (the durable setting today)
    b = start_broker(power=True, config={"log.flush.interval.messages": "1", "offsets.topic.num.partitions": "3"})
    create_topic(b.bootstrap, "cut", {}, partitions=2)
    acked = produce(b.bootstrap, "cut", [(b"k%d" % i, b"v%d" % i) for i in range(50)], partition=1)
    b.cut()
    # partition.metadata and the first leader epoch are written unsynced at creation (derived from
    # the topic store and the batches at start-up), so the cut may leave them empty ...
    b.start()
    # ... and start-up makes them again, with no manual step
    assert "left as is" not in b.log_text()
    dirs = partition_dirs(b.log_dir)
    assert "cut-0" in dirs and "cut-1" in dirs
    for d in dirs:
        path = os.path.join(b.log_dir, d)
        assert read_partition_metadata(path) is not None, f"{d}/partition.metadata unreadable after the restart"
    epochs = open(os.path.join(b.log_dir, "cut-1", "leader-epoch-checkpoint")).read()
    assert epochs == "0\n1\n0 0\n", epochs
    got = read_partition(b.bootstrap, "cut", partition=1)
    assert got == acked


# Power cuts at each step of the cleaner's swap (kompakt/cleaner/log_cleaner.py's steps, and
# Log.replace_segments' renames: swap_renamed, swap_old_deleted). flush.messages=1 makes every
# acknowledged record durable, so a cut may lose none; the swap is all-or-nothing: every record read
# back is the one produced at its offset, each key's latest survives, no segment is lost.
@pytest.mark.parametrize("point", ["before_swap", "swap_renamed", "after_first_group", "swap_old_deleted",
                                   "before_checkpoint", "after_checkpoint"])
def test_a_power_cut_at_each_swap_step(start_broker, monkeypatch, point):
    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", point)
    b = start_broker(power=True, config=dict(SLOW_START, **{"log.flush.interval.messages": "1"}))
    create_topic(b.bootstrap, "crash", TOPIC_CONFIG)
    produced = produce(b.bootstrap, "crash", [(b"k%d" % (i % 40), b"value-%d" % i) for i in range(400)],
                       batch_size=1500)
    compact_now(b, "crash")
    wait_until(lambda: b.proc.poll() is not None, "the broker to cut its power", timeout=120)
    assert f"test hook TEST_KOMPAKT_CRASH_AT={point}" in b.log_text()
    b.restore_after_crash()
    restart_and_check(b, produced, monkeypatch)


def test_records_deleted_by_delete_records_stay_deleted_after_a_cut(start_broker):
    """DeleteRecords is answered once the log start offset is checkpointed (synced): a cut right
    after the answer must not bring the deleted records back."""
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    b = start_broker(power=True, config={"log.flush.interval.messages": "1"})
    create_topic(b.bootstrap, "trim", {})
    produce(b.bootstrap, "trim", [(b"k%d" % i, b"v") for i in range(30)])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    (fut,) = admin.delete_records([CTP("trim", 0, 20)]).values()
    assert fut.result(30).low_watermark == 20
    b.cut()
    b.start()
    got = read_partition(b.bootstrap, "trim")
    assert [o for o, _, _ in got] == list(range(20, 30))


# Durable acknowledgements (the defaults) and a cut inside a transaction's commit: after its
# Prepare is synced (txn_prepare_written) or between its markers (txn_marker_written): the
# transaction is all-or-nothing after the restart, all once its EndTxn was answered; what was
# acknowledged before (records, a group commit, the first transaction) is all there.
# (A cut right after the answers: tests/integration/test_durable_acks_power_cut.py.)
@pytest.mark.parametrize("point", ["txn_prepare_written:2", "txn_marker_written:5"])
def test_a_cut_inside_a_transaction_commit_keeps_it_all_or_nothing(start_broker, monkeypatch, point):
    import confluent_kafka as ck
    from txn_support import DEADLINE_S, TXN_BROKER_CONFIG, committed_offset, read_values

    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", point)
    b = start_broker(power=True, config=TXN_BROKER_CONFIG)
    create_topic(b.bootstrap, "out", {}, partitions=2)
    create_topic(b.bootstrap, "other", {})
    acked = produce(b.bootstrap, "other", [(b"k%d" % i, b"v%d" % i) for i in range(40)])
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "cut-txn",
                     "transaction.timeout.ms": 60000})
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()                     # a third partition: the first commit writes 3 markers
    p.produce("other", value=b"first-other", partition=0)
    for i in range(6):
        p.produce("out", value=b"first-%d" % i, partition=i % 2)
    p.commit_transaction(DEADLINE_S)
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "cut-group", "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition("other", 0, 25)], asynchronous=False)
    c.close()
    p.begin_transaction()
    for i in range(6):
        p.produce("out", value=b"second-%d" % i, partition=i % 2)
    p.produce("other", value=b"second-other", partition=0)
    second_acked = False
    try:
        p.commit_transaction(2)               # the power goes inside this EndTxn
        second_acked = True
    except ck.KafkaException:
        pass
    wait_until(lambda: b.proc.poll() is not None, "the broker to cut its power", timeout=60)
    b.restore_after_crash()
    monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT")
    b.start()
    got = read_partition(b.bootstrap, "other")
    assert [r for r in got if r[0] < len(acked)] == acked                 # nothing acknowledged is lost
    assert committed_offset(b.bootstrap, "cut-group", "other", 0) == 25   # the acknowledged commit too
    values = read_values(b.bootstrap, [("out", 0), ("out", 1)], committed=True, expect=6)
    out = sorted(values[("out", 0)] + values[("out", 1)])
    first = sorted(b"first-%d" % i for i in range(6))
    second = sorted(b"second-%d" % i for i in range(6))
    assert out in (first, sorted(first + second)), out                    # all or nothing ...
    if second_acked:
        assert out == sorted(first + second)                              # ... all once answered


def test_transaction_version_2_state_survives_cuts(start_broker, monkeypatch):
    """A client of transaction version 2 (raw requests: Produce v12 adding partitions itself,
    EndTxn v5) against cuts of the power. (1) Right after an acknowledged (acks=all) produce that
    added a partition: the transaction's record of that partition is on disk too, so the restart
    knows the partition is in the transaction (else its records would never be marked). (2) Inside
    the next EndTxn, once its Prepare is appended (synced or not: either way): the client's retry,
    same epoch, is answered with the bumped epoch, and everything acknowledged commits once."""
    from txn_support import TXN_BROKER_CONFIG, batches, marker_kinds, read_values
    from wire_support import Wire, req, sub

    from kompakt.protocol.records import build_batch, decode_records
    from kompakt.protocol.txn_records import TRANSACTION_STATE_TOPIC, decode_value, partition_for

    b = start_broker(power=True, config=TXN_BROKER_CONFIG)
    create_topic(b.bootstrap, "tv2", {}, partitions=2)
    tid = "tv2-cut"

    def call(request, version):
        wire = Wire(b.port)
        try:
            return wire.call(request, version)
        finally:
            wire.sock.close()

    def produce_v12(epoch, seq, partition):
        batch = build_batch([(b"k", b"e%d-s%d" % (epoch, seq))], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, is_transactional=True)
        T = sub(0, "TopicProduceData")
        answer = call(req(0, transactional_id=tid, acks=-1, timeout_ms=10000, topic_data=[
            T(name="tv2", partition_data=[T.PartitionProduceData(index=partition, records=batch)])]), 12)
        return answer.responses[0].partition_responses[0].error_code

    def end_v5(epoch, commit=True):
        answer = call(req(26, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit), 5)
        return answer.error_code, answer.producer_id, answer.producer_epoch

    def described():
        state = call(req(65, transactional_ids=[tid]), 0).transaction_states[0]
        return state.transaction_state, state.producer_epoch, sorted((t.topic, p) for t in state.topics
                                                                     for p in t.partitions)

    answer = call(req(22, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), 5)
    pid = answer.producer_id
    assert (answer.error_code, answer.producer_epoch) == (0, 0)
    assert produce_v12(0, 0, 0) == 0 and produce_v12(0, 0, 1) == 0
    assert end_v5(0) == (0, pid, 1)
    assert produce_v12(1, 0, 0) == 0                  # acknowledged: tv2-0 joined transaction 2
    b.cut()
    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", "txn_prepare_written:1")
    b.start()
    assert described() == ("Ongoing", 1, [("tv2", 0)])
    assert produce_v12(1, 1, 0) == 0 and produce_v12(1, 0, 1) == 0
    with pytest.raises((AssertionError, OSError)):    # no answer: the connection closes
        end_v5(1)                                     # the power goes once Prepare is appended
    wait_until(lambda: b.proc.poll() is not None, "the broker to cut its power", timeout=60)
    b.restore_after_crash()
    monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT")
    b.start()
    assert end_v5(1) == (0, pid, 2)                   # the retry: the epoch the end moved to
    assert described() == ("CompleteCommit", 2, [])
    values = read_values(b.bootstrap, [("tv2", 0), ("tv2", 1)], committed=True, expect=5)
    assert sorted(values[("tv2", 0)] + values[("tv2", 1)]) == [
        b"e0-s0", b"e0-s0", b"e1-s0", b"e1-s0", b"e1-s1"]
    b.stop()
    # the markers carry the epoch each end moved to
    for partition in (0, 1):
        assert [(h.producer_id, h.producer_epoch) for h, _, _ in batches(b.log_dir, "tv2", partition)
                if h.is_control] == [(pid, 1), (pid, 2)]
        assert marker_kinds(b.log_dir, "tv2", partition) == ["COMMIT", "COMMIT"]
    # the coordinator's records are the flexible v1 values (transaction.version 2 is finalized)
    values = [decode_value(r.value) for h, data, pos in batches(b.log_dir, TRANSACTION_STATE_TOPIC,
                                                                partition_for(tid, 3))
              for r in decode_records(data, pos, h)]
    assert {v["version"] for v in values} == {1} and values[-1]["producer_epoch"] == 2


def test_a_cut_at_a_random_moment_under_load_keeps_every_acknowledged_record(start_broker):
    """acks=all producers keep writing into 3 partitions while the power goes (the broker is
    frozen first, so every acknowledgement a client got was sent before the cut): after the
    restart every acknowledged record is at its offset, and offsets go on without reuse."""
    import random
    import threading
    import time

    import confluent_kafka as ck

    b = start_broker(power=True, config={"num.partitions": "3"})
    create_topic(b.bootstrap, "load", {}, partitions=3)
    acked, stop = {}, threading.Event()

    def run():
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 5000, "log_level": 2})

        def cb(err, msg):
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()
        i = 0
        while not stop.is_set():
            try:
                p.produce("load", value=b"v%d" % i, partition=i % 3, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            p.poll(0.001)
        p.flush(6)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(random.uniform(0.8, 2.0))
    b.cut()
    stop.set()
    t.join(30)
    assert len(acked) > 100
    b.start()
    for part in range(3):
        got = {o: v for o, _, v in read_partition(b.bootstrap, "load", partition=part)}
        mine = {o: v for (p_, o), v in acked.items() if p_ == part}
        assert all(got.get(o) == v for o, v in mine.items()), f"partition {part}: acknowledged records lost"
        (o, _, _), = produce(b.bootstrap, "load", [(None, b"after")], partition=part)
        assert o > max(mine, default=-1), f"partition {part}: offset {o} handed out again"
