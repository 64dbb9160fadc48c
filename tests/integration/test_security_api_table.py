"""Kafka's authorization table, API by API, on the wire: one broker with the StandardAuthorizer,
raw requests (kompakt.protocol's schema classes) from two SASL/PLAIN principals.

* eve has no ACL: every topic, group and transactional-id API answers its
  TOPIC_/GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED where Kafka puts it (a cluster API
  CLUSTER_AUTHORIZATION_FAILED), and changes nothing;
* gina has DESCRIBE on the topic, the group and the transactional id (and on the topics starting
  `auto-`): the APIs Kafka lets DESCRIBE through pass the check, those needing READ, WRITE,
  DELETE, ALTER, CREATE or the *_CONFIGS operations still fail, so each handler checks exactly
  the operation Kafka's table names (KafkaApis, ControllerApis; "Operations and Resources on
  Protocols" in Kafka's documentation).
"""
from __future__ import annotations

import uuid

import pytest

from broker_process import BrokerProcess
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.records import build_batch
from wire_support import Wire, field, req, sub

TOPIC, GROUP, TXN = "tab", "tab-group", "tab-txn"
TOPIC_DENIED, GROUP_DENIED, TXN_DENIED, CLUSTER_DENIED = (EC.TOPIC_AUTHORIZATION_FAILED, EC.GROUP_AUTHORIZATION_FAILED,
                                                          EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                                          EC.CLUSTER_AUTHORIZATION_FAILED)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_eve="eve-pw" user_gina="gina-pw";')
ALLOW, LITERAL, PREFIXED = 3, 3, 4
RES_TOPIC, RES_GROUP, RES_CLUSTER, RES_TXN = 2, 3, 4, 5
OP_DESCRIBE = 8
ZERO = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("security-api-table"), {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "num.partitions": "1", "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
    })
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    proc.start()
    sasl_port = proc.ports["SASL_PLAINTEXT"]
    admin = login(sasl_port, "admin")
    T = sub(19, "CreatableTopic")
    created = admin.call(req(19, topics=[T(name=TOPIC, num_partitions=1, replication_factor=1, assignments=[],
                                           configs=[])], timeout_ms=10000, validate_only=False), 7)
    assert created.topics[0].error_code == 0
    assert all(code == 0 for code in codes(admin.call(produce(), 9)))
    assert codes(admin.call(commit(), 9)) == [0]
    C = field(30, "creations")
    acls = [C(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal="User:gina",
              host="*", operation=OP_DESCRIBE, permission_type=ALLOW)
            for rtype, name, pattern in ((RES_TOPIC, TOPIC, LITERAL), (RES_TOPIC, "auto-", PREFIXED),
                                         (RES_GROUP, GROUP, LITERAL), (RES_TXN, TXN, LITERAL))]
    assert [r.error_code for r in admin.call(req(30, creations=acls), 3).results] == [0] * 4
    admin.close()
    yield proc, sasl_port
    proc.kill()


def login(port: int, user: str) -> Wire:
    w = Wire(port)
    w.plain_login(user, f"{user}-pw")
    return w


def codes(response) -> list[int]:
    from wire_support import error_codes
    return error_codes(response)


# -- requests (name -> (request, version)) and the error code that carries the authorization answer ----------

def produce(txn=None):
    """A plain batch, or with `txn` a transactional one (Kafka checks WRITE on the request's
    transactional id only for transactional records)."""
    T = sub(0, "TopicProduceData")
    records = (build_batch([(None, b"x")]) if txn is None else
               build_batch([(None, b"x")], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True))
    return req(0, transactional_id=txn, acks=1, timeout_ms=5000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=records)])])


def commit():
    T = sub(8, "OffsetCommitRequestTopic")
    return req(8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               retention_time_ms=-1, topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
                   partition_index=0, committed_offset=1, committed_leader_epoch=-1, commit_timestamp=-1,
                   committed_metadata="")])])


def fetch():
    T = sub(1, "FetchTopic")
    return req(1, cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[T(topic=TOPIC, partitions=[
                   T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                    log_start_offset=-1, partition_max_bytes=1 << 20)])])


def metadata(name, auto=False):
    return req(3, topics=[sub(3, "MetadataRequestTopic")(name=name, topic_id=ZERO)], allow_auto_topic_creation=auto,
               include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def join():
    return req(11, group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
               group_instance_id=None, protocol_type="consumer",
               protocols=[sub(11, "JoinGroupRequestProtocol")(name="range", metadata=b"")], reason=None)


def offset_fetch():
    G = sub(9, "OffsetFetchRequestGroup")
    return req(9, require_stable=False, groups=[G(group_id=GROUP, member_id=None, member_epoch=-1, topics=[
        G.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])])


def topic_config(api_key):
    R = sub(api_key, "DescribeConfigsResource" if api_key == 32 else "AlterConfigsResource")
    if api_key == 32:
        return req(32, resources=[R(resource_type=2, resource_name=TOPIC, configuration_keys=None)],
                   include_synonyms=False, include_documentation=False)
    return req(44, resources=[R(resource_type=2, resource_name=TOPIC, configs=[R.AlterableConfig(
        name="retention.ms", config_operation=0, value="3600000")])], validate_only=False)


def txn_offset_commit():
    T = field(28, "topics")
    return req(28, transactional_id=TXN, group_id=GROUP, producer_id=1, producer_epoch=0, generation_id=-1,
               member_id="", group_instance_id=None, topics=[T(name=TOPIC, partitions=[field(28, "topics", "partitions")(
                   partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])


def acl_filter():
    return dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                host_filter=None, operation=1, permission_type=1)


# (request builder, version, the answer's authorization-relevant code, eve expects, gina expects)
TABLE = {
    "Produce": (produce, 9, lambda r: r.responses[0].partition_responses[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "Produce (transactional)": (lambda: produce(TXN), 9,
                                lambda r: r.responses[0].partition_responses[0].error_code, TXN_DENIED, TXN_DENIED),
    "Fetch": (fetch, 12, lambda r: r.responses[0].partitions[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "ListOffsets": (lambda: req(2, replica_id=-1, isolation_level=0, timeout_ms=5000, topics=[
        sub(2, "ListOffsetsTopic")(name=TOPIC, partitions=[sub(2, "ListOffsetsTopic", "ListOffsetsPartition")(
            partition_index=0, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1)])]), 7,
        lambda r: r.topics[0].partitions[0].error_code, TOPIC_DENIED, 0),
    "Metadata": (lambda: metadata(TOPIC), 12, lambda r: r.topics[0].error_code, TOPIC_DENIED, 0),
    "Metadata (auto-create)": (lambda: metadata("auto-x", auto=True), 12, lambda r: r.topics[0].error_code,
                               TOPIC_DENIED, TOPIC_DENIED),
    "OffsetForLeaderEpoch": (lambda: req(23, replica_id=-1, topics=[sub(23, "OffsetForLeaderTopic")(
        topic=TOPIC, partitions=[sub(23, "OffsetForLeaderTopic", "OffsetForLeaderPartition")(
            partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4,
        lambda r: r.topics[0].partitions[0].error_code, TOPIC_DENIED, 0),
    "DescribeTopicPartitions": (lambda: req(75, topics=[sub(75, "TopicRequest")(name=TOPIC)],
                                            response_partition_limit=10, cursor=None), 0,
                                lambda r: r.topics[0].error_code, TOPIC_DENIED, 0),
    "DescribeProducers": (lambda: req(61, topics=[field(61, "topics")(name=TOPIC, partition_indexes=[0])]), 0,
                          lambda r: r.topics[0].partitions[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "DeleteRecords": (lambda: req(21, topics=[sub(21, "DeleteRecordsTopic")(name=TOPIC, partitions=[
        sub(21, "DeleteRecordsTopic", "DeleteRecordsPartition")(partition_index=0, offset=0)])], timeout_ms=5000), 2,
        lambda r: r.topics[0].partitions[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "CreatePartitions": (lambda: req(37, topics=[sub(37, "CreatePartitionsTopic")(name=TOPIC, count=2,
                                                                                  assignments=None)],
                                     timeout_ms=5000, validate_only=True), 3,
                         lambda r: r.results[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "DescribeConfigs (topic)": (lambda: topic_config(32), 4, lambda r: r.results[0].error_code,
                                TOPIC_DENIED, TOPIC_DENIED),
    "IncrementalAlterConfigs (topic)": (lambda: topic_config(44), 1, lambda r: r.responses[0].error_code,
                                        TOPIC_DENIED, TOPIC_DENIED),
    "CreateTopics": (lambda: req(19, topics=[sub(19, "CreatableTopic")(name="auto-new", num_partitions=1,
                                                                       replication_factor=1, assignments=[],
                                                                       configs=[])],
                                 timeout_ms=5000, validate_only=True), 7,
                     lambda r: r.topics[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "DeleteTopics": (lambda: req(20, topics=[sub(20, "DeleteTopicState")(name=TOPIC, topic_id=ZERO)],
                                 timeout_ms=5000), 6, lambda r: r.responses[0].error_code, TOPIC_DENIED, TOPIC_DENIED),
    "OffsetCommit": (commit, 9, lambda r: r.topics[0].partitions[0].error_code, GROUP_DENIED, GROUP_DENIED),
    "OffsetFetch": (offset_fetch, 9, lambda r: r.groups[0].error_code, GROUP_DENIED, 0),
    "FindCoordinator (group)": (lambda: req(10, key_type=0, coordinator_keys=[GROUP]), 4,
                                lambda r: r.coordinators[0].error_code, GROUP_DENIED, 0),
    "FindCoordinator (transaction)": (lambda: req(10, key_type=1, coordinator_keys=[TXN]), 4,
                                      lambda r: r.coordinators[0].error_code, TXN_DENIED, 0),
    "JoinGroup": (join, 9, lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "Heartbeat": (lambda: req(12, group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None), 4,
                  lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "SyncGroup": (lambda: req(14, group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None,
                              protocol_type="consumer", protocol_name="range", assignments=[]), 5,
                  lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "LeaveGroup": (lambda: req(13, group_id=GROUP, members=[sub(13, "MemberIdentity")(
        member_id="m", group_instance_id=None, reason=None)]), 5, lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "DescribeGroups": (lambda: req(15, groups=[GROUP], include_authorized_operations=False), 5,
                       lambda r: r.groups[0].error_code, GROUP_DENIED, 0),
    "DeleteGroups": (lambda: req(42, groups_names=[GROUP]), 2, lambda r: r.results[0].error_code,
                     GROUP_DENIED, GROUP_DENIED),
    "OffsetDelete": (lambda: req(47, group_id=GROUP, topics=[sub(47, "OffsetDeleteRequestTopic")(
        name=TOPIC, partitions=[sub(47, "OffsetDeleteRequestTopic", "OffsetDeleteRequestPartition")(
            partition_index=0)])]), 0, lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "ConsumerGroupHeartbeat": (lambda: req(68, group_id=GROUP + "-848", member_id="m", member_epoch=0,
                                           instance_id=None, rack_id=None, rebalance_timeout_ms=10000,
                                           subscribed_topic_names=[TOPIC], subscribed_topic_regex=None,
                                           server_assignor=None, topic_partitions=[]), 1,
                               lambda r: r.error_code, GROUP_DENIED, GROUP_DENIED),
    "InitProducerId (transactional)": (lambda: req(22, transactional_id=TXN, transaction_timeout_ms=60000,
                                                   producer_id=-1, producer_epoch=-1), 5,
                                       lambda r: r.error_code, TXN_DENIED, TXN_DENIED),
    "InitProducerId (idempotent)": (lambda: req(22, transactional_id=None, transaction_timeout_ms=60000,
                                                producer_id=-1, producer_epoch=-1), 5,
                                    lambda r: r.error_code, CLUSTER_DENIED, CLUSTER_DENIED),
    "AddPartitionsToTxn": (lambda: req(24, v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1,
                                       v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                           field(24, "v3_and_below_topics")(name=TOPIC, partitions=[0])]), 3,
                           lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
                           TXN_DENIED, TXN_DENIED),
    "AddOffsetsToTxn": (lambda: req(25, transactional_id=TXN, producer_id=1, producer_epoch=0, group_id=GROUP), 3,
                        lambda r: r.error_code, TXN_DENIED, TXN_DENIED),
    "EndTxn": (lambda: req(26, transactional_id=TXN, producer_id=1, producer_epoch=0, committed=True), 3,
               lambda r: r.error_code, TXN_DENIED, TXN_DENIED),
    "TxnOffsetCommit": (txn_offset_commit, 3, lambda r: r.topics[0].partitions[0].error_code, TXN_DENIED, TXN_DENIED),
    "DescribeTransactions": (lambda: req(65, transactional_ids=[TXN]), 0,
                             lambda r: r.transaction_states[0].error_code, TXN_DENIED, EC.TRANSACTIONAL_ID_NOT_FOUND),
    "DescribeAcls": (lambda: req(29, **acl_filter()), 3, lambda r: r.error_code, CLUSTER_DENIED, CLUSTER_DENIED),
    "AlterReplicaLogDirs": (lambda: req(34, dirs=[sub(34, "AlterReplicaLogDir")(path="/nowhere", topics=[
        sub(34, "AlterReplicaLogDir", "AlterReplicaLogDirTopic")(name=TOPIC, partitions=[0])])]), 2,
                            lambda r: r.results[0].partitions[0].error_code, CLUSTER_DENIED, CLUSTER_DENIED),
    "UpdateFeatures": (lambda: req(57, timeout_ms=10000, validate_only=False, feature_updates=[
        sub(57, "FeatureUpdateKey")(feature="group.version", max_version_level=0, upgrade_type=2)]), 1,
                       lambda r: r.error_code, CLUSTER_DENIED, CLUSTER_DENIED),
    "DeleteAcls": (lambda: req(31, filters=[field(31, "filters")(**acl_filter())]), 3,
                   lambda r: r.filter_results[0].error_code, CLUSTER_DENIED, CLUSTER_DENIED),
}


@pytest.mark.parametrize("principal", ["eve", "gina"])
def test_each_api_checks_the_operation_kafkas_table_names(table, principal):
    proc, port = table
    w = login(port, principal)
    try:
        got, want = {}, {}
        for name, (build, version, code_of, eve, gina) in TABLE.items():
            got[name] = int(code_of(w.call(build(), version)))
            want[name] = eve if principal == "eve" else gina
        mismatched = {n: (EC(got[n]).name, EC(want[n]).name) for n in TABLE if got[n] != want[n]}
        assert not mismatched, f"{principal}: (answered, Kafka's) {mismatched}"
        groups = [g.group_id for g in w.call(req(16, states_filter=[], types_filter=[]), 5).groups]
        assert (GROUP in groups) == (principal == "gina")          # ListGroups lists describable groups only
    finally:
        w.close()
    admin = login(port, "admin")
    try:                                                       # nothing was changed or created
        md = admin.call(req(3, topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False), 12)
        assert sorted(t.name for t in md.topics if not t.is_internal) == [TOPIC]
        assert len(md.topics[[t.name for t in md.topics].index(TOPIC)].partitions) == 1
        fetched = admin.call(offset_fetch(), 9)
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 1
    finally:
        admin.close()


def _cluster_acl(admin: Wire, user: str, operation: int, create: bool) -> None:
    """Create (or delete) an ALLOW of `operation` on the cluster for `user`."""
    acl = dict(resource_type=RES_CLUSTER, resource_name="kafka-cluster", principal=f"User:{user}", host="*",
               operation=operation, permission_type=ALLOW)
    if create:
        C = field(30, "creations")
        assert [r.error_code for r in admin.call(req(30, creations=[C(resource_pattern_type=LITERAL, **acl)]),
                                                 3).results] == [0]
        return
    F = field(31, "filters")
    deleted = admin.call(req(31, filters=[F(resource_type_filter=RES_CLUSTER, resource_name_filter="kafka-cluster",
                                            pattern_type_filter=LITERAL, principal_filter=acl["principal"],
                                            host_filter="*", operation=operation, permission_type=ALLOW)]), 3)
    assert [len(r.matching_acls) for r in deleted.filter_results] == [1]


def test_offset_for_leader_epoch_accepts_cluster_action(table):
    """Kafka's handleOffsetForLeaderEpochRequest: CLUSTER_ACTION on the cluster (a broker's
    right; the API began inter-broker) lets every topic through, else DESCRIBE per topic (KIP-320)."""
    _, port = table
    admin = login(port, "admin")
    build, version, code_of, eve_code, _ = TABLE["OffsetForLeaderEpoch"]
    eve = login(port, "eve")
    try:
        assert code_of(eve.call(build(), version)) == eve_code == TOPIC_DENIED
        _cluster_acl(admin, "eve", 9, create=True)                       # CLUSTER_ACTION
        try:
            assert code_of(eve.call(build(), version)) == 0
        finally:
            _cluster_acl(admin, "eve", 9, create=False)
    finally:
        eve.close()
        admin.close()


def test_metadata_cluster_operations_need_describe_on_the_cluster(table):
    """Metadata v8-10 fills the cluster's authorized operations only for a principal with DESCRIBE
    on the cluster, else 0 (Kafka's handleTopicMetadataRequest), as DescribeCluster does: gina,
    given IDEMPOTENT_WRITE on the cluster but not DESCRIBE, must not learn her cluster rights here."""
    _, port = table
    admin = login(port, "admin")
    _cluster_acl(admin, "gina", 12, create=True)                        # IDEMPOTENT_WRITE
    try:
        gina = login(port, "gina")
        try:
            md = gina.call(req(3, topics=[], allow_auto_topic_creation=False,
                               include_cluster_authorized_operations=True,
                               include_topic_authorized_operations=False), 10)
            assert not md.authorized_operations, md.authorized_operations
        finally:
            gina.close()
        md = admin.call(req(3, topics=[], allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                            include_topic_authorized_operations=False), 10)
        assert OP_DESCRIBE in md.authorized_operations and 12 in md.authorized_operations   # a super user: all
    finally:
        _cluster_acl(admin, "gina", 12, create=False)
        admin.close()


def test_find_coordinator_share_keys(table):
    """Kafka 4's KafkaApis.getCoordinator for key type SHARE (2): before v6 INVALID_REQUEST; at v6
    CLUSTER_ACTION on the cluster first (authorizeClusterOperation throws: every key of the request
    answers CLUSTER_AUTHORIZATION_FAILED with Errors' message), then INVALID_REQUEST as no share
    coordinator runs (share groups off: BrokerServer.createShareCoordinator gives None)."""
    _, port = table
    keys = ["share-g:AAAAAAAAAAAAAAAAAAAAAA:0", "other"]
    admin, eve = login(port, "admin"), login(port, "eve")

    def ask(w, version):
        if version < 4:
            r = w.call(req(10, key=keys[0], key_type=2), version)
            return [(r.error_code, r.node_id, r.error_message)]
        r = w.call(req(10, key_type=2, coordinator_keys=keys), version)
        return [(c.error_code, c.node_id, c.error_message) for c in r.coordinators]
    try:
        invalid = (EC.INVALID_REQUEST, -1, None)
        assert ask(eve, 6) == [(CLUSTER_DENIED, -1, "Cluster authorization failed.")] * 2
        assert ask(eve, 5) == [invalid] * 2                          # the version check comes first
        [(code, node, _)] = ask(eve, 3)
        assert (code, node) == (EC.INVALID_REQUEST, -1)
        assert ask(admin, 6) == [invalid] * 2
        _cluster_acl(admin, "eve", 9, create=True)                   # CLUSTER_ACTION
        try:
            assert ask(eve, 6) == [invalid] * 2
        finally:
            _cluster_acl(admin, "eve", 9, create=False)
    finally:
        eve.close()
        admin.close()
