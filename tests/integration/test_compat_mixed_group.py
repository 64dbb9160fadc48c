"""One consumer group, members from three different clients: confluent-kafka (librdkafka),
kafka-python and aiokafka, each a separate process (groups_support.Member).

The clients offer different assignor lists (librdkafka "range,roundrobin", kafka-python
"range,roundrobin", aiokafka "roundrobin" only), so the coordinator must choose the protocol every
member supports, as Kafka does (candidates common to all, then the members' votes): "roundrobin".
The leader, whichever client it is, then assigns partitions from the others' subscription
metadata (three encoders of ConsumerProtocolSubscription), and the broker hands each member its
share through SyncGroup. Every record must be committed exactly once across the group, and every
client must get a share; when one member leaves, the other two take over its partitions. A kafkajs
member, whose assignor has a name of its own, is refused with INCONSISTENT_GROUP_PROTOCOL and the
group goes on undisturbed.
"""
from __future__ import annotations

import re

from compat_support import NODE, NPM, ensure_node_modules, kafkajs
from groups_support import GROUP_BROKER, Member, committed_offsets, create_topic, produce
from kompakt.testing.poll import wait_until

PARTITIONS = 6
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


def stable_cover(members) -> bool:
    """Every member owns something, no partition twice, all partitions owned."""
    owned = [m.assignment() for m in members]
    if any(not o for o in owned):
        return False
    return sum(len(o) for o in owned) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))


def test_mixed_client_group_shares_partitions_and_commits_exactly_once(start_broker, tmp_path):
    broker = start_broker(config=GROUP_BROKER)
    topic, group = "mixed", "mixed-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [Member(client, broker.bootstrap, group, topic, tmp_path) for client in CLIENTS]
    try:
        wait_until(lambda: stable_cover(members), "three clients to share the six partitions")
        # the only assignor all three offer (a lone first member may have had "range" before)
        chosen = re.findall(r"generation \d+ with 3 members, protocol (\w+)", broker.log_text())
        assert chosen and set(chosen) == {"roundrobin"}, chosen

        # -- records produced once the group is stable: each member reads its own partitions
        owned = {m.client: m.assignment() for m in members}
        phase1 = [f"p1-{i}" for i in range(60)]
        produce(broker.bootstrap, topic, phase1, PARTITIONS)
        wait_until(lambda: sum(len(m.values()) for m in members) >= len(phase1), "the first 60 records")
        for m in members:
            mine = [int(v[3:]) % PARTITIONS for v in m.values()]     # produced round-robin
            assert mine and set(mine) <= owned[m.client], (m.client, owned, sorted(set(mine)))

        # -- kafkajs names its assignor "RoundRobinAssigner": it shares no protocol with the group,
        #    so its JoinGroup is refused (INCONSISTENT_GROUP_PROTOCOL) without disturbing the members
        if NODE and NPM:
            ensure_node_modules()
            rebalances = broker.log_text().count("preparing to rebalance")
            refused = kafkajs(broker, "joinGroup", groupId=group, topic=topic)
            assert refused == {"outcome": "crashed", "errorName": "KafkaJSProtocolError",
                               "errorType": "INCONSISTENT_GROUP_PROTOCOL"}, refused
            assert broker.log_text().count("preparing to rebalance") == rebalances
            assert stable_cover(members) and {m.client: m.assignment() for m in members} == owned

        # -- the departure of one client: the other two take over its partitions
        leaving, staying = members[1], [members[0], members[2]]
        leaving.close()
        wait_until(lambda: stable_cover(staying), "the other two clients to take over")
        phase2 = [f"p2-{i}" for i in range(30)]
        produce(broker.bootstrap, topic, phase2, PARTITIONS)
        wait_until(lambda: sum(len(m.values()) for m in members) >= len(phase1) + len(phase2), "30 more records")

        # exactly once: each committed record reported by one member, none missing
        values = [v for m in members for v in m.values()]
        assert sorted(values) == sorted(phase1 + phase2), [m.client for m in members]
        assert committed_offsets(broker.bootstrap, group) == {p: 15 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.close()
