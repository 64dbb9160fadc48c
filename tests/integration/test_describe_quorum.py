"""DescribeQuorum (key 55) against a real broker process: kafka-python 3.x's
`describe_metadata_quorum` (v2) sees this node as the single voter and leader of
`__cluster_metadata`-0, whose end offset moves with topic metadata; raw v0/v1 answers and the
errors Kafka's KafkaRaftClient gives for any other partition."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from kompakt.protocol.errors import ErrorCode
from kompakt.storage.topic_store import uuid_from_str
from wire_support import Wire, req, sub


@pytest.fixture(scope="module")
def admin(module_broker):
    client = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


def _describe(wire, version, topic="__cluster_metadata", partitions=(0,)):
    T = sub(55, "TopicData")
    return wire.call(req(55, topics=[T(topic_name=topic, partitions=[T.PartitionData(partition_index=p)
                                                                     for p in partitions])]), version)


def test_kafka_python_describe_metadata_quorum(admin, module_broker):
    before_ms = int(time.time() * 1000)
    quorum = admin.describe_metadata_quorum()
    [topic] = quorum["topics"]
    [part] = topic["partitions"]
    assert (topic["topic_name"], part["partition_index"], part["error"]) == ("__cluster_metadata", 0, None)
    [node] = quorum["nodes"]
    node_id = node["node_id"]
    assert part["leader_id"] == node_id and part["leader_epoch"] == 1
    [voter] = part["current_voters"]
    assert part["observers"] == []
    assert voter["replica_id"] == node_id
    assert voter["log_end_offset"] == part["high_watermark"] >= 1
    assert voter["last_fetch_timestamp"] >= before_ms and voter["last_caught_up_timestamp"] >= before_ms
    # the first log dir's directory.id (meta.properties holds it in Kafka's base64 form)
    props = dict(line.split("=", 1) for line in Path(module_broker.log_dir, "meta.properties").read_text().split()
                 if "=" in line)
    assert voter["replica_directory_id"] == str(uuid_from_str(props["directory.id"]))
    [listener] = node["listeners"]
    assert (listener["name"], listener["host"], listener["port"]) == ("PLAINTEXT", "127.0.0.1", module_broker.port)

    # the metadata log's end moves with topic metadata
    admin.create_topics([NewTopic("quorum-t", 1, 1)])
    after = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    assert after["high_watermark"] > part["high_watermark"]
    assert after["current_voters"][0]["log_end_offset"] == after["high_watermark"]


@pytest.mark.parametrize("version", [0, 1])
def test_older_versions(module_broker, version):
    wire = Wire(module_broker.port)
    answer = _describe(wire, version)
    wire.close()
    assert answer.error_code == 0
    [part] = answer.topics[0].partitions
    assert part.error_code == 0 and part.leader_epoch == 1 and part.high_watermark >= 1
    assert [v.log_end_offset for v in part.current_voters] == [part.high_watermark]


@pytest.mark.parametrize("topic,partitions", [("__cluster_metadata", (1,)), ("other", (0,)),
                                              ("__cluster_metadata", (0, 1))])
def test_any_other_partition_is_unknown(module_broker, topic, partitions):
    """KafkaRaftClient: not exactly __cluster_metadata-0 -> UNKNOWN_TOPIC_OR_PARTITION for every
    partition asked, with Kafka's message (v2), top-level error 0."""
    wire = Wire(module_broker.port)
    answer = _describe(wire, 2, topic, partitions)
    wire.close()
    assert answer.error_code == 0 and answer.nodes == []
    [t] = answer.topics
    assert t.topic_name == topic
    assert [(p.partition_index, p.error_code, p.error_message) for p in t.partitions] == [
        (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        for p in partitions]
