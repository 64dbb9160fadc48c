"""Admin APIs through confluent-kafka's AdminClient (librdkafka) against a real broker process.

One broker per test; each test walks one admin story end to end and checks what librdkafka
reports (values, sources, error codes), then what the broker really did (describe again,
produce/consume, offsets).
"""
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, ResourceType)

TIMEOUT = 15


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def result(futures, key):
    return futures[key].result(timeout=TIMEOUT)


def error_code(futures, key):
    with pytest.raises(KafkaException) as info:
        futures[key].result(timeout=TIMEOUT)
    return info.value.args[0].code()


def topic_configs(client, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    return client.describe_configs([res])[res].result(timeout=TIMEOUT)


def api_requests(broker, api: str) -> float:
    """Requests the broker has served for one API, from its Prometheus /metrics."""
    text = urllib.request.urlopen(f"{broker.metrics_url}/metrics", timeout=TIMEOUT).read().decode()
    prefix = f'kompakt_requests_total{{api="{api}"}} '
    return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))


def produce(broker, topic, n, partition=0):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0


def test_create_describe_alter_delete_topic(start_broker):
    broker = start_broker()
    client = admin(broker)

    # validate-only creates nothing
    fs = client.create_topics([NewTopic("orders", 3, 1, config={"cleanup.policy": "compact"})],
                              validate_only=True)
    assert result(fs, "orders") is None
    assert "orders" not in client.list_topics(timeout=TIMEOUT).topics

    fs = client.create_topics([NewTopic("orders", 3, 1, config={"cleanup.policy": "compact",
                                                                 "retention.ms": "3600000"})])
    assert result(fs, "orders") is None
    md = client.list_topics(timeout=TIMEOUT).topics["orders"]
    assert sorted(md.partitions) == [0, 1, 2]

    configs = topic_configs(client, "orders")
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # incremental: APPEND to a list key, SET one, DELETE another
    res = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert result(client.incremental_alter_configs([res]), res) is None
    configs = topic_configs(client, "orders")
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # legacy AlterConfigs replaces the whole override set
    res = ConfigResource(ResourceType.TOPIC, "orders", set_config={"retention.bytes": "123456"})
    with pytest.warns(DeprecationWarning):   # librdkafka still sends the legacy API
        assert result(client.alter_configs([res]), res) is None
    configs = topic_configs(client, "orders")
    assert configs["retention.bytes"].value == "123456"
    assert configs["cleanup.policy"].value == "delete"            # back to the default
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # applied live: a batch above a lowered max.message.bytes is refused by the running log
    res = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
        ConfigEntry("max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET)])
    assert result(client.incremental_alter_configs([res]), res) is None
    outcome = {}

    def report(err, msg):
        outcome[msg.partition()] = err and err.code()

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.send.max.retries": 0})
    p.produce("orders", key=b"k", value=b"x" * 1000, partition=0, on_delivery=report)
    p.produce("orders", key=b"k", value=b"small", partition=1, on_delivery=report)
    assert p.flush(TIMEOUT) == 0
    assert outcome == {0: KafkaError.MSG_SIZE_TOO_LARGE, 1: None}

    fs = client.create_partitions([NewPartitions("orders", 5)])
    assert result(fs, "orders") is None
    assert sorted(client.list_topics(timeout=TIMEOUT).topics["orders"].partitions) == [0, 1, 2, 3, 4]

    fs = client.delete_topics(["orders"])
    assert result(fs, "orders") is None
    assert "orders" not in client.list_topics(timeout=TIMEOUT).topics


def test_bad_input_gets_kafka_error_codes(start_broker):
    broker = start_broker()
    client = admin(broker)
    assert result(client.create_topics([NewTopic("exists", 2, 1)]), "exists") is None

    fs = client.create_topics([
        NewTopic("exists", 1, 1),
        NewTopic("bad/name", 1, 1),
        NewTopic("badconfig", 1, 1, config={"retention.ms": "soon"}),
        NewTopic("unknownconfig", 1, 1, config={"no.such.key": "1"}),
        NewTopic("threereplicas", 1, 3),
    ])
    assert error_code(fs, "exists") == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_code(fs, "bad/name") == KafkaError.TOPIC_EXCEPTION
    assert error_code(fs, "badconfig") == KafkaError.INVALID_CONFIG
    assert error_code(fs, "unknownconfig") == KafkaError.INVALID_CONFIG
    assert error_code(fs, "threereplicas") == KafkaError.INVALID_REPLICATION_FACTOR
    assert set(client.list_topics(timeout=TIMEOUT).topics) & {"badconfig", "unknownconfig", "threereplicas"} == set()

    # the message reaches the client
    fs = client.create_topics([NewTopic("badconfig", 1, 1, config={"retention.ms": "soon"})])
    with pytest.raises(KafkaException, match="retention.ms"):
        fs["badconfig"].result(timeout=TIMEOUT)

    fs = client.create_partitions([NewPartitions("exists", 1)])
    assert error_code(fs, "exists") == KafkaError.INVALID_PARTITIONS
    fs = client.create_partitions([NewPartitions("missing", 4)])
    assert error_code(fs, "missing") == KafkaError.UNKNOWN_TOPIC_OR_PART

    res = ConfigResource(ResourceType.TOPIC, "exists", incremental_configs=[
        ConfigEntry("segment.bytes", "12", incremental_operation=AlterConfigOpType.SET)])
    assert error_code(client.incremental_alter_configs([res]), res) == KafkaError.INVALID_CONFIG
    res = ConfigResource(ResourceType.TOPIC, "exists", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    assert error_code(client.incremental_alter_configs([res]), res) == KafkaError.INVALID_CONFIG
    # nothing changed by the failed alters
    assert topic_configs(client, "exists")["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    fs = client.delete_topics(["missing"])
    assert error_code(fs, "missing") == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_raises_low_watermark(start_broker):
    broker = start_broker()
    client = admin(broker)
    assert result(client.create_topics([NewTopic("events", 1, 1)]), "events") is None
    produce(broker, "events", 10)

    fs = client.delete_records([TopicPartition("events", 0, 4)])
    deleted = fs[TopicPartition("events", 0, 4)].result(timeout=TIMEOUT)
    assert deleted.low_watermark == 4

    # above the high watermark: OFFSET_OUT_OF_RANGE
    tp = TopicPartition("events", 0, 11)
    assert error_code(client.delete_records([tp]), tp) == KafkaError.OFFSET_OUT_OF_RANGE

    # a consumer from the beginning starts at the new log start offset
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-dr", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition("events", 0), timeout=TIMEOUT)
        assert (low, high) == (4, 10)
        c.assign([TopicPartition("events", 0, -2)])   # OFFSET_BEGINNING
        got = []
        while len(got) < 6:
            msg = c.poll(TIMEOUT)
            assert msg is not None, f"timed out after {got}"
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
        assert got == [(i, f"v{i}".encode()) for i in range(4, 10)]
    finally:
        c.close()

    # a position with a leader epoch is validated with OffsetForLeaderEpoch (KIP-320) before
    # fetching; a wrong end offset would look like log truncation and reset the position
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-epoch", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("events", 0, 7, leader_epoch=0)])
        msg = c.poll(TIMEOUT)
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert (msg.offset(), msg.leader_epoch()) == (7, 0)
    finally:
        c.close()
    assert api_requests(broker, "OffsetForLeaderEpoch") >= 1

    # the new log start offset survives a restart (log-start-offset-checkpoint)
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-restart"})
    try:
        assert c.get_watermark_offsets(TopicPartition("events", 0), timeout=TIMEOUT) == (4, 10)
    finally:
        c.close()

    # -1 means the high watermark: everything goes
    client = admin(broker)
    tp = TopicPartition("events", 0, -1)
    assert client.delete_records([tp])[tp].result(timeout=TIMEOUT).low_watermark == 10


def test_describe_cluster_and_broker_configs(start_broker):
    broker = start_broker()
    client = admin(broker)
    cluster = client.describe_cluster().result(timeout=TIMEOUT)
    assert cluster.cluster_id
    assert [n.id for n in cluster.nodes] == [cluster.controller.id]
    assert cluster.nodes[0].port == broker.port

    res = ConfigResource(ResourceType.BROKER, str(cluster.controller.id))
    configs = client.describe_configs([res])[res].result(timeout=TIMEOUT)
    assert configs["log.retention.hours"].value == "168"
    assert configs["log.retention.hours"].is_read_only

    res = ConfigResource(ResourceType.BROKER, str(cluster.controller.id), incremental_configs=[
        ConfigEntry("log.retention.hours", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="server.properties") as info:
        client.incremental_alter_configs([res])[res].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
