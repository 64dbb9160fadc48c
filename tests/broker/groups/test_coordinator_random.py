"""Random interleavings of the classic protocol against one coordinator (real LogManager):
joins (dynamic and static, old and new versions), syncs, heartbeats, leaves, commits and
session expiries in a seeded random order, with the group invariants checked after every step
and every parked request answered by the end. The seed is in the test id, so a failure replays.
"""
from __future__ import annotations

import asyncio
import logging
import random
import types

import pytest

from kompakt.broker.groups.coordinator import GroupCoordinator, JoinRequest
from kompakt.broker.groups.group import GroupState
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import group_records as gr
from kompakt.protocol.consumer_protocol import encode_consumer_subscription
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError
from kompakt.storage.log_manager import LogManager

SUB = encode_consumer_subscription(["t"])
STEPS = 250


def check_invariants(c: GroupCoordinator, generations: dict) -> None:
    for gid, g in c.groups.items():
        assert (g.leader_id is None) == (not g.members), g
        assert g.leader_id is None or g.leader_id in g.members, g
        assert not (g.pending_members & set(g.members)), g
        for iid, mid in g.static_members.items():
            assert mid in g.members and g.members[mid].group_instance_id == iid, g
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.members and g.protocol_name is not None, g
        if g.state is GroupState.EMPTY:
            assert not g.members and g.protocol_name is None, g
        assert g.generation_id >= generations.get(gid, 0), g
        generations[gid] = g.generation_id


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_random_protocol_interleavings_keep_invariants(tmp_path, seed, caplog):
    rnd = random.Random(seed)
    config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "group.initial.rebalance.delay.ms": "0",
                           "group.min.session.timeout.ms": "10", "offsets.topic.num.partitions": "2"})
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 2, {})
    c = GroupCoordinator(types.SimpleNamespace(config=config, log_manager=lm))
    await c.start()
    known: list[tuple[str, str | None]] = []          # (member id, instance id) handed out
    tasks: list[asyncio.Task] = []
    generations: dict = {}

    def request(member_id="", instance=None, version=5):
        # long timeouts: expiries happen only when the test fires them
        return JoinRequest("g", member_id, instance, "consumer", [("range", SUB)], 60_000, 200,
                           "c", "/h", version)

    async def join(member_id="", instance=None, version=5):
        r = await c.join_group(request(member_id, instance, version))
        if r.error == EC.MEMBER_ID_REQUIRED:
            known.append((r.member_id, None))
            r = await c.join_group(request(r.member_id, None, version))
        if r.error == 0:
            known.append((r.member_id, instance))
        return r

    async def sync(member_id, instance):
        g = c.groups.get("g")
        gen = g.generation_id if g else 0
        assignment = [(m, b"a") for m in (g.members if g else {})]
        return await c.sync_group("g", gen, member_id, instance, None, None, assignment)

    caplog.set_level(logging.ERROR)
    try:
        for _ in range(STEPS):
            op = rnd.choice(["join", "join", "rejoin", "sync", "sync", "heartbeat", "leave",
                             "commit", "expire", "yield"])
            member_id, instance = rnd.choice(known) if known else ("", None)
            if op == "join":
                static = rnd.random() < 0.3
                tasks.append(asyncio.create_task(join(
                    instance=f"i{rnd.randrange(3)}" if static else None, version=rnd.choice([3, 5, 9]))))
            elif op == "rejoin" and known:
                tasks.append(asyncio.create_task(join(member_id, instance)))
            elif op == "sync" and known:
                tasks.append(asyncio.create_task(sync(member_id, instance)))
            elif op == "heartbeat" and known and "g" in c.groups:
                code = c.heartbeat("g", c.groups["g"].generation_id, member_id, instance)
                assert code in (0, EC.REBALANCE_IN_PROGRESS, EC.UNKNOWN_MEMBER_ID, EC.FENCED_INSTANCE_ID)
            elif op == "leave" and known:
                c.leave_group("g", [(member_id, instance)])
            elif op == "commit" and known and "g" in c.groups:
                try:
                    c.commit_offsets("g", c.groups["g"].generation_id, member_id, instance, -1,
                                     [("t", rnd.randrange(2), rnd.randrange(100), -1, "", -1)], 8)
                except KafkaError as exc:
                    assert exc.code in (EC.UNKNOWN_MEMBER_ID, EC.FENCED_INSTANCE_ID,
                                        EC.REBALANCE_IN_PROGRESS, EC.ILLEGAL_GENERATION)
            elif op == "expire" and known:
                c._expire_heartbeat("g", member_id)      # what the session timer does
            for _ in range(rnd.randrange(3)):
                await asyncio.sleep(0)
            check_invariants(c, generations)
        # let join/sync timers (200 ms rebalance timeout) run their course, then shut down
        await asyncio.sleep(0.5)
        check_invariants(c, generations)
    finally:
        await c.stop()
        lm.shutdown()
    done, pending = await asyncio.wait(tasks, timeout=5) if tasks else (set(), set())
    assert not pending, f"{len(pending)} requests never answered"
    for t in done:
        t.result()                                    # no request raised
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
