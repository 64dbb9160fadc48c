"""Transaction version 2 across broker deaths, timeouts and a classic-protocol client beside it: the
Java producer (TV2: Produce v12 adds partitions, EndTxn v5 bumps the epoch) and confluent-kafka
(librdkafka, the classic protocol: AddPartitionsToTxn, EndTxn that keeps the epoch) against one
`kompakt serve` that is SIGKILLed mid-transaction and right after a PrepareCommit record is
written (before any marker, before the answer), then started again on the same port.

What Kafka 4.0 does and these hold (TransactionCoordinator.endTransaction for TV2,
TransactionStateManager's load completing Prepare* transactions, the client's TransactionManager
retrying EndTxn after a disconnect): a retried EndTxn v5 whose end completed meanwhile is answered
NONE with the bumped epoch (its epoch + 1 is the coordinator's), so the producer goes on; an open
transaction survives a restart and commits; the coordinator's own abort of a timed-out
transaction bumps the epoch twice under TV2 (fence, then the abort's own bump), and a new
instance gets one more, as after a new instance's InitProducerId mid-transaction (epoch + 2 abort,
+ 3 for it); an abortable error is left by EndTxn v5's bump alone. read_committed consumers see
every committed record exactly once, also after the cleaner dropped the aborted batch (its marker
carries a later epoch than its data).
"""
from __future__ import annotations

import threading

import confluent_kafka as ck
import pytest

from kompakt.testing.broker import SUBPROCESS, start_broker
from kompakt.testing.poll import wait_until
from test_java_transactions import epochs, read_all, send, txn_producer


# the module's shared broker (tests/interop/conftest.py): the timeout check runs every 200 ms
BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture(scope="module")
def shell(java, interop_broker):
    process = java.start("ClientShell", interop_broker.bootstrap)
    yield process
    process.close()


@pytest.fixture
def broker(tmp_path):
    """A broker of the test's own that it kills: a restart keeps its port, so the clients find it again."""
    b = start_broker(tmp_path, mode=SUBPROCESS)
    yield b
    b.stop()


@pytest.fixture
def restart_shell(java, broker):
    process = java.start("ClientShell", broker.bootstrap)
    yield process
    process.close()


def restart(broker, monkeypatch, crash_at: str | None) -> None:
    broker.kill()
    if crash_at:
        monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", crash_at)
    else:
        monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT", raising=False)
    broker.start()


def test_tv2_and_tv0_transactions_survive_sigkills_mid_transaction_and_after_prepare_commit(
        restart_shell, broker, monkeypatch):
    shell = restart_shell
    topic = "jr-restart"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1,
                                        "configs": {"cleanup.policy": "compact"}}])
    txn_producer(shell, "p", "jr-java")
    shell.call("beginTransaction", name="p")
    send(shell, "p", topic, ["t1a", "t1b"])
    shell.call("commitTransaction", name="p")

    # both transactions open when the broker dies
    shell.call("beginTransaction", name="p")
    send(shell, "p", topic, ["t2a"])
    classic = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "jr-classic",
                           "linger.ms": 0})
    classic.init_transactions(30)
    classic.begin_transaction()
    classic.produce(topic, key=b"c1", value=b"c1", partition=0)
    assert classic.flush(30) == 0
    restart(broker, monkeypatch, crash_at="txn_prepare_written:1")

    send(shell, "p", topic, ["t2b"])            # the transaction goes on after the restart
    # the broker dies once PrepareCommit is written: no marker, no answer; the client resends
    # EndTxn v5 at its epoch to the next broker, which completed the commit while starting
    answer = {}
    committing = threading.Thread(target=lambda: answer.update(shell.call("commitTransaction", name="p",
                                                                          timeout=90)))
    committing.start()
    wait_until(lambda: not broker.running, "the broker to die at txn_prepare_written", timeout=60)
    assert "test hook TEST_KOMPAKT_CRASH_AT=txn_prepare_written" in broker.log_text()
    restart(broker, monkeypatch, crash_at=None)
    committing.join(90)
    assert not committing.is_alive() and "error" not in answer, answer

    classic.commit_transaction(30)               # the classic client's transaction survived too
    classic.flush(5)
    shell.call("beginTransaction", name="p")
    send(shell, "p", topic, ["t3"])
    shell.call("abortTransaction", name="p")
    shell.call("beginTransaction", name="p")
    send(shell, "p", topic, ["t4"])
    shell.call("commitTransaction", name="p")
    shell.call("closeProducer", name="p")
    # TV2: one bump per end (1 commit, 2 the crashed commit, 3 abort, 4 commit), at the
    # coordinator and in the partition's producer state (the markers' epoch); TV0 keeps epoch 0
    described = shell.call("describeTransactions", ids=["jr-java", "jr-classic"])
    producers = {p["producerId"]: p["producerEpoch"]
                 for p in shell.call("describeProducers", partitions=[f"{topic}-0"])[f"{topic}-0"]}
    assert {tid: (d["producerEpoch"], producers[d["producerId"]]) for tid, d in described.items()} == {
        "jr-java": (4, 4), "jr-classic": (0, 0)}

    committed, _ = read_all(shell, "jr-rc", topic, [0], "read_committed", 6)
    assert sorted(committed) == ["c1", "t1a", "t1b", "t2a", "t2b", "t4"], committed
    everything, _ = read_all(shell, "jr-ru", topic, [0], "read_uncommitted", 7)
    assert sorted(everything) == ["c1", "t1a", "t1b", "t2a", "t2b", "t3", "t4"], everything
    # the cleaner drops the aborted batch (written at epoch 2, its ABORT marker at 3) and keeps
    # every committed record and what read_committed needs to see them
    broker.compact(topic)
    after, _ = read_all(shell, "jr-ru2", topic, [0], "read_uncommitted", 6)
    assert sorted(after) == sorted(committed), after
    committed_after, _ = read_all(shell, "jr-rc2", topic, [0], "read_committed", 6)
    assert committed_after == committed


def test_tv2_timeout_abort_bumps_twice_and_a_new_instance_goes_on(shell, broker):
    topic = "jr-timeout"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    txn_producer(shell, "slow", "jr-timeout", **{"transaction.timeout.ms": "1000"})
    shell.call("beginTransaction", name="slow")
    send(shell, "slow", topic, ["late"])
    wait_until(lambda: shell.call("describeTransactions", ids=["jr-timeout"])["jr-timeout"]["state"]
               == "COMPLETE_ABORT", "the coordinator to abort the timed-out transaction", timeout=30)
    # Kafka 4.0 at transaction.version 2: the fence bumps 0 -> 1, the abort's own bump -> 2; the
    # ABORT marker carries 2
    assert epochs(shell, "jr-timeout", f"{topic}-0") == (2, 2)
    failed = shell.call("commitTransaction", name="slow", expect_error=True)
    assert "error" in failed, failed
    shell.call("closeProducer", name="slow")

    txn_producer(shell, "fresh", "jr-timeout")
    assert shell.call("describeTransactions", ids=["jr-timeout"])["jr-timeout"]["producerEpoch"] == 3
    shell.call("beginTransaction", name="fresh")
    send(shell, "fresh", topic, ["kept"])
    shell.call("commitTransaction", name="fresh")
    shell.call("closeProducer", name="fresh")
    assert epochs(shell, "jr-timeout", f"{topic}-0") == (4, 4)
    committed, _ = read_all(shell, "jr-trc", topic, [0], "read_committed", 1)
    assert committed == ["kept"]


def test_transaction_version_downgraded_and_upgraded_under_an_open_transaction(shell):
    """kafka-features.sh downgrade/upgrade of transaction.version while a Java producer's
    transaction is open: the coordinator serves each request by its own version (Kafka 4.0's
    clientTransactionVersion), so the open transaction ends as it began and the producer goes on
    at whatever version it picks next; nothing committed is lost or doubled."""
    topic = "jr-features"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    txn_producer(shell, "f", "jr-features")
    seen = []
    try:
        for level, how, value in ((0, "SAFE_DOWNGRADE", "v1"), (2, "UPGRADE", "v2"), (0, "SAFE_DOWNGRADE", "v3")):
            shell.call("beginTransaction", name="f")
            send(shell, "f", topic, [value])
            assert shell.call("updateFeatures", features={"transaction.version": [level, how]}) == {
                "transaction.version": None}
            shell.call("commitTransaction", name="f")
            shell.call("beginTransaction", name="f")
            send(shell, "f", topic, [value + "-next"])
            shell.call("commitTransaction", name="f")
            seen.append(epochs(shell, "jr-features", f"{topic}-0"))
    finally:
        shell.call("updateFeatures", features={"transaction.version": [2, "UPGRADE"]})
    shell.call("closeProducer", name="f")
    # the coordinator and the markers agree at every step, and the epoch only grew (the client
    # picks its version; Java 4.x stays at 2 once initialized, so every end bumped it)
    assert all(coordinator == partition for coordinator, partition in seen), seen
    assert [e for e, _ in seen] == sorted({e for e, _ in seen}), seen
    committed, _ = read_all(shell, "jr-frc", topic, [0], "read_committed", 6)
    assert committed == ["v1", "v1-next", "v2", "v2-next", "v3", "v3-next"]


def test_tv2_fence_by_a_new_instance_and_recovery_from_an_abortable_error(shell):
    """InitProducerId from a new instance while a TV2 transaction is open: the abort is written at
    epoch + 2 (Kafka 4.0: the fence bumps, the abort at transaction.version 2 bumps again) and the
    new instance's retry gets + 3. An abortable error (MESSAGE_TOO_LARGE from the partition) is
    left by an abort (EndTxn v5 bumps the epoch; TV2 needs no InitProducerId for it) and the
    producer commits its next transaction."""
    topic = "jr-fence"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1, "configs": {"max.message.bytes": "2000"}}])
    txn_producer(shell, "old", "jr-fence")
    shell.call("beginTransaction", name="old")
    send(shell, "old", topic, ["zombie"])
    txn_producer(shell, "new", "jr-fence")
    assert epochs(shell, "jr-fence", f"{topic}-0") == (3, 2)    # the ABORT marker at 0 + 2
    assert "error" in shell.call("commitTransaction", name="old", expect_error=True)
    shell.call("closeProducer", name="old")

    shell.call("beginTransaction", name="new")
    send(shell, "new", topic, ["lost"])
    too_large = shell.call("send", name="new", topic=topic, expect_error=True,
                           records=[{"key": "big", "value": "x" * 5000, "partition": 0}])
    assert "RecordTooLarge" in str(too_large), too_large
    shell.call("abortTransaction", name="new")
    shell.call("beginTransaction", name="new")
    send(shell, "new", topic, ["kept"])
    shell.call("commitTransaction", name="new")
    shell.call("closeProducer", name="new")
    coordinator, partition = epochs(shell, "jr-fence", f"{topic}-0")
    assert coordinator == partition == 5, (coordinator, partition)     # abort 4, commit 5
    committed, _ = read_all(shell, "jr-fence-rc", topic, [0], "read_committed", 1)
    assert committed == ["kept"]
