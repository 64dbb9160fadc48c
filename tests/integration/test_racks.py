"""Racks on a single node (docs/compatibility.md, "Racks").

`broker.rack` reaches clients in Metadata and DescribeCluster (what client-side rack-aware
assignors, KIP-881, and fetch-from-follower read); a KIP-848 member's `client.rack` is kept and
shown by ConsumerGroupDescribe; the server-side assignors ignore racks, as Kafka 4's do, so two
members on different racks share the partitions exactly as without racks.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from groups_support import create_topic, produce
from kompakt.testing.poll import wait_until
from wire_support import Wire, req


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory):
    from broker_process import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("racks"), {
        "broker.rack": "rack-a", "offsets.topic.num.partitions": "1",
        "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "100"}).start()
    yield b
    b.kill()


def test_broker_rack_in_metadata_and_describe_cluster(rbroker):
    w = Wire(rbroker.port)
    for v in (1, 9, 12):
        md = w.call(req(3, topics=[], allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False), v)
        assert [b.rack for b in md.brokers] == ["rack-a"]
    admin = AdminClient({"bootstrap.servers": rbroker.bootstrap})   # kept: a dropped client cancels its futures
    nodes = admin.describe_cluster().result(30).nodes
    assert [n.rack for n in nodes] == ["rack-a"]


def test_member_racks_are_kept_and_do_not_change_the_assignment(rbroker):
    create_topic(rbroker.bootstrap, "rack-t", 4)
    produce(rbroker.bootstrap, "rack-t", [str(i) for i in range(8)], 4)
    consumers = [Consumer({"bootstrap.servers": rbroker.bootstrap, "group.id": "rack-g", "group.protocol": "consumer",
                           "client.rack": rack, "auto.offset.reset": "earliest"}) for rack in ("rack-a", "rack-b")]
    try:
        for c in consumers:
            c.subscribe(["rack-t"])

        def balanced():
            for c in consumers:
                c.poll(0.1)
            return sorted(len(c.assignment()) for c in consumers) == [2, 2]
        wait_until(balanced, "two members with two partitions each")
        described = Wire(rbroker.port).call(req(69, group_ids=["rack-g"], include_authorized_operations=False), 1)
        members = described.groups[0].members
        assert sorted(m.rack_id for m in members) == ["rack-a", "rack-b"]
        # uniform, rack-blind: the assignment is the one of two rack-less members (2 + 2, disjoint)
        owned = [p.partitions for m in members for p in m.assignment.topic_partitions]
        assert sorted(x for ps in owned for x in ps) == [0, 1, 2, 3]
    finally:
        for c in consumers:
            c.close()
