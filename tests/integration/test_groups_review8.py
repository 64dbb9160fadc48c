"""Second review of consumer groups and committed offsets against Kafka 4's group coordinator:
one probe per behaviour that differed from Kafka, over raw wire requests (wire_support.Wire)
on one broker shared by the module (each probe uses its own group ids and topics).
"""
from __future__ import annotations

import pytest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest

from groups_support import GROUP_BROKER, create_topic
from wire_support import Wire, error_codes, field, heartbeat_request, req

T = OffsetCommitRequest.OffsetCommitRequestTopic
P = T.OffsetCommitRequestPartition
FT = OffsetFetchRequest.OffsetFetchRequestTopic


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from broker_process import BrokerProcess
    proc = BrokerProcess(tmp_path_factory.mktemp("review8"), GROUP_BROKER).start()
    create_topic(proc.bootstrap, "two", 2)      # the probes' shared topic
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


def heartbeat(wire, group, member, epoch, topics=("two",), **kw):
    return wire.call(heartbeat_request(group, member, epoch, topics, **kw), 1)


def transaction(wire, name, group):
    """A transactional producer's (id, epoch) with `group`'s offsets added to its transaction."""
    found = wire.call(req(10, key_type=1, coordinator_keys=[name]), 4)
    assert set(error_codes(found)) == {0}, found
    init = wire.call(req(22, transactional_id=name, transaction_timeout_ms=60000, producer_id=-1,
                         producer_epoch=-1), 4)
    assert init.error_code == 0, init
    added = wire.call(req(25, transactional_id=name, producer_id=init.producer_id,
                          producer_epoch=init.producer_epoch, group_id=group), 3)
    assert added.error_code == 0, added
    return init.producer_id, init.producer_epoch


def txn_commit(wire, name, group, pid, epoch, generation, member, version=3):
    TT = field(28, "topics")
    answer = wire.call(req(28, transactional_id=name, group_id=group, producer_id=pid, producer_epoch=epoch,
                           generation_id=generation, member_id=member, group_instance_id=None,
                           topics=[TT(name="two", partitions=[field(28, "topics", "partitions")(
                               partition_index=0, committed_offset=4, committed_leader_epoch=-1,
                               committed_metadata="")])]), version)
    return answer.topics[0].partitions[0].error_code


def test_txn_offset_commit_to_a_consumer_protocol_group(broker, wire):
    """Kafka's ConsumerGroup.validateOffsetCommit lets a transactional commit without member id,
    generation and instance id (TxnOffsetCommit v0-2, or a producer given only the group id)
    into a group that has members; and OffsetMetadataManager.validateTransactionalOffsetCommit
    turns STALE_MEMBER_EPOCH into ILLEGAL_GENERATION (what a producer understands)."""
    joined = heartbeat(wire, "g-txn848", "m1", 0)
    assert joined.error_code == 0 and joined.member_epoch >= 1, joined
    pid, epoch = transaction(wire, "tx-848", "g-txn848")
    assert txn_commit(wire, "tx-848", "g-txn848", pid, epoch, -1, "") == 0
    assert txn_commit(wire, "tx-848", "g-txn848", pid, epoch, -1, "", version=0) == 0
    assert txn_commit(wire, "tx-848", "g-txn848", pid, epoch, joined.member_epoch + 5, "m1") == 22
    assert txn_commit(wire, "tx-848", "g-txn848", pid, epoch, joined.member_epoch, "nobody") == 25
    assert txn_commit(wire, "tx-848", "g-txn848", pid, epoch, joined.member_epoch, "m1") == 0


def test_offset_delete_of_a_partition_that_does_not_exist(broker, wire):
    """Kafka's KafkaApis.handleOffsetDeleteRequest answers UNKNOWN_TOPIC_OR_PARTITION for an
    unknown topic or partition; the existing ones are deleted."""
    create_topic(broker.bootstrap, "three", 3)
    assert set(codes(commit(wire, "g-odel", [("three", [(0, 1), (1, 2)])])).values()) == {0}
    OT = field(47, "topics")
    OP = field(47, "topics", "partitions")
    answer = wire.call(req(47, group_id="g-odel", topics=[
        OT(name="three", partitions=[OP(partition_index=0), OP(partition_index=5)]),
        OT(name="gone", partitions=[OP(partition_index=0)])]), 0)
    assert answer.error_code == 0
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions} == {
        ("three", 0): 0, ("three", 5): 3, ("gone", 0): 3}
    fetched = wire.call(OffsetFetchRequest(group_id="g-odel", topics=None), 7)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in fetched.topics] == [("three", [1])]
    # an unknown group is still GROUP_ID_NOT_FOUND, whatever the partitions
    assert wire.call(req(47, group_id="g-none", topics=[
        OT(name="gone", partitions=[OP(partition_index=0)])]), 0).error_code == 69


def test_an_empty_group_id_is_invalid(broker, wire):
    """Kafka's GroupCoordinatorService answers INVALID_GROUP_ID for an empty group id in
    SyncGroup, Heartbeat, LeaveGroup and OffsetDelete (isGroupIdNotEmpty), not UNKNOWN_MEMBER_ID
    or GROUP_ID_NOT_FOUND as if a group "" could exist."""
    from kafka.protocol.consumer.group import HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest
    sync = wire.call(SyncGroupRequest(group_id="", generation_id=1, member_id="m", group_instance_id=None,
                                      protocol_type="consumer", protocol_name="range", assignments=[]), 5)
    assert sync.error_code == 24
    assert wire.call(HeartbeatRequest(group_id="", generation_id=1, member_id="m", group_instance_id=None),
                     4).error_code == 24
    assert wire.call(LeaveGroupRequest(group_id="", member_id="m"), 1).error_code == 24
    left = wire.call(LeaveGroupRequest(group_id="", members=[LeaveGroupRequest.MemberIdentity(
        member_id="m", group_instance_id=None)]), 4)
    assert (left.error_code, left.members) == (24, [])
    OT = field(47, "topics")
    assert wire.call(req(47, group_id="", topics=[OT(name="two", partitions=[
        field(47, "topics", "partitions")(partition_index=0)])]), 0).error_code == 24


def test_offset_delete_when_the_subscriptions_cannot_be_read(broker, wire):
    """A classic group of the consumer protocol whose members' subscriptions cannot be parsed:
    Kafka's ClassicGroup.isSubscribedToTopic counts it as subscribed to every topic
    (orElse(usesConsumerGroupProtocol())), so OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC per
    partition and keeps the offsets; NON_EMPTY_GROUP is for groups of other protocol types."""
    from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest
    create_topic(broker.bootstrap, "four", 1)
    assert set(codes(commit(wire, "g-garbled", [("four", [(0, 8)])])).values()) == {0}
    JP = JoinGroupRequest.JoinGroupRequestProtocol
    fields = dict(group_id="g-garbled", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                  group_instance_id=None, protocol_type="consumer",
                  protocols=[JP(name="range", metadata=b"\x00")])   # not a ConsumerProtocolSubscription
    joined = wire.call(JoinGroupRequest(member_id="", **fields), 5)
    if joined.error_code == 79:
        joined = wire.call(JoinGroupRequest(member_id=joined.member_id, **fields), 5)
    assert joined.error_code == 0, joined
    synced = wire.call(SyncGroupRequest(
        group_id="g-garbled", generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"")]), 5)
    assert synced.error_code == 0, synced
    OT = field(47, "topics")
    answer = wire.call(req(47, group_id="g-garbled", topics=[OT(name="four", partitions=[
        field(47, "topics", "partitions")(partition_index=0)])]), 0)
    assert answer.error_code == 0, answer
    assert [p.error_code for t in answer.topics for p in t.partitions] == [86]   # GROUP_SUBSCRIBED_TO_TOPIC
    fetched = wire.call(OffsetFetchRequest(group_id="g-garbled", topics=None), 7)
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched.topics] == [("four", [8])]


def test_delete_an_empty_group_with_a_pending_member(broker, wire):
    """DeleteGroups of an Empty classic group whose only member got its id (MEMBER_ID_REQUIRED)
    and has not rejoined yet: Kafka's ClassicGroup.validateDeleteGroup looks at the state only,
    so the group is deleted (the member's rejoin then answers UNKNOWN_MEMBER_ID, and it joins
    again without an id); DescribeGroups showed an Empty group without members, yet deleting
    it answered NON_EMPTY_GROUP until the pending member's session expired."""
    from kafka.protocol.admin.groups import DescribeGroupsRequest
    from kafka.protocol.consumer.group import JoinGroupRequest
    fields = dict(group_id="g-pending", session_timeout_ms=30000, rebalance_timeout_ms=30000,
                  group_instance_id=None, protocol_type="consumer",
                  protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    first = wire.call(JoinGroupRequest(member_id="", **fields), 5)
    assert first.error_code == 79, first            # MEMBER_ID_REQUIRED: a pending member
    described = wire.call(DescribeGroupsRequest(groups=["g-pending"]), 5).groups[0]
    assert (described.group_state, described.members) == ("Empty", [])
    deleted = wire.call(req(42, groups_names=["g-pending"]), 2)
    assert [(r.group_id, r.error_code) for r in deleted.results] == [("g-pending", 0)]
    rejoined = wire.call(JoinGroupRequest(member_id=first.member_id, **fields), 5)
    assert rejoined.error_code == 25                # UNKNOWN_MEMBER_ID: the group is gone


def test_list_groups_state_filter_is_trimmed(broker, wire):
    """Kafka's GroupMetadataManager.listGroups lower-cases and trims each state filter, so
    " Empty " matches an Empty group (as "EMPTY" does); the type filter is only lower-cased."""
    create_topic(broker.bootstrap, "five", 1)
    assert set(codes(commit(wire, "g-listed", [("five", [(0, 1)])])).values()) == {0}

    def listed(states, types=()):
        answer = wire.call(req(16, states_filter=list(states), types_filter=list(types)), 5)
        assert answer.error_code == 0, answer
        return {g.group_id for g in answer.groups}
    assert "g-listed" in listed([" Empty "]) and "g-listed" in listed(["EMPTY"], ["Classic"])
    assert "g-listed" not in listed(["Stable"]) and "g-listed" not in listed([], [" classic"])


def test_a_partition_given_back_while_its_member_revokes_it(broker, wire):
    """Kafka's CurrentAssignmentBuilder.computeNextAssignment: a target partition that the member
    itself holds pending revocation is not "unreleased" (only one member can hold a partition).
    m1 is asked to revoke a partition of "two" for m2; m2 leaves before m1 acknowledges; when m1
    acknowledges, the new target gives the partition back: m1 gets it at once, Stable at the
    new epoch, instead of waiting one more heartbeat in UnreleasedPartitions without it."""
    TP = field(68, "topic_partitions")

    def owned(answer):
        return [TP(topic_id=t.topic_id, partitions=sorted(t.partitions)) for t in answer.assignment.topic_partitions]

    def parts(answer):
        return sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)

    first = heartbeat(wire, "g-giveback", "m1", 0)
    assert first.error_code == 0 and parts(first) == [0, 1], first
    m1_owned = owned(first)
    joined = heartbeat(wire, "g-giveback", "m2", 0)
    assert joined.error_code == 0, joined
    revoke = heartbeat(wire, "g-giveback", "m1", first.member_epoch, topics=None, rebalance_timeout_ms=-1,
                       topic_partitions=m1_owned)
    assert revoke.member_epoch == first.member_epoch and len(parts(revoke)) == 1, revoke   # asked to revoke one
    left = heartbeat(wire, "g-giveback", "m2", -1, topics=None, rebalance_timeout_ms=-1)
    assert left.error_code == 0, left
    acked = heartbeat(wire, "g-giveback", "m1", revoke.member_epoch, topics=None, rebalance_timeout_ms=-1,
                      topic_partitions=owned(revoke))
    assert acked.error_code == 0 and acked.assignment is not None and parts(acked) == [0, 1], acked
    described = wire.call(req(69, group_ids=["g-giveback"], include_authorized_operations=False), 0).groups[0]
    assert described.group_state == "Stable" and described.members[0].member_epoch == acked.member_epoch
