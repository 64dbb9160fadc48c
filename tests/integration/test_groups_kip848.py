"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka / librdkafka 2.16.

One broker for the module with short consumer-group timers (heartbeat 300 ms, session 3 s).
Members are separate processes (groups_support.Member, --protocol consumer) so a SIGKILL is a
real crash. Covered:
* three members join one by one and leave (one gracefully, one killed) while a producer keeps
  writing: every record is consumed exactly once per committed offset, the assignment is always
  disjoint, and the committed offsets equal what was produced;
* no stop-the-world: while a second member joins, the first keeps consuming the partitions it
  keeps (records committed inside the rebalance window; property, not a timing);
* a static member (group.instance.id) closed and restarted takes its partitions back without a
  rebalance: the other member sees nothing;
* a regex subscription (resolved by the broker);
* ConsumerGroupDescribe (the admin client), ListGroups' group type, a classic member joining
  the live consumer group, and dump-log decoding the new records.
"""
from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from groups_support import Member, SteadyProducer, committed_offsets, consumed, create_topic, disjoint, unconsumed
from kompakt.testing.poll import wait_until
from tests.integration.conftest import BrokerProcess

PARTITIONS = 6
K848_BROKER = {
    "offsets.topic.num.partitions": "1",
    "group.consumer.heartbeat.interval.ms": "300", "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "3000", "group.consumer.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("kip848"), K848_BROKER).start()
    yield b
    b.kill()


def test_members_join_and_leave_under_load_exactly_once(kbroker, tmp_path):
    topic, group = "k848-load", "k848-load"
    create_topic(kbroker.bootstrap, topic, PARTITIONS)
    producer = SteadyProducer(kbroker.bootstrap, topic, "v", PARTITIONS)
    members = []

    def member():
        m = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, protocol="consumer")
        members.append(m)
        return m

    try:
        first = member()
        wait_until(lambda: first.assignment() == set(range(PARTITIONS)), "the first member to own all")
        wait_until(lambda: len(first.values()) > 50, "the first member to consume")
        second, third = member(), member()
        wait_until(lambda: sorted(len(m.assignment() or ()) for m in members) == [2, 2, 2]
                   and disjoint(members), "three members with two partitions each")
        second.close()                          # leaves (epoch -1): its partitions move at once
        third.kill()                            # crashes: the session timeout (3 s) fences it
        wait_until(lambda: first.assignment() == set(range(PARTITIONS)),
                   "the first member to own every partition again")
        sent = producer.stop()
        # The batch whose commit `third` had on the wire when killed may have been committed
        # without being reported: then exactly that batch is missing (the commit is one append
        # for all its partitions, and `first` starts after it); else `first` reads all of it.
        in_doubt = set(third.in_doubt())
        wait_until(lambda: set(consumed(members)) | in_doubt >= set(sent), "every record consumed",
                   details=lambda: unconsumed(members, sent, in_doubt))
        counts = consumed(members)
        assert [v for v, n in counts.items() if n > 1] == [], "records consumed twice"
        missing = set(sent) - set(counts)
        assert missing in (set(), in_doubt), sorted(missing)
        first.close()
    finally:
        producer._stop.set()
        for m in members:
            m.kill()
    per_partition = Counter(int(v.split("-")[1]) % PARTITIONS for v in sent)
    assert committed_offsets(kbroker.bootstrap, group) == dict(per_partition)


def test_kept_partitions_keep_flowing_while_a_member_joins(kbroker, tmp_path):
    """No stop-the-world: the member that keeps partitions commits records of them between the
    newcomer's start and the newcomer's first assignment (the classic eager protocol stops
    every member for that window; bench/bench_group_pause.py measures both)."""
    topic, group = "k848-pause", "k848-pause"
    create_topic(kbroker.bootstrap, topic, PARTITIONS)
    producer = SteadyProducer(kbroker.bootstrap, topic, "w", PARTITIONS, interval=0.01)
    first = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, protocol="consumer")
    second = None
    try:
        wait_until(lambda: first.assignment() == set(range(PARTITIONS)), "the first member to own all")
        wait_until(lambda: len(first.values()) > 50, "the first member to consume")
        start = time.time()
        second = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, protocol="consumer")
        wait_until(lambda: second.assignment(), "the second member's first partitions")
        got = next(e["t"] for e in second.snapshot() if e["event"] == "assigned" and e["partitions"])
        kept = first.assignment()
        assert kept and len(kept) < PARTITIONS
        during = [r for e in first.snapshot() if e["event"] == "records" and start < e["t"] < got
                  for r in e["records"] if r[0] in kept]
        assert during, "the first member stopped consuming its kept partitions during the rebalance"
        revoked = [set(e["partitions"]) for e in first.snapshot() if e["event"] == "revoked"]
        assert revoked and all(r.isdisjoint(kept) for r in revoked)   # only the moving ones
    finally:
        producer.stop()
        first.kill()
        if second is not None:
            second.kill()


def test_static_member_restart_keeps_its_partitions(kbroker, tmp_path):
    topic, group = "k848-static", "k848-static"
    create_topic(kbroker.bootstrap, topic, 4)
    a = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, instance_id="sa", protocol="consumer")
    b = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, protocol="consumer")
    restarted = None
    try:
        wait_until(lambda: sorted(len(m.assignment() or ()) for m in (a, b)) == [2, 2] and disjoint([a, b]),
                   "two members with two partitions each")
        owned_by_a, mark = a.assignment(), len(b.snapshot())
        # the new instance's process is up before the old one leaves: a process start on a busy
        # machine must not eat the 3 s session timeout that holds the place
        restarted = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, instance_id="sa",
                           protocol="consumer", wait_for_go=True)
        wait_until(lambda: restarted.count("ready"), "the new instance's process to load")
        a.begin_close()                # a static member leaves with epoch -2: it keeps its place
        wait_until(lambda: "(instance sa) left for now" in kbroker.log_text(), "the -2 leave")
        restarted.go()
        a.close()
        wait_until(lambda: restarted.assignment(), "the restarted instance to be assigned")
        assert restarted.assignment() == owned_by_a
        assert [e["event"] for e in b.snapshot()[mark:] if e["event"] in ("assigned", "revoked")] == []
        assert "(instance sa) replaces" in kbroker.log_text()
    finally:
        for m in (a, b, restarted):
            if m is not None:
                m.kill()


def test_regex_subscription_resolved_by_the_broker(kbroker):
    from confluent_kafka import Consumer, Producer
    p = Producer({"bootstrap.servers": kbroker.bootstrap})
    for i in range(4):
        p.produce("k848re-1", str(i).encode())            # auto-creates the topic
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "k848-regex",
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["^k848re-.*"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == [b"0", b"1", b"2", b"3"]
        from wire_support import Wire
        from kompakt.protocol import registry
        described = Wire(kbroker.port).call(registry.API[69].request(
            group_ids=["k848-regex"], include_authorized_operations=False), 1)
        [member] = described.groups[0].members
        assert member.subscribed_topic_regex == "(^k848re-.*)"   # librdkafka sends it; the broker resolves
        assert [t.topic_name for t in member.assignment.topic_partitions] == ["k848re-1"]
    finally:
        c.close()


def test_admin_views_a_classic_member_and_dump_log(kbroker, tmp_path):
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient
    topic, group = "k848-admin", "k848-admin"
    create_topic(kbroker.bootstrap, topic, 2)
    m = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, protocol="consumer")
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    try:
        wait_until(lambda: m.assignment() == {0, 1}, "the member to own both partitions")
        desc = admin.describe_consumer_groups([group])[group].result(30)
        assert desc.type == ConsumerGroupType.CONSUMER and str(desc.state).endswith("STABLE")
        [member] = desc.members
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(30).valid}
        assert listed[group].type == ConsumerGroupType.CONSUMER
        # a classic member joins the live consumer group as a classic member (KIP-848's mixed
        # groups, test_groups_migration.py has more) and gets its share
        classic = Member("confluent", kbroker.bootstrap, group, topic, tmp_path, session_ms=6000)
        try:
            wait_until(lambda: len(m.assignment() or ()) == len(classic.assignment() or ()) == 1,
                       "one partition each")
            desc = admin.describe_consumer_groups([group])[group].result(30)
            assert desc.type == ConsumerGroupType.CONSUMER and len(desc.members) == 2
            classic.close()
        finally:
            classic.kill()
        wait_until(lambda: m.assignment() == {0, 1}, "both partitions back with the first member")
        m.close()
    finally:
        m.kill()
    out = subprocess.run([sys.executable, "-m", "kompakt", "dump-log",
                          f"{kbroker.log_dir}/__consumer_offsets-0", "--offsets-decoder"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f'"type":"8","data":{{"groupId":"{group}"' in out.stdout       # current assignment
    assert '"memberEpoch":' in out.stdout and '"assignedPartitions":[{"topicId":' in out.stdout
    assert f'"type":"3","data":{{"groupId":"{group}"}}' in out.stdout     # group epoch
    assert "Error at offset" not in out.stdout
