"""Transactions across crashes, with real processes: the broker SIGKILLed with a transaction Ongoing,
right after PrepareCommit is written, and between two markers (crash points armed with
TEST_KOMPAKT_CRASH_AT, kompakt/storage/faults.py); a transactional producer SIGKILLed mid-transaction
(aborted at its timeout, the last stable offset moves on); and consume-transform-produce exactly
once across a broker SIGKILL in the middle of a commit's markers.

After each restart read_committed readers must see every committed record exactly once and no
aborted or open one."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import confluent_kafka as ck
import pytest

from txn_support import DEADLINE_S, create_topics, marker_kinds, read_values, txn_broker

CRASH_ENV = "TEST_KOMPAKT_CRASH_AT"


def producer(bootstrap, tid, **conf):
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "message.timeout.ms": 10000,
                     "transaction.timeout.ms": 60000, **conf})
    p.init_transactions(DEADLINE_S)
    return p


def send(p, topic, values, partitions=2):
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(DEADLINE_S) == 0


def wait_dead(b, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while b.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not b.running, "the armed crash point was not reached"
    b.proc.wait()


def committed_values(b, topic, expect=None):
    got = read_values(b.bootstrap, [(topic, 0), (topic, 1)], committed=True, expect=expect)
    return sorted(got[(topic, 0)] + got[(topic, 1)])


@pytest.mark.slow
# crash hits count from the broker's start: the first commit writes 3 markers (other-0, out-0, out-1),
# so the second commit's Prepare is hit 2 and its second marker hit 5
@pytest.mark.parametrize("point", ["ongoing", "txn_prepare_written:2", "txn_marker_written:5"])
def test_broker_sigkill_during_a_transaction(tmp_path, monkeypatch, point):
    """Ongoing: the restarted coordinator still has the transaction; a new instance of the
    producer fences and aborts it. PrepareCommit written / markers half written: the restart
    completes the commit (the client's own commit may or may not have been answered)."""
    monkeypatch.delenv(CRASH_ENV, raising=False)
    if point != "ongoing":
        monkeypatch.setenv(CRASH_ENV, point)
    b = txn_broker(tmp_path)
    create_topics(b.bootstrap, {"out": 2, "other": 1})
    p = producer(b.bootstrap, "crash-txn")
    p.begin_transaction()
    p.produce("other", value=b"done-0", partition=0)   # a third partition: markers 1, 2, 3
    send(p, "out", [b"before-%d" % i for i in range(6)])
    assert p.commit_transaction(DEADLINE_S) is None
    p.begin_transaction()
    send(p, "out", [b"txn-%d" % i for i in range(6)])
    p.produce("other", value=b"txn-other", partition=0)
    assert p.flush(DEADLINE_S) == 0
    if point == "ongoing":
        b.kill()
    else:
        try:
            p.commit_transaction(1)             # the broker dies inside this EndTxn
        except ck.KafkaException:
            pass
        wait_dead(b)
    monkeypatch.delenv(CRASH_ENV, raising=False)
    b.start()
    expect_txn = point != "ongoing"
    if not expect_txn:
        # the open transaction survived the restart: the LSO still holds readers before it
        assert committed_values(b, "out", expect=6) == sorted(b"before-%d" % i for i in range(6))
        again = producer(b.bootstrap, "crash-txn")   # fences the old instance: its transaction aborts
        again.begin_transaction()
        send(again, "out", [b"after-0"])
        again.commit_transaction(DEADLINE_S)
    want = sorted([b"before-%d" % i for i in range(6)] + ([b"txn-%d" % i for i in range(6)] if expect_txn
                                                             else [b"after-0"]))
    assert committed_values(b, "out", expect=len(want)) == want
    other = read_values(b.bootstrap, [("other", 0)], committed=True, expect=2 if expect_txn else 1)[("other", 0)]
    assert other == ([b"done-0", b"txn-other"] if expect_txn else [b"done-0"])
    kinds = marker_kinds(b.log_dir, "out", 0) + marker_kinds(b.log_dir, "out", 1)
    if expect_txn:   # a restart writes every marker again: a second COMMIT where one was written
        assert kinds.count("ABORT") == 0 and kinds.count("COMMIT") >= 4
    else:
        assert (kinds.count("COMMIT"), kinds.count("ABORT")) == (3, 2)
    if point != "ongoing":
        assert f"test hook {CRASH_ENV}={point.split(':')[0]}" in b.log_text()
    b.stop()


PRODUCER_SCRIPT = textwrap.dedent("""
    import sys, time, confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "doomed",
                     "transaction.timeout.ms": 3000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce("t", value=b"open-%d" % i, partition=0)
    assert p.flush(30) == 0
    print("in-transaction", flush=True)
    time.sleep(600)
""")


def lso(bootstrap, topic, partition=0):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=DEADLINE_S, cached=False)[1]
    finally:
        c.close()


@pytest.mark.slow
def test_producer_sigkill_mid_transaction_is_aborted_at_its_timeout(tmp_path):
    b = txn_broker(tmp_path)
    create_topics(b.bootstrap, {"t": 1})
    plain = ck.Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("t", value=b"plain-0", partition=0)
    plain.flush(DEADLINE_S)
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER_SCRIPT, b.bootstrap], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "in-transaction"
        proc.kill()                                  # SIGKILL: no abort, no EndTxn
        proc.wait()
        plain.produce("t", value=b"plain-1", partition=0)   # after the open transaction
        plain.flush(DEADLINE_S)
        assert lso(b.bootstrap, "t") == 1            # held at the open transaction's first offset
        assert read_values(b.bootstrap, [("t", 0)], committed=True, expect=1)[("t", 0)] == [b"plain-0"]
        deadline = time.monotonic() + DEADLINE_S     # timeout 3 s, checked every 500 ms
        while lso(b.bootstrap, "t") != 8 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lso(b.bootstrap, "t") == 8            # 1 + 5 aborted + plain-1 + the ABORT marker
        assert read_values(b.bootstrap, [("t", 0)], committed=True, expect=2)[("t", 0)] == [b"plain-0", b"plain-1"]
        assert marker_kinds(b.log_dir, "t", 0) == ["ABORT"]
        assert "aborting transaction of doomed" in b.log_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    b.stop()


# -- consume-transform-produce --------------------------------------------------------------------

INPUTS = 240
BATCH = 20


def process(bootstrap, until=None):
    """Read `in` (read_committed, group `ctp`), write `f(x)` to `out` and commit the consumed
    offsets in the same transaction, BATCH records at a time; returns the number of batches
    committed, stopping at `until` batches or at the first client error (the broker died)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "isolation.level": "read_committed",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition("in", 0)])
    committed = consumer.committed([ck.TopicPartition("in", 0)], timeout=DEADLINE_S)
    if committed[0].offset >= 0:
        consumer.seek(committed[0])
    p = producer(bootstrap, "ctp-txn")
    done = 0
    try:
        while until is None or done < until:
            msgs = consumer.consume(BATCH, 2.0)
            if not msgs:
                break
            p.begin_transaction()
            for m in msgs:
                assert m.error() is None
                p.produce("out", value=b"f(" + m.value() + b")", partition=0)
            p.send_offsets_to_transaction([ck.TopicPartition("in", 0, msgs[-1].offset() + 1)],
                                          consumer.consumer_group_metadata(), 5)
            p.commit_transaction(5)
            done += 1
    except ck.KafkaException:
        return done, False                            # the broker went away mid-transaction
    finally:
        consumer.close()
    return done, True


@pytest.mark.slow
def test_consume_transform_produce_exactly_once_across_a_broker_sigkill(tmp_path, monkeypatch):
    # the broker dies between two markers of the 4th commit (each commit writes 2: out-0 and the
    # group's __consumer_offsets partition)
    monkeypatch.setenv(CRASH_ENV, "txn_marker_written:7")
    b = txn_broker(tmp_path)
    create_topics(b.bootstrap, {"in": 1, "out": 1})
    plain = ck.Producer({"bootstrap.servers": b.bootstrap})
    for i in range(INPUTS):
        plain.produce("in", value=b"%03d" % i, partition=0)
    plain.flush(DEADLINE_S)
    done, finished = process(b.bootstrap)
    assert not finished and done == 3
    wait_dead(b)
    monkeypatch.delenv(CRASH_ENV)
    b.start()                                          # the 4th transaction is completed at load
    done2, finished2 = process(b.bootstrap)
    assert finished2 and done2 == INPUTS // BATCH - 4
    out = read_values(b.bootstrap, [("out", 0)], committed=True, expect=INPUTS)[("out", 0)]
    assert out == [b"f(%03d)" % i for i in range(INPUTS)]   # each input exactly once, in order
    b.stop()
