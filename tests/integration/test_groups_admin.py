"""List, describe and delete consumer groups (and read / delete their offsets) through each
client's admin API: confluent-kafka AdminClient, kafka-python KafkaAdminClient, aiokafka
AIOKafkaAdminClient (which has no delete call: its DeleteGroupsRequest goes through its client).

Scenario per client: a live group "live" (one member process, offsets committed) and a "simple"
group that only committed offsets (generation -1, no membership).
"""
from __future__ import annotations

import asyncio

import pytest

from groups_support import GROUP_BROKER, Member, committed_offsets, create_topic, produce
from kompakt.testing.poll import wait_until

TOPIC = "adm"
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
GROUP_SUBSCRIBED_TO_TOPIC = 86


def setup_groups(broker, tmp_path, client: str) -> Member:
    create_topic(broker.bootstrap, TOPIC, 2)
    produce(broker.bootstrap, TOPIC, [f"v{i}" for i in range(10)], 2)
    member = Member(client, broker.bootstrap, "live", TOPIC, tmp_path)
    wait_until(lambda: len(member.values()) == 10, "the live member to consume and commit")
    # A simple commit: generation -1, no member id (kafka-python with manual assignment).
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="simple", enable_auto_commit=False)
    try:
        c.assign([TopicPartition(TOPIC, 0)])
        c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(3, "note", -1)})
    finally:
        c.close()
    return member


def test_admin_confluent(start_broker, tmp_path):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka.admin import AdminClient
    broker = start_broker(config=GROUP_BROKER)
    member = setup_groups(broker, tmp_path, "confluent")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(30).valid}
        assert set(listed) >= {"live", "simple"}
        assert listed["live"].state == ConsumerGroupState.STABLE
        assert not listed["live"].is_simple_consumer_group
        assert listed["simple"].state == ConsumerGroupState.EMPTY
        assert listed["simple"].is_simple_consumer_group
        only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(30).valid
        assert [g.group_id for g in only_empty] == ["simple"]

        desc = admin.describe_consumer_groups(["live"])["live"].result(30)
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        [m] = desc.members
        assert m.client_id == "ck-dyn" and m.host == "/127.0.0.1"
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1]

        offsets = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("simple")])["simple"].result(30)
        [tp] = offsets.topic_partitions
        # (librdkafka hands the metadata over as raw bytes; kafka-python's test checks it)
        assert (tp.topic, tp.partition, tp.offset) == (TOPIC, 0, 3)

        with pytest.raises(KafkaException) as info:
            admin.delete_consumer_groups(["live"])["live"].result(30)
        assert info.value.args[0].code() == NON_EMPTY_GROUP
        member.close()
        admin.delete_consumer_groups(["live"])["live"].result(30)
        with pytest.raises(KafkaException) as info:
            admin.delete_consumer_groups(["nope"])["nope"].result(30)
        assert info.value.args[0].code() == GROUP_ID_NOT_FOUND
        listed = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
        assert "live" not in listed and "simple" in listed
    finally:
        member.kill()
    assert committed_offsets(broker.bootstrap, "live") == {}


def test_admin_kafka_python(start_broker, tmp_path):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import MemberToRemove
    broker = start_broker(config=GROUP_BROKER)
    member = setup_groups(broker, tmp_path, "kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["live"]["protocol_type"] == "consumer" and listed["live"]["group_state"] == "Stable"
        assert listed["simple"]["protocol_type"] == "" and listed["simple"]["group_state"] == "Empty"
        assert [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])] == ["live"]

        desc = admin.describe_groups(["live"])["live"]
        assert desc["error"] is None and desc["group_state"] == "Stable" and desc["protocol_type"] == "consumer"
        [m] = desc["members"]
        assert m["client_id"] == "kp-dyn" and m["client_host"] == "/127.0.0.1"

        offsets = admin.list_group_offsets({"live": None, "simple": None})
        assert {tp.partition: om.offset for tp, om in offsets["live"].items()} == {0: 5, 1: 5}
        assert offsets["simple"][TopicPartition(TOPIC, 0)].metadata == "note"

        # OffsetDelete: refused for the topic a live member subscribes, allowed for the simple group.
        result = admin.delete_group_offsets("live", [TopicPartition(TOPIC, 0)])
        assert result[TopicPartition(TOPIC, 0)].errno == GROUP_SUBSCRIBED_TO_TOPIC
        admin.delete_group_offsets("simple", [TopicPartition(TOPIC, 0)])
        assert admin.list_group_offsets("simple")["simple"] == {}

        result = dict(admin.delete_groups(["live", "nope"]))
        assert result == {"live": "NonEmptyGroupError", "nope": "GroupIdNotFoundError"}
        # Batch LeaveGroup (v3+) through the admin API empties the group; then it can go.
        admin.remove_group_members("live", [MemberToRemove(member_id=m["member_id"])])
        wait_until(lambda: admin.describe_groups(["live"])["live"]["group_state"] == "Empty",
                   "the group to become empty after remove_group_members")
        assert dict(admin.delete_groups(["live"])) == {"live": "OK"}
        assert "live" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        member.kill()
        admin.close()


def test_admin_aiokafka(start_broker, tmp_path):
    broker = start_broker(config=GROUP_BROKER)
    member = setup_groups(broker, tmp_path, "aiokafka")

    async def run():
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.protocol.admin import DeleteGroupsRequest
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            listed = dict((g[0], g[1]) for g in await admin.list_consumer_groups())
            assert listed["live"] == "consumer" and listed["simple"] == ""
            [resp] = await admin.describe_consumer_groups(["live"])
            [group] = resp.groups
            error_code, group_id, state, protocol_type, protocol, members = group[:6]
            assert (error_code, group_id, state, protocol_type, protocol) == (0, "live", "Stable", "consumer", "roundrobin")
            assert [m[1] for m in members] == ["ak-dyn"]
            offsets = await admin.list_consumer_group_offsets("live")
            assert sorted((tp.partition, om.offset) for tp, om in offsets.items()) == [(0, 5), (1, 5)]

            coordinator = await admin.find_coordinator("live")
            resp = await admin._send_request(DeleteGroupsRequest(["live", "nope"]), coordinator)
            assert dict(resp.results) == {"live": NON_EMPTY_GROUP, "nope": GROUP_ID_NOT_FOUND}
            await asyncio.to_thread(member.close)
            resp = await admin._send_request(DeleteGroupsRequest(["live"]), coordinator)
            assert dict(resp.results) == {"live": 0}
            listed = dict((g[0], g[1]) for g in await admin.list_consumer_groups())
            assert "live" not in listed
        finally:
            await admin.close()

    try:
        asyncio.run(run())
    finally:
        member.kill()
