"""The APIs a single node answers for a cluster, and topic ids in OffsetCommit/OffsetFetch v10,
with requests written by the schema classes and sent over TCP to a real broker:
ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments, GetTelemetrySubscriptions
(error codes and messages as Kafka's controller and ClientMetricsManager give them), and the
v10 topic-id paths (unknown ids, "all topics" answers).
"""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode as EC
from wire_support import Wire, create_topics

ZERO = uuid.UUID(int=0)


def req(api_key: int, **fields):
    return registry.API[api_key].request(**fields)


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    create_topics(w, {"ops": {}}, partitions=2)
    yield w
    w.close()


def elect(wire, version, topics, election_type=0):
    TP = registry.API[43].request.TopicPartitions
    parts = None if topics is None else [TP(topic=t, partitions=ps) for t, ps in topics]
    return wire.call(req(43, election_type=election_type, topic_partitions=parts, timeout_ms=1000), version)


def test_elect_leaders_needs_no_election_on_one_node(wire):
    answer = elect(wire, 2, [("ops", [0, 1, 7]), ("nope", [0])], election_type=1)
    assert answer.error_code == 0
    rows = {(r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in answer.replica_election_results for p in r.partition_result}
    assert rows == {
        ("ops", 0): (EC.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("ops", 1): (EC.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("ops", 7): (EC.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as ops-7"),
        ("nope", 0): (EC.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope"),
    }
    # every partition (null): those that needed no election are left out, topics stay listed
    answer = elect(wire, 1, None)
    assert answer.error_code == 0
    assert {r.topic: r.partition_result for r in answer.replica_election_results}["ops"] == []
    # v0 has no election type: preferred
    (result,) = elect(wire, 0, [("ops", [1])]).replica_election_results
    assert [p.error_code for p in result.partition_result] == [EC.ELECTION_NOT_NEEDED]


def test_elect_leaders_unknown_election_type_is_an_invalid_request(wire):
    answer = elect(wire, 2, [("ops", [0])], election_type=5)
    assert (answer.error_code, answer.replica_election_results) == (EC.INVALID_REQUEST, [])


def test_alter_partition_reassignments_as_a_single_node_controller(wire):
    T = registry.API[45].request.ReassignableTopic
    P = T.ReassignablePartition
    answer = wire.call(req(45, timeout_ms=1000, allow_replication_factor_change=False, topics=[
        T(name="ops", partitions=[P(partition_index=0, replicas=[1]), P(partition_index=1, replicas=None),
                                  P(partition_index=0, replicas=[1, 2]), P(partition_index=1, replicas=[1, 1]),
                                  P(partition_index=1, replicas=[]), P(partition_index=9, replicas=[1])]),
        T(name="nope", partitions=[P(partition_index=0, replicas=[1])])]), 0)
    assert (answer.error_code, answer.error_message) == (0, None)
    rows = [(t.name, p.partition_index, p.error_code, p.error_message)
            for t in answer.responses for p in t.partitions]
    assert rows == [
        ("ops", 0, 0, None),                                     # [node.id]: what it already is
        ("ops", 1, EC.NO_REASSIGNMENT_IN_PROGRESS, None),        # cancel: nothing in progress
        ("ops", 0, EC.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 2, but no such broker is registered."),
        ("ops", 1, EC.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 1 more than once."),
        ("ops", 1, EC.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes an empty replica list."),
        ("ops", 9, EC.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition ops:9."),
        ("nope", 0, EC.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
    ]
    listed = wire.call(req(46, timeout_ms=1000, topics=[
        registry.API[46].request.ListPartitionReassignmentsTopics(name="ops", partition_indexes=[0, 1])]), 0)
    assert (listed.error_code, listed.topics) == (0, [])


def test_get_telemetry_subscriptions_subscribes_to_nothing(wire):
    first = wire.call(req(71, client_instance_id=ZERO), 0)
    assert first.error_code == 0 and first.client_instance_id not in (None, ZERO)
    assert first.requested_metrics == [] and first.push_interval_ms == 300000
    assert sorted(first.accepted_compression_types) == [1, 2, 3, 4]
    again = wire.call(req(71, client_instance_id=first.client_instance_id), 0)
    # the same instance keeps its id and subscription id (a function of both, as in Kafka)
    assert (again.client_instance_id, again.subscription_id) == (first.client_instance_id, first.subscription_id)
    other = wire.call(req(71, client_instance_id=ZERO), 0)
    assert other.client_instance_id != first.client_instance_id


def test_cluster_apis_need_their_cluster_acl(start_broker):
    """An authorizer with no ACL for the (anonymous) client: every cluster-level API of this
    group answers CLUSTER_AUTHORIZATION_FAILED where Kafka puts it, and changes nothing."""
    broker = start_broker(config={"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    w = Wire(broker.port)
    try:
        denied = EC.CLUSTER_AUTHORIZATION_FAILED
        answer = elect(w, 2, [("any", [0])])
        assert answer.error_code == denied
        assert [p.error_code for r in answer.replica_election_results for p in r.partition_result] == [denied]
        T = registry.API[45].request.ReassignableTopic
        answer = w.call(req(45, timeout_ms=1000, topics=[
            T(name="any", partitions=[T.ReassignablePartition(partition_index=0, replicas=[1])])]), 0)
        assert answer.error_code == denied and answer.responses[0].partitions[0].error_code == denied
        assert w.call(req(46, timeout_ms=1000, topics=None), 0).error_code == denied
        assert w.call(req(48, strict=False, components=[]), 1).error_code == denied
        E = registry.API[49].request.EntryData
        answer = w.call(req(49, validate_only=False, entries=[E(
            entity=[E.EntityData(entity_type="client-id", entity_name="x")],
            ops=[E.OpData(key="producer_byte_rate", value=1.0, remove=False)])]), 1)
        assert [e.error_code for e in answer.entries] == [denied]
        R = registry.API[44].request.AlterConfigsResource
        answer = w.call(req(44, validate_only=False, resources=[R(resource_type=4, resource_name="1", configs=[
            R.AlterableConfig(name="log.retention.ms", config_operation=0, value="1")])]), 1)
        assert answer.responses[0].error_code == denied
        D = registry.API[32].request.DescribeConfigsResource
        answer = w.call(req(32, resources=[D(resource_type=4, resource_name="1", configuration_keys=None)],
                            include_synonyms=False, include_documentation=False), 4)
        assert answer.results[0].error_code == denied
    finally:
        w.close()
    # nothing was stored: no dynamic broker configs, no quotas
    assert not (Path(broker.log_dir) / "kompakt-broker-configs.json").exists()
    assert not (Path(broker.log_dir) / "kompakt-client-quotas.json").exists()
