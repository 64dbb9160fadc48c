"""KIP-848's online migration with confluent-kafka / librdkafka: a live group rolled member by
member between group.protocol=classic and group.protocol=consumer while records flow
(group.consumer.migration.policy=bidirectional, Kafka's default).

* upgrade: three classic members; each in turn is closed and replaced by a consumer-protocol
  member. The first replacement upgrades the live classic group into a consumer group whose
  classic members carry on through JoinGroup/SyncGroup/Heartbeat; after the roll the group is a
  consumer group of three consumer-protocol members. Every record is consumed exactly once per
  committed offset, and the committed offsets equal what was produced.
* downgrade (rolling back): two consumer-protocol members; one is replaced by a classic member
  (a classic member inside the consumer group), then the other: its leaving downgrades the group
  to a classic group, which the second classic member joins. Exactly once again.

Members are processes (groups_support.Member); the broker is shared by the module.
"""
from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from groups_support import GROUP_BROKER, Member, SteadyProducer, committed_offsets, consumed, create_topic, disjoint
from kompakt.testing.poll import wait_until
from tests.integration.conftest import BrokerProcess

PARTITIONS = 6
MIGRATION_BROKER = {**GROUP_BROKER,
                    "group.consumer.heartbeat.interval.ms": "300",
                    "group.consumer.min.heartbeat.interval.ms": "100",
                    "group.consumer.session.timeout.ms": "3000",
                    "group.consumer.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("migration"), MIGRATION_BROKER).start()
    yield b
    b.kill()


def balanced(members, sizes) -> bool:
    """The members own every partition between them, disjointly, in shares of `sizes`."""
    owned = [m.assignment() or set() for m in members]
    return (sorted(len(o) for o in owned) == sorted(sizes) and disjoint(members)
            and set().union(*owned) == set(range(PARTITIONS)))


def group_view(bootstrap: str, group: str) -> tuple[str, int]:
    """(group type, number of members) as confluent's admin client describes the group
    (ConsumerGroupDescribe, or DescribeGroups for a classic group)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(30)
    return str(desc.type).rsplit(".", 1)[-1], len(desc.members)


def check_exactly_once(bootstrap, group, members, sent):
    try:
        wait_until(lambda: set(consumed(members)) >= set(sent), "every record consumed", timeout=90)
    except AssertionError:
        missing = Counter(int(v.split("-")[1]) % PARTITIONS for v in set(sent) - set(consumed(members)))
        owners = [(m.proc.poll(), sorted(m.assignment() or ())) for m in members]
        raise AssertionError(f"records never consumed, per partition: {dict(missing)}; members "
                             f"(exit code, partitions): {owners}") from None
    counts = consumed(members)
    assert [v for v, n in counts.items() if n > 1] == [], "records consumed twice"
    assert set(counts) == set(sent)
    per_partition = Counter(int(v.split("-")[1]) % PARTITIONS for v in sent)
    wait_until(lambda: committed_offsets(bootstrap, group) == dict(per_partition),
               "the committed offsets to reach the end of every partition")


@contextlib.contextmanager
def records_flowing(bootstrap: str, topic: str, prefix: str):
    """A topic with a producer writing to it; yields (producer, members: a list the test fills);
    on the way out the producer stops and every member process is killed."""
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SteadyProducer(bootstrap, topic, prefix, PARTITIONS, interval=0.01)
    members: list[Member] = []
    try:
        yield producer, members
    finally:
        producer._stop.set()
        for m in members:
            m.kill()


def finish(bootstrap: str, group: str, producer, everyone, live) -> None:
    """Stop producing, check exactly once, close the live members."""
    check_exactly_once(bootstrap, group, everyone, producer.stop())
    for m in live:
        m.close()


@pytest.mark.slow
def test_rolling_classic_members_to_the_consumer_protocol(mbroker, tmp_path):
    group = "mig-up"
    with records_flowing(mbroker.bootstrap, group, "u") as (producer, everyone):
        live = [Member("confluent", mbroker.bootstrap, group, group, tmp_path) for _ in range(3)]
        everyone += live
        wait_until(lambda: balanced(live, [2, 2, 2]), "three classic members with two partitions each")
        assert group_view(mbroker.bootstrap, group)[0] == "CLASSIC"
        for i in range(3):
            live[i].close()                                      # LeaveGroup (classic)
            live[i] = Member("confluent", mbroker.bootstrap, group, group, tmp_path, protocol="consumer")
            everyone.append(live[i])
            wait_until(lambda: balanced(live, [2, 2, 2]) and live[i].values(),
                       f"the group balanced and consuming again after rolling member {i}")
            if i == 0:
                assert "upgrades to a consumer group" in mbroker.log_text()
                assert group_view(mbroker.bootstrap, group) == ("CONSUMER", 3)
        assert group_view(mbroker.bootstrap, group) == ("CONSUMER", 3)   # all consumer-protocol now
        finish(mbroker.bootstrap, group, producer, everyone, live)
        assert group_view(mbroker.bootstrap, group) == ("CONSUMER", 0)   # and stays one, empty


@pytest.mark.slow
def test_rolling_back_to_the_classic_protocol_downgrades(mbroker, tmp_path):
    group = "mig-down"
    with records_flowing(mbroker.bootstrap, group, "d") as (producer, everyone):
        live = [Member("confluent", mbroker.bootstrap, group, group, tmp_path, protocol="consumer")
                for _ in range(2)]
        everyone += live
        wait_until(lambda: balanced(live, [3, 3]), "two consumer-protocol members")
        live[0].close()
        live[0] = Member("confluent", mbroker.bootstrap, group, group, tmp_path)      # classic
        everyone.append(live[0])
        wait_until(lambda: balanced(live, [3, 3]) and live[0].values(),
                   "a classic member consuming inside the consumer group")
        assert group_view(mbroker.bootstrap, group) == ("CONSUMER", 2)
        live[1].close()                  # the last consumer-protocol member: the group downgrades
        wait_until(lambda: "downgrades to a classic group" in mbroker.log_text(), "the downgrade")
        live[1] = Member("confluent", mbroker.bootstrap, group, group, tmp_path)
        everyone.append(live[1])
        wait_until(lambda: balanced(live, [3, 3]) and live[1].values(),
                   "two classic members in a classic group")
        assert group_view(mbroker.bootstrap, group)[0] == "CLASSIC"
        finish(mbroker.bootstrap, group, producer, everyone, live)
