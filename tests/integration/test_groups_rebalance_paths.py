"""Issue 16: two classic rebalances that must settle, with each real client.

One broker for the module, on Kafka's *code* defaults for the group coordinator
(group.initial.rebalance.delay.ms=3000: the first JoinGroup of an empty group is parked three
seconds), num.partitions=2 and auto topic creation on, as in the report; sessions down to 500 ms
are allowed so librdkafka can use max.poll.interval.ms=3000 (it insists on
session.timeout.ms <= max.poll.interval.ms).

1. A pattern subscription picks up a topic auto-created while its JoinGroup is parked in the
   initial delay: the client abandons the answer (its subscription changed) and re-sends
   JoinGroup with new metadata while the group is CompletingRebalance; the coordinator must
   rebalance again (Kafka's classicGroupJoinExistingMember) and the consumer must get the
   record produced to the new topic.
2. A second member joins a group whose first member has max.poll.interval.ms=3000 and stops
   polling: the first member's client leaves (LeaveGroup) while the group is PreparingRebalance
   for the newcomer; the join phase completes with the newcomer alone (Kafka's
   maybeCompleteJoinPhase after a leave), which then owns every partition. When the first
   member polls again it rejoins, and the group reaches a Stable two-member generation with
   both members assigned partitions (checked with DescribeGroups).

Each test waits by polling with generous deadlines; nothing asserts on elapsed time.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.conftest import BrokerProcess

DEADLINE_S = 45.0


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("rebalance-paths"), {
        "num.partitions": "2", "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "3000",    # Kafka's code default: the harder case
        "group.min.session.timeout.ms": "500"}).start()
    yield b
    b.kill()     # nothing to check at shutdown; the harness would stop it anyway


def tag() -> str:
    return uuid.uuid4().hex[:8]


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    """Produce and wait for the acks; an unknown topic is auto-created by the producer's Metadata."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        if partition is None:
            p.produce(topic, v)
        else:
            p.produce(topic, v, partition=partition)
    assert p.flush(30) == 0


def stable_members(bootstrap: str, group: str) -> dict[str, set[int]] | None:
    """member id -> assigned partitions, when DescribeGroups shows the group Stable."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})   # held until the future resolves
    desc = admin.describe_consumer_groups([group])[group].result(30)
    if desc.state != ConsumerGroupState.STABLE:
        return None
    return {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}


def two_members_share(bootstrap: str, group: str, partitions: int) -> bool:
    members = stable_members(bootstrap, group)
    if not members or len(members) != 2:
        return False
    sets = list(members.values())
    return (all(sets) and not (sets[0] & sets[1])
            and sets[0] | sets[1] == set(range(partitions)))


# ---------------------------------------------------------------------- 1. pattern + new topic

def test_pattern_picks_up_topic_created_during_join_aiokafka(rbroker):
    """aiokafka's own test_consumer_subscribe_pattern_with_autocreate, with a generous wait."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    t = tag()

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=rbroker.bootstrap, metadata_max_age_ms=200,
                                    group_id=f"pat-ak-{t}", fetch_max_wait_ms=50,
                                    auto_offset_reset="earliest")
        await consumer.start()
        producer = AIOKafkaProducer(bootstrap_servers=rbroker.bootstrap)
        await producer.start()
        try:
            consumer.subscribe(pattern=f"^pat-ak-{t}-.*$")
            consume = asyncio.ensure_future(consumer.getone())
            await asyncio.sleep(0.3)
            assert not consume.done() and consumer.subscription() == set()
            # Auto-create two matching topics while the JoinGroup is parked in the initial delay.
            await producer.client._wait_on_metadata(f"pat-ak-{t}-1")
            await producer.client._wait_on_metadata(f"pat-ak-{t}-2")
            deadline = time.monotonic() + DEADLINE_S
            while consumer.subscription() != {f"pat-ak-{t}-1", f"pat-ak-{t}-2"}:
                assert time.monotonic() < deadline, consumer.subscription()
                await asyncio.sleep(0.05)
            await producer.send_and_wait(f"pat-ak-{t}-1", b"test msg")
            msg = await asyncio.wait_for(consume, DEADLINE_S)
            assert (msg.topic, msg.value) == (f"pat-ak-{t}-1", b"test msg")
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(main())


def test_pattern_picks_up_topic_created_during_join_confluent(rbroker):
    from confluent_kafka import Consumer
    t = tag()
    c = Consumer({"bootstrap.servers": rbroker.bootstrap, "group.id": f"pat-ck-{t}",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 200})
    try:
        c.subscribe([f"^pat-ck-{t}-.*"])
        c.poll(0.3)     # starts the group join (parked in the initial delay)
        produce(rbroker.bootstrap, f"pat-ck-{t}-1", [b"test msg"])
        deadline = time.monotonic() + DEADLINE_S
        got = None
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got = (m.topic(), m.value())
        assert got == (f"pat-ck-{t}-1", b"test msg")
    finally:
        c.close()


def test_pattern_picks_up_topic_created_during_join_kafka_python(rbroker):
    from kafka import KafkaConsumer
    t = tag()
    c = KafkaConsumer(bootstrap_servers=rbroker.bootstrap, group_id=f"pat-kp-{t}",
                      auto_offset_reset="earliest", metadata_max_age_ms=200)
    try:
        c.subscribe(pattern=f"^pat-kp-{t}-.*")
        c.poll(timeout_ms=300)
        produce(rbroker.bootstrap, f"pat-kp-{t}-1", [b"test msg"])
        deadline = time.monotonic() + DEADLINE_S
        got = None
        while got is None and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                got = (records[0].topic, records[0].value)
        assert got == (f"pat-kp-{t}-1", b"test msg")
    finally:
        c.close()


# ------------------------------------------- 2. the first member leaves during PreparingRebalance

def test_leave_during_rebalance_then_two_member_generation_aiokafka(rbroker):
    """aiokafka's test_max_poll_interval_ms shape: c1 (max_poll_interval_ms=3000) is assigned and
    then idle; c2 joins; c1's client leaves the group when its poll interval expires, during the
    rebalance c2 started. c2 gets every record; c1 polls again, rejoins, and both share the
    topic in one Stable generation."""
    from aiokafka import AIOKafkaConsumer
    t = tag()
    topic, group = f"mpi-ak-{t}", f"mpi-ak-{t}"
    produce(rbroker.bootstrap, topic, [str(i).encode() for i in range(10)], partition=0)
    produce(rbroker.bootstrap, topic, [str(i).encode() for i in range(10, 20)], partition=1)

    async def consumer(**kw):
        c = AIOKafkaConsumer(topic, group_id=group, bootstrap_servers=rbroker.bootstrap,
                             auto_offset_reset="earliest", heartbeat_interval_ms=100, **kw)
        await c.start()
        await c.seek_to_committed()      # returns once the member is assigned
        return c

    async def main():
        c1 = await consumer(max_poll_interval_ms=3000, client_id="c1")
        c2 = None
        try:
            assert c1.assignment()
            c2 = await consumer(client_id="c2")
            seen = set()
            deadline = time.monotonic() + DEADLINE_S
            while seen != set(range(20)):
                assert time.monotonic() < deadline, sorted(seen)
                batches = await c2.getmany(timeout_ms=200)
                seen.update(int(r.value) for rs in batches.values() for r in rs)
            assert len(c2.assignment()) == 2, "c2 alone owns both partitions while c1 is away"
            assert len(await asyncio.to_thread(stable_members, rbroker.bootstrap, group) or {}) == 1
            # c1 polls again: it rejoins and the group settles with both members.
            produce(rbroker.bootstrap, topic, [b"20"], partition=0)
            produce(rbroker.bootstrap, topic, [b"21"], partition=1)
            deadline = time.monotonic() + DEADLINE_S
            while not (len(c1.assignment()) == 1 and len(c2.assignment()) == 1
                       and await asyncio.to_thread(two_members_share, rbroker.bootstrap, group, 2)):
                assert time.monotonic() < deadline, (c1.assignment(), c2.assignment())
                await c1.getmany(timeout_ms=100)
                await c2.getmany(timeout_ms=100)
        finally:
            await c1.stop()
            if c2 is not None:
                await c2.stop()

    asyncio.run(main())


def _poll_until_assigned(consumer, poll, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{what} never assigned"
        poll()


def test_leave_during_rebalance_then_two_member_generation_confluent(rbroker):
    """librdkafka leaves the group when the application has not polled for
    max.poll.interval.ms and rejoins on its next poll."""
    from confluent_kafka import Consumer
    t = tag()
    topic, group = f"mpi-ck-{t}", f"mpi-ck-{t}"
    produce(rbroker.bootstrap, topic, [str(i).encode() for i in range(20)])
    base = {"bootstrap.servers": rbroker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "heartbeat.interval.ms": 100}
    c1 = Consumer({**base, "client.id": "c1", "max.poll.interval.ms": 3000,
                   "session.timeout.ms": 3000})
    c2 = Consumer({**base, "client.id": "c2"})
    try:
        c1.subscribe([topic])
        _poll_until_assigned(c1, lambda: c1.poll(0.1), "c1")
        c2.subscribe([topic])
        c2.poll(0.1)
        # c2's join is parked waiting for c1, which does not poll: librdkafka makes c1 leave when
        # its 3 s poll interval runs out, and the join completes with c2 alone.
        deadline = time.monotonic() + DEADLINE_S
        while len(c2.assignment()) != 2:
            assert time.monotonic() < deadline, c2.assignment()
            c2.poll(0.1)
        assert len(stable_members(rbroker.bootstrap, group) or {}) == 1, "c1 is still a member"
        deadline = time.monotonic() + DEADLINE_S
        while not (len(c1.assignment()) == 1 and len(c2.assignment()) == 1
                   and two_members_share(rbroker.bootstrap, group, 2)):
            assert time.monotonic() < deadline, (c1.assignment(), c2.assignment())
            c1.poll(0.1)
            c2.poll(0.1)
    finally:
        c2.close()
        c1.close()


def test_leave_during_rebalance_then_two_member_generation_kafka_python(rbroker):
    """kafka-python's heartbeat thread leaves the group when poll() has not been called for
    max_poll_interval_ms; the next poll() rejoins."""
    from kafka import KafkaConsumer
    t = tag()
    topic, group = f"mpi-kp-{t}", f"mpi-kp-{t}"
    produce(rbroker.bootstrap, topic, [str(i).encode() for i in range(20)])
    base = dict(bootstrap_servers=rbroker.bootstrap, group_id=group, auto_offset_reset="earliest",
                heartbeat_interval_ms=100)
    c1 = KafkaConsumer(client_id="c1", max_poll_interval_ms=3000, session_timeout_ms=3000, **base)
    c2 = KafkaConsumer(client_id="c2", **base)
    try:
        c1.subscribe([topic])
        _poll_until_assigned(c1, lambda: c1.poll(timeout_ms=100), "c1")
        c2.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(c2.assignment()) != 2:
            assert time.monotonic() < deadline, c2.assignment()
            c2.poll(timeout_ms=100)
        assert len(stable_members(rbroker.bootstrap, group) or {}) == 1, "c1 is still a member"
        deadline = time.monotonic() + DEADLINE_S
        while not (len(c1.assignment()) == 1 and len(c2.assignment()) == 1
                   and two_members_share(rbroker.bootstrap, group, 2)):
            assert time.monotonic() < deadline, (c1.assignment(), c2.assignment())
            c1.poll(timeout_ms=100)
            c2.poll(timeout_ms=100)
    finally:
        c2.close()
        c1.close()
