"""Admin APIs through aiokafka 0.14's AIOKafkaAdminClient (non-flexible versions only)."""
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from aiokafka.structs import TopicPartition

TOPIC_ALREADY_EXISTS, INVALID_TOPIC, INVALID_CONFIG = 36, 17, 40


@pytest.fixture
async def client(broker):
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    await admin.start()
    yield admin
    await admin.close()


def create_errors(response) -> dict[str, int]:
    return {topic: code for topic, code, *_ in response.topic_errors}


async def describe(client, topic) -> dict[str, tuple]:
    (response,) = await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (error_code, _msg, _type, name, entries), = [tuple(r)[:5] for r in response.resources]
    assert error_code == 0 and name == topic
    return {e[0]: e for e in entries}   # name -> (name, value, read_only, ...)


async def test_admin_story(broker, client):
    resp = await client.create_topics([NewTopic("metrics", 2, 1, topic_configs={"retention.ms": "60000"})],
                                      validate_only=True)
    assert create_errors(resp) == {"metrics": 0}
    assert "metrics" not in await client.list_topics()

    resp = await client.create_topics([
        NewTopic("metrics", 2, 1, topic_configs={"retention.ms": "60000"}),
        NewTopic("bad topic", 1, 1),
        NewTopic("bad-config", 1, 1, topic_configs={"compression.type": "brotli"}),
    ])
    assert create_errors(resp) == {"metrics": 0, "bad topic": INVALID_TOPIC, "bad-config": INVALID_CONFIG}
    resp = await client.create_topics([NewTopic("metrics", 2, 1)])
    assert create_errors(resp) == {"metrics": TOPIC_ALREADY_EXISTS}

    configs = await describe(client, "metrics")
    assert configs["retention.ms"][1] == "60000"
    assert configs["cleanup.policy"][1] == "delete"

    # aiokafka only has the legacy AlterConfigs: the given set replaces the overrides
    (resp, *_) = await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "metrics",
                                                           {"segment.bytes": "2097152"})])
    assert [tuple(r)[0] for r in resp.resources] == [0]
    configs = await describe(client, "metrics")
    assert configs["segment.bytes"][1] == "2097152"
    assert configs["retention.ms"][1] == "604800000"

    (resp, *_) = await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "metrics",
                                                           {"segment.bytes": "1"})])
    assert [tuple(r)[0] for r in resp.resources] == [INVALID_CONFIG]

    await client.create_partitions({"metrics": NewPartitions(3)})
    with pytest.raises(InvalidPartitionsError):
        await client.create_partitions({"metrics": NewPartitions(2)})
    (topic,) = await client.describe_topics(["metrics"])
    assert len(topic["partitions"]) == 3

    # aiokafka's idempotent producer (InitProducerId at its own, older version)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        offsets = [(await producer.send_and_wait("metrics", value=b"x%d" % i, key=b"k", partition=2)).offset
                   for i in range(6)]
    finally:
        await producer.stop()
    assert offsets == list(range(6))
    low = await client.delete_records({TopicPartition("metrics", 2): RecordsToDelete(5)})
    assert low == {TopicPartition("metrics", 2): 5}
    with pytest.raises(OffsetOutOfRangeError):
        await client.delete_records({TopicPartition("metrics", 2): RecordsToDelete(7)})

    resp = await client.delete_topics(["metrics", "never"])
    codes = {t: c for t, c, *_ in resp.topic_error_codes}
    assert codes == {"metrics": 0, "never": UnknownTopicOrPartitionError.errno}
    assert "metrics" not in await client.list_topics()
