"""Every API Kompakt advertises, at every version it advertises, answers a real request.

The table walked is the handler table (`handlers/__init__.py` MODULES -> MIN_VERSION..MAX_VERSION),
checked first to equal the broker's own ApiVersions answer (less the modules that say
ADVERTISED = False, which are walked too), so an API another change adds joins the walk by itself. Each request is written by the schema class Kompakt decodes
with (kafka-python's, or ours where kafka-python has none) and sent over TCP to a real
`kompakt serve`; the answer must come back on the same connection, decode at that version with
not a byte missing or left over, and carry only the error codes a working broker gives for that
request (mostly NONE; e.g. ELECTION_NOT_NEEDED for ElectLeaders on one node, MEMBER_ID_REQUIRED
for a first JoinGroup from v4, UNSUPPORTED_VERSION for Produce v0-2, which Kafka 4 advertises
and refuses).

APIs without a request builder here (added later by other work) are walked with the schema's
default request and must not answer UNKNOWN_SERVER_ERROR, UNSUPPORTED_VERSION or
CORRUPT_MESSAGE anywhere; give them a builder to check more.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kompakt.broker.handlers import load_handlers, version_ranges
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.records import build_batch
from tests.integration.conftest import BrokerProcess
from wire_support import Wire, error_codes, field, heartbeat_request, req, sub, update_features_request

HANDLERS = load_handlers()
ADVERTISED = {key: (lo, hi) for key, lo, hi in version_ranges(HANDLERS)}
# what is served: the advertised table plus handlers that answer without being advertised
# (GetTelemetrySubscriptions, as on Kafka without a client-metrics plugin)
SERVED = {key: (m.MIN_VERSION, m.MAX_VERSION) for key, m in HANDLERS.items()}
BROKEN = {EC.UNKNOWN_SERVER_ERROR, EC.UNSUPPORTED_VERSION, EC.CORRUPT_MESSAGE}
ZERO = uuid.UUID(int=0)
TOPIC, NODE = "walk", 1
TOPIC_CONFIG, BROKER = 2, 4


def batch(n: int = 1) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(n):
        builder.append(timestamp=None, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    builder.close()
    return bytes(builder.buffer())


class World:
    """The connection and the state the builders lean on: topic `walk` (2 partitions, 3 records
    each), its id, group `walk-offsets` with a commit on walk-0, a client quota entity."""

    def __init__(self, broker: BrokerProcess):
        self.broker = broker
        self.wire = Wire(broker.port)
        self.create_topic(TOPIC, 2)
        self.create_topic("walk-alter", 1)
        P = sub(0, "TopicProduceData", "PartitionProduceData")
        for p in (0, 1):
            answer = self.wire.call(req(0, transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
                sub(0, "TopicProduceData")(name=TOPIC, partition_data=[P(index=p, records=batch(3))])]), 9)
            assert set(error_codes(answer)) == {0}
        meta = self.wire.call(req(3, topics=[sub(3, "MetadataRequestTopic")(name=TOPIC, topic_id=ZERO)],
                                  allow_auto_topic_creation=False), 12)
        self.topic_id = meta.topics[0].topic_id
        self.commit("walk-offsets", offset=2)
        request, _ = alter_client_quotas(self, 0)     # an entity for DescribeClientQuotas to find
        assert set(error_codes(self.wire.call(request, 0))) == {0}

    def create_topic(self, name: str, partitions: int = 1) -> None:
        answer = self.wire.call(req(19, topics=[sub(19, "CreatableTopic")(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False), 5)
        assert set(error_codes(answer)) == {0}, answer

    def commit(self, group: str, offset: int = 1) -> None:
        T = sub(8, "OffsetCommitRequestTopic")
        answer = self.wire.call(req(8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                    group_instance_id=None, topics=[T(name=TOPIC, partitions=[
                                        T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata="walk")])]), 8)
        assert set(error_codes(answer)) == {0}, answer

    def transaction(self, name: str) -> tuple[int, int]:
        """A transactional producer's (id, epoch), its coordinator found first as a client would."""
        found = self.wire.call(req(10, key_type=1, coordinator_keys=[name]), 4)
        assert set(error_codes(found)) == {0}, found
        answer = self.wire.call(req(22, transactional_id=name, transaction_timeout_ms=60000, producer_id=-1,
                                    producer_epoch=-1), 4)
        assert answer.error_code == 0, answer
        return answer.producer_id, answer.producer_epoch

    def add_partition(self, name: str, pid: int, epoch: int) -> None:
        answer = self.wire.call(req(24, v3_and_below_transactional_id=name, v3_and_below_producer_id=pid,
                                    v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                        field(24, "v3_and_below_topics")(name=TOPIC, partitions=[0])]), 3)
        assert set(error_codes(answer)) == {0}, answer

    def join(self, group: str, version: int = 5) -> tuple[str, int]:
        """A lone member joins `group` (the MEMBER_ID_REQUIRED round trip first from v4):
        (member id, generation)."""
        protocols = [sub(11, "JoinGroupRequestProtocol")(name="range", metadata=b"")]
        fields = dict(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                      group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None)
        answer = self.wire.call(req(11, member_id="", **fields), version)
        if answer.error_code == EC.MEMBER_ID_REQUIRED:
            answer = self.wire.call(req(11, member_id=answer.member_id, **fields), version)
        assert answer.error_code == 0, answer
        return answer.member_id, answer.generation_id

    def join_and_sync(self, group: str) -> tuple[str, int]:
        member, generation = self.join(group)
        answer = self.wire.call(req(14, group_id=group, generation_id=generation, member_id=member,
                                    group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                    assignments=[sub(14, "SyncGroupRequestAssignment")(
                                        member_id=member, assignment=b"")]), 5)
        assert answer.error_code == 0, answer
        return member, generation


# -- one builder per API: (world, version) -> (request, expected error codes[, check(response)]) --

def produce(w, v):
    T = sub(0, "TopicProduceData")
    topic = dict(topic_id=w.topic_id) if v >= 13 else dict(name=TOPIC)
    request = req(0, transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        T(partition_data=[T.PartitionProduceData(index=0, records=batch())], **topic)])
    # v0-2 are advertised, as Kafka 4 advertises them, and refused per partition (KIP-896)
    return request, {EC.UNSUPPORTED_VERSION} if v < 3 else {0}


def fetch(w, v):
    T = sub(1, "FetchTopic")
    topic = dict(topic_id=w.topic_id) if v >= 13 else dict(topic=TOPIC)
    request = req(1, cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                  isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                  topics=[T(partitions=[T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                         last_fetched_epoch=-1, log_start_offset=-1,
                                                         partition_max_bytes=1 << 20)], **topic)])
    return request, {0}, lambda r: len(r.responses[0].partitions[0].records) > 0


def list_offsets(w, v):
    T = sub(2, "ListOffsetsTopic")
    request = req(2, replica_id=-1, isolation_level=0, timeout_ms=5000, topics=[T(name=TOPIC, partitions=[
        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1)])])
    return request, {0}, lambda r: r.topics[0].partitions[0].offset >= 3


def metadata(w, v):
    request = req(3, topics=[sub(3, "MetadataRequestTopic")(name=TOPIC, topic_id=ZERO)],
                  allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                  include_topic_authorized_operations=False)
    return request, {0}, lambda r: [len(t.partitions) for t in r.topics] == [2]


def offset_commit(w, v):
    T = sub(8, "OffsetCommitRequestTopic")
    topic = dict(topic_id=w.topic_id) if v >= 10 else dict(name=TOPIC)
    request = req(8, group_id=f"walk-commit-{v}", generation_id_or_member_epoch=-1, member_id="",
                  group_instance_id=None, retention_time_ms=-1, topics=[T(partitions=[
                      T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                     commit_timestamp=-1, committed_metadata="m")], **topic)])
    return request, {0}, lambda r: len(r.topics[0].partitions) == 1


def offset_fetch(w, v):
    if v < 8:
        T = sub(9, "OffsetFetchRequestTopic")
        request = req(9, group_id="walk-offsets", topics=[T(name=TOPIC, partition_indexes=[0])],
                      require_stable=False)
        return request, {0}, lambda r: r.topics[0].partitions[0].committed_offset == 2
    G = sub(9, "OffsetFetchRequestGroup")
    topic = dict(topic_id=w.topic_id) if v >= 10 else dict(name=TOPIC)
    request = req(9, require_stable=False, groups=[G(group_id="walk-offsets", member_id=None, member_epoch=-1,
                                                     topics=[G.OffsetFetchRequestTopics(partition_indexes=[0],
                                                                                        **topic)])])
    return request, {0}, lambda r: r.groups[0].topics[0].partitions[0].committed_offset == 2


def find_coordinator(w, v):
    request = (req(10, key="walk-g", key_type=0) if v < 4
               else req(10, key_type=0, coordinator_keys=["walk-g"]))
    return request, {0}


def join_group(w, v):
    group = f"walk-join-{v}"
    protocols = [sub(11, "JoinGroupRequestProtocol")(name="range", metadata=b"")]
    fields = dict(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                  group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None)
    member = ""
    if v >= 4:   # the first join is answered MEMBER_ID_REQUIRED with the id to come back with
        first = w.wire.call(req(11, member_id="", **fields), v)
        assert first.error_code == EC.MEMBER_ID_REQUIRED, first
        member = first.member_id
    return req(11, member_id=member, **fields), {0}, lambda r: r.generation_id == 1


def heartbeat(w, v):
    member, generation = w.join_and_sync(f"walk-hb-{v}")
    return req(12, group_id=f"walk-hb-{v}", generation_id=generation, member_id=member,
               group_instance_id=None), {0}


def leave_group(w, v):
    group = f"walk-leave-{v}"
    member, _ = w.join_and_sync(group)
    if v < 3:
        return req(13, group_id=group, member_id=member), {0}
    M = sub(13, "MemberIdentity")
    return req(13, group_id=group, members=[M(member_id=member, group_instance_id=None, reason=None)]), {0}


def sync_group(w, v):
    group = f"walk-sync-{v}"
    member, generation = w.join(group)
    request = req(14, group_id=group, generation_id=generation, member_id=member, group_instance_id=None,
                  protocol_type="consumer", protocol_name="range",
                  assignments=[sub(14, "SyncGroupRequestAssignment")(member_id=member, assignment=b"")])
    return request, {0}


def describe_groups(w, v):
    return (req(15, groups=["walk-offsets"], include_authorized_operations=False), {0},
            lambda r: r.groups[0].group_id == "walk-offsets")


def list_groups(w, v):
    return req(16, states_filter=[], types_filter=[]), {0}, lambda r: any(
        g.group_id == "walk-offsets" for g in r.groups)


def api_versions(w, v):
    return req(18, client_software_name="wire-test", client_software_version="1"), {0}


def create_topics(w, v):
    T = sub(19, "CreatableTopic")
    return req(19, topics=[T(name=f"walk-ct-{v}", num_partitions=1, replication_factor=1, assignments=[],
                             configs=[])], timeout_ms=10000, validate_only=False), {0}


def delete_topics(w, v):
    name = f"walk-dt-{v}"
    w.create_topic(name)
    if v < 6:
        return req(20, topic_names=[name], timeout_ms=10000), {0}
    return req(20, topics=[sub(20, "DeleteTopicState")(name=name, topic_id=ZERO)], timeout_ms=10000), {0}


def delete_records(w, v):
    T = sub(21, "DeleteRecordsTopic")
    return req(21, topics=[T(name=TOPIC, partitions=[T.DeleteRecordsPartition(partition_index=1, offset=1)])],
               timeout_ms=10000), {0}, lambda r: r.topics[0].partitions[0].low_watermark == 1


def init_producer_id(w, v):
    return req(22, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), \
        {0}, lambda r: r.producer_id >= 0


def offset_for_leader_epoch(w, v):
    T = sub(23, "OffsetForLeaderTopic")
    return req(23, replica_id=-1, topics=[T(topic=TOPIC, partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]), {0}


def describe_configs(w, v):
    R = sub(32, "DescribeConfigsResource")
    return req(32, resources=[R(resource_type=TOPIC_CONFIG, resource_name=TOPIC, configuration_keys=None)],
               include_synonyms=True, include_documentation=False), {0}, lambda r: len(r.results[0].configs) > 10


def alter_configs(w, v):
    R = sub(33, "AlterConfigsResource")
    return req(33, resources=[R(resource_type=TOPIC_CONFIG, resource_name="walk-alter", configs=[
        R.AlterableConfig(name="retention.ms", value=str(3_600_000 + v))])], validate_only=False), {0}


def create_partitions(w, v):
    name = f"walk-cp-{v}"
    w.create_topic(name)
    return req(37, topics=[sub(37, "CreatePartitionsTopic")(name=name, count=2, assignments=None)],
               timeout_ms=10000, validate_only=False), {0}


def delete_groups(w, v):
    group = f"walk-dg-{v}"
    w.commit(group)
    return req(42, groups_names=[group]), {0}


def elect_leaders(w, v):
    # one node leads every partition: no election is ever needed (Kafka's answer, per partition)
    request = req(43, election_type=0, timeout_ms=10000,
                  topic_partitions=[sub(43, "TopicPartitions")(topic=TOPIC, partitions=[0, 1])])
    return request, {0, EC.ELECTION_NOT_NEEDED}, lambda r: [p.error_code for p in r.replica_election_results[
        0].partition_result] == [EC.ELECTION_NOT_NEEDED] * 2


def incremental_alter_configs(w, v):
    R = sub(44, "AlterConfigsResource")
    return req(44, resources=[R(resource_type=TOPIC_CONFIG, resource_name="walk-alter", configs=[
        R.AlterableConfig(name="retention.ms", config_operation=0, value=str(7_200_000 + v))])],
        validate_only=False), {0}


def alter_partition_reassignments(w, v):
    T = sub(45, "ReassignableTopic")
    return req(45, timeout_ms=10000, allow_replication_factor_change=True, topics=[T(name=TOPIC, partitions=[
        T.ReassignablePartition(partition_index=0, replicas=[NODE])])]), {0}


def list_partition_reassignments(w, v):
    return req(46, timeout_ms=10000, topics=None), {0}, lambda r: r.topics == []


def offset_delete(w, v):
    group = f"walk-od-{v}"
    w.commit(group)
    T = sub(47, "OffsetDeleteRequestTopic")
    return req(47, group_id=group, topics=[T(name=TOPIC, partitions=[
        T.OffsetDeleteRequestPartition(partition_index=0)])]), {0}


def describe_client_quotas(w, v):
    C = sub(48, "ComponentData")
    return req(48, strict=False, components=[C(entity_type="client-id", match_type=0, match="walk-q-0")]), {0}, \
        lambda r: [[e.entity_name for e in x.entity] for x in r.entries] == [["walk-q-0"]]


def alter_client_quotas(w, v):
    E = sub(49, "EntryData")
    return req(49, validate_only=False, entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name=f"walk-q-{v}")],
        ops=[E.OpData(key="producer_byte_rate", value=1e9, remove=False)])]), {0}


def sasl_handshake(w, v):
    # the walk's listener is PLAINTEXT: Kafka answers ILLEGAL_SASL_STATE to SASL there
    return req(17, mechanism="PLAIN"), {EC.ILLEGAL_SASL_STATE}


def sasl_authenticate(w, v):
    return req(36, auth_bytes=b"\x00user\x00secret"), {EC.ILLEGAL_SASL_STATE}


def add_partitions_to_txn(w, v):
    name = f"walk-txn-apt-{v}"
    pid, epoch = w.transaction(name)
    if v <= 3:
        return req(24, v3_and_below_transactional_id=name, v3_and_below_producer_id=pid,
                   v3_and_below_producer_epoch=epoch,
                   v3_and_below_topics=[field(24, "v3_and_below_topics")(name=TOPIC, partitions=[0, 1])]), {0}
    # v4+ (brokers verifying a transaction): verify_only asks whether the partitions are in it: yes
    w.add_partition(name, pid, epoch)
    T = field(24, "transactions")
    return req(24, transactions=[T(transactional_id=name, producer_id=pid, producer_epoch=epoch, verify_only=True,
                                   topics=[field(24, "transactions", "topics")(name=TOPIC, partitions=[0])])]), {0}


def add_offsets_to_txn(w, v):
    name = f"walk-txn-aot-{v}"
    pid, epoch = w.transaction(name)
    return req(25, transactional_id=name, producer_id=pid, producer_epoch=epoch, group_id="walk-txn-group"), {0}


def end_txn(w, v):
    name = f"walk-txn-end-{v}"
    pid, epoch = w.transaction(name)
    w.add_partition(name, pid, epoch)
    # v5 (transaction version 2) answers the bumped epoch to use next; v0-4 keep it (-1, -1)
    after = (pid, epoch + 1) if v >= 5 else (-1, -1)
    return (req(26, transactional_id=name, producer_id=pid, producer_epoch=epoch, committed=True), {0},
            lambda r: v < 5 or (r.producer_id, r.producer_epoch) == after)


def txn_offset_commit(w, v):
    name = f"walk-txn-toc-{v}"
    pid, epoch = w.transaction(name)
    group = f"walk-txn-group-{v}"
    answer = w.wire.call(req(25, transactional_id=name, producer_id=pid, producer_epoch=epoch, group_id=group), 3)
    assert answer.error_code == 0, answer
    T = field(28, "topics")
    return req(28, transactional_id=name, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
               member_id="", group_instance_id=None, topics=[T(name=TOPIC, partitions=[
                   field(28, "topics", "partitions")(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                     committed_metadata="")])]), {0}


ANY = 1


def describe_acls(w, v):
    # no authorizer configured: Kafka answers SECURITY_DISABLED
    return req(29, resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY, principal_filter=None,
               host_filter=None, operation=ANY, permission_type=ANY), {EC.SECURITY_DISABLED}


def create_acls(w, v):
    C = field(30, "creations")
    return req(30, creations=[C(resource_type=2, resource_name=TOPIC, resource_pattern_type=3, principal="User:walk",
                                host="*", operation=3, permission_type=3)]), {EC.SECURITY_DISABLED}


def delete_acls(w, v):
    F = field(31, "filters")
    return req(31, filters=[F(resource_type_filter=2, resource_name_filter=TOPIC, pattern_type_filter=3,
                              principal_filter="User:walk", host_filter=None, operation=ANY,
                              permission_type=ANY)]), {EC.SECURITY_DISABLED}


def describe_user_scram_credentials(w, v):
    return req(50, users=None), {0}


def alter_user_scram_credentials(w, v):
    U = field(51, "upsertions")
    return req(51, deletions=[], upsertions=[U(name=f"walk-user-{v}", mechanism=1, iterations=4096, salt=b"s" * 16,
                                               salted_password=b"p" * 32)]), {0}


def describe_producers(w, v):
    T = field(61, "topics")
    return req(61, topics=[T(name=TOPIC, partition_indexes=[0])]), {0}


def describe_transactions(w, v):
    return req(65, transactional_ids=["walk-txn-aot-0"]), {0}


def list_transactions(w, v):
    return req(66, state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=None), {0}


def describe_log_dirs(w, v):
    T = field(35, "topics")
    request = req(35, topics=[T(topic=TOPIC, partitions=[0, 1])])
    return request, {0}, lambda r: [
        sorted((t.name, p.partition_index, p.partition_size > 0) for t in d.topics for p in t.partitions)
        for d in r.results] == [[(TOPIC, 0, True), (TOPIC, 1, True)]]


def alter_replica_log_dirs(w, v):
    # to the dir it is in already: a no-op success (Kafka's maybeCreateFutureReplica)
    D = sub(34, "AlterReplicaLogDir")
    T = sub(34, "AlterReplicaLogDir", "AlterReplicaLogDirTopic")
    request = req(34, dirs=[D(path=os.path.abspath(w.broker.log_dir), topics=[T(name=TOPIC, partitions=[0])])])
    return request, {0}, lambda r: [(t.topic_name, [p.partition_index for p in t.partitions])
                                    for t in r.results] == [(TOPIC, [0])]


def describe_cluster(w, v):
    return req(60, include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False), \
        {0}, lambda r: [b.broker_id for b in r.brokers] == [NODE]


def describe_quorum(w, v):
    t = sub(55, "TopicData")
    return req(55, topics=[t(topic_name="__cluster_metadata", partitions=[t.PartitionData(partition_index=0)])]), \
        {0}, lambda r: [v.replica_id for v in r.topics[0].partitions[0].current_voters] == [NODE]


def update_features(w, v):
    # group.version to the level it has (no change of level); validate only where the version has it
    request = update_features_request([("group.version", 1, 1)], v, validate_only=True, timeout_ms=10000)
    return request, {0}, lambda r: r.error_message is None and (
        v >= 2 or [x.feature for x in r.results] == ["group.version"])


def get_telemetry_subscriptions(w, v):
    # no telemetry: a client instance id is assigned and no metric is requested
    return req(71, client_instance_id=ZERO), {0}, lambda r: (r.requested_metrics == []
                                                             and r.client_instance_id not in (None, ZERO))


def consumer_group_heartbeat(w, v):
    request = heartbeat_request(f"walk-cg-{v}", f"walk-member-{v}", 0, [TOPIC], rebalance_timeout_ms=10000)
    return request, {0}, lambda r: (
        r.member_epoch == 1 and sorted(r.assignment.topic_partitions[0].partitions) == [0, 1])


def consumer_group_describe(w, v):
    group = f"walk-cgd-{v}"
    joined = w.wire.call(heartbeat_request(group, "m", 0, [TOPIC], rebalance_timeout_ms=10000), 1)
    assert joined.error_code == 0, joined
    return req(69, group_ids=[group], include_authorized_operations=False), {0}, lambda r: (
        r.groups[0].group_state == "Stable" and [m.member_id for m in r.groups[0].members] == ["m"])


def describe_topic_partitions(w, v):
    return req(75, topics=[sub(75, "TopicRequest")(name=TOPIC)], response_partition_limit=100, cursor=None), \
        {0}, lambda r: len(r.topics[0].partitions) == 2


BUILDERS = {
    0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch,
    10: find_coordinator, 11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group,
    15: describe_groups, 16: list_groups, 18: api_versions, 19: create_topics, 20: delete_topics,
    21: delete_records, 22: init_producer_id, 23: offset_for_leader_epoch, 32: describe_configs,
    33: alter_configs, 37: create_partitions, 42: delete_groups, 43: elect_leaders,
    44: incremental_alter_configs, 45: alter_partition_reassignments, 46: list_partition_reassignments,
    34: alter_replica_log_dirs, 35: describe_log_dirs, 47: offset_delete, 48: describe_client_quotas,
    49: alter_client_quotas, 55: describe_quorum, 57: update_features, 60: describe_cluster,
    71: get_telemetry_subscriptions, 75: describe_topic_partitions,
    # security
    17: sasl_handshake, 36: sasl_authenticate, 29: describe_acls, 30: create_acls, 31: delete_acls,
    50: describe_user_scram_credentials, 51: alter_user_scram_credentials,
    # transactions
    24: add_partitions_to_txn, 25: add_offsets_to_txn, 26: end_txn, 28: txn_offset_commit,
    61: describe_producers, 65: describe_transactions, 66: list_transactions,
    # consumer groups (KIP-848)
    68: consumer_group_heartbeat, 69: consumer_group_describe,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("api-walk"), {
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
    broker.start()
    w = World(broker)
    yield w
    w.wire.close()
    broker.stop()


def test_api_versions_advertises_exactly_the_handler_table(world):
    answer = world.wire.call(req(18, client_software_name="wire-test", client_software_version="1"), 3)
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == ADVERTISED


@pytest.mark.parametrize("key", sorted(SERVED), ids=lambda k: registry.API[k].name)
def test_every_advertised_version_answers_a_real_request(world, key):
    lo, hi = SERVED[key]
    builder = BUILDERS.get(key)
    for version in range(lo, hi + 1):
        if builder is None:
            response = world.wire.call(registry.API[key].request(), version)
            assert not BROKEN & set(error_codes(response)), (registry.API[key].name, version, response)
            continue
        request, expected, *check = builder(world, version)
        response = world.wire.call(request, version)
        codes = set(error_codes(response))
        assert codes <= expected, f"{registry.API[key].name} v{version}: {codes - expected} in {response}"
        if check:
            assert check[0](response), f"{registry.API[key].name} v{version}: {response}"


def tv2_produce(w, name, pid, epoch, seq, partition, version=12):
    """A Produce of one transactional batch (no AddPartitionsToTxn before it): its partition code."""
    batch = build_batch([(b"k", b"tv2-%d" % seq)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          is_transactional=True)
    T = sub(0, "TopicProduceData")
    answer = w.wire.call(req(0, transactional_id=name, acks=-1, timeout_ms=10000, topic_data=[
        T(name="walk-tv2", partition_data=[T.PartitionProduceData(index=partition, records=batch)])]), version)
    return answer.responses[0].partition_responses[0].error_code


def test_transaction_version_2_on_the_wire(world):
    """A client of transaction version 2 (KIP-890 part 2), request by request: Produce v12 to a
    partition never added joins it to the transaction; EndTxn v5 answers the bumped epoch, the
    finished transaction's epoch is fenced, a retry of the end gets the same answer."""
    w = world
    w.create_topic("walk-tv2", 2)
    name = "walk-tv2-txn"
    pid, epoch = w.transaction(name)
    assert tv2_produce(w, name, pid, epoch, 0, partition=1) == 0
    described = w.wire.call(req(65, transactional_ids=[name]), 0).transaction_states[0]
    assert (described.transaction_state, [(t.topic, t.partitions) for t in described.topics]) == (
        "Ongoing", [("walk-tv2", [1])])
    # Produce v11 only asks (KIP-890 part 1): walk-tv2-0 was never added
    assert tv2_produce(w, name, pid, epoch, 0, partition=0, version=11) == EC.TRANSACTION_ABORTABLE
    end = req(26, transactional_id=name, producer_id=pid, producer_epoch=epoch, committed=True)
    answer = w.wire.call(end, 5)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, pid, epoch + 1)
    answer = w.wire.call(end, 5)                                    # the client retries: same answer
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, pid, epoch + 1)
    assert tv2_produce(w, name, pid, epoch, 1, partition=1) == EC.INVALID_PRODUCER_EPOCH
    assert tv2_produce(w, name, pid, epoch + 1, 0, partition=1) == 0     # the next transaction
    answer = w.wire.call(req(26, transactional_id=name, producer_id=pid, producer_epoch=epoch + 1,
                             committed=False), 5)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, pid, epoch + 2)
    described = w.wire.call(req(65, transactional_ids=[name]), 0).transaction_states[0]
    assert (described.transaction_state, described.producer_epoch) == ("CompleteAbort", epoch + 2)


def test_compatibility_doc_lists_every_served_api_and_version_range():
    """docs/compatibility.md's "APIs and versions served" table is the advertised table."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text()
    section = doc.split("## APIs and versions served", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            lo, _, hi = cells[2].partition("-")
            rows[int(cells[0])] = (cells[1], int(lo), int(hi or lo))
    wanted = {key: (registry.API[key].name, lo, hi) for key, (lo, hi) in ADVERTISED.items()}
    missing = {k: v for k, v in wanted.items() if rows.get(k) != v}
    assert rows == wanted, (f"docs/compatibility.md 'APIs and versions served' must list what ApiVersions "
                            f"advertises; add or correct rows for {missing}, remove rows for "
                            f"{sorted(set(rows) - set(wanted))}")
