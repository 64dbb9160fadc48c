"""KIP-848 consumer-protocol groups in the real coordinator over a real LogManager (no client):
joining, member epochs, incremental assignment (a partition goes to its new owner only after the
old one revoked it), leaving, fencing, static members, regex subscriptions, errors, the records
in __consumer_offsets and their reload, and what the classic and offset APIs see.
"""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kompakt.broker.groups.consumer.heartbeat import HeartbeatRequest
from kompakt.broker.groups.consumer.member import MemberState
from kompakt.broker.groups.offsets_topic import OFFSETS_TOPIC
from kompakt.protocol import consumer_group_records as cgr
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError
from kompakt.storage import TopicPartition

from tests.broker.groups.test_coordinator import (  # noqa: F401  (fixtures)
    join_req, log_records, own_coordinator, started, wait_for)

G = "cg"


def hb(c, member_id, epoch, *, topics=None, owned=None, regex=None, instance=None, group=G,
       assignor=None, rebalance=None, version=1):
    """One ConsumerGroupHeartbeat; joins (epoch 0) send the full request as clients do."""
    joining = epoch == 0
    return c.consumer_group_heartbeat(HeartbeatRequest(
        group, member_id, epoch, instance, None,
        rebalance if rebalance is not None else (30_000 if joining else -1),
        topics if topics is not None else (["t"] if joining and regex is None else None),
        regex, assignor, [] if joining else owned, "client", "/127.0.0.1", version))


def parts(result, c) -> set[tuple[str, int]]:
    names = {m.topic_id: n for n, m in c.broker.log_manager.topics.items()}
    return {(names[t], p) for t, ps in (result.assignment or {}).items() for p in ps}


def owned(result):
    """What a member reports owning after applying an answer: exactly its assignment."""
    return [(t, sorted(ps)) for t, ps in (result.assignment or {}).items()]


@pytest.fixture
async def cgc(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 6), ("u", 2)]) as c:
        yield c


def member(c, member_id):
    return c.consumer_groups[G].members[member_id]


async def test_join_assigns_everything_and_persists_records(cgc):
    c = cgc
    r = hb(c, "a", 0)
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms) == (0, 1, 5000)
    assert parts(r, c) == {("t", p) for p in range(6)}
    g = c.consumer_groups[G]
    assert (g.group_epoch, g.assignment_epoch, g.state.value) == (1, 1, "Stable")
    types = [k["type"] for k, _ in log_records(c.broker, G) if k["type"].startswith("consumer_group")]
    assert types == ["consumer_group_member_metadata", "consumer_group_partition_metadata",
                     "consumer_group_metadata", "consumer_group_target_assignment_member",
                     "consumer_group_target_assignment_metadata",
                     "consumer_group_current_member_assignment"]
    # a plain heartbeat writes nothing and sends no assignment
    before = len(log_records(c.broker, G))
    again = hb(c, "a", 1, owned=owned(r))
    assert (again.error, again.member_epoch, again.assignment) == (0, 1, None)
    assert len(log_records(c.broker, G)) == before


async def test_incremental_rebalance_revokes_before_reassigning(cgc):
    c = cgc
    a = hb(c, "a", 0)
    a_owned = owned(a)
    b = hb(c, "b", 0)                       # epoch 2: the target gives b half of a's partitions
    assert b.member_epoch == 2 and parts(b, c) == set()   # nothing free yet: a still owns them
    assert member(c, "b").state is MemberState.UNRELEASED_PARTITIONS
    a2 = hb(c, "a", 1, owned=a_owned)      # a is asked to revoke, keeps its epoch
    assert a2.member_epoch == 1 and len(parts(a2, c)) == 3
    assert member(c, "a").state is MemberState.UNREVOKED_PARTITIONS
    b2 = hb(c, "b", 2, owned=[])            # still held by a: b waits
    assert b2.assignment is None and member(c, "b").state is MemberState.UNRELEASED_PARTITIONS
    a3 = hb(c, "a", 1, owned=owned(a2))     # a reports the revocation: epoch 2
    assert a3.member_epoch == 2 and a3.assignment is None and member(c, "a").state is MemberState.STABLE
    b3 = hb(c, "b", 2, owned=[])            # now b gets them
    assert len(parts(b3, c)) == 3 and parts(b3, c).isdisjoint(parts(a2, c))
    assert c.consumer_groups[G].state.value == "Stable"


async def test_member_epoch_checks(cgc):
    c = cgc
    a = hb(c, "a", 0)
    assert hb(c, "a", 5, owned=owned(a)).error == EC.FENCED_MEMBER_EPOCH      # ahead
    b = hb(c, "b", 0)
    assert b.member_epoch == 2
    # a answer lost: the previous epoch is accepted with a subset of the assignment
    a2 = hb(c, "a", 1, owned=owned(a))
    assert a2.error == 0
    assert hb(c, "b", 1, owned=[]).error == EC.FENCED_MEMBER_EPOCH             # b's previous is 0
    assert hb(c, "nobody", 3, owned=[]).error == EC.UNKNOWN_MEMBER_ID
    assert hb(c, "a", 1, owned=owned(a), group="nogroup").error == EC.GROUP_ID_NOT_FOUND


async def test_request_validation(cgc):
    c = cgc
    assert hb(c, "", 0).error == EC.INVALID_REQUEST                      # v1: the member chooses its id
    v0 = hb(c, "", 0, version=0)                                          # v0: the coordinator does
    assert v0.error == 0 and len(v0.member_id) == 22
    assert hb(c, "x", 0, rebalance=-1).error == EC.INVALID_REQUEST
    assert hb(c, "x", -3).error == EC.INVALID_REQUEST
    assert hb(c, "x", -2).error == EC.INVALID_REQUEST                    # -2 needs an instance id
    bad = hb(c, "x", 0, assignor="sticky")
    assert bad.error == EC.UNSUPPORTED_ASSIGNOR and "uniform, range" in bad.message
    r = hb(c, "x", 0, topics=[], regex="(?<=a)b")
    assert r.error == EC.INVALID_REGULAR_EXPRESSION and "look-around" in r.message
    assert hb(c, "x", 0, topics=[], regex="[").error == EC.INVALID_REGULAR_EXPRESSION


async def test_leave_fences_and_frees_partitions(cgc):
    c = cgc
    a, b = hb(c, "a", 0), hb(c, "b", 0)
    a2 = hb(c, "a", 1, owned=owned(a))
    hb(c, "a", 1, owned=owned(a2))
    b2 = hb(c, "b", 2, owned=[])
    left = hb(c, "b", -1)
    assert (left.error, left.member_epoch) == (0, -1)
    assert "b" not in c.consumer_groups[G].members
    a3 = hb(c, "a", 2, owned=owned(a2))      # the target moves back to a, at once
    assert a3.member_epoch == c.consumer_groups[G].group_epoch and len(parts(a3, c)) == 6
    assert b2.member_epoch == 2


async def test_session_timeout_fences_a_silent_member(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 2)], group_consumer_session_timeout_ms=150,
                               group_consumer_min_session_timeout_ms=100,
                               group_consumer_heartbeat_interval_ms=50,
                               group_consumer_min_heartbeat_interval_ms=10) as c:
        hb(c, "a", 0)
        b = hb(c, "b", 0)
        expired = c.counters["members_expired_total"]
        # b heartbeats, a goes silent
        for _ in range(20):
            b = hb(c, "b", b.member_epoch, owned=owned(b) if b.assignment is not None else [])
            await asyncio.sleep(0.03)
            if "a" not in c.consumer_groups[G].members:
                break
        assert "a" not in c.consumer_groups[G].members
        assert c.counters["members_expired_total"] == expired + 1


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 4)]) as c:
        a = hb(c, "a", 0, rebalance=100)
        hb(c, "b", 0)
        a2 = hb(c, "a", 1, owned=owned(a))     # asked to revoke within 100 ms
        assert member(c, "a").state is MemberState.UNREVOKED_PARTITIONS and a2.error == 0
        await wait_for(lambda: "a" not in c.consumer_groups[G].members, "a to be fenced")
        assert hb(c, "a", 1, owned=owned(a)).error == EC.UNKNOWN_MEMBER_ID


async def test_rebalance_timeout_survives_a_coordinator_restart(tmp_path):
    """Kafka's onLoaded: a member loaded while asked to revoke gets its rebalance timer again,
    so heartbeating without revoking does not keep it in the group forever."""
    async with own_coordinator(tmp_path, topics=[("t", 4)]) as c:
        a = hb(c, "a", 0, rebalance=300)
        hb(c, "b", 0)
        hb(c, "a", 1, owned=owned(a))                      # asked to revoke
        assert member(c, "a").state is MemberState.UNREVOKED_PARTITIONS
        broker = c.broker
        await c.stop()
        again = await started(broker, c.time_ms)
        try:
            assert member(again, "a").state is MemberState.UNREVOKED_PARTITIONS
            for _ in range(500):                           # keeps reporting what it must give up
                if "a" not in again.consumer_groups[G].members:
                    break
                assert hb(again, "a", 1, owned=owned(a)).error == 0
                await asyncio.sleep(0.01)
            assert "a" not in again.consumer_groups[G].members
        finally:
            await again.stop()


async def test_static_member_leaves_and_comes_back_with_its_partitions(cgc):
    c = cgc
    a = hb(c, "a1", 0, instance="i-a")
    b = hb(c, "b", 0)
    a2 = hb(c, "a1", 1, owned=owned(a), instance="i-a")
    a3 = hb(c, "a1", 1, owned=owned(a2), instance="i-a")
    mine = parts(a3, c) or parts(a2, c)
    epoch = c.consumer_groups[G].group_epoch
    # a restarted instance cannot take over while the old one is live
    assert hb(c, "a2", 0, instance="i-a").error == EC.UNRELEASED_INSTANCE_ID
    left = hb(c, "a1", -2, instance="i-a")
    assert (left.error, left.member_epoch) == (0, -2)
    back = hb(c, "a2", 0, instance="i-a")
    assert back.error == 0 and parts(back, c) == mine
    assert c.consumer_groups[G].group_epoch == epoch            # no rebalance
    assert hb(c, "a1", 2, owned=[], instance="i-a").error == EC.FENCED_INSTANCE_ID
    assert "a1" not in c.consumer_groups[G].members and b.error == 0


async def test_failed_static_replacement_keeps_the_old_member_and_its_timer(cgc):
    c = cgc
    hb(c, "a1", 0, instance="i-a")
    hb(c, "a1", -2, instance="i-a")                 # left for now: its session timer runs on
    partition = gr.partition_for(G, 3)
    c.broker.log_manager.get_log(TopicPartition(OFFSETS_TOPIC, partition)).close()
    assert hb(c, "a2", 0, instance="i-a").error == EC.NOT_COORDINATOR
    assert set(c.consumer_groups[G].members) == {"a1"}
    assert ("cg-session", G, "a1") in c._timers     # so it still expires if nobody comes back


async def test_regex_subscription_follows_new_topics(cgc):
    c = cgc
    r = hb(c, "a", 0, topics=[], regex="t|u")
    assert parts(r, c) == {("t", p) for p in range(6)} | {("u", 0), ("u", 1)}
    assert c.consumer_groups[G].resolved_regexes["t|u"][0] == frozenset({"t", "u"})
    keys = [k for k, _ in log_records(c.broker, G) if k["type"] == "consumer_group_regular_expression"]
    assert keys and keys[0]["regex"] == "t|u"


async def test_regex_resolution_keeps_what_the_triggering_member_may_describe(cgc):
    """Kafka's filterTopicDescribeAuthorizedTopics: every regex of the group is resolved in the
    context of the member whose request triggered the resolution - a heartbeat, or a classic
    member's JoinGroup into the consumer group."""
    c = cgc

    def only(*allowed):
        return lambda topic: topic in allowed
    r = c.consumer_group_heartbeat(dataclasses.replace(
        HeartbeatRequest(G, "a", 0, None, None, 30_000, [], "t|u|v", None, [], "client", "/127.0.0.1", 1),
        describable=only("t")))
    assert parts(r, c) == {("t", p) for p in range(6)}
    assert c.consumer_groups[G].resolved_regexes["t|u|v"][0] == frozenset({"t"})
    # a new topic and the batching interval passed: the next request resolves again, in its context
    c.broker.log_manager.create_topic("v", 1, {})
    c.time_ms.now += 11_000
    sub = cp.encode_subscription(cp.Subscription(["u"], None, {}, -1, None, 1))
    joined = await c.join_group(dataclasses.replace(
        join_req(member_id="classic-1", group=G, protocols=(("range", sub),)), describable=only("t", "v")))
    assert joined.error == 0, joined
    assert c.consumer_groups[G].resolved_regexes["t|u|v"][0] == frozenset({"t", "v"})


async def test_last_member_of_a_regex_leaving_tombstones_its_resolution(cgc):
    c = cgc
    hb(c, "a", 0, topics=[], regex="t|u")
    hb(c, "b", 0, topics=["t"])
    hb(c, "c", 0, topics=[], regex="t|u")
    hb(c, "a", -1)                                   # c still uses the regex: kept
    assert "t|u" in c.consumer_groups[G].resolved_regexes
    hb(c, "c", -1)                                   # its last user: Kafka tombstones it
    assert c.consumer_groups[G].resolved_regexes == {}
    last = [v for k, v in log_records(c.broker, G) if k["type"] == "consumer_group_regular_expression"][-1]
    assert last is None
    assert c.consumer_groups[G].subscription_metadata.keys() == {"t"}     # u is no one's now


async def test_reload_restores_groups_members_and_assignments(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 6)]) as c:
        a, b = hb(c, "a", 0), hb(c, "b", 0, instance="i-b")
        a2 = hb(c, "a", 1, owned=owned(a))
        hb(c, "a", 1, owned=owned(a2))
        before = c.consumer_groups[G]
        snapshot = (before.group_epoch, before.assignment_epoch, dict(before.target_assignment),
                    {m: (x.member_epoch, x.state, x.assigned, x.instance_id) for m, x in before.members.items()})
        broker = c.broker
        await c.stop()
        again = await started(broker, c.time_ms)
        try:
            g = again.consumer_groups[G]
            assert (g.group_epoch, g.assignment_epoch, dict(g.target_assignment),
                    {m: (x.member_epoch, x.state, x.assigned, x.instance_id) for m, x in g.members.items()}) == snapshot
            assert g.static_members == {"i-b": "b"}
            assert ("cg-session", G, "a") in again._timers
        finally:
            await again.stop()


async def test_offsets_with_member_epochs(cgc):
    c = cgc
    a = hb(c, "a", 0)
    commit = [("t", 0, 5, -1, "", -1)]
    assert c.commit_offsets(G, 1, "a", None, -1, commit, 9) == {("t", 0): 0}
    for args, code in (((G, 0, "a", None, -1, commit, 9), EC.STALE_MEMBER_EPOCH),
                       ((G, 1, "zz", None, -1, commit, 9), EC.UNKNOWN_MEMBER_ID),
                       ((G, 1, "a", None, -1, commit, 8), EC.UNSUPPORTED_VERSION),
                       ((G, -1, "", None, -1, commit, 9), EC.UNKNOWN_MEMBER_ID)):
        with pytest.raises(KafkaError) as info:
            c.commit_offsets(*args)
        assert info.value.code == code
    c.validate_consumer_offset_fetch(G, "a", 1)
    c.validate_consumer_offset_fetch(G, None, -1)
    with pytest.raises(KafkaError) as info:
        c.validate_consumer_offset_fetch(G, "a", 7)
    assert info.value.code == EC.STALE_MEMBER_EPOCH
    assert c.fetch_offsets(G, [("t", 0)])[("t", 0)].offset == 5
    # OffsetDelete refuses subscribed topics
    assert c.delete_offsets(G, [("t", 0)]) == (0, {("t", 0): EC.GROUP_SUBSCRIBED_TO_TOPIC})
    hb(c, "a", -1)
    assert c.commit_offsets(G, -1, "", None, -1, [("t", 1, 3, -1, "", -1)], 9) == {("t", 1): 0}
    assert a.error == 0


async def test_classic_apis_meet_a_consumer_group(cgc):
    c = cgc
    hb(c, "a", 0)
    # a classic member may join (test_migration.py), but is first given an id and nothing kept
    first = await c.join_group(join_req(group=G))
    assert first.error == EC.MEMBER_ID_REQUIRED and set(c.consumer_groups[G].members) == {"a"}
    assert (await c.join_group(join_req(group=G, protocol_type="connect"))).error == \
        EC.INCONSISTENT_GROUP_PROTOCOL
    # "a" speaks the consumer protocol: the classic APIs do not know it
    assert c.heartbeat(G, 1, "a", None) == EC.UNKNOWN_MEMBER_ID
    assert (await c.sync_group(G, 1, "a", None, None, None, [])).error == EC.UNKNOWN_MEMBER_ID
    assert c.leave_group(G, [("a", None)]) == (0, [EC.UNKNOWN_MEMBER_ID])
    assert c.describe_group(G) is None and "not a classic group" in c.not_classic_message(G)
    assert (G, "consumer", "Stable", "consumer") in c.list_groups()
    assert c.list_groups(types=["classic"]) == [] and c.list_groups(states=["assigning"]) == []
    assert c.delete_groups([G]) == {G: EC.NON_EMPTY_GROUP}
    [d] = c.consumer_group_describe([G])
    assert (d.state, d.group_epoch, d.assignor, [m.member_id for m in d.members]) == ("Stable", 1, "uniform", ["a"])
    assert [n for _, n, _ in d.members[0].assignment] == ["t"]
    # once empty, a classic JoinGroup replaces the consumer group
    hb(c, "a", -1)
    first = await c.join_group(join_req(group=G))
    assert first.error == EC.MEMBER_ID_REQUIRED and G not in c.consumer_groups
    # and an empty classic group makes way for a consumer group (a live one does not)
    assert c.leave_group(G, [(first.member_id, None)]) == (0, [0])
    assert hb(c, "z", 0).error == 0 and G in c.consumer_groups and G not in c.groups


async def test_live_classic_group_refuses_consumer_heartbeat_when_upgrades_are_off(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 6)],
                               group_consumer_migration_policy="downgrade") as c:
        first = await c.join_group(join_req(group="classic"))
        joined = await c.join_group(join_req(group="classic", member_id=first.member_id))
        assert joined.error == 0
        r = hb(c, "x", 0, group="classic")
        assert r.error == EC.GROUP_ID_NOT_FOUND and "not a consumer group" in r.message
        [d] = c.consumer_group_describe(["classic"])
        assert d.error == EC.GROUP_ID_NOT_FOUND


async def test_delete_empty_consumer_group_tombstones_everything(cgc):
    c = cgc
    hb(c, "a", 0, topics=[], regex="t")
    c.commit_offsets(G, 1, "a", None, -1, [("t", 0, 5, -1, "", -1)], 9)
    hb(c, "a", -1)
    assert c.delete_groups([G]) == {G: 0} and G not in c.consumer_groups and G not in c.offsets
    latest = {}
    for k, v in log_records(c.broker, G):
        latest[tuple(sorted((x, str(y)) for x, y in k.items()))] = v
    assert all(v is None for v in latest.values())          # every key ends as a tombstone


def test_record_codecs_round_trip_and_golden_key():
    import uuid
    tid = uuid.UUID("00000000-0000-0000-0000-000000000001")
    key = cgr.encode_key(cgr.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    # int16 type 8 | STRING "g" | STRING "m"
    assert key == b"\x00\x08" + b"\x00\x01g" + b"\x00\x01m"
    value = cgr.encode_current_assignment_value(member_epoch=3, previous_member_epoch=2, state=1,
                                                assigned={tid: [0, 2]}, pending_revocation={})
    # int16 version 0 | int32 3 | int32 2 | int8 1 | compact array(1): uuid, compact array(2) 0 2,
    # tags | compact array(0) | tags
    assert value == (b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x02" + b"\x01" + b"\x02"
                     + tid.bytes + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00"
                     + b"\x01" + b"\x00")
    assert gr.decode_key(key) == {"type": "consumer_group_current_member_assignment", "version": 8,
                                  "group": "g", "member_id": "m"}
    assert gr.decode_value(key, value) == {"version": 0, "member_epoch": 3, "previous_member_epoch": 2,
                                           "state": 1, "assigned": {tid: [0, 2]}, "pending_revocation": {}}
    for t, v in ((cgr.GROUP_METADATA, cgr.encode_group_metadata_value(7)),
                 (cgr.TARGET_ASSIGNMENT_METADATA, cgr.encode_target_assignment_metadata_value(7)),
                 (cgr.TARGET_ASSIGNMENT_MEMBER, cgr.encode_target_assignment_member_value({tid: [1]})),
                 (cgr.PARTITION_METADATA, cgr.encode_partition_metadata_value([(tid, "t", 3)])),
                 (cgr.REGULAR_EXPRESSION, cgr.encode_regex_value(["a", "b"], 9, 10)),
                 (cgr.MEMBER_METADATA, cgr.encode_member_metadata_value(
                     instance_id=None, rack_id="r", client_id="c", client_host="/h",
                     subscribed_topic_names=["t"], subscribed_topic_regex=None,
                     rebalance_timeout_ms=1000, server_assignor="range"))):
        k = cgr.encode_key(t, "g", "x" if t in (cgr.TARGET_ASSIGNMENT_MEMBER, cgr.MEMBER_METADATA,
                                                 cgr.REGULAR_EXPRESSION) else None)
        decoded = gr.decode_value(k, v)
        assert decoded["version"] == 0
        with pytest.raises(gr.GroupRecordError):
            gr.decode_value(k, v + b"\x00")              # trailing bytes
        with pytest.raises(gr.GroupRecordError):
            gr.decode_value(k, v[:-2])                   # truncated


async def test_offsets_of_unsubscribed_topics_expire_and_an_empty_group_goes(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", 2), ("u", 1)], offsets_retention_minutes=1) as c:
        hb(c, "a", 0)
        c.commit_offsets(G, 1, "a", None, -1, [("t", 0, 5, -1, "", -1), ("u", 0, 7, -1, "", -1)], 9)
        c.time_ms.now += 60_000
        assert c.expire_offsets() == 1                     # u: nobody subscribes it
        assert set(c.offsets[G]) == {("t", 0)}
        hb(c, "a", -1)
        assert c.expire_offsets() == 1 and G not in c.consumer_groups   # empty and no offsets left
        assert c.list_groups() == []
