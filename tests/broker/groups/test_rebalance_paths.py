"""The classic rebalance paths of issue 16, each checked against what Kafka's GroupMetadataManager
does (classicGroupJoinExistingMember, prepareRebalance / maybeCompleteJoinElseSchedule,
completeClassicGroupJoin, classicGroupLeaveToClassicGroup, the pending-member rules):

* a member re-sending JoinGroup during PreparingRebalance updates its protocols and the join
  phase completes with the new metadata;
* during CompletingRebalance, the same metadata is answered with the current generation at once
  (the leader again gets the members), changed metadata starts a new rebalance;
* the join phase lasts the largest rebalance_timeout_ms of the members (timer deadline checked);
* when it ends, dynamic members that did not rejoin are removed, static ones stay;
* a LeaveGroup during PreparingRebalance completes the phase once everybody left has rejoined,
  except during the initial delay of a group coming from Empty, which still waits for its timer;
* a pending member (given an id with MEMBER_ID_REQUIRED) holds the join phase until it joins,
  leaves or expires;
* a rejoin updates the member's session and rebalance timeouts; members that never send
  SyncGroup after the join phase are removed when the sync timer fires.

Real coordinator and LogManager (test_coordinator.py's fixtures); timers are real and short.
"""
from __future__ import annotations

import asyncio

from kompakt.broker.groups.group import GroupState
from kompakt.protocol import group_records as gr
from kompakt.protocol.consumer_protocol import encode_consumer_subscription
from kompakt.protocol.errors import ErrorCode as EC

from tests.broker.groups.test_coordinator import (  # noqa: F401  (fixtures)
    SUB, coord, env, join_alone, join_req, own_coordinator, wait_for)

SUB_T2 = encode_consumer_subscription(["t", "t2"])


async def stable_pair(c, *, a_kw=None, b_kw=None):
    """Two members in a Stable generation 2: (a id, b id)."""
    a = await join_alone(c, **(a_kw or {}))
    await c.sync_group("g", 1, a.member_id, None, None, None, [(a.member_id, b"A")])
    b_id = (await c.join_group(join_req(**(b_kw or {})))).member_id
    b_join = asyncio.ensure_future(c.join_group(join_req(member_id=b_id, **(b_kw or {}))))
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    a2 = await c.join_group(join_req(member_id=a.member_id, **(a_kw or {})))
    assert (await b_join).generation_id == a2.generation_id == 2
    await c.sync_group("g", 2, a.member_id, None, None, None, [(a.member_id, b"A"), (b_id, b"B")])
    assert c.groups["g"].state is GroupState.STABLE
    return a.member_id, b_id


def join_deadline_s(c) -> float:
    """Seconds until the group's join-phase timer fires."""
    handle = c._timers[("join", "g")]
    return handle.when() - asyncio.get_running_loop().time()


async def test_rejoin_during_preparing_rebalance_updates_metadata(env, coord):
    c = coord
    a, b = await stable_pair(c)
    first = asyncio.ensure_future(c.join_group(join_req(member_id=a)))      # starts a rebalance
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    # a re-sends JoinGroup with a new subscription before b has rejoined.
    second = asyncio.ensure_future(c.join_group(join_req(member_id=a, protocols=(("range", SUB_T2),))))
    # Kafka drops the replaced request's callback; our responses on one connection leave in
    # order, so the abandoned one is answered (REBALANCE_IN_PROGRESS) rather than left hanging.
    assert (await first).error == EC.REBALANCE_IN_PROGRESS
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE and not second.done()
    b_res = await c.join_group(join_req(member_id=b))
    a_res = await second
    assert a_res.generation_id == b_res.generation_id == 3 and a_res.leader == a
    assert dict((m, meta) for m, _, meta in a_res.members) == {a: SUB_T2, b: SUB}
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE


async def test_rejoin_during_completing_rebalance(env, coord):
    c = coord
    a, b = await stable_pair(c)
    a_join = asyncio.ensure_future(c.join_group(join_req(member_id=a)))   # the leader: rebalance
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    assert (await c.join_group(join_req(member_id=b))).generation_id == 3
    a_res = await a_join
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    # Same metadata (a lost its answer): the current generation again, members for the leader.
    again = await c.join_group(join_req(member_id=a))
    assert (again.error, again.generation_id, again.leader) == (0, 3, a)
    assert {m for m, _, _ in again.members} == {a, b}
    assert (await c.join_group(join_req(member_id=b))).members == []
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    # Changed metadata: a new rebalance; the parked SyncGroup of b learns it at once.
    b_sync = asyncio.ensure_future(c.sync_group("g", 3, b, None, None, None, []))
    await asyncio.sleep(0)
    changed = asyncio.ensure_future(c.join_group(join_req(member_id=a, protocols=(("range", SUB_T2),))))
    assert (await b_sync).error == EC.REBALANCE_IN_PROGRESS
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    await c.join_group(join_req(member_id=b))
    assert (await changed).generation_id == 4
    assert a_res.generation_id == 3


async def test_join_phase_lasts_the_largest_rebalance_timeout(env, coord):
    c = coord
    a, b = await stable_pair(c, a_kw={"rebalance": 300}, b_kw={"rebalance": 30_000})
    asyncio.ensure_future(c.join_group(join_req(member_id=a, rebalance=300)))
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    assert c.groups["g"].rebalance_timeout_ms == 30_000
    assert join_deadline_s(c) > 20.0          # b's 30 s, not a's 0.3 s
    await c.join_group(join_req(member_id=b, rebalance=30_000))   # everybody in: done at once
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE


async def test_members_that_did_not_rejoin(tmp_path):
    """At the end of the join phase dynamic members that did not rejoin are removed; a static
    member stays (it keeps its partitions until its session times out)."""
    async with own_coordinator(tmp_path, topics=[("t", 2)]) as c:
        kw = {"rebalance": 200, "session": 60_000}
        a = await join_alone(c, **kw)
        await c.sync_group("g", 1, a.member_id, None, None, None, [])
        s_join = asyncio.ensure_future(c.join_group(join_req(instance="s", **kw)))   # static
        await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
        a_res = await c.join_group(join_req(member_id=a.member_id, **kw))
        s_res = await s_join
        s_sync = asyncio.ensure_future(c.sync_group("g", 2, s_res.member_id, "s", None, None, []))
        await asyncio.sleep(0)
        await c.sync_group("g", 2, a.member_id, None, None, None, [])
        assert (await s_sync).error == 0 and c.groups["g"].state is GroupState.STABLE
        d_id = (await c.join_group(join_req(**kw))).member_id
        d_res = await c.join_group(join_req(member_id=d_id, **kw))   # joins; a and s never rejoin
        assert a_res.generation_id == 2 and d_res.generation_id == 3
        group = c.groups["g"]
        assert a.member_id not in group.members                  # dynamic: removed
        assert s_res.member_id in group.members                  # static: kept
        assert group.leader_id == d_id                           # the leader did not rejoin
        assert {m for m, _, _ in d_res.members} == {d_id, s_res.member_id}


async def test_leave_during_preparing_rebalance_completes_the_join(env, coord):
    c = coord
    a, b = await stable_pair(c)
    c_id = (await c.join_group(join_req())).member_id
    c_join = asyncio.ensure_future(c.join_group(join_req(member_id=c_id)))   # newcomer
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    b_join = asyncio.ensure_future(c.join_group(join_req(member_id=b)))
    await asyncio.sleep(0)
    assert not c_join.done() and not b_join.done()               # waiting for a
    assert c.leave_group("g", [(a, None)]) == (0, [0])           # a leaves instead
    # the leave itself ends the join phase (not the rebalance timer, which would too, later)
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE and ("join", "g") not in c._timers
    c_res, b_res = await c_join, await b_join
    assert c_res.generation_id == b_res.generation_id == 3
    assert {m for m, _, _ in (b_res.members or c_res.members)} == {b, c_id}


async def test_leave_during_initial_rebalance_waits_for_the_delay(tmp_path):
    async with own_coordinator(tmp_path, group_initial_rebalance_delay_ms=300) as c:
        ids = [(await c.join_group(join_req())).member_id for _ in range(2)]
        joins = [asyncio.ensure_future(c.join_group(join_req(member_id=m))) for m in ids]
        await wait_for(lambda: len(c.groups["g"].members) == 2, "both members added")
        assert c.leave_group("g", [(ids[1], None)]) == (0, [0])
        assert (await joins[1]).error == EC.UNKNOWN_MEMBER_ID
        # Kafka's maybeCompleteJoinPhase does not end an initial rebalance: the delay timer does.
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert ("join", "g") in c._timers
        assert (await joins[0]).generation_id == 1


async def test_pending_member_holds_the_join_phase(env, coord):
    c = coord
    a, b = await stable_pair(c)
    pending = (await c.join_group(join_req())).member_id          # MEMBER_ID_REQUIRED only
    assert pending in c.groups["g"].pending_members
    a_join = asyncio.ensure_future(c.join_group(join_req(member_id=a)))
    b_join = asyncio.ensure_future(c.join_group(join_req(member_id=b)))
    await asyncio.sleep(0.05)
    # Everybody in `members` rejoined, but a pending member exists: not complete yet.
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE and not a_join.done()
    assert c.leave_group("g", [(pending, None)]) == (0, [0])     # the pending member leaves
    assert (await a_join).generation_id == (await b_join).generation_id == 3
    assert not c.groups["g"].pending_members and ("heartbeat", "g", pending) not in c._timers


async def test_rejoin_updates_the_member_timeouts(env, coord):
    c = coord
    a, b = await stable_pair(c)
    rejoin = asyncio.ensure_future(c.join_group(join_req(member_id=a, session=7000, rebalance=60_000)))
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    m = c.groups["g"].member(a)
    assert (m.session_timeout_ms, m.rebalance_timeout_ms) == (7000, 60_000)
    assert join_deadline_s(c) > 30                 # the phase waits for the largest: a's new one
    await c.join_group(join_req(member_id=b))
    assert (await rejoin).generation_id == 3


async def test_members_that_never_sync_are_removed(env, coord):
    """Kafka's expirePendingSync: after the join phase every member must send SyncGroup within
    the rebalance timeout; the ones that do not are removed and the group rebalances."""
    c = coord
    a, b = await stable_pair(c)                    # b never sent SyncGroup for generation 2
    assert c.groups["g"].pending_sync_members == {b} and ("sync", "g") in c._timers
    c._expire_pending_sync("g", 1)                 # a stale timer of an older generation: nothing
    assert b in c.groups["g"].members
    c._expire_pending_sync("g", 2)                 # what the sync timer does when it fires
    g = c.groups["g"]
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert ("heartbeat", "g", b) not in c._timers
    # once every member has synced, the timer goes
    rejoined = await c.join_group(join_req(member_id=a))
    assert rejoined.generation_id == 3 and ("sync", "g") in c._timers
    await c.sync_group("g", 3, a, None, None, None, [(a, b"A")])
    assert ("sync", "g") not in c._timers
