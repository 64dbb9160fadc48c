"""KIP-848's online migration in the real coordinator over a real LogManager (no client):
a live classic group upgraded when a consumer-protocol member joins, its members carrying on as
classic members of the consumer group (JoinGroup / SyncGroup / Heartbeat / LeaveGroup / commits),
the downgrade when the last consumer-protocol member leaves or is replaced by a classic static
member, group.consumer.migration.policy, the records written and their replay at start.
"""
from __future__ import annotations

import asyncio

import pytest

from kompakt.broker.groups.group import GroupState
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError

from tests.broker.groups.test_consumer_group import hb as cg_hb
from tests.broker.groups.test_consumer_group import owned
from tests.broker.groups.test_coordinator import (  # noqa: F401  (fixtures)
    join_req, log_records, own_coordinator, started, wait_for)

G = "mig"
PARTS = 6


def hb(c, member_id, epoch, **kw):
    """A ConsumerGroupHeartbeat of this module's group."""
    return cg_hb(c, member_id, epoch, group=G, **kw)


def sub(owned_parts=(), topics=("t",), version=1) -> bytes:
    """A consumer protocol subscription of `topics` owning partitions `owned_parts` of "t"."""
    return cp.encode_subscription(cp.Subscription(list(topics), None, {"t": list(owned_parts)} if owned_parts else {},
                                                  -1, None, version))


def cjoin(member_id="", owned_parts=(), instance=None, version=5, **kw):
    return join_req(member_id=member_id, instance=instance, version=version, group=G,
                    protocols=(("range", sub(owned_parts)), ("roundrobin", sub(owned_parts))), **kw)


async def classic_group(c, n):
    """A Stable classic group of `n` members (range, topic t), partitions split round-robin by
    the leader; returns their member ids in join order."""
    joined = await asyncio.gather(*[c.join_group(cjoin(version=3)) for _ in range(n)])
    assert {j.generation_id for j in joined} == {1} and not any(j.error for j in joined)
    ids = [j.member_id for j in joined]
    plan = {mid: cp.encode_assignment({"t": list(range(i, PARTS, n))}, 1) for i, mid in enumerate(ids)}
    leader = joined[0].leader
    synced = await asyncio.gather(*[
        c.sync_group(G, 1, mid, None, "consumer", "range", list(plan.items()) if mid == leader else [])
        for mid in ids])
    assert not any(s.error for s in synced) and c.groups[G].state is GroupState.STABLE
    return ids


def assignment(result) -> set[int]:
    return set(cp.decode_assignment(result.assignment).get("t", []))


def check_disjoint(c):
    """No partition owned (assigned or pending revocation) by two members."""
    seen = []
    for m in c.consumer_groups[G].members.values():
        for parts in m.owned_partitions().values():
            seen.extend(parts)
    assert len(seen) == len(set(seen)), c.consumer_groups[G].members


async def rejoin_and_sync(c, member_id, owned_parts):
    """A classic member's rejoin: JoinGroup reporting what it owns, then SyncGroup; returns
    (generation, assigned partitions) or the first error code."""
    j = await c.join_group(cjoin(member_id, owned_parts))
    if j.error:
        return j.error, None
    assert (j.protocol_type, j.protocol_name, j.leader, j.members) == ("consumer", "range", "", [])
    s = await c.sync_group(G, j.generation_id, member_id, None, "consumer", "range", [])
    return (s.error, None) if s.error else (j.generation_id, assignment(s))


@pytest.fixture
async def mc(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", PARTS)]) as c:
        yield c


async def test_consumer_member_upgrades_a_live_classic_group(mc):
    c = mc
    a, b = await classic_group(c, 2)
    parked = asyncio.create_task(c.join_group(cjoin(version=3)))        # a third classic member,
    await wait_for(lambda: c.groups[G].state is GroupState.PREPARING_REBALANCE, "a rebalance")
    n = len(log_records(c.broker, G))
    r = hb(c, "z", 0)                                                   # a consumer-protocol member
    assert r.error == 0 and G in c.consumer_groups and G not in c.groups
    third = await parked
    assert third.error == EC.REBALANCE_IN_PROGRESS                      # parked: told to rejoin
    g = c.consumer_groups[G]
    assert {m.member_id: (m.member_epoch, m.uses_classic_protocol, len(m.assigned)) for m in g.members.values()} == \
        {a: (1, True, 1), b: (1, True, 1), third.member_id: (1, True, 0), "z": (r.member_epoch, False, 0)}
    assert g.group_epoch == r.member_epoch == 2
    assert ("cg-session", G, a) in c._timers and not [k for k in c._timers if k[0] == "heartbeat"]
    assert g.members[a].classic.session_timeout_ms == 5000 and g.members[a].classic.protocol_name == "range"
    # Kafka's records: the classic group's tombstone, then the consumer group in its order
    written = [(k["type"], k.get("member_id"), v is None) for k, v in log_records(c.broker, G)[n:]]
    abt = (a, b, third.member_id)
    assert written[:13] == [("group_metadata", None, True)] + [
        ("consumer_group_member_metadata", m, False) for m in abt] + [
        ("consumer_group_metadata", None, False)] + [
        ("consumer_group_target_assignment_member", m, False) for m in abt] + [
        ("consumer_group_target_assignment_metadata", None, False)] + [
        ("consumer_group_current_member_assignment", m, False) for m in abt] + [
        ("consumer_group_member_metadata", "z", False)]
    assert parts(r) == set()              # everything still owned by a and b
    # the classic members learn of the new epoch from their heartbeat, and rejoin (eager: owning nothing)
    assert c.heartbeat(G, 1, a, None) == EC.REBALANCE_IN_PROGRESS
    assert c.heartbeat(G, 2, a, None) == EC.ILLEGAL_GENERATION
    gen_a, got_a = await rejoin_and_sync(c, a, [])
    gen_b, got_b = await rejoin_and_sync(c, b, [])
    gen_t, got_t = await rejoin_and_sync(c, third.member_id, [])
    check_disjoint(c)
    assert gen_a == gen_b == gen_t == 2 and not got_a & got_b
    assert c.heartbeat(G, 2, a, None) == c.heartbeat(G, 2, b, None) == EC.NONE
    z = hb(c, "z", 2, owned=[])
    assert len(parts(z)) == 1 and len(got_a) == len(got_b) == 2 and len(got_t) == 1
    assert parts(z) | got_a | got_b | got_t == set(range(PARTS))
    assert c.consumer_groups[G].state.value == "Stable"
    # classic members commit with their generation, at any OffsetCommit version
    assert c.commit_offsets(G, 2, a, None, -1, [("t", min(got_a), 5, -1, "", -1)], 2) == {("t", min(got_a)): 0}
    with pytest.raises(KafkaError) as info:
        c.commit_offsets(G, 1, a, None, -1, [("t", 0, 5, -1, "", -1)], 8)
    assert info.value.code == EC.ILLEGAL_GENERATION
    [d] = c.consumer_group_describe([G])
    assert {m.member_id: m.member_type for m in d.members} == {a: 0, b: 0, third.member_id: 0, "z": 1}


def parts(result) -> set[int]:
    return {p for ps in (result.assignment or {}).values() for p in ps}


async def test_cooperative_classic_member_revokes_before_its_partitions_move(mc):
    c = mc
    a, b = await classic_group(c, 2)
    hb(c, "z", 0)
    owned_a = sorted(range(0, PARTS, 2))
    j = await c.join_group(cjoin(a, owned_a))              # still owns them all: asked to revoke
    assert j.generation_id == 1 and c.consumer_groups[G].members[a].state.label == "UnrevokedPartitions"
    s = await c.sync_group(G, 1, a, None, "consumer", "range", [])
    kept = assignment(s)
    assert s.error == 0 and kept < set(owned_a)            # what it keeps; it drops the rest
    assert c.heartbeat(G, 1, a, None) == EC.REBALANCE_IN_PROGRESS     # and must rejoin
    z = hb(c, "z", 2, owned=[])
    assert not parts(z) & set(owned_a)                     # nothing of a's moves before
    check_disjoint(c)
    gen, got = await rejoin_and_sync(c, a, sorted(kept))   # revoked: next epoch
    assert gen == 2 and got == kept
    z = hb(c, "z", 2, owned=[])
    assert parts(z) & (set(owned_a) - kept)                # now they do
    check_disjoint(c)


async def test_upgrade_replays_to_the_same_group(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", PARTS)]) as c:
        a, b = await classic_group(c, 2)
        hb(c, "z", 0)
        await rejoin_and_sync(c, a, [])
        before = c.consumer_groups[G]
        snapshot = (before.group_epoch, before.assignment_epoch, dict(before.target_assignment),
                    dict(before.members), before.state)
        broker = c.broker
        await c.stop()
        again = await started(broker, c.time_ms)
        try:
            g = again.consumer_groups[G]
            assert (g.group_epoch, g.assignment_epoch, dict(g.target_assignment), dict(g.members),
                    g.state) == snapshot
            assert G not in again.groups
            assert ("cg-session", G, a) in again._timers
        finally:
            await again.stop()


async def test_classic_member_joins_a_consumer_group(mc):
    c = mc
    hb(c, "z", 0)
    first = await c.join_group(cjoin())
    assert first.error == EC.MEMBER_ID_REQUIRED and len(first.member_id) == 22
    assert list(c.consumer_groups[G].members) == ["z"]
    j = await c.join_group(cjoin(first.member_id))
    m = first.member_id
    assert j.error == 0 and j.generation_id == 2 == c.consumer_groups[G].group_epoch
    s = await c.sync_group(G, 2, m, None, "consumer", "range", [])
    assert s.error == 0 and assignment(s) == set()        # z has not released anything yet
    assert c.heartbeat(G, 2, m, None) == EC.NONE          # waiting on z
    z = hb(c, "z", 1, owned=[(t, list(p)) for t, p in c.consumer_groups[G].members["z"].assigned.items()])
    hb(c, "z", 1, owned=owned(z))                         # z revoked what moves
    assert c.heartbeat(G, 2, m, None) == EC.REBALANCE_IN_PROGRESS   # free now: come and get them
    gen, got = await rejoin_and_sync(c, m, [])
    assert gen == 2 and len(got) == 3
    check_disjoint(c)
    # errors of the classic APIs in a consumer group
    assert (await c.sync_group(G, 2, m, None, "consumer", "roundrobin", [])).error == EC.INCONSISTENT_GROUP_PROTOCOL
    assert (await c.sync_group(G, 9, m, None, None, None, [])).error == EC.ILLEGAL_GENERATION
    assert c.heartbeat(G, 2, "nobody", None) == EC.UNKNOWN_MEMBER_ID
    other = await c.join_group(join_req(group=G, member_id="x", protocols=(("sticky", sub()),)))
    assert other.error == EC.INCONSISTENT_GROUP_PROTOCOL          # no protocol shared with m
    # LeaveGroup: classic members only
    epoch = c.consumer_groups[G].group_epoch
    assert c.leave_group(G, [("z", None), (m, None)]) == (0, [EC.UNKNOWN_MEMBER_ID, 0])
    assert list(c.consumer_groups[G].members) == ["z"] and c.consumer_groups[G].group_epoch == epoch + 1
    assert not [k for k in c._timers if k[2:] == (m,)]


async def test_classic_member_that_does_not_sync_or_rejoin_is_fenced(mc):
    c = mc
    hb(c, "z", 0)
    j = await c.join_group(cjoin("m1", rebalance=100))
    assert j.error == 0
    await wait_for(lambda: "m1" not in c.consumer_groups[G].members, "no SyncGroup: fenced")
    j = await c.join_group(cjoin("m2", rebalance=100))
    assert (await c.sync_group(G, j.generation_id, "m2", None, None, None, [])).error == 0
    hb(c, "y", 0)                                         # the group epoch moves on
    assert c.heartbeat(G, j.generation_id, "m2", None) == EC.REBALANCE_IN_PROGRESS
    await wait_for(lambda: "m2" not in c.consumer_groups[G].members, "no rejoin: fenced")


async def test_last_consumer_member_leaving_downgrades(mc):
    c = mc
    a, b = await classic_group(c, 2)
    hb(c, "z", 0)
    for m, owned_parts in ((a, []), (b, [])):
        await rejoin_and_sync(c, m, owned_parts)
    epoch = c.consumer_groups[G].group_epoch
    n = len(log_records(c.broker, G))
    left = hb(c, "z", -1)
    assert left.error == 0 and G not in c.consumer_groups
    g = c.groups[G]
    assert (g.state, g.generation_id, g.protocol_type, set(g.members)) == \
        (GroupState.PREPARING_REBALANCE, epoch, "consumer", {a, b})
    written = [(k["type"], v is None) for k, v in log_records(c.broker, G)[n:]]
    assert written[-1] == ("group_metadata", False) and all(tomb for _, tomb in written[:-1])
    assert {t for t, _ in written[:-1]} == {
        "consumer_group_current_member_assignment", "consumer_group_target_assignment_member",
        "consumer_group_target_assignment_metadata", "consumer_group_member_metadata",
        "consumer_group_partition_metadata", "consumer_group_metadata"}
    # the classic members rejoin the classic way and get a generation
    ja, jb = await asyncio.gather(c.join_group(cjoin(a)), c.join_group(cjoin(b)))
    assert ja.generation_id == jb.generation_id == epoch + 1 and ja.leader in (a, b)
    assert c.groups[G].state is GroupState.COMPLETING_REBALANCE


async def test_downgrade_record_replays_as_a_stable_classic_group(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", PARTS)]) as c:
        a, b = await classic_group(c, 2)
        hb(c, "z", 0)
        hb(c, "z", -1)
        target = {m.member_id: cp.decode_assignment(m.assignment) for m in c.groups[G].members.values()}
        broker = c.broker
        await c.stop()
        again = await started(broker, c.time_ms)
        try:
            g = again.groups[G]
            assert (g.state, g.protocol_name, set(g.members)) == (GroupState.STABLE, "range", {a, b})
            assert {m.member_id: cp.decode_assignment(m.assignment) for m in g.members.values()} == target
            assert G not in again.consumer_groups
        finally:
            await again.stop()


async def test_classic_static_member_replacing_the_last_consumer_member_downgrades(mc):
    c = mc
    (a,) = await classic_group(c, 1)
    hb(c, "z1", 0, instance="i-z")
    mine = set(c.consumer_groups[G].target_assignment["z1"].get(c.broker.log_manager.topics["t"].topic_id, ()))
    j = await c.join_group(cjoin(instance="i-z"))          # the same instance, back as a classic member
    assert j.error == 0 and G in c.groups and G not in c.consumer_groups
    g = c.groups[G]
    assert g.state is GroupState.STABLE and g.static_member_id("i-z") == j.member_id
    assert set(cp.decode_assignment(g.member(j.member_id).assignment).get("t", [])) == mine
    assert hb(c, "z1", 3, instance="i-z").error == EC.GROUP_ID_NOT_FOUND


async def test_policy_upgrade_only_keeps_classic_members_in_the_consumer_group(tmp_path):
    async with own_coordinator(tmp_path, topics=[("t", PARTS)], group_consumer_migration_policy="UPGRADE") as c:
        a, _ = await classic_group(c, 2)
        hb(c, "z", 0)
        assert hb(c, "z", -1).error == 0
        assert G in c.consumer_groups and G not in c.groups           # no downgrade
        assert set(c.consumer_groups[G].members) == {a, _}
    async with own_coordinator(tmp_path / "d", topics=[("t", PARTS)],
                               group_consumer_migration_policy="disabled") as c:
        await classic_group(c, 1)
        r = hb(c, "z", 0)
        assert r.error == EC.GROUP_ID_NOT_FOUND and G in c.groups


async def test_malformed_classic_assignment_refuses_the_upgrade(mc):
    c = mc
    (a,) = await classic_group(c, 1)
    c.groups[G].member(a).assignment = b"\x00\x00\x00\x00\x00\x09"    # a leader's garbage
    r = hb(c, "z", 0)
    assert r.error == EC.GROUP_ID_NOT_FOUND and "malformed" in r.message and G in c.groups
    assert c.heartbeat(G, 1, a, None) == EC.NONE                      # the classic group carries on
