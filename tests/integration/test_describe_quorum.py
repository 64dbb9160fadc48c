"""The single-node KRaft quorum against a real broker process. DescribeQuorum (key 55):
kafka-python 3.x's `describe_metadata_quorum` (v2) sees this node as the single voter and leader
of `__cluster_metadata`-0, whose end offset moves with topic metadata; raw v0/v1 answers and the
errors Kafka's KafkaRaftClient gives for any other partition. AddRaftVoter / RemoveRaftVoter
(80, 81), UnregisterBroker (64) and ListClientMetricsResources (74) answer as Kafka's controller
does for a one-voter, one-broker cluster, and change nothing."""
from __future__ import annotations

import time
import uuid
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


# -- the quorum's other APIs on a single node ------------------------------------------------------
def _cluster_id(wire) -> str:
    return wire.call(req(60, include_cluster_authorized_operations=False, endpoint_type=1,
                         include_fenced_brokers=False), 2).cluster_id


def _node_and_directory(wire):
    part = _describe(wire, 2).topics[0].partitions[0]
    [voter] = part.current_voters
    return voter.replica_id, voter.replica_directory_id


def test_add_raft_voter(module_broker):
    """KafkaRaftClient.handleAddVoterRequest / AddVoterHandler, in order: cluster id, a valid
    voter, an endpoint for the quorum's listener, not a voter already; a new node cannot catch up
    with a metadata log Kompakt does not replicate: REQUEST_TIMED_OUT."""
    wire = Wire(module_broker.port)
    node, directory = _node_and_directory(wire)
    L = sub(80, "Listener")
    here = [L(name="PLAINTEXT", host="127.0.0.1", port=module_broker.port)]
    other = uuid.uuid4()

    def add(voter_id, directory_id, listeners=here, cluster_id=None):
        return wire.call(req(80, cluster_id=cluster_id, timeout_ms=1000, voter_id=voter_id,
                             voter_directory_id=directory_id, listeners=listeners), 0)

    wrong = add(2, other, cluster_id="not-this-one")
    assert wrong.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID and '"not-this-one"' in wrong.error_message
    assert add(2, other, cluster_id=_cluster_id(wire)).error_code == ErrorCode.REQUEST_TIMED_OUT
    assert (add(2, uuid.UUID(int=0)).error_code, add(-1, other).error_code) == (ErrorCode.INVALID_REQUEST,) * 2
    no_endpoint = add(2, other, listeners=[L(name="CONTROLLER", host="h", port=1)])
    assert no_endpoint.error_code == ErrorCode.INVALID_REQUEST and "PLAINTEXT" in no_endpoint.error_message
    again = add(node, directory)
    assert again.error_code == ErrorCode.DUPLICATE_VOTER and f"ReplicaKey(id={node}," in again.error_message
    # nothing changed: still one voter
    assert _node_and_directory(wire) == (node, directory)
    wire.close()


def test_remove_raft_voter(module_broker):
    """RemoveVoterHandler: VoterSet.removeVoter refuses a non-voter and the last voter alike."""
    wire = Wire(module_broker.port)
    node, directory = _node_and_directory(wire)

    def remove(voter_id, directory_id, cluster_id=None):
        return wire.call(req(81, cluster_id=cluster_id, voter_id=voter_id, voter_directory_id=directory_id), 0)

    for voter_id, directory_id in ((node, directory), (node, uuid.uuid4()), (7, uuid.uuid4())):
        answer = remove(voter_id, directory_id)
        assert answer.error_code == ErrorCode.VOTER_NOT_FOUND, answer
        assert answer.error_message.startswith(f"Cannot remove voter ReplicaKey(id={voter_id},")
    assert remove(-1, directory).error_code == ErrorCode.INVALID_REQUEST
    assert remove(node, directory, cluster_id="x").error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert _node_and_directory(wire) == (node, directory)
    wire.close()


def test_unregister_broker_and_list_client_metrics_resources(module_broker):
    wire = Wire(module_broker.port)
    node, _ = _node_and_directory(wire)
    assert wire.call(req(64, broker_id=node + 5), 0).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert wire.call(req(64, broker_id=node), 0).error_code == 0     # registered again at once
    assert _node_and_directory(wire)[0] == node
    listed = wire.call(req(74), 0)
    assert (listed.error_code, listed.config_resources) == (0, [])  # no client-metrics resources
    wire.close()
