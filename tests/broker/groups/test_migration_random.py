"""Random interleavings of both protocols on one group id (real coordinator, real LogManager):
consumer-protocol heartbeats, joins and leaves, classic joins / syncs / heartbeats / leaves /
commits, and session expiries, in a seeded random order - so the group upgrades and downgrades
as members of either kind come and go. After every step: no partition is owned by two members,
a group id names one group, the classic group invariants hold. At the end a second coordinator
replays __consumer_offsets and must rebuild exactly the groups in memory (Kafka's rule: memory
equals a replay). The seed is in the test id, so a failure replays.
"""
from __future__ import annotations

import asyncio
import logging
import random

import pytest

from kompakt.broker.groups.consumer.heartbeat import HeartbeatRequest
from kompakt.broker.groups.group import GroupState
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError

from tests.broker.groups.test_coordinator import JoinRequest, own_coordinator, started
from tests.broker.groups.test_coordinator_random import check_invariants

G = "rnd"
STEPS = 300
PARTS = 4


def check_ownership(c) -> None:
    assert not (G in c.groups and G in c.consumer_groups)
    group = c.consumer_groups.get(G)
    if group is None:
        return
    owned = [(t, p) for m in group.members.values() for t, ps in m.owned_partitions().items() for p in ps]
    assert len(owned) == len(set(owned)), group.members
    for m in group.members.values():
        assert all(not (p & m.pending_revocation.get(t, frozenset())) for t, p in m.assigned.items()), m


def image(c) -> dict:
    """What a replay must rebuild: consumer groups whole; classic groups when settled."""
    out = {"offsets": {g: dict(o) for g, o in c.offsets.items()}}
    cg = c.consumer_groups.get(G)
    if cg is not None:
        out["consumer"] = (cg.group_epoch, cg.assignment_epoch, dict(cg.target_assignment),
                           dict(cg.members), cg.state, dict(cg.subscription_metadata))
    g = c.groups.get(G)
    if g is not None and g.state in (GroupState.STABLE, GroupState.EMPTY):
        out["classic"] = (g.generation_id, g.protocol_name,
                          {m.member_id: (m.assignment, m.group_instance_id) for m in g.members.values()})
    return out


@pytest.mark.parametrize("seed", [1, 2, 4, 6])       # (seeds whose runs convert both ways)
async def test_random_mixed_protocol_interleavings(tmp_path, seed, caplog):
    rnd = random.Random(seed)
    caplog.set_level(logging.ERROR)
    async with own_coordinator(tmp_path, topics=[("t", PARTS)]) as c:
        tid = c.broker.log_manager.topics["t"].topic_id
        consumers: list[tuple[str, str | None]] = []     # (member id, instance id) of either kind
        classics: list[tuple[str, str | None]] = []
        tasks: list[asyncio.Task] = []
        generations: dict = {}
        n = 0
        conversions = {"upgrade": 0, "downgrade": 0}
        for name, kind in (("_after_upgrade", "upgrade"), ("_consumer_to_classic_group", "downgrade")):
            def counted(*args, _real=getattr(c, name), _kind=kind, **kw):
                result = _real(*args, **kw)       # (raises when the append fails: not counted)
                conversions[_kind] += 1
                return result
            setattr(c, name, counted)

        def member(member_id):
            group = c.consumer_groups.get(G)
            return group.members.get(member_id) if group is not None else None

        def owns(m, partial: bool) -> list[int]:
            """What a client reports owning: its assignment, maybe still what it must revoke."""
            if m is None:
                return []
            have = set(m.assigned.get(tid, ())) | (set(m.pending_revocation.get(tid, ())) if partial else set())
            return sorted(have)

        def heartbeat(member_id, epoch, instance):
            m = member(member_id)
            r = c.consumer_group_heartbeat(HeartbeatRequest(
                G, member_id, epoch, instance, None, 30_000 if epoch == 0 else -1,
                ["t"] if epoch == 0 else None, None, None,
                [] if epoch == 0 else [(tid, owns(m, rnd.random() < 0.3))], "c", "/h", 1))
            assert r.error in (0, EC.UNKNOWN_MEMBER_ID, EC.FENCED_MEMBER_EPOCH, EC.GROUP_ID_NOT_FOUND,
                               EC.UNRELEASED_INSTANCE_ID, EC.FENCED_INSTANCE_ID), r
            return r

        def classic_join_request(member_id, instance):
            m = member(member_id)
            eager = rnd.random() < 0.5
            sub = cp.encode_subscription(cp.Subscription(
                ["t"], None, {} if eager else {"t": owns(m, rnd.random() < 0.3)}, -1, None, 1))
            return JoinRequest(G, member_id, instance, "consumer", [("range", sub)], 60_000, 200,
                               "c", "/h", 5)

        async def classic_join(member_id="", instance=None):
            r = await c.join_group(classic_join_request(member_id, instance))
            if r.error == EC.MEMBER_ID_REQUIRED:
                r = await c.join_group(classic_join_request(r.member_id, instance))
            if r.error == 0:
                classics.append((r.member_id, instance))
            return r

        async def classic_sync(member_id, instance):
            m, g = member(member_id), c.groups.get(G)
            generation = m.member_epoch if m is not None else (g.generation_id if g else 0)
            plan = [(x, cp.encode_assignment({"t": [i]})) for i, x in enumerate(g.members)] if g else []
            return await c.sync_group(G, generation, member_id, instance, "consumer", "range", plan)

        try:
            for _ in range(STEPS):
                op = rnd.choice(["cjoin", "hb", "hb", "hb", "cleave", "join", "rejoin", "sync", "sync",
                                 "heartbeat", "leave", "commit", "expire", "yield"])
                mid, inst = rnd.choice(consumers) if consumers else ("", None)
                kid, kinst = rnd.choice(classics) if classics else ("", None)
                if op == "cjoin":
                    n += 1
                    inst = f"i{rnd.randrange(3)}" if rnd.random() < 0.3 else None
                    r = heartbeat(f"m{n}", 0, inst)
                    if r.error == 0:
                        consumers.append((f"m{n}", inst))
                elif op == "hb" and consumers:
                    m = member(mid)
                    heartbeat(mid, m.member_epoch if m is not None else 1, inst)
                elif op == "cleave" and consumers:
                    m = member(mid)
                    epoch = -2 if inst is not None and rnd.random() < 0.5 else -1
                    heartbeat(mid, epoch, inst)
                elif op == "join":
                    static = rnd.random() < 0.3
                    tasks.append(asyncio.create_task(classic_join(instance=f"i{rnd.randrange(3)}" if static else None)))
                elif op == "rejoin" and classics:
                    tasks.append(asyncio.create_task(classic_join(kid, kinst)))
                elif op == "sync" and classics:
                    tasks.append(asyncio.create_task(classic_sync(kid, kinst)))
                elif op == "heartbeat" and classics:
                    m, g = member(kid), c.groups.get(G)
                    generation = m.member_epoch if m is not None else (g.generation_id if g else 0)
                    code = c.heartbeat(G, generation, kid, kinst)
                    assert code in (0, EC.REBALANCE_IN_PROGRESS, EC.UNKNOWN_MEMBER_ID, EC.FENCED_INSTANCE_ID,
                                    EC.ILLEGAL_GENERATION), code
                elif op == "leave" and classics:
                    c.leave_group(G, [(kid, kinst)])
                elif op == "commit" and (classics or consumers):
                    who, wi = rnd.choice(classics + consumers)
                    m, g = member(who), c.groups.get(G)
                    generation = m.member_epoch if m is not None else (g.generation_id if g else -1)
                    try:
                        c.commit_offsets(G, generation, who, wi, -1,
                                         [("t", rnd.randrange(PARTS), rnd.randrange(100), -1, "", -1)], 9)
                    except KafkaError as exc:
                        assert exc.code in (EC.UNKNOWN_MEMBER_ID, EC.FENCED_INSTANCE_ID, EC.STALE_MEMBER_EPOCH,
                                            EC.REBALANCE_IN_PROGRESS, EC.ILLEGAL_GENERATION), exc
                elif op == "expire" and (classics or consumers):
                    who, _ = rnd.choice(classics + consumers)
                    c._expire_consumer_member(G, who, "test")        # what a session timer does
                    c._expire_heartbeat(G, who)
                for _ in range(rnd.randrange(3)):
                    await asyncio.sleep(0)
                check_ownership(c)
                check_invariants(c, generations)
            assert conversions["upgrade"] and conversions["downgrade"], conversions
            await asyncio.sleep(0.5)                  # classic join/sync timers (200 ms) run out
            check_ownership(c)
            before = image(c)
            broker = c.broker
            await c.stop()
            again = await started(broker, c.time_ms)
            try:
                assert image(again) == before
            finally:
                await again.stop()
        finally:
            await c.stop()
    done, pending = await asyncio.wait(tasks, timeout=5) if tasks else (set(), set())
    assert not pending, f"{len(pending)} requests never answered"
    for t in done:
        t.result()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
