"""Second review of consumer groups and committed offsets against Kafka 4's group coordinator:
one probe per behaviour that differed from Kafka, over raw wire requests (wire_support.Wire)
on one broker shared by the module (each probe uses its own group ids and topics).
"""
from __future__ import annotations

import pytest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest

from groups_support import GROUP_BROKER, create_topic
from wire_support import Wire

T = OffsetCommitRequest.OffsetCommitRequestTopic
P = T.OffsetCommitRequestPartition
FT = OffsetFetchRequest.OffsetFetchRequestTopic


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from conftest import BrokerProcess
    proc = BrokerProcess(tmp_path_factory.mktemp("review8"), GROUP_BROKER).start()
    yield proc
    proc.kill()


@pytest.fixture
def wire(broker):
    w = Wire(broker.port)
    yield w
    w.close()


def commit(wire, group, topics, version=8, generation=-1, member="", instance=None):
    kw = {"group_instance_id": instance} if version >= 7 else {}
    return wire.call(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        topics=[T(name=t, partitions=[P(partition_index=p, committed_offset=o) for p, o in parts])
                for t, parts in topics], **kw), version)


def codes(response):
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def test_commit_to_a_partition_that_does_not_exist(broker, wire):
    """Kafka's KafkaApis.handleOffsetCommitRequest answers UNKNOWN_TOPIC_OR_PARTITION for a
    partition the topic lacks (metadataCache.getPartitionInfo) and for an unknown topic, before
    the group coordinator sees the request: nothing is stored for it, and the group checks do
    not overwrite that code."""
    create_topic(broker.bootstrap, "two", 2)
    answer = commit(wire, "g-part", [("two", [(0, 5), (7, 9)]), ("nope", [(0, 1)])])
    assert codes(answer) == {("two", 0): 0, ("two", 7): 3, ("nope", 0): 3}
    fetched = wire.call(OffsetFetchRequest(group_id="g-part", topics=None), 7)
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
            for t in fetched.topics] == [("two", [(0, 5)])]
    # a stale generation fails only the partitions that exist; an unknown one keeps its own error
    stale = commit(wire, "g-part", [("two", [(1, 1)]), ("nope", [(0, 1)])], generation=4, member="m")
    assert codes(stale) == {("two", 1): 25, ("nope", 0): 3}   # UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_OR_PARTITION
    # only unknown partitions: answered at once, no group created for it
    commit(wire, "g-ghost", [("two", [(9, 1)])])
    from kafka.protocol.admin.groups import DescribeGroupsRequest
    described = wire.call(DescribeGroupsRequest(groups=["g-ghost"]), 5)
    assert described.groups[0].group_state == "Dead"
