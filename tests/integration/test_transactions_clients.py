"""Transactional producers of confluent-kafka (librdkafka), kafka-python 3 and aiokafka against a real
broker (kafkajs: test_kafkajs.py): init, begin, produce to several partitions and topics,
send_offsets_to_transaction, commit, abort. One story per client:

    txn 1  a-0: c1 c2   a-1: c3   b-0: c4     offsets src-0 -> 10     COMMIT
    txn 2  a-0: x1 x2                          offsets src-0 -> 20     ABORT
    txn 3  b-0: c5                                                     COMMIT

read_committed readers see exactly c1..c5 (per partition, in order), read_uncommitted ones also x1
x2, the group's committed offset is 10, the files hold COMMIT/ABORT markers where the coordinator
wrote them, and the admin APIs (kafka-python's admin client: DescribeTransactions,
ListTransactions, DescribeProducers) describe what happened."""
from __future__ import annotations

import asyncio

import aiokafka
import confluent_kafka as ck
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.structs import OffsetAndMetadata

from txn_support import (batches, committed_offset, create_topics, marker_kinds, read_values,
                         txn_broker)

COMMITTED = {("a", 0): [b"c1", b"c2"], ("a", 1): [b"c3"], ("b", 0): [b"c4", b"c5"]}
ABORTED = {("a", 0): [b"x1", b"x2"]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = txn_broker(tmp_path_factory.mktemp("txn-clients"))
    yield proc
    try:
        proc.stop()
    except RuntimeError:
        proc.kill()


def _topics(prefix):
    return {"a": f"{prefix}-a", "b": f"{prefix}-b", "src": f"{prefix}-src"}


def _setup(broker, prefix):
    names = _topics(prefix)
    create_topics(broker.bootstrap, {names["a"]: 2, names["b"]: 1, names["src"]: 1})
    return names


def _check(broker, names, group, tid):
    tps = [(names[t], p) for t, p in COMMITTED]
    committed = read_values(broker.bootstrap, tps, committed=True, expect=5)
    assert committed == {(names[t], p): v for (t, p), v in COMMITTED.items()}
    everything = read_values(broker.bootstrap, tps, committed=False, expect=7)
    assert everything[(names["a"], 0)] == [b"c1", b"c2", b"x1", b"x2"]
    assert committed_offset(broker.bootstrap, group, names["src"], 0) == 10
    assert marker_kinds(broker.log_dir, names["a"], 0) == ["COMMIT", "ABORT"]
    assert marker_kinds(broker.log_dir, names["b"], 0) == ["COMMIT", "COMMIT"]
    # every data batch of the story is transactional and belongs to one producer id
    pids = {h.producer_id for h, _, _ in batches(broker.log_dir, names["a"], 0)}
    assert len(pids) == 1 and all(h.is_transactional for h, _, _ in batches(broker.log_dir, names["a"], 0))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_transactions([tid])[tid]
        assert described.state == "CompleteCommit" and described.producer_id in pids
        listed = admin.list_transactions(state_filters=["CompleteCommit"])     # {broker id: [listing]}
        assert tid in {t.transactional_id for listings in listed.values() for t in listings}
        producers = admin.describe_producers([KTP(names["a"], 0)])[KTP(names["a"], 0)]
        assert [p.producer_id for p in producers.active_producers] == list(pids)
        assert producers.active_producers[0].current_transaction_start_offset == -1
    finally:
        admin.close()


def test_confluent_kafka(broker):
    names = _setup(broker, "ck")
    group, tid = "ck-group", "ck-txn"
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    meta = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}).consumer_group_metadata()
    p.init_transactions(30)
    p.begin_transaction()
    for (t, part), values in {("a", 0): [b"c1", b"c2"], ("a", 1): [b"c3"], ("b", 0): [b"c4"]}.items():
        for v in values:
            p.produce(names[t], value=v, partition=part)
    p.send_offsets_to_transaction([ck.TopicPartition(names["src"], 0, 10)], meta, 30)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in ABORTED[("a", 0)]:
        p.produce(names["a"], value=v, partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition(names["src"], 0, 20)], meta, 30)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(names["b"], value=b"c5", partition=0)
    p.commit_transaction(30)
    _check(broker, names, group, tid)


def test_kafka_python(broker):
    names = _setup(broker, "kp")
    group, tid = "kp-group", "kp-txn"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
    try:
        p.init_transactions()
        p.begin_transaction()
        for (t, part), values in {("a", 0): [b"c1", b"c2"], ("a", 1): [b"c3"], ("b", 0): [b"c4"]}.items():
            for v in values:
                p.send(names[t], value=v, partition=part)
        p.send_offsets_to_transaction({KTP(names["src"], 0): OffsetAndMetadata(10, "", -1)}, group)
        p.commit_transaction()
        p.begin_transaction()
        for v in ABORTED[("a", 0)]:
            p.send(names["a"], value=v, partition=0)
        p.send_offsets_to_transaction({KTP(names["src"], 0): OffsetAndMetadata(20, "", -1)}, group)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(names["b"], value=b"c5", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    _check(broker, names, group, tid)


def test_aiokafka(broker):
    names = _setup(broker, "ak")
    group, tid = "ak-group", "ak-txn"

    async def story():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
        await p.start()
        try:
            async with p.transaction():
                for (t, part), values in {("a", 0): [b"c1", b"c2"], ("a", 1): [b"c3"], ("b", 0): [b"c4"]}.items():
                    for v in values:
                        await p.send(names[t], value=v, partition=part)
                await p.send_offsets_to_transaction({aiokafka.TopicPartition(names["src"], 0): 10}, group)
            await p.begin_transaction()
            for v in ABORTED[("a", 0)]:
                await (await p.send(names["a"], value=v, partition=0))
            await p.send_offsets_to_transaction({aiokafka.TopicPartition(names["src"], 0): 20}, group)
            await p.abort_transaction()
            async with p.transaction():
                await p.send(names["b"], value=b"c5", partition=0)
        finally:
            await p.stop()

    asyncio.run(story())
    _check(broker, names, group, tid)


def test_fenced_producer_and_require_stable(broker):
    """A second instance with the same transactional id fences the first (its open transaction is
    aborted, its next call fails), and a group's offsets committed in an open transaction stay
    invisible until it commits (require_stable: tests/broker/test_txn_coordinator.py)."""
    names = _setup(broker, "fx")
    first = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="fx-txn")
    first.init_transactions()
    first.begin_transaction()
    first.send(names["a"], value=b"zombie", partition=0).get(30)
    second = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fx-txn"})
    second.init_transactions(30)                     # fences `first`, aborting its transaction
    with pytest.raises(Exception) as fenced:
        first.commit_transaction()
    assert "Fenced" in type(fenced.value).__name__ or "fenced" in str(fenced.value).lower()
    first.close(0)
    assert read_values(broker.bootstrap, [(names["a"], 0)], committed=True)[(names["a"], 0)] == []
    assert marker_kinds(broker.log_dir, names["a"], 0) == ["ABORT"]
    second.begin_transaction()
    second.send_offsets_to_transaction([ck.TopicPartition(names["src"], 0, 3)],
                                       ck.Consumer({"bootstrap.servers": broker.bootstrap,
                                                    "group.id": "fx-group"}).consumer_group_metadata(), 30)
    # pending while the transaction is open
    from kafka import KafkaConsumer
    plain = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="fx-group", enable_auto_commit=False)
    assert plain.committed(KTP(names["src"], 0)) is None
    plain.close()
    second.commit_transaction(30)
    assert committed_offset(broker.bootstrap, "fx-group", names["src"], 0) == 3


def test_admin_api_and_cli_show_transactions_and_lso(broker):
    """GET /v1/transactions and /v1/partitions (open transactions, LSO) and `kompakt admin
    transactions` / `partitions` while a transaction is open, then after it commits."""
    import json
    import subprocess
    import sys
    import urllib.request

    names = _setup(broker, "ad")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ad-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(names["a"], value=b"one", partition=1)
    assert p.flush(30) == 0

    def get(path):
        with urllib.request.urlopen(broker.metrics_url + path, timeout=30) as resp:
            return json.loads(resp.read())

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "kompakt", "admin", "--url", broker.metrics_url, *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    [txn] = get("/v1/transactions?state=Ongoing")["transactions"]
    assert (txn["transactional_id"], txn["partitions"]) == ("ad-txn", [f"{names['a']}-1"])
    [part] = get(f"/v1/partitions?topic={names['a']}")["partitions"][1:]
    assert part["last_stable_offset"] == 0 and part["log_end_offset"] == 1
    assert part["ongoing_transactions"] == [{"producer_id": txn["producer_id"], "first_offset": 0}]
    _, row = cli("transactions", "--state", "Ongoing").splitlines()
    assert row.split()[:2] == ["ad-txn", "Ongoing"] and row.split()[-1] == f"{names['a']}-1"
    header, _, row = cli("partitions", "--topic", names["a"]).splitlines()
    assert header.split()[3:7] == ["START", "END", "LSO", "TXNS"] and row.split()[3:7] == ["0", "1", "0", "1"]
    p.commit_transaction(30)
    [part] = get(f"/v1/partitions?topic={names['a']}")["partitions"][1:]
    assert part["last_stable_offset"] == part["log_end_offset"] == 2 and part["ongoing_transactions"] == []
    assert get("/v1/transactions?state=CompleteCommit")["counters"]["committed_total"] >= 1
    # a misspelt state is a 400 naming the states, not an empty list
    bad = subprocess.run([sys.executable, "-m", "kompakt", "admin", "--url", broker.metrics_url,
                          "transactions", "--state", "Comitted"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "error 400: unknown transaction state 'Comitted'; one of Empty, Ongoing" in bad.stderr
