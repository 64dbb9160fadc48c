"""The group APIs version by version, with requests written by kafka-python's schema classes and
sent over a real TCP connection to a broker process: the per-version fields and error codes that
no client library happens to exercise (batched FindCoordinator keys, transaction keys, v6
DescribeGroups of an unknown group, ListGroups type filter, LeaveGroup v0, OffsetFetch of an
unknown group, OffsetCommit v2 retention, JoinGroup v0 without MEMBER_ID_REQUIRED, v9 skip).
"""
from __future__ import annotations

import itertools
import socket
import struct
import threading

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
                                           OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from groups_support import GROUP_BROKER, create_topic
from kompakt.testing.poll import wait_until

SUB = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)  # ConsumerProtocolSubscription v0 ["t"]


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.ids = itertools.count(1)

    def call(self, request):
        request.with_header(correlation_id=next(self.ids), client_id="proto-test")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", self._read(4))[0]
        data = self._read(size)
        response_class = type(request).__name__.replace("Request", "Response")
        module = __import__(type(request).__module__, fromlist=[response_class])
        return getattr(module, response_class).decode(data, version=request.version, header=True)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "broker closed the connection"
            out += chunk
        return out

    def close(self):
        self.sock.close()


@pytest.fixture
def conn(start_broker):
    broker = start_broker(config=GROUP_BROKER)
    c = Conn(broker.port)
    c.broker = broker
    yield c
    c.close()


def join(conn, version, member_id="", instance=None, group="g"):
    kw = {"rebalance_timeout_ms": 5000} if version >= 1 else {}
    if version >= 5:
        kw["group_instance_id"] = instance
    return conn.call(JoinGroupRequest(
        version=version, group_id=group, session_timeout_ms=6000, member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUB)], **kw))


def test_membership_apis_by_version(conn):
    """One broker for every membership API check (each uses its own group ids)."""
    _find_coordinator_versions(conn)
    _join_v2_needs_no_member_id_round_trip_and_v4_does(conn)
    _static_leader_rejoin_v9_skips_assignment(conn)
    _leave_v0_and_describe_v5_v6(conn)
    _list_groups_filters(conn)
    _null_assignment_is_an_empty_one(conn)
    _graceful_stop_answers_parked_join(conn)   # last: stops the broker


def _find_coordinator_versions(conn):
    v0 = conn.call(FindCoordinatorRequest(version=0, key="g"))
    assert (v0.error_code, v0.node_id, v0.port) == (0, 1, conn.broker.port)
    txn = conn.call(FindCoordinatorRequest(version=3, key="tx", key_type=1))
    assert (txn.error_code, txn.node_id, txn.port) == (0, 1, conn.broker.port)   # the transaction coordinator
    unknown = conn.call(FindCoordinatorRequest(version=3, key="x", key_type=7))
    assert (unknown.error_code, unknown.error_message) == (42, "Unknown coordinator type received: 7")
    mixed = conn.call(FindCoordinatorRequest(version=4, key_type=9, coordinator_keys=["a"]))
    assert [(c.key, c.error_code, c.node_id) for c in mixed.coordinators] == [("a", 42, -1)]   # INVALID_REQUEST
    batched = conn.call(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["a", "b"]))
    assert [(c.key, c.error_code, c.port) for c in batched.coordinators] == [
        ("a", 0, conn.broker.port), ("b", 0, conn.broker.port)]


def _join_v2_needs_no_member_id_round_trip_and_v4_does(conn):
    # v2 is the oldest JoinGroup Kafka 4.0 serves (KIP-896 removed v0-1)
    v2 = join(conn, 2)
    assert v2.error_code == 0 and v2.generation_id == 1 and v2.member_id.startswith("proto-test-")
    assert v2.leader == v2.member_id and v2.members[0].metadata == SUB
    v4 = join(conn, 4, group="g4")
    assert v4.error_code == 79 and v4.member_id               # MEMBER_ID_REQUIRED
    again = join(conn, 4, member_id=v4.member_id, group="g4")
    assert again.error_code == 0 and again.member_id == v4.member_id


def _static_leader_rejoin_v9_skips_assignment(conn):
    first = join(conn, 9, instance="i1", group="g9")
    assert first.error_code == 0 and first.protocol_type == "consumer"
    sync = conn.call(SyncGroupRequest(version=5, group_id="g9", generation_id=1, member_id=first.member_id,
                                      group_instance_id="i1", protocol_type="consumer", protocol_name="range",
                                      assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                          member_id=first.member_id, assignment=b"asg")]))
    assert (sync.error_code, sync.assignment, sync.protocol_name) == (0, b"asg", "range")
    restarted = join(conn, 9, instance="i1", group="g9")
    assert restarted.error_code == 0 and restarted.skip_assignment
    assert restarted.generation_id == 1 and restarted.leader == restarted.member_id
    fenced = conn.call(HeartbeatRequest(version=4, group_id="g9", generation_id=1,
                                        member_id=first.member_id, group_instance_id="i1"))
    assert fenced.error_code == 82                              # FENCED_INSTANCE_ID


def _null_assignment_is_an_empty_one(conn):
    first = join(conn, 3, group="gnull")   # v3: no MEMBER_ID_REQUIRED round trip
    sync = conn.call(SyncGroupRequest(version=3, group_id="gnull", generation_id=first.generation_id,
                                      member_id=first.member_id,
                                      assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                          member_id=first.member_id, assignment=None)]))
    assert (sync.error_code, sync.assignment) == (0, b"")


def _leave_v0_and_describe_v5_v6(conn):
    member = join(conn, 3, group="gl")
    left = conn.call(LeaveGroupRequest(version=0, group_id="gl", member_id=member.member_id))
    assert left.error_code == 0
    gone = conn.call(LeaveGroupRequest(version=0, group_id="gl", member_id=member.member_id))
    assert gone.error_code == 25                                # UNKNOWN_MEMBER_ID
    d5 = conn.call(DescribeGroupsRequest(version=5, groups=["gl", "missing"]))
    assert [(g.group_id, g.error_code, g.group_state) for g in d5.groups] == [
        ("gl", 0, "Empty"), ("missing", 0, "Dead")]
    d6 = conn.call(DescribeGroupsRequest(version=6, groups=["missing"]))
    assert (d6.groups[0].error_code, d6.groups[0].error_message) == (69, "Group missing not found.")


def _list_groups_filters(conn):
    join(conn, 3, group="live")
    listed = conn.call(ListGroupsRequest(version=5, states_filter=["STABLE", "completingrebalance"],
                                         types_filter=[]))
    assert sorted((g.group_id, g.group_state, g.group_type) for g in listed.groups) == [
        ("g", "CompletingRebalance", "classic"), ("g4", "CompletingRebalance", "classic"),
        ("g9", "Stable", "classic"), ("live", "CompletingRebalance", "classic")]
    assert conn.call(ListGroupsRequest(version=5, states_filter=[], types_filter=["consumer"])).groups == []
    assert sorted(g.group_id for g in conn.call(ListGroupsRequest(version=0)).groups) == [
        "g", "g4", "g9", "gl", "live"]


def _graceful_stop_answers_parked_join(conn):
    """SIGTERM while a JoinGroup is parked (a rebalance waits for a member that stays in its
    session): the broker answers it NOT_COORDINATOR and stops, rather than draining until
    shutdown.timeout.ms and dropping the connection unanswered."""
    kw = dict(version=3, group_id="gs", session_timeout_ms=60000, rebalance_timeout_ms=120000,
              protocol_type="consumer",
              protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUB)])
    first = conn.call(JoinGroupRequest(member_id="", **kw))
    conn.call(SyncGroupRequest(version=2, group_id="gs", generation_id=first.generation_id,
                               member_id=first.member_id, assignments=[]))
    other, answers = Conn(conn.broker.port), []
    joiner = threading.Thread(target=lambda: answers.append(_answer_or_error(other, JoinGroupRequest(member_id="", **kw))))
    joiner.start()
    wait_until(lambda: conn.call(DescribeGroupsRequest(version=5, groups=["gs"])).groups[0].group_state
               == "PreparingRebalance", "the second member's JoinGroup to be parked")
    conn.broker.stop()
    joiner.join(60)
    other.close()
    assert answers == [16], answers                             # NOT_COORDINATOR


def _answer_or_error(conn, request):
    try:
        return conn.call(request).error_code
    except (AssertionError, OSError) as exc:
        return repr(exc)


def test_commit_v2_retention_and_fetch_versions(conn):
    create_topic(conn.broker.bootstrap, "t", 2)
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    commit = conn.call(OffsetCommitRequest(
        version=2, group_id="s", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=60000,
        topics=[T(name="t", partitions=[P(partition_index=0, committed_offset=17, committed_metadata="m")])]))
    assert [p.error_code for t in commit.topics for p in t.partitions] == [0]
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    v1 = conn.call(OffsetFetchRequest(version=1, group_id="s", topics=[FT(name="t", partition_indexes=[0, 1])]))
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in v1.topics[0].partitions] == [
        (0, 17, "m"), (1, -1, "")]
    v7 = conn.call(OffsetFetchRequest(version=7, group_id="s", topics=None, require_stable=True))
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in v7.topics] == [("t", [17])]
    # v6+ commits carry the leader epoch; OffsetFetch v5+ returns it
    epoch = conn.call(OffsetCommitRequest(
        version=8, group_id="s", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[T(name="t", partitions=[P(partition_index=1, committed_offset=3, committed_leader_epoch=4,
                                          committed_metadata=None)])]))
    assert epoch.topics[0].partitions[0].error_code == 0
    v5 = conn.call(OffsetFetchRequest(version=5, group_id="s", topics=[FT(name="t", partition_indexes=[1])]))
    p1 = v5.topics[0].partitions[0]
    assert (p1.committed_offset, p1.committed_leader_epoch, p1.metadata) == (3, 4, "")
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    v8 = conn.call(OffsetFetchRequest(version=8, groups=[G(group_id="s", topics=None),
                                                          G(group_id="nobody", topics=None)]))
    assert [(g.group_id, len(g.topics), g.error_code) for g in v8.groups] == [("s", 1, 0), ("nobody", 0, 0)]
    # a generation for an unknown group: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9
    for version, code in ((8, 22), (9, 69)):
        bad = conn.call(OffsetCommitRequest(
            version=version, group_id="unknown", generation_id_or_member_epoch=3, member_id="m",
            topics=[T(name="t", partitions=[P(partition_index=0, committed_offset=1)])]))
        assert bad.topics[0].partitions[0].error_code == code
