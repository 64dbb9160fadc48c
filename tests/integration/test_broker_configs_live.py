"""Dynamic broker configs end to end: confluent-kafka's and kafka-python's admin clients change
broker-level keys of a running `kompakt serve`; the change is live (the cleaner's worker
processes and throttle, a topic's effective retention), described with Kafka's sources, and
survives a SIGKILL right after the acknowledgement (persisted before the answer).
"""
import json
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)
from kafka.admin import ConfigResource as KPResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KPNewTopic

from kompakt.testing.poll import wait_until
from kafka.protocol.admin.configs import AlterConfigsRequest
from wire_support import Wire

TIMEOUT = 15


def cleaner_status(broker) -> dict:
    with urllib.request.urlopen(f"{broker.metrics_url}/v1/cleaner", timeout=TIMEOUT) as resp:
        return json.loads(resp.read())


def describe_broker(client, name="1") -> dict:
    res = ConfigResource(ResourceType.BROKER, name)
    return client.describe_configs([res])[res].result(timeout=TIMEOUT)


def test_cleaner_threads_and_throttle_change_live_and_survive_a_kill(start_broker):
    broker = start_broker(log_cleaner_backoff_ms=200, log_segment_bytes=2048)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert len(cleaner_status(broker)["workers"]) == 1

    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.cleaner.io.max.bytes.per.second", "1048576.0", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([res])[res].result(timeout=TIMEOUT)
    status = cleaner_status(broker)           # applied before the answer: no waiting needed
    assert [w["id"] for w in status["workers"]] == [0, 1]   # worker processes start on first use
    assert status["io_max_bytes_per_second"] == 1048576.0
    entry = describe_broker(client)["log.cleaner.threads"]
    assert (entry.value, entry.source, entry.is_read_only) == ("2", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)

    broker.kill()                             # no clean shutdown: the file was written before the ack
    broker.start()
    assert len(cleaner_status(broker)["workers"]) == 2
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert describe_broker(client)["log.cleaner.threads"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # the restarted cleaner still compacts (compact-now through the admin API)
    fs = client.create_topics([NewTopic("kv", 1, 1, config={"cleanup.policy": "compact"})])
    fs["kv"].result(timeout=TIMEOUT)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(100):
        p.produce("kv", key=b"k%d" % (i % 5), value=b"v%d" % i)
        p.flush(TIMEOUT)                   # one batch each: 2 KiB segments roll every few
    req = urllib.request.Request(f"{broker.metrics_url}/v1/partitions/kv/0/compact?wait=30", method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        stats = json.loads(resp.read())
    if stats["stats"]["cleaned"] is not True:
        # the restarted cleaner (2 threads, 200 ms backoff) may have cleaned the partition itself
        # while the records were produced (a loaded machine): then compact-now finds nothing
        # cleanable, and the cleaner point shows the clean happened
        assert stats["stats"]["reason"].startswith("nothing cleanable"), stats
        with urllib.request.urlopen(f"{broker.metrics_url}/v1/partitions/kv/0", timeout=TIMEOUT) as resp:
            view = json.loads(resp.read())
        assert view["cleaner"]["cleaner_point"] > 0, view


def test_cluster_default_retention_reaches_topics_without_overrides(start_broker):
    """The legacy AlterConfigs sets the cluster-default log.retention.ms: retention deletes the
    old segments of a topic without its own retention.ms, not of one with it; kafka-python is
    refused a key Kafka cannot change at run time."""
    broker = start_broker(log_segment_bytes=1000, log_retention_check_interval_ms=200)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([KPNewTopic("plain", 1, 1), KPNewTopic("pinned", 1, 1, topic_configs={
            "retention.ms": "86400000"})])
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(30):
            for topic in ("plain", "pinned"):
                p.produce(topic, key=b"k", value=b"x" * 100)
            p.flush(TIMEOUT)              # one batch each: the segments roll every few records
        # neither kafka-python nor librdkafka can name the cluster-default resource (Kafka's
        # kafka-configs.sh --entity-default does): a legacy AlterConfigs v2 on the wire
        R = AlterConfigsRequest.AlterConfigsResource
        wire = Wire(broker.port)
        answer = wire.call(AlterConfigsRequest(validate_only=False, resources=[R(
            resource_type=4, resource_name="", configs=[R.AlterableConfig(name="log.retention.ms", value="1")])]), 2)
        wire.close()
        assert [(r.error_code, r.error_message) for r in answer.responses] == [(0, None)]
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_until(lambda: _earliest(broker, "plain") > 0, "retention of plain under the new default")
        assert _earliest(broker, "pinned") == 0
        for topic, value, source in (("plain", "1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
                                     ("pinned", "86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)):
            res = ConfigResource(ResourceType.TOPIC, topic)
            entry = client.describe_configs([res])[res].result(timeout=TIMEOUT)["retention.ms"]
            assert (entry.value, entry.source) == (value, source), topic
        refused = admin.alter_configs([KPResource(ConfigResourceType.BROKER, "1", configs={"log.dirs": "/elsewhere"})],
                                      incremental=False, raise_on_unknown=False)
        assert "[Error 42] InvalidRequestError: Cannot update these configs dynamically: Set(log.dirs)" in str(refused)
    finally:
        admin.close()


def _earliest(broker, topic) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    try:
        low, _high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
        return low
    finally:
        c.close()
