"""GroupCoordinator over a real LogManager in a temp dir: error codes of the classic protocol,
what reaches __consumer_offsets (and when), reload, deletion, expiry and dump-log decoding.

The coordinator needs only `broker.config` and `broker.log_manager`, so the broker here is a
plain namespace around the real ones. Timers are real asyncio timers with small timeouts; tests
poll with deadlines, never assert on elapsed time.
"""
from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import types

import pytest

from kompakt.broker.groups.coordinator import GroupCoordinator, JoinRequest
from kompakt.broker.groups.group import GroupState
from kompakt.broker.groups.offsets_topic import OFFSETS_TOPIC
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import group_records as gr
from kompakt.protocol.consumer_protocol import encode_consumer_subscription
from kompakt.protocol import records as rec
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError
from kompakt.storage import TopicPartition
from kompakt.storage.log_manager import LogManager

SUB = encode_consumer_subscription(["t"])


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def make_config(tmp_path, **extra):
    props = {"log.dirs": str(tmp_path / "data"), "group.initial.rebalance.delay.ms": "0",
             "group.min.session.timeout.ms": "10", "offsets.topic.num.partitions": "3",
             "log.initial.task.delay.ms": "0"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return BrokerConfig(props)


@pytest.fixture
def env(tmp_path):
    """(broker namespace, clock); the LogManager is shut down at teardown."""
    config = make_config(tmp_path)
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 2, {})
    broker = types.SimpleNamespace(config=config, log_manager=lm)
    yield broker, Clock()
    lm.shutdown()


@pytest.fixture
async def coord(env):
    """A started coordinator over `env`'s LogManager, stopped at teardown."""
    broker, clock = env
    c = await started(broker, clock)
    yield c
    await c.stop()


async def started(broker, clock) -> GroupCoordinator:
    c = GroupCoordinator(broker, time_ms=clock)
    await c.start()
    return c


@contextlib.asynccontextmanager
async def own_coordinator(tmp_path, topics=(), **config):
    """A started coordinator over a LogManager of its own with `config` overrides (keys with `_`
    for `.`) and (name, partitions) topics; stopped and shut down on exit."""
    cfg = make_config(tmp_path, **config)
    lm = LogManager(cfg)
    lm.startup()
    for name, partitions in topics:
        lm.create_topic(name, partitions, {})
    c = await started(types.SimpleNamespace(config=cfg, log_manager=lm), Clock())
    try:
        yield c
    finally:
        await c.stop()
        lm.shutdown()


def join_req(member_id="", instance=None, session=5000, rebalance=5000, version=5,
             protocols=(("range", SUB),), protocol_type="consumer", group="g"):
    return JoinRequest(group, member_id, instance, protocol_type, list(protocols), session, rebalance,
                       "client", "/127.0.0.1", version)


async def join_alone(c, **kw):
    """Join a fresh member (MEMBER_ID_REQUIRED round trip) and complete its generation."""
    first = await c.join_group(join_req(**kw))
    if first.error == EC.MEMBER_ID_REQUIRED:
        first = await c.join_group(join_req(member_id=first.member_id, **kw))
    assert first.error == 0, first
    return first


async def wait_for(predicate, what, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def log_records(broker, group):
    """Decoded (key, value) records of the group's __consumer_offsets partition, in order."""
    partition = gr.partition_for(group, broker.log_manager.topics[OFFSETS_TOPIC].partitions)
    plog = broker.log_manager.get_log(TopicPartition(OFFSETS_TOPIC, partition))
    data = plog.read(plog.log_start_offset, 1 << 24).records
    out = []
    for pos, header in rec.iter_batches(data):
        for r in rec.decode_records(data, pos, header):
            key = gr.decode_key(r.key)
            out.append((key, gr.decode_value(key, r.value)))
    return out


async def test_member_id_required_join_sync_heartbeat_errors(env, coord):
    broker, clock = env
    c = coord
    first = await c.join_group(join_req())
    assert first.error == EC.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    assert c.groups["g"].pending_members == {first.member_id}
    joined = await c.join_group(join_req(member_id=first.member_id))
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, first.member_id, "range")
    assert joined.members == [(first.member_id, None, SUB)]
    synced = await c.sync_group("g", 1, joined.member_id, None, "consumer", "range",
                                [(joined.member_id, b"assignment")])
    assert (synced.error, synced.assignment) == (0, b"assignment")
    assert c.groups["g"].state is GroupState.STABLE
    assert c.heartbeat("g", 1, joined.member_id, None) == 0
    assert c.heartbeat("g", 0, joined.member_id, None) == EC.ILLEGAL_GENERATION
    assert c.heartbeat("g", 1, "stranger", None) == EC.UNKNOWN_MEMBER_ID
    assert c.heartbeat("nogroup", 1, joined.member_id, None) == EC.UNKNOWN_MEMBER_ID
    bad = await c.sync_group("g", 1, joined.member_id, None, "consumer", "roundrobin", [])
    assert bad.error == EC.INCONSISTENT_GROUP_PROTOCOL
    # The assignment is in the log before SyncGroup was answered.
    key, value = log_records(broker, "g")[-1]
    assert key == {"type": "group_metadata", "version": 2, "group": "g"}
    assert value["generation"] == 1 and value["members"][0]["assignment"] == b"assignment"


async def test_join_argument_errors(env, coord):
    broker, clock = env
    c = coord
    assert (await c.join_group(join_req(group=""))).error == EC.INVALID_GROUP_ID
    assert (await c.join_group(join_req(session=5))).error == EC.INVALID_SESSION_TIMEOUT
    assert (await c.join_group(join_req(session=10**8))).error == EC.INVALID_SESSION_TIMEOUT
    assert (await c.join_group(join_req(member_id="ghost"))).error == EC.UNKNOWN_MEMBER_ID
    assert (await c.join_group(join_req(protocol_type=""))).error == EC.INCONSISTENT_GROUP_PROTOCOL
    a = await join_alone(c)
    other = await c.join_group(join_req(protocol_type="connect", version=3))
    assert other.error == EC.INCONSISTENT_GROUP_PROTOCOL
    disjoint = await c.join_group(join_req(protocols=[("sticky", b"")], version=3))
    assert disjoint.error == EC.INCONSISTENT_GROUP_PROTOCOL
    assert a.generation_id == 1


async def test_second_member_rebalances_and_old_generation_is_refused(env, coord):
    broker, clock = env
    c = coord
    a = await join_alone(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, [(a.member_id, b"A")])
    b_id = (await c.join_group(join_req())).member_id
    b_join = asyncio.create_task(c.join_group(join_req(member_id=b_id)))
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    assert c.heartbeat("g", 1, a.member_id, None) == EC.REBALANCE_IN_PROGRESS
    assert (await c.sync_group("g", 1, a.member_id, None, None, None, [])).error == EC.REBALANCE_IN_PROGRESS
    # a commits during the join phase with its (still current) generation: accepted
    codes = c.commit_offsets("g", 1, a.member_id, None, -1, [("t", 0, 7, -1, "", -1)], 8)
    assert codes == {("t", 0): 0}
    a_join = await c.join_group(join_req(member_id=a.member_id))
    b_res = await b_join
    assert a_join.generation_id == b_res.generation_id == 2
    assert a_join.leader == a.member_id and len(a_join.members) == 2 and b_res.members == []
    # CompletingRebalance: commits wait for the assignment
    with pytest.raises(KafkaError) as info:
        c.commit_offsets("g", 2, a.member_id, None, -1, [("t", 0, 8, -1, "", -1)], 8)
    assert info.value.code == EC.REBALANCE_IN_PROGRESS
    assert c.heartbeat("g", 2, b_id, None) == 0      # heartbeats are fine meanwhile
    b_sync = asyncio.create_task(c.sync_group("g", 2, b_id, None, None, None, []))
    await asyncio.sleep(0)
    assert not b_sync.done()                          # parked until the leader's SyncGroup
    a_sync = await c.sync_group("g", 2, a.member_id, None, None, None,
                                [(a.member_id, b"A2"), (b_id, b"B2")])
    assert (a_sync.assignment, (await b_sync).assignment) == (b"A2", b"B2")
    assert (await c.sync_group("g", 1, b_id, None, None, None, [])).error == EC.ILLEGAL_GENERATION


async def test_session_timeout_removes_member_and_group_becomes_empty(env, coord):
    broker, clock = env
    c = coord
    a = await join_alone(c, session=50)
    await c.sync_group("g", 1, a.member_id, None, None, None, [(a.member_id, b"A")])
    await wait_for(lambda: c.groups["g"].state is GroupState.EMPTY, "the silent member to expire")
    assert c.groups["g"].generation_id == 2 and not c.groups["g"].members
    assert c.heartbeat("g", 2, a.member_id, None) == EC.UNKNOWN_MEMBER_ID
    key, value = log_records(broker, "g")[-1]
    assert value["generation"] == 2 and value["members"] == [] and value["protocol"] is None


async def test_pending_member_expires(env, coord):
    broker, clock = env
    c = coord
    first = await c.join_group(join_req(session=30))
    assert first.error == EC.MEMBER_ID_REQUIRED
    await wait_for(lambda: not c.groups["g"].pending_members, "the pending member to expire")
    assert (await c.join_group(join_req(member_id=first.member_id))).error == EC.UNKNOWN_MEMBER_ID


async def test_static_member_replaced_fences_old_id_without_rebalance(env, coord):
    broker, clock = env
    c = coord
    a = await join_alone(c, instance="i-a")
    assert a.member_id.startswith("i-a-")
    await c.sync_group("g", 1, a.member_id, "i-a", None, None, [(a.member_id, b"A")])
    again = await c.join_group(join_req(instance="i-a"))       # restarted instance, v5
    assert again.error == 0 and again.member_id != a.member_id
    assert again.generation_id == 1 and again.leader == a.member_id   # old leader id (v<9)
    assert c.groups["g"].state is GroupState.STABLE
    assert c.heartbeat("g", 1, a.member_id, "i-a") == EC.FENCED_INSTANCE_ID
    assert c.heartbeat("g", 1, again.member_id, "i-a") == 0
    synced = await c.sync_group("g", 1, again.member_id, "i-a", None, None, [])
    assert synced.assignment == b"A"                              # kept its partitions
    v9 = await c.join_group(join_req(instance="i-a", version=9))  # KIP-814 leader rejoin
    assert v9.skip_assignment and v9.leader == v9.member_id and len(v9.members) == 1
    # leave by instance id alone (admin removeMembersFromConsumerGroup)
    top, codes = c.leave_group("g", [("", "i-a"), ("", "i-unknown")])
    assert (top, codes) == (0, [0, EC.UNKNOWN_MEMBER_ID])
    await wait_for(lambda: c.groups["g"].state is GroupState.EMPTY, "the group to empty")


async def test_leave_group_batch_and_errors(env, coord):
    broker, clock = env
    c = coord
    a = await join_alone(c)
    assert c.leave_group("nope", [(a.member_id, None)])[0] == EC.UNKNOWN_MEMBER_ID
    top, codes = c.leave_group("g", [(a.member_id, "wrong-instance"), ("x", None), (a.member_id, None)])
    assert (top, codes) == (0, [EC.UNKNOWN_MEMBER_ID, EC.UNKNOWN_MEMBER_ID, 0])
    await wait_for(lambda: c.groups["g"].state is GroupState.EMPTY, "the group to empty")


async def test_offset_commit_rules(env, coord):
    broker, clock = env
    c = coord
    # simple commit (generation -1) creates an Empty group without protocol
    codes = c.commit_offsets("simple", -1, "", None, -1,
                             [("t", 0, 5, 2, "m", -1), ("t", 1, 6, -1, "x" * 4097, -1),
                              ("missing", 0, 1, -1, "", -1)], 8)
    assert codes == {("t", 0): 0, ("t", 1): EC.OFFSET_METADATA_TOO_LARGE,
                     ("missing", 0): EC.UNKNOWN_TOPIC_OR_PARTITION}
    om = c.fetch_offsets("simple", [("t", 0), ("t", 1)])
    assert om[("t", 1)] is None
    assert (om[("t", 0)].offset, om[("t", 0)].leader_epoch, om[("t", 0)].metadata) == (5, 2, "m")
    assert c.list_groups() == [("simple", "", "Empty", "classic")]
    # null entries in a (malformed) filter match nothing instead of failing the request
    assert c.list_groups(states=[None, "empty"]) == [("simple", "", "Empty", "classic")]
    assert c.list_groups(states=[None]) == []
    assert c.list_groups(types=[None, "classic"]) == [("simple", "", "Empty", "classic")]
    for version, code in ((8, EC.ILLEGAL_GENERATION), (9, EC.GROUP_ID_NOT_FOUND)):
        with pytest.raises(KafkaError) as info:
            c.commit_offsets("unknown", 3, "m", None, -1, [("t", 0, 1, -1, "", -1)], version)
        assert info.value.code == code
    a = await join_alone(c)
    with pytest.raises(KafkaError) as info:   # non-member commit to a group with members
        c.commit_offsets("g", -1, "", None, -1, [("t", 0, 1, -1, "", -1)], 8)
    assert info.value.code == EC.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as info:
        c.commit_offsets("g", 1, "other", None, -1, [("t", 0, 1, -1, "", -1)], 8)
    assert info.value.code == EC.UNKNOWN_MEMBER_ID
    # v2-4 retention time: stored with an expire timestamp (value version 1)
    await c.sync_group("g", 1, a.member_id, None, None, None, [])
    clock.now = 2_000_000
    c.commit_offsets("g", 1, a.member_id, None, 60_000, [("t", 1, 9, -1, "", -1)], 2)
    key, value = log_records(broker, "g")[-1]
    assert key == {"type": "offset_commit", "version": 1, "group": "g", "topic": "t", "partition": 1}
    assert (value["version"], value["commit_timestamp"], value["expire_timestamp"]) == (1, 2_000_000, 2_060_000)


async def test_state_survives_a_log_manager_restart(tmp_path):
    config = make_config(tmp_path)
    clock = Clock()
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 2, {})
    broker = types.SimpleNamespace(config=config, log_manager=lm)
    c = await started(broker, clock)
    a = await join_alone(c, instance="i-1")
    await c.sync_group("g", 1, a.member_id, "i-1", None, None, [(a.member_id, b"ASG")])
    c.commit_offsets("g", 1, a.member_id, "i-1", -1, [("t", 0, 11, 4, "meta", -1)], 8)
    c.commit_offsets("simple", -1, "", None, -1, [("t", 1, 3, -1, "", -1)], 8)
    c.commit_offsets("gone", -1, "", None, -1, [("t", 1, 1, -1, "", -1)], 8)
    assert c.delete_groups(["gone"]) == {"gone": 0}
    await c.stop()
    lm.shutdown()

    lm2 = LogManager(config)
    lm2.startup()
    try:
        c2 = await started(types.SimpleNamespace(config=config, log_manager=lm2), clock)
        try:
            g = c2.groups["g"]
            assert (g.state, g.generation_id, g.protocol_name, g.leader_id) == (GroupState.STABLE, 1, "range", a.member_id)
            assert g.members[a.member_id].assignment == b"ASG" and g.static_member_id("i-1") == a.member_id
            om = c2.fetch_offsets("g", None)[("t", 0)]
            assert (om.offset, om.leader_epoch, om.metadata) == (11, 4, "meta")
            assert c2.fetch_offsets("simple", None)[("t", 1)].offset == 3
            assert "gone" not in c2.groups and c2.fetch_offsets("gone", None) == {}
            # the member carries on with its generation after the restart
            assert c2.heartbeat("g", 1, a.member_id, "i-1") == 0
        finally:
            await c2.stop()
    finally:
        lm2.shutdown()


async def test_delete_groups_and_offsets(env):
    broker, clock = env
    broker.log_manager.create_topic("other", 1, {})
    c = await started(broker, clock)
    try:
        a = await join_alone(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, [])
        assert c.commit_offsets("g", 1, a.member_id, None, -1,
                                [("t", 0, 1, -1, "", -1), ("other", 0, 1, -1, "", -1)], 8) == {
            ("t", 0): 0, ("other", 0): 0}
        assert c.delete_groups(["g", "nope", ""]) == {"g": EC.NON_EMPTY_GROUP, "nope": EC.GROUP_ID_NOT_FOUND,
                                                      "": EC.INVALID_GROUP_ID}
        top, codes = c.delete_offsets("g", [("t", 0), ("other", 0)])
        assert (top, codes) == (0, {("t", 0): EC.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): 0})
        assert list(c.fetch_offsets("g", None)) == [("t", 0)]
        assert c.delete_offsets("nope", [("t", 0)])[0] == EC.GROUP_ID_NOT_FOUND
        c.leave_group("g", [(a.member_id, None)])
        await wait_for(lambda: c.groups["g"].state is GroupState.EMPTY, "empty group")
        assert c.delete_groups(["g"]) == {"g": 0}
        assert "g" not in c.groups and c.describe_group("g") is None
        tail = log_records(broker, "g")[-1:]
        assert tail == [({"type": "group_metadata", "version": 2, "group": "g"}, None)]
        tombstoned = [k["topic"] for k, v in log_records(broker, "g") if k["type"] == "offset_commit" and v is None]
        assert sorted(tombstoned) == ["other", "t"]
    finally:
        await c.stop()


async def test_offsets_expire_only_after_retention(tmp_path):
    config = make_config(tmp_path, offsets_retention_minutes=1)
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 1, {})
    clock = Clock(0)
    c = await started(types.SimpleNamespace(config=config, log_manager=lm), clock)
    try:
        c.commit_offsets("simple", -1, "", None, -1, [("t", 0, 5, -1, "", -1)], 8)
        clock.now = 59_999
        assert c.expire_offsets() == 0 and "simple" in c.groups
        clock.now = 60_000
        assert c.expire_offsets() == 1
        assert "simple" not in c.groups          # Empty and nothing left: the group dies too
        kinds = [(k["type"], v is None) for k, v in log_records(types.SimpleNamespace(log_manager=lm), "simple")]
        assert kinds == [("offset_commit", False), ("offset_commit", True), ("group_metadata", True)]
    finally:
        await c.stop()
        lm.shutdown()


async def test_dump_log_decodes_our_records(env, tmp_path):
    broker, clock = env
    c = await started(broker, clock)
    try:
        c.commit_offsets("dumpme", -1, "", None, -1, [("t", 0, 42, 7, "hello", -1)], 8)
    finally:
        await c.stop()
    partition = gr.partition_for("dumpme", 3)
    plog = broker.log_manager.get_log(TopicPartition(OFFSETS_TOPIC, partition))
    plog.flush()
    out = subprocess.run([sys.executable, "-m", "kompakt", "dump-log", "--offsets-decoder",
                          plog.segments[0].log_path], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"group":"dumpme"' in out.stdout and '"offset":42' in out.stdout
    assert '"metadata":"hello"' in out.stdout and '"leaderEpoch":7' in out.stdout


async def test_metrics_export_group_figures(env):
    from kompakt.broker.observability.metrics import Metrics
    broker, clock = env
    c = await started(broker, clock)
    broker.groups = c
    try:
        a = await join_alone(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, [])
        c.commit_offsets("g", 1, a.member_id, None, -1, [("t", 0, 1, -1, "", -1), ("t", 1, 1, -1, "", -1)], 8)
        c.commit_offsets("s", -1, "", None, -1, [("t", 0, 1, -1, "", -1)], 8)
        metrics = Metrics(process_metrics=False)
        metrics.attach(broker)
        text = metrics.render().decode()
        assert 'kompakt_groups{state="Stable"} 1.0' in text
        assert 'kompakt_groups{state="Empty"} 1.0' in text
        assert "kompakt_group_members 1.0" in text
        assert "kompakt_group_committed_offsets 3.0" in text
        assert "kompakt_group_offset_commits_total 3.0" in text
        assert "kompakt_group_rebalances_total 1.0" in text
        # docs/operations.md: every help text names the Kafka metric (or says "Kafka: none")
        helps = [line for line in text.splitlines() if line.startswith("# HELP kompakt_")]
        assert helps and [line for line in helps if "Kafka" not in line] == []
    finally:
        await c.stop()


async def test_initial_rebalance_delay_gathers_a_starting_fleet(tmp_path):
    async with own_coordinator(tmp_path, group_initial_rebalance_delay_ms=300) as c:
        # v3: no MEMBER_ID_REQUIRED round trip; both arrive within the delay of the empty group
        first = asyncio.create_task(c.join_group(join_req(version=3)))
        await wait_for(lambda: c.groups.get("g") and c.groups["g"].members, "the first member")
        second = asyncio.create_task(c.join_group(join_req(version=3)))
        a, b = await first, await second
        assert a.generation_id == b.generation_id == 1        # one generation, not two
        assert len((a if a.members else b).members) == 2


async def test_stop_answers_parked_joins(env):
    broker, clock = env
    c = await started(broker, clock)
    a = await join_alone(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, [])
    parked = asyncio.create_task(c.join_group(join_req(version=3)))   # waits for a to rejoin
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "the rebalance")
    await c.stop()
    assert (await parked).error == EC.NOT_COORDINATOR


async def test_replay_skips_undecodable_records(env):
    broker, clock = env
    c = await started(broker, clock)
    c.commit_offsets("g", -1, "", None, -1, [("t", 0, 5, -1, "", -1)], 8)
    await c.stop()
    partition = gr.partition_for("g", 3)
    garbage = rec.build_batch([(b"\x00\x01\xff", b"x"), (b"\x00\x05unknown-type", b"v"),
                               (gr.encode_offset_commit_key("g", "t", 1), b"\x00\x09bad version"),
                               (gr.encode_offset_commit_key("g", "t", 0),
                                gr.encode_offset_commit_value(6, "after", 1))])
    broker.log_manager.append_as_leader(TopicPartition(OFFSETS_TOPIC, partition), garbage)
    c2 = await started(broker, clock)
    try:
        assert {tp: om.offset for tp, om in c2.fetch_offsets("g", None).items()} == {("t", 0): 6}
    finally:
        await c2.stop()


async def test_deleted_topic_loses_its_committed_offsets(env):
    broker, clock = env
    broker.log_manager.create_topic("gone", 2, {})
    c = await started(broker, clock)
    try:
        c.commit_offsets("a", -1, "", None, -1, [("gone", 0, 1, -1, "", -1), ("gone", 1, 2, -1, "", -1),
                                                 ("t", 0, 3, -1, "", -1)], 8)
        c.commit_offsets("b", -1, "", None, -1, [("gone", 0, 4, -1, "", -1)], 8)
        broker.log_manager.delete_topic("gone")
        assert c.on_topic_deleted("gone") == 3
        assert list(c.fetch_offsets("a", None)) == [("t", 0)] and c.fetch_offsets("b", None) == {}
        assert [(k["topic"], k["partition"]) for k, v in log_records(broker, "b") if v is None] == [("gone", 0)]
    finally:
        await c.stop()


async def test_append_failures_answer_errors_and_change_nothing(env, coord):
    broker, clock = env
    c = coord
    assert c.commit_offsets("g", -1, "", None, -1, [("t", 0, 1, -1, "", -1)], 8) == {("t", 0): 0}
    c.commit_offsets("e", -1, "", None, -1, [("t", 0, 1, -1, "", -1)], 8)
    a = await join_alone(c, version=3)
    await c.sync_group("g", 1, a.member_id, None, None, None, [(a.member_id, b"A")])
    # the disk under the group's partition fails: appends raise KAFKA_STORAGE_ERROR
    for name in ("g", "e"):
        partition = gr.partition_for(name, 3)
        broker.log_manager.get_log(TopicPartition(OFFSETS_TOPIC, partition)).close()

    codes = c.commit_offsets("g", 1, a.member_id, None, -1, [("t", 0, 9, -1, "", -1)], 8)
    assert codes == {("t", 0): EC.NOT_COORDINATOR}
    assert c.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 1      # unchanged
    assert c.counters["offset_commits_total"] == 2

    b_join = asyncio.create_task(c.join_group(join_req(version=3)))
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
    a_join = await c.join_group(join_req(member_id=a.member_id, version=3))
    b = await b_join
    b_sync = asyncio.create_task(c.sync_group("g", 2, b.member_id, None, None, None, []))
    await wait_for(lambda: c.groups["g"].member(b.member_id).is_awaiting_sync, "b parked in SyncGroup")
    a_sync = await c.sync_group("g", 2, a.member_id, None, None, None,
                                [(a.member_id, b"A2"), (b.member_id, b"B2")])
    # the assignment could not be stored: nobody gets it, the group rebalances again
    assert (a_sync.error, (await b_sync).error) == (EC.NOT_COORDINATOR, EC.NOT_COORDINATOR)
    assert a_join.generation_id == 2 and c.groups["g"].state is GroupState.PREPARING_REBALANCE

    assert c.delete_groups(["e"]) == {"e": EC.NOT_COORDINATOR}
    assert "e" in c.groups and c.fetch_offsets("e", None)


async def test_large_commit_splits_into_batches_and_reloads(env, coord):
    broker, clock = env
    broker.log_manager.create_topic("wide", 1, {})   # commits are checked per topic, as in Kafka
    meta = "m" * 4000                        # 400 x 4 KB of metadata: beyond one 1 MiB batch
    parts = [("wide", p, p, -1, meta, -1) for p in range(400)] + [("wide", 0, 7, -1, "last", -1)]
    codes = coord.commit_offsets("big", -1, "", None, -1, parts, 8)
    assert set(codes.values()) == {0} and len(codes) == 400
    assert coord.fetch_offsets("big", [("wide", 0)])[("wide", 0)].metadata == "last"   # last one wins
    batches = {k["partition"] for k, v in log_records(broker, "big")}
    assert len(batches) == 400
    await coord.stop()
    again = await started(broker, clock)
    try:
        offsets = again.fetch_offsets("big", None)
        assert len(offsets) == 400 and offsets[("wide", 0)].offset == 7 and offsets[("wide", 399)].offset == 399
    finally:
        await again.stop()


async def test_retention_loop_runs_every_check_interval(tmp_path):
    config = make_config(tmp_path, offsets_retention_minutes=1, offsets_retention_check_interval_ms=20)
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 1, {})
    clock = Clock(0)
    c = await started(types.SimpleNamespace(config=config, log_manager=lm), clock)
    try:
        c.commit_offsets("simple", -1, "", None, -1, [("t", 0, 5, -1, "", -1)], 8)
        clock.now = 60_000                      # a minute later: the loop must notice by itself
        await wait_for(lambda: "simple" not in c.groups, "the retention loop to expire the group")
        assert c.counters["offsets_expired_total"] == 1
    finally:
        await c.stop()
        lm.shutdown()


async def test_rejected_pending_member_leaves_no_session_timer(tmp_path):
    """A member given an id (MEMBER_ID_REQUIRED) and then refused with GROUP_MAX_SIZE_REACHED is
    forgotten together with its session timer; so is one that leaves before rejoining."""
    config = make_config(tmp_path, group_max_size=1, group_initial_rebalance_delay_ms=100)
    lm = LogManager(config)
    lm.startup()
    c = await started(types.SimpleNamespace(config=config, log_manager=lm), Clock())
    try:
        p1, p2, p3 = [await c.join_group(join_req()) for _ in range(3)]
        assert {p1.error, p2.error, p3.error} == {EC.MEMBER_ID_REQUIRED}
        first = asyncio.create_task(c.join_group(join_req(member_id=p1.member_id)))
        await wait_for(lambda: c.groups["g"].has_member(p1.member_id), "the first member")
        assert (await c.join_group(join_req(member_id=p2.member_id))).error == EC.GROUP_MAX_SIZE_REACHED
        assert c.leave_group("g", [(p3.member_id, None)]) == (0, [0])
        assert not c.groups["g"].pending_members
        heartbeat_timers = {k[2] for k in c._timers if k[0] == "heartbeat"}
        assert heartbeat_timers == {p1.member_id}
        assert (await first).error == 0
    finally:
        await c.stop()
        lm.shutdown()
    assert c._timers == {}          # nothing left running after stop
    assert c._retention_task is None


async def test_release_parked_answers_joins_and_nothing_runs_after_stop(env):
    """Broker shutdown: release_parked() answers the parked JoinGroup and every later
    JoinGroup/SyncGroup NOT_COORDINATOR at once (draining connections must not wait for a
    rebalance), commits still land; after stop() a late request re-arms no timer."""
    broker, clock = env
    c = await started(broker, clock)
    a = await join_alone(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, [])
    parked = asyncio.create_task(c.join_group(join_req(version=3)))   # waits for a to rejoin
    await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "the rebalance")
    c.release_parked()
    assert (await parked).error == EC.NOT_COORDINATOR
    assert (await c.join_group(join_req(member_id=a.member_id))).error == EC.NOT_COORDINATOR
    assert (await c.sync_group("g", 1, a.member_id, None, None, None, [])).error == EC.NOT_COORDINATOR
    assert c.commit_offsets("g", 1, a.member_id, None, -1, [("t", 0, 4, -1, "", -1)], 8) == {("t", 0): 0}
    await c.stop()
    assert c._timers == {}
    c.commit_offsets("g", 1, a.member_id, None, -1, [("t", 0, 5, -1, "", -1)], 8)   # a late commit
    assert c.heartbeat("g", 1, a.member_id, None) in (0, EC.REBALANCE_IN_PROGRESS)
    assert c._timers == {}


async def test_member_refused_by_a_lowered_max_size_is_removed(tmp_path):
    """group.max.size lowered below a loaded group's size: the member refused with
    GROUP_MAX_SIZE_REACHED is removed (static ones too, as Kafka does), and the join phase
    completes with those that fit instead of waiting for the rebalance timeout."""
    config = make_config(tmp_path, group_max_size=2)
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 2, {})
    clock = Clock()
    try:
        c = await started(types.SimpleNamespace(config=config, log_manager=lm), clock)
        a = await join_alone(c, version=3)
        b_join = asyncio.create_task(c.join_group(join_req(instance="i-b")))
        await wait_for(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE, "rebalance")
        a2 = await c.join_group(join_req(member_id=a.member_id, version=3))
        b = await b_join
        b_sync = asyncio.create_task(c.sync_group("g", a2.generation_id, b.member_id, "i-b", None, None, []))
        await c.sync_group("g", a2.generation_id, a.member_id, None, None, None, [])
        assert (await b_sync).error == 0
        assert c.groups["g"].state is GroupState.STABLE and len(c.groups["g"].members) == 2
        await c.stop()

        smaller = make_config(tmp_path, group_max_size=1)
        c = await started(types.SimpleNamespace(config=smaller, log_manager=lm), clock)
        # Kafka's onLoaded: a group over the (lowered) limit rebalances as soon as it is loaded
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        a_rejoin = asyncio.create_task(c.join_group(join_req(member_id=a.member_id, version=3,
                                                             rebalance=60_000)))
        await wait_for(lambda: c.groups["g"].member(a.member_id).is_awaiting_join, "a's rejoin")
        refused = await c.join_group(join_req(member_id=b.member_id, instance="i-b"))
        assert refused.error == EC.GROUP_MAX_SIZE_REACHED
        g = c.groups["g"]
        assert b.member_id not in g.members and g.static_member_id("i-b") is None
        done = await asyncio.wait_for(a_rejoin, 10)       # not after the 60 s rebalance timeout
        assert done.error == 0 and [m[0] for m in done.members] == [a.member_id]
        assert ("heartbeat", "g", b.member_id) not in c._timers
        await c.stop()
    finally:
        lm.shutdown()
