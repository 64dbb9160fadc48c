"""Old protocol versions from a real client: kafka-python pinned to older brokers' versions.

`api_version=(X, Y)` makes kafka-python skip ApiVersions negotiation and speak what a Kafka X.Y
broker would: (0, 11) is the oldest that Kafka 4 (and Kompakt) still serves - Produce v3 with record
batch v2, Fetch v5, Metadata v4, ListOffsets v2, JoinGroup v2, OffsetCommit v3, OffsetFetch v3,
FindCoordinator v1, CreateTopics v2 - and each later pin moves some APIs up (DescribeConfigs v0,
which kafka-python sends below 1.1, is gone from Kafka 4 as from Kompakt: the connection is closed).
Every pin must produce, read through a group, commit, and administer topics. Below 0.11 the
producer needs Produce v0-2 (message format v0/v1), which Kafka 4 answers UNSUPPORTED_VERSION per
partition; Kompakt must do the same, at once, rather than time out or store old-format messages.
"""
from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import UnsupportedVersionError

from compat_support import running_broker, stored_batches

PINS = [(0, 11), (1, 0), (2, 0), (2, 4), (3, 0)]


@pytest.fixture(scope="module")
def versions_broker(tmp_path_factory):
    # single-member groups only: no initial rebalance delay to wait out
    with running_broker(tmp_path_factory.mktemp("versions-broker"),
                        {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}) as proc:
        yield proc


@pytest.mark.parametrize("pin", PINS, ids=lambda v: "kafka-%d.%d" % v)
def test_kafka_python_pinned_to_an_older_broker_version(versions_broker, pin):
    b = versions_broker
    topic, group = "pin-%d-%d" % pin, "pin-group-%d-%d" % pin
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, api_version=pin)
    try:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
        if pin >= (1, 1):       # before 1.1 this is DescribeConfigs v0, which Kafka 4 no longer serves
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms"])])
            (by_name,) = described.values()
            assert by_name[topic]["retention.ms"]["value"] == "3600000", described

        producer = KafkaProducer(bootstrap_servers=b.bootstrap, api_version=pin, compression_type="gzip",
                                 linger_ms=20)
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                                 headers=[("pin", b"%d.%d" % pin)], timestamp_ms=1_700_000_000_000 + i)
                   for i in range(20)]
        producer.flush(30)
        acked = [f.get(30) for f in futures]
        producer.close(5)
        assert sorted((m.partition, m.offset) for m in acked) == sorted((i % 2, i // 2) for i in range(20))
        for p in range(2):
            assert {h.compression for h, _ in stored_batches(b.log_dir, topic, p)} == {1}

        consumer = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, api_version=pin, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=50)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=200).values():
                got += msgs
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(2)}
        consumer.close()
        assert sorted((m.partition, m.offset, m.key, m.value) for m in got) == \
            sorted((i % 2, i // 2, b"k%d" % i, b"v%d" % i) for i in range(20))
        assert {m.timestamp for m in got} == {1_700_000_000_000 + i for i in range(20)}
        assert all(list(m.headers) == [("pin", b"%d.%d" % pin)] for m in got)
        assert committed == {0: 10, 1: 10}

        offsets = admin.list_group_offsets({group: None})
        assert {tp.partition: meta.offset for tp, meta in offsets[group].items()} == {0: 10, 1: 10}
        admin.delete_topics([topic])
    finally:
        admin.close()


def test_pre_0_11_produce_is_refused_as_unsupported(versions_broker):
    """Produce v2 (kafka-python pinned to 0.10.2) is answered UNSUPPORTED_VERSION, promptly, and the
    partition stays empty."""
    b = versions_broker
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("pin-old", 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, api_version=(0, 10, 2), retries=0)
    try:
        future = producer.send("pin-old", b"old", partition=0)
        with pytest.raises(UnsupportedVersionError):
            future.get(30)
    finally:
        producer.close(5)
    assert stored_batches(b.log_dir, "pin-old", 0) == []
