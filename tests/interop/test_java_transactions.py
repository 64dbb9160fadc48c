"""Transactions of the Java producer against a real Kompakt broker (one ClientShell JVM): commit
and abort seen by read_committed and read_uncommitted Java consumers, consume-transform-produce
with sendOffsetsToTransaction, fencing by a second instance, and the Admin views of an open
transaction that `kafka-transactions.sh list/describe/describe-producers/find-hanging` print.

The Java client 4.x uses transactions v2 (KIP-890 part 2) when the broker finalizes
transaction.version >= 2, as Kompakt does on a fresh node (Kafka 4.0's default), so these run
transaction version 2: no AddPartitionsToTxn (Produce v12 adds the partitions) and no
AddOffsetsToTxn (TxnOffsetCommit v5), the broker's request counters say, and EndTxn v5 bumping the
epoch of every transaction, which the coordinator (DescribeTransactions) and the markers' producer
state on the partitions (DescribeProducers) show. The classic protocol is what the Python
clients use (tests/integration/test_transactions_clients.py)."""
from __future__ import annotations

import re
import time
import urllib.request

import pytest


@pytest.fixture(scope="module")
def shell(java, interop_broker):
    process = java.start("ClientShell", interop_broker.bootstrap)
    yield process
    process.close()


def txn_producer(shell, name, txn_id, **props):
    shell.call("producer", name=name, props={"transactional.id": txn_id, "linger.ms": "0",
                                             "transaction.timeout.ms": "60000", **props})
    shell.call("initTransactions", name=name)


def send(shell, name, topic, values, partition=0, **fields):
    return shell.call("send", name=name, topic=topic,
                      records=[{"key": v, "value": v, "partition": partition, **fields} for v in values])["sent"]


def read_all(shell, name, topic, partitions, isolation, expect):
    shell.call("consumer", name=name, props={"isolation.level": isolation})
    shell.call("assign", name=name, partitions=[f"{topic}-{p}" for p in partitions])
    got = shell.call("poll", name=name, count=expect, timeoutMs=10000)["records"]
    # nothing more arrives: one more short poll
    got += shell.call("poll", name=name, count=1, timeoutMs=500)["records"]
    positions = shell.call("position", name=name)
    shell.call("closeConsumer", name=name)
    return [r["value"] for r in sorted(got, key=lambda r: (r["partition"], r["offset"]))], positions


def requests_handled(broker, api: str) -> int:
    """The broker's count of `api` requests (kompakt_requests_total on its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.search(r'^kompakt_requests_total\{api="%s"\} ([0-9.e+]+)$' % api, text, re.M)
    return int(float(found.group(1))) if found else 0


def epochs(shell, txn_id, tp):
    """(the coordinator's epoch of `txn_id`, the producer epoch partition `tp` last saw)."""
    described = shell.call("describeTransactions", ids=[txn_id])[txn_id]
    (state,) = shell.call("describeProducers", partitions=[tp])[tp]
    return described["producerEpoch"], state["producerEpoch"]


def test_commit_and_abort_seen_by_both_isolation_levels(shell, interop_broker):
    topic = "jt-commit-abort"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 2}])
    adds, ends = requests_handled(interop_broker, "AddPartitionsToTxn"), requests_handled(interop_broker, "EndTxn")
    txn_producer(shell, "ca", "jt-commit-abort")
    seen = []
    shell.call("beginTransaction", name="ca")
    send(shell, "ca", topic, ["c1", "c2"], partition=0)
    send(shell, "ca", topic, ["c3"], partition=1)
    shell.call("commitTransaction", name="ca")
    seen.append(epochs(shell, "jt-commit-abort", f"{topic}-0"))
    shell.call("beginTransaction", name="ca")
    send(shell, "ca", topic, ["a1", "a2"], partition=0)
    send(shell, "ca", topic, ["a3"], partition=1)
    shell.call("abortTransaction", name="ca")
    seen.append(epochs(shell, "jt-commit-abort", f"{topic}-0"))
    shell.call("beginTransaction", name="ca")
    send(shell, "ca", topic, ["c4"], partition=0)
    shell.call("commitTransaction", name="ca")
    seen.append(epochs(shell, "jt-commit-abort", f"{topic}-0"))
    shell.call("closeProducer", name="ca")
    # transaction version 2: each end bumped the epoch, the markers carry it; no partition was
    # added by AddPartitionsToTxn (Produce v12 did it)
    assert seen == [(1, 1), (2, 2), (3, 3)], seen          # a new id starts at epoch 0
    assert requests_handled(interop_broker, "AddPartitionsToTxn") == adds
    assert requests_handled(interop_broker, "EndTxn") == ends + 3      # (the counters are read right)

    committed, positions = read_all(shell, "rc", topic, [0, 1], "read_committed", 4)
    assert committed == ["c1", "c2", "c4", "c3"]
    # partition 0: c1 c2 COMMIT a1 a2 ABORT c4 COMMIT = 8 offsets; partition 1: c3 COMMIT a3 ABORT
    assert positions == {f"{topic}-0": 8, f"{topic}-1": 4}
    everything, _ = read_all(shell, "ru", topic, [0, 1], "read_uncommitted", 7)
    assert everything == ["c1", "c2", "a1", "a2", "c4", "c3", "a3"]
    offsets = shell.call("listOffsets", partitions={f"{topic}-0": "latest"}, isolation="READ_COMMITTED")
    assert offsets[f"{topic}-0"]["offset"] == 8


def test_an_open_transaction_as_the_admin_and_find_hanging_see_it(shell):
    """The calls `kafka-transactions.sh find-hanging --broker-id 1 --max-transaction-timeout 1`
    makes, in its order: listTopics (internal too), describeTopics of all, describeProducers of
    every partition on that broker, then listTransactions(producer ids) and describeTransactions
    of the candidates: an open transaction whose coordinator still lists the partition is not
    hanging."""
    topic = "jt-open"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    txn_producer(shell, "open", "jt-open-txn")
    shell.call("beginTransaction", name="open")
    # the producer state's last timestamp is the batch's: an hour old, so find-hanging's
    # 1-minute threshold makes it a candidate
    old = int(time.time() * 1000) - 3_600_000
    first = send(shell, "open", topic, ["o1", "o2"], timestamp=old)[0]["offset"]

    listed = shell.call("listTransactions")["jt-open-txn"]
    assert listed["state"] == "ONGOING"
    described = shell.call("describeTransactions", ids=["jt-open-txn"])["jt-open-txn"]
    assert described["state"] == "ONGOING"
    assert described["producerId"] == listed["producerId"]
    assert described["producerEpoch"] >= 0
    assert described["transactionTimeoutMs"] == 60000
    assert described["transactionStartTimeMs"] is not None
    assert described["partitions"] == [f"{topic}-0"]
    assert described["coordinatorId"] == shell.call("describeCluster")["nodes"][0]["id"]

    # find-hanging --broker-id <node>
    node = shell.call("describeCluster")["nodes"][0]["id"]
    names = shell.call("listTopics", internal=True)["topics"]
    assert {"__transaction_state", topic} <= set(names)
    topics = shell.call("describeTopics", topics=names)
    partitions = [f"{name}-{p['partition']}" for name, t in topics.items() for p in t["partitions"]
                  if node in p["replicas"]]
    producers = shell.call("describeProducers", partitions=partitions, broker=node)
    assert set(producers) == set(partitions)
    now = int(time.time() * 1000)
    candidates = {tp: p for tp, states in producers.items() for p in states
                  if p["currentTransactionStartOffset"] is not None and now - p["lastTimestamp"] > 60_000}
    assert set(candidates) == {f"{topic}-0"}
    candidate = candidates[f"{topic}-0"]
    assert candidate["producerId"] == listed["producerId"]
    assert candidate["currentTransactionStartOffset"] == first
    assert candidate["lastTimestamp"] == old
    assert candidate["coordinatorEpoch"] is None   # -1 until a marker was written for this producer
    by_id = shell.call("listTransactions", producerIds=[candidate["producerId"]])
    assert list(by_id) == ["jt-open-txn"]
    assert f"{topic}-0" in shell.call("describeTransactions", ids=list(by_id))["jt-open-txn"]["partitions"]

    shell.call("commitTransaction", name="open")
    shell.call("closeProducer", name="open")
    assert shell.call("describeTransactions", ids=["jt-open-txn"])["jt-open-txn"]["state"] == "COMPLETE_COMMIT"
    (state,) = shell.call("describeProducers", partitions=[f"{topic}-0"])[f"{topic}-0"]
    assert state["currentTransactionStartOffset"] is None
    # KIP-994's duration filter: started (broker clock) less than an hour ago, more than 0 ms ago
    assert "jt-open-txn" not in shell.call("listTransactions", durationMs=3_600_000)
    assert "jt-open-txn" in shell.call("listTransactions", durationMs=0)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce_commits_offsets_with_the_transaction(shell, interop_broker, protocol):
    source, sink, group = f"jt-src-{protocol}", f"jt-sink-{protocol}", f"jt-ctp-{protocol}"
    add_offsets = requests_handled(interop_broker, "AddOffsetsToTxn")
    shell.call("createTopics", topics=[{"name": source, "partitions": 1}, {"name": sink, "partitions": 1}])
    shell.call("producer", name="feed", props={"linger.ms": "0"})
    send(shell, "feed", source, [f"in{i}" for i in range(6)])
    shell.call("closeProducer", name="feed")

    consumer = f"ctp-{protocol}"
    shell.call("consumer", name=consumer, props={
        "group.id": group, "group.protocol": protocol, "enable.auto.commit": "false",
        "isolation.level": "read_committed"})
    shell.call("subscribe", name=consumer, topics=[source])
    txn_producer(shell, "ctp", f"jt-ctp-{protocol}")
    batch = shell.call("poll", name=consumer, count=6)["records"]
    assert [r["value"] for r in batch] == [f"in{i}" for i in range(6)]

    # the first three transformed and committed with their offsets; the rest aborted
    shell.call("beginTransaction", name="ctp")
    send(shell, "ctp", sink, [r["value"].upper() for r in batch[:3]])
    shell.call("sendOffsetsToTransaction", name="ctp", consumer=consumer, offsets={f"{source}-0": 3})
    shell.call("commitTransaction", name="ctp")
    assert shell.call("listConsumerGroupOffsets", group=group) == {f"{source}-0": 3}
    shell.call("beginTransaction", name="ctp")
    send(shell, "ctp", sink, [r["value"].upper() for r in batch[3:]])
    shell.call("sendOffsetsToTransaction", name="ctp", consumer=consumer, offsets={f"{source}-0": 6})
    shell.call("abortTransaction", name="ctp")
    assert shell.call("listConsumerGroupOffsets", group=group) == {f"{source}-0": 3}
    shell.call("closeProducer", name="ctp")
    shell.call("closeConsumer", name=consumer)

    values, _ = read_all(shell, f"sink-{protocol}", sink, [0], "read_committed", 3)
    assert values == ["IN0", "IN1", "IN2"]
    # transaction version 2: TxnOffsetCommit v5 put the group's partition in the transaction
    assert requests_handled(interop_broker, "AddOffsetsToTxn") == add_offsets


def test_a_second_instance_fences_the_first(shell):
    topic = "jt-fence"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    txn_producer(shell, "first", "jt-fence-txn")
    shell.call("beginTransaction", name="first")
    send(shell, "first", topic, ["zombie"])
    txn_producer(shell, "second", "jt-fence-txn")   # bumps the epoch, aborts the first's transaction
    shell.call("beginTransaction", name="second")
    send(shell, "second", topic, ["live"])
    shell.call("commitTransaction", name="second")

    fenced = shell.call("commitTransaction", name="first", expect_error=True)
    assert fenced["error"] in ("ProducerFencedException", "InvalidProducerEpochException"), fenced
    shell.call("closeProducer", name="first")
    shell.call("closeProducer", name="second")
    values, _ = read_all(shell, "fence-reader", topic, [0], "read_committed", 1)
    assert values == ["live"]
    everything, _ = read_all(shell, "fence-raw", topic, [0], "read_uncommitted", 2)
    assert everything == ["zombie", "live"]


def test_at_transaction_version_0_the_java_client_uses_the_classic_protocol(shell, interop_broker):
    """kafka-features.sh downgrade --feature transaction.version=0: a producer connecting then
    adds its partitions with AddPartitionsToTxn and keeps its epoch across transactions (EndTxn
    v4), and the coordinator serves it beside the version 2 transactions above; back to 2 after."""
    topic = "jt-tv0"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    assert shell.call("updateFeatures", features={"transaction.version": [0, "SAFE_DOWNGRADE"]}) == {
        "transaction.version": None}
    try:
        adds = requests_handled(interop_broker, "AddPartitionsToTxn")
        txn_producer(shell, "tv0", "jt-tv0-txn")
        for values in (["t1"], ["t2"]):
            shell.call("beginTransaction", name="tv0")
            send(shell, "tv0", topic, values)
            shell.call("commitTransaction", name="tv0")
        assert epochs(shell, "jt-tv0-txn", f"{topic}-0") == (0, 0)     # the epoch stayed
        assert requests_handled(interop_broker, "AddPartitionsToTxn") >= adds + 2   # one per transaction
        shell.call("closeProducer", name="tv0")
    finally:
        assert shell.call("updateFeatures", features={"transaction.version": [2, "UPGRADE"]}) == {
            "transaction.version": None}
    values, _ = read_all(shell, "tv0-reader", topic, [0], "read_committed", 2)
    assert values == ["t1", "t2"]
