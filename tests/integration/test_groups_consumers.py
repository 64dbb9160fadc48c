"""Consumer groups end to end with each real client (confluent-kafka, kafka-python, aiokafka).

One broker per test; members are separate processes (groups_support.Member). Covered:
* three members of a 6-partition topic get a full, non-overlapping assignment;
* one member leaves (LeaveGroup), one is SIGKILLed (session timeout), the survivor takes over
  every partition, and with manual commits every record is consumed exactly once;
* the broker is restarted gracefully: the committed offsets survive and a new member process
  resumes from them (sees only what was produced after the last commit);
* the broker is SIGKILLed and restarted: the committed offsets and the group are still there;
* a static member (group.instance.id) that restarts gets its partitions back without a rebalance,
  and the group survives a SIGKILL of the broker: its members carry on without a rebalance.
"""
from __future__ import annotations

from collections import Counter

import pytest

from groups_support import (CLIENTS, GROUP_BROKER, Member, committed_offsets, create_topic, listed_groups, produce,
                            rebalances_logged)
from kompakt.testing.poll import wait_until

PARTITIONS = 6


def values(phase: str, n: int) -> list[str]:
    return [f"{phase}-{i}" for i in range(n)]


def consumed(members) -> Counter:
    return Counter(v for m in members for v in m.values())


def rebalance_events(events) -> list[str]:
    """The assignment changes among a member's events (not records, failed commits or polls)."""
    return [e["event"] for e in events if e["event"] in ("assigned", "revoked")]


def full_disjoint_assignment(members, partitions: int):
    owned = [m.assignment() for m in members]
    if any(a is None or not a for a in owned):
        return False
    union = set().union(*owned)
    return union == set(range(partitions)) and sum(len(a) for a in owned) == partitions


@pytest.mark.parametrize("client", CLIENTS)
def test_group_rebalance_exactly_once_and_restarts(client, start_broker, tmp_path):
    broker = start_broker(config=GROUP_BROKER)
    topic, group = "orders", f"g-{client}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    phase1 = values("p1", 60)
    produce(broker.bootstrap, topic, phase1, PARTITIONS)

    members = [Member(client, broker.bootstrap, group, topic, tmp_path) for _ in range(3)]
    try:
        wait_until(lambda: full_disjoint_assignment(members, PARTITIONS),
                   "three members to share the six partitions")
        assert sorted(len(m.assignment()) for m in members) == [2, 2, 2]
        wait_until(lambda: set(consumed(members)) == set(phase1), "phase 1 consumed")

        leaver, victim, survivor = members
        victim.kill()           # no LeaveGroup: only the session timeout removes it
        leaver.close()          # LeaveGroup: immediate rebalance
        wait_until(lambda: survivor.assignment() == set(range(PARTITIONS)),
                   "the survivor to own every partition")
        phase2 = values("p2", 60)
        produce(broker.bootstrap, topic, phase2, PARTITIONS)
        wait_until(lambda: set(consumed(members)) == set(phase1 + phase2), "phase 2 consumed")
        counts = consumed(members)
        assert [v for v, n in counts.items() if n > 1] == [], "records consumed twice"
        survivor.close()
    finally:
        for m in members:
            m.kill()

    # Committed offsets survive a graceful broker restart, and a new member process of the
    # group resumes from them: it sees phase 3 only.
    expected = {p: 20 for p in range(PARTITIONS)}           # 120 records round-robin over 6
    assert committed_offsets(broker.bootstrap, group) == expected
    phase3 = values("p3", 60)
    produce(broker.bootstrap, topic, phase3, PARTITIONS)
    broker.restart()
    assert committed_offsets(broker.bootstrap, group) == expected
    resumed = Member(client, broker.bootstrap, group, topic, tmp_path)
    try:
        wait_until(lambda: set(resumed.values()) >= set(phase3), "phase 3 consumed by the new member")
        resumed.close()
    finally:
        resumed.kill()
    assert sorted(resumed.values()) == sorted(phase3)

    # SIGKILL: the appended commits are in the log; the group is still listed.
    broker.restart(kill=True)
    assert committed_offsets(broker.bootstrap, group) == {p: 30 for p in range(PARTITIONS)}
    assert listed_groups(broker.bootstrap)[group]["group_state"] == "Empty"


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restart_without_rebalance(client, start_broker, tmp_path):
    broker = start_broker(config=GROUP_BROKER)
    topic, group = "static", f"s-{client}"
    create_topic(broker.bootstrap, topic, 4)
    # Long sessions: the restarted instance must be back before the broker would expire it.
    a = Member(client, broker.bootstrap, group, topic, tmp_path, instance_id="a", session_ms=10000)
    b = Member(client, broker.bootstrap, group, topic, tmp_path, instance_id="b", session_ms=10000)
    restarted = None
    try:
        wait_until(lambda: full_disjoint_assignment([a, b], 4), "two static members sharing 4 partitions")
        first = values("s1", 40)
        produce(broker.bootstrap, topic, first, 4)
        wait_until(lambda: set(consumed([a, b])) == set(first), "records consumed by both members")
        owned_by_a = a.assignment()
        rebalances, b_events = rebalances_logged(broker), len(b.snapshot())

        a.kill()
        restarted = Member(client, broker.bootstrap, group, topic, tmp_path, instance_id="a",
                           session_ms=10000)
        wait_until(lambda: restarted.assignment(), "the restarted static member to be assigned")
        assert restarted.assignment() == owned_by_a
        second = values("s2", 40)
        produce(broker.bootstrap, topic, second, 4)
        wait_until(lambda: set(consumed([a, b, restarted])) >= set(second), "records after the restart")

        assert rebalances_logged(broker) == rebalances, "the static rejoin triggered a rebalance"
        assert rebalance_events(b.snapshot()[b_events:]) == [], "the other member saw a rebalance"
        assert [v for v, n in consumed([a, b, restarted]).items() if n > 1] == []

        # The broker dies (SIGKILL) under the live group: it reloads the group (generation,
        # members, assignment) from __consumer_offsets and the members carry on without a
        # rebalance once they reconnect within their session timeout.
        marks = len(b.snapshot()), len(restarted.snapshot())
        broker.restart(kill=True)
        third = values("s3", 40)
        produce(broker.bootstrap, topic, third, 4)
        wait_until(lambda: set(consumed([b, restarted])) >= set(third), "records after the broker restart")
        assert rebalances_logged(broker) == rebalances, "the broker restart triggered a rebalance"
        assert [rebalance_events(m.snapshot()[mark:]) for m, mark in zip((b, restarted), marks)] \
            == [[], []], "a member saw a rebalance after the broker restart"
    finally:
        for m in (a, b, restarted):
            if m is not None:
                m.kill()


def test_cooperative_sticky_incremental_rebalance_confluent(start_broker):
    """KIP-429 incremental cooperative rebalancing rides on the same classic protocol: a first
    librdkafka member owns all six partitions; two more join and, with cooperative-sticky, the
    first gives up only the four that move (never all six at once), ending at 2+2+2. The
    coordinator needs nothing protocol-specific for that."""
    import threading
    from confluent_kafka import Consumer
    broker = start_broker(config=GROUP_BROKER)
    create_topic(broker.bootstrap, "coop", PARTITIONS)
    owned: dict[int, set[int]] = {}
    revoked: dict[int, list[set[int]]] = {}
    lock, stop = threading.Lock(), threading.Event()

    def member(i: int) -> None:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "coop",
                      "partition.assignment.strategy": "cooperative-sticky",
                      "session.timeout.ms": 3000, "heartbeat.interval.ms": 200})

        def on_assign(consumer, parts):
            with lock:
                owned.setdefault(i, set()).update(p.partition for p in parts)
            consumer.incremental_assign(parts)

        def on_revoke(consumer, parts):
            with lock:
                owned[i].difference_update(p.partition for p in parts)
                revoked.setdefault(i, []).append({p.partition for p in parts})
            consumer.incremental_unassign(parts)

        c.subscribe(["coop"], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            c.poll(0.05)
        c.close()

    def snapshot():
        with lock:
            return {i: set(s) for i, s in owned.items()}

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    try:
        threads[0].start()
        wait_until(lambda: snapshot().get(0) == set(range(PARTITIONS)), "the first member to own all")
        threads[1].start()
        threads[2].start()

        def balanced():
            sets = list(snapshot().values())
            return (len(sets) == 3 and sorted(len(s) for s in sets) == [2, 2, 2]
                    and set().union(*sets) == set(range(PARTITIONS)))
        wait_until(balanced, "three cooperative members with two partitions each")
        with lock:
            first = [set(r) for r in revoked.get(0, []) if r]
        assert sum(len(r) for r in first) == 4, first          # only the moving partitions
        assert all(len(r) < PARTITIONS for r in first), first   # never an eager revoke-all
    finally:
        stop.set()
        for t in threads:
            if t.is_alive() or t.ident:
                t.join(30)
