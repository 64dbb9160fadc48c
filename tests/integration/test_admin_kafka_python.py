"""Admin APIs through kafka-python 3.x's KafkaAdminClient against a real broker process."""
import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType


@pytest.fixture
def client(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield admin
    admin.close()


def topic_configs(client, topic, config_filter="all"):
    described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                        config_filter=config_filter)
    return described["topic"][topic]


def test_create_alter_partitions_records_delete(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    out = client.create_topics({"ledger": {"num_partitions": 2, "replication_factor": 1,
                                           "configs": {"cleanup.policy": "compact,delete"}}},
                               validate_only=True)
    assert out["topics"][0]["error_code"] == 0
    assert "ledger" not in client.list_topics()

    out = client.create_topics({"ledger": {"num_partitions": 2, "configs": {"cleanup.policy": "compact,delete",
                                                                            "min.compaction.lag.ms": "1000"}}})
    created = out["topics"][0]
    assert created["error_code"] == 0 and created["num_partitions"] == 2 and created["replication_factor"] == 1
    assert created["configs"]["min.compaction.lag.ms"]["value"] == "1000"
    assert created["configs"]["min.compaction.lag.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

    modified = topic_configs(client, "ledger", "modified")
    assert {k: v["value"] for k, v in modified.items()} == {"cleanup.policy": "compact,delete",
                                                           "min.compaction.lag.ms": "1000"}

    # incremental (kafka-python picks IncrementalAlterConfigs when the broker offers it)
    res = ConfigResource(ConfigResourceType.TOPIC, "ledger", {
        "cleanup.policy": (AlterConfigOp.SUBTRACT, "delete"),
        "segment.ms": (AlterConfigOp.SET, "60000"),
        "min.compaction.lag.ms": (AlterConfigOp.DELETE, None)})
    assert client.alter_configs([res]) == {"topic": {"ledger": "OK"}}
    modified = topic_configs(client, "ledger", "modified")
    assert {k: v["value"] for k, v in modified.items()} == {"cleanup.policy": "compact", "segment.ms": "60000"}

    # legacy AlterConfigs (the client re-sends the other modified keys, as it must)
    res = ConfigResource(ConfigResourceType.TOPIC, "ledger", {"retention.ms": "7200000"})
    assert client.alter_configs([res], incremental=False) == {"topic": {"ledger": "OK"}}
    modified = topic_configs(client, "ledger", "modified")
    assert modified["retention.ms"]["value"] == "7200000"
    assert modified["segment.ms"]["value"] == "60000"

    # persisted: the overrides survive a restart
    client.close()
    broker.restart()
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    modified = topic_configs(client, "ledger", "modified")
    assert {k: v["value"] for k, v in modified.items()} == {"cleanup.policy": "compact", "segment.ms": "60000",
                                                           "retention.ms": "7200000"}

    client.create_partitions({"ledger": 4})
    described = client.describe_topics(["ledger"])
    assert len(described[0]["partitions"]) == 4

    # DescribeTopicPartitions with a page of 3 partitions
    page = client.describe_topic_partitions(["ledger"], response_partition_limit=3)
    assert [p["partition_index"] for p in page["topics"][0]["partitions"]] == [0, 1, 2]
    assert page["next_cursor"] == {"topic_name": "ledger", "partition_index": 3}

    # records: DeleteRecords needs `delete` in cleanup.policy
    client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "ledger",
                                         {"cleanup.policy": (AlterConfigOp.SET, "delete")})])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(5):
        producer.send("ledger", key=b"k", value=str(i).encode(), partition=1)
    producer.flush(15)
    producer.close()
    out = client.delete_records({TopicPartition("ledger", 1): 3})
    assert out[TopicPartition("ledger", 1)]["low_watermark"] == 3

    client.delete_topics(["ledger"])
    assert "ledger" not in client.list_topics()
    client.close()


def test_errors_cluster_and_broker_configs(broker, client):
    client.create_topics({"one": {"num_partitions": 3}})
    with pytest.raises(Errors.TopicAlreadyExistsError):
        client.create_topics({"one": {"num_partitions": 1}})
    with pytest.raises(Errors.InvalidTopicError):
        client.create_topics({"..": {"num_partitions": 1}})
    with pytest.raises(Errors.InvalidTopicError):
        client.create_topics({"x" * 250: {"num_partitions": 1}})
    with pytest.raises(Errors.InvalidConfigurationError):
        client.create_topics({"two": {"configs": {"cleanup.policy": "shred"}}})
    with pytest.raises(Errors.InvalidPartitionsError):
        client.create_topics({"three": {"num_partitions": 0}})
    with pytest.raises(Errors.InvalidPartitionsError):
        client.create_partitions({"one": 2})
    with pytest.raises(Errors.InvalidReplicationFactorError):
        client.create_topics({"four": {"num_partitions": 1, "replication_factor": 2}})
    assert "two" not in client.list_topics() and "three" not in client.list_topics()

    res = ConfigResource(ConfigResourceType.TOPIC, "one", {"retention.ms": (AlterConfigOp.SET, "-5")})
    result = client.alter_configs([res])["topic"]["one"]
    assert "InvalidConfigurationError" in result and "retention.ms" in result

    # compacted topics refuse DeleteRecords (Kafka's policy)
    client.create_topics({"compacted": {"num_partitions": 1, "configs": {"cleanup.policy": "compact"}}})
    with pytest.raises(Errors.PolicyViolationError):
        client.delete_records({TopicPartition("compacted", 0): 0})
    with pytest.raises(Errors.OffsetOutOfRangeError):
        client.delete_records({TopicPartition("one", 0): 1})

    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        client.delete_topics(["never-created"])

    # the cluster and the broker resource
    cluster = client.describe_cluster()
    assert cluster["cluster_id"]
    assert [b["broker_id"] for b in cluster["brokers"]] == [cluster["controller_id"]]
    node = str(cluster["controller_id"])
    configs = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)], config_filter="all")
    broker_configs = configs["broker"][node]
    assert broker_configs["num.partitions"]["value"] == "1"
    assert broker_configs["log.dirs"]["config_source"] == "STATIC_BROKER_CONFIG"

    # BROKER_LOGGER: the broker's Python loggers, changed live
    res = ConfigResource(ConfigResourceType.BROKER_LOGGER, node, {"kompakt.storage.log": (AlterConfigOp.SET, "DEBUG")})
    assert client.alter_configs([res]) == {"broker_logger": {node: "OK"}}
    loggers = client.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, node)], config_filter="all")
    assert loggers["broker_logger"][node]["kompakt.storage.log"]["value"] == "DEBUG"
