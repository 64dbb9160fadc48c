"""ACLs end to end: one broker with Kafka's StandardAuthorizer name, a PLAIN SASL listener for
five users (admin is a super user), ACLs created and checked with confluent-kafka's AdminClient,
then each principal's clients run into exactly the checks Kafka's authorization table names.

Matrix: READ-only cannot produce; no DESCRIBE hides the topic (left out of the topic list,
TOPIC_AUTHORIZATION_FAILED when named); DENY beats a prefixed ALLOW; a super user needs no ACL;
a group needs its own READ ACL (classic and KIP-848 members); a transactional id needs WRITE; authorized operations come back
in Metadata / DescribeCluster / DescribeGroups; DescribeAcls/DeleteAcls filter as Kafka does; the
ACLs survive a restart.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from broker_process import BrokerProcess
from kompakt.protocol.records import build_batch
from security_support import PLAIN_JAAS, TIMEOUT_S, Pki, mtls_config
from wire_support import Wire, field, req, sub

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("security-acls")
    pki = Pki(base / "pki")
    proc = BrokerProcess(base / "broker", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL",
        **mtls_config(pki),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "1",
        "offsets.topic.num.partitions": "1",
    })
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0"
    proc.start()
    proc.sasl_bootstrap = f"127.0.0.1:{proc.ports['SASL_PLAINTEXT']}"
    proc.mtls_bootstrap, proc.pki = f"127.0.0.1:{proc.ports['MTLS']}", pki
    admin = AdminClient(conf(proc, "admin"))
    _wait(admin.create_topics([NewTopic(t, 1, 1) for t in
                               ("acl-read", "acl-hidden", "shared.open", "shared.locked", "acl-txn")]))
    _wait(admin.create_acls([
        AclBinding(ResourceType.TOPIC, "acl-read", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
        AclBinding(ResourceType.GROUP, "alice-group", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
        AclBinding(ResourceType.GROUP, "alice-looks", LITERAL, "User:alice", "*", AclOperation.DESCRIBE, ALLOW),
        AclBinding(ResourceType.TOPIC, "acl-read", LITERAL, "User:bob", "*", AclOperation.WRITE, DENY),
        AclBinding(ResourceType.TOPIC, "shared.", PREFIXED, "User:carol", "*", AclOperation.ALL, ALLOW),
        AclBinding(ResourceType.TOPIC, "shared.locked", LITERAL, "User:carol", "*", AclOperation.WRITE, DENY),
        AclBinding(ResourceType.TOPIC, "acl-txn", LITERAL, "User:dave", "*", AclOperation.WRITE, ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "dave-allowed", LITERAL, "User:dave", "*",
                   AclOperation.WRITE, ALLOW),
    ]))
    yield proc
    try:
        proc.stop()
    except RuntimeError:
        proc.kill()


def conf(proc, user: str, **extra) -> dict:
    return {"bootstrap.servers": proc.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw", **extra}


def _wait(futures: dict) -> None:
    for f in futures.values():
        f.result(TIMEOUT_S)


def produce_error(proc, user: str, topic: str):
    """The delivery error of one record (None when it was written)."""
    errors = []
    p = Producer(conf(proc, user, **{"message.timeout.ms": 10000, "allow.auto.create.topics": False}))
    p.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert len(errors) == 1
    return errors[0]


def test_read_only_principal_cannot_produce_but_reads(acl_broker):
    err = produce_error(acl_broker, "alice", "acl-read")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(acl_broker, "admin", "acl-read") is None          # super user, no ACL needed
    c = Consumer(conf(acl_broker, "alice", **{"group.id": "alice-group", "auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition("acl-read", 0, 0)])
        msg = None
        for _ in range(40):
            msg = c.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None and msg.value() == b"x"
        c.commit(message=msg, asynchronous=False)                           # READ on alice-group
    finally:
        c.close()


def test_group_needs_its_own_read_acl(acl_broker):
    # DESCRIBE on the group finds its coordinator; committing needs READ on it
    c = Consumer(conf(acl_broker, "alice", **{"group.id": "alice-looks", "enable.auto.commit": False}))
    try:
        with pytest.raises(KafkaException) as info:
            c.commit(offsets=[TopicPartition("acl-read", 0, 1)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_consumer_protocol_group_needs_read(acl_broker):
    """KIP-848: ConsumerGroupHeartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED, a
    fatal error for librdkafka); with it, alice's member is assigned the topic it may read."""
    def first_event(group: str):
        c = Consumer(conf(acl_broker, "alice", **{"group.id": group, "group.protocol": "consumer",
                                                  "auto.offset.reset": "earliest"}))
        try:
            c.subscribe(["acl-read"])
            for _ in range(60):
                msg = c.poll(0.5)
                if msg is not None and msg.error():
                    return msg.error()
                if c.assignment():
                    return sorted((tp.topic, tp.partition) for tp in c.assignment())
            return None
        finally:
            c.close()
    err = first_event("alice-looks")                                             # DESCRIBE only
    assert err is not None and err.code() == KafkaError._FATAL, err
    assert "ConsumerGroupHeartbeat fatal error: Broker: Group authorization failed" in err.str(), err
    assert first_event("alice-group") == [("acl-read", 0)]                       # READ


def test_topic_without_describe_is_hidden(acl_broker):
    bob = AdminClient(conf(acl_broker, "bob"))
    listed = bob.list_topics(timeout=TIMEOUT_S)
    assert "acl-hidden" not in listed.topics and "acl-read" not in listed.topics
    named = bob.list_topics("acl-hidden", timeout=TIMEOUT_S).topics["acl-hidden"]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin_view = AdminClient(conf(acl_broker, "admin")).list_topics(timeout=TIMEOUT_S)
    assert {"acl-hidden", "acl-read"} <= set(admin_view.topics)
    # an unauthenticated client on the PLAINTEXT listener is User:ANONYMOUS: it sees nothing
    anon = AdminClient({"bootstrap.servers": acl_broker.bootstrap}).list_topics(timeout=TIMEOUT_S)
    assert not set(anon.topics) & {"acl-hidden", "acl-read", "shared.open"}


def test_deny_beats_prefixed_allow(acl_broker):
    assert produce_error(acl_broker, "carol", "shared.open") is None
    err = produce_error(acl_broker, "carol", "shared.locked")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # the DENY is on WRITE only: carol still sees the topic (DESCRIBE implied by the prefixed ALL)
    md = AdminClient(conf(acl_broker, "carol")).list_topics(timeout=TIMEOUT_S)
    assert {"shared.open", "shared.locked"} <= set(md.topics) and "acl-read" not in md.topics


def test_transactional_id_needs_write(acl_broker):
    p = Producer(conf(acl_broker, "dave", **{"transactional.id": "dave-forbidden"}))
    with pytest.raises(KafkaException) as info:
        p.init_transactions(TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # with WRITE on its transactional id (and the topic) a transaction commits
    t = Producer(conf(acl_broker, "dave", **{"transactional.id": "dave-allowed"}))
    t.init_transactions(TIMEOUT_S)
    t.begin_transaction()
    t.produce("acl-txn", b"in-txn")
    t.commit_transaction(TIMEOUT_S)
    # without a transactional id, WRITE on a topic is enough for an idempotent producer
    errors = []
    q = Producer(conf(acl_broker, "dave", **{"enable.idempotence": True, "message.timeout.ms": 10000}))
    q.produce("acl-txn", b"y", on_delivery=lambda err, _msg: errors.append(err))
    q.flush(TIMEOUT_S)
    assert errors == [None]


def test_transactional_id_is_checked_only_for_transactional_records(acl_broker):
    """Kafka's handleProduceRequest checks WRITE on the request's transactional id only when it
    carries transactional records: plain records under an id dave may not use are written (dave
    has WRITE on the topic); transactional ones are refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    T = sub(0, "TopicProduceData")

    def produce(records):
        return req(0, transactional_id="dave-forbidden", acks=-1, timeout_ms=5000, topic_data=[
            T(name="acl-txn", partition_data=[T.PartitionProduceData(index=0, records=records)])])
    w = Wire(int(acl_broker.sasl_bootstrap.rsplit(":", 1)[1]))
    try:
        w.plain_login("dave", "dave-pw")
        plain = w.call(produce(build_batch([(None, b"plain-under-an-id")])), 9)
        assert plain.responses[0].partition_responses[0].error_code == 0
        txn = w.call(produce(build_batch([(None, b"t")], producer_id=1, producer_epoch=0, base_sequence=0,
                                         is_transactional=True)), 9)
        assert txn.responses[0].partition_responses[0].error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        w.close()


def _need_ipv6_loopback() -> None:
    """The test is skipped on a machine without IPv6 loopback."""
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")


def test_acl_hosts_match_ipv6_clients_as_kafka_writes_them(tmp_path):
    """StandardAuthorizer matches an ACL's host against the client's InetAddress.getHostAddress():
    for IPv6 the full form without zero compression (`0:0:0:0:0:0:0:1`, not `::1`). A DENY for
    alice from ::1 written that way refuses her produce over an IPv6 listener (the DENY was
    skipped before: `::1` != `0:0:0:0:0:0:0:1`, and her ALLOW from any host let her in)."""
    _need_ipv6_loopback()
    proc = BrokerProcess(tmp_path / "broker", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,V6:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "num.partitions": "1",
    })
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,V6://[::1]:0"
    proc.start()
    v6_port = proc.ports["V6"]
    try:
        admin = Wire(v6_port, host="::1")
        admin.plain_login("admin", "admin-pw")
        CT = sub(19, "CreatableTopic")
        created = admin.call(req(19, topics=[CT(name="v6", num_partitions=1, replication_factor=1, assignments=[],
                                                 configs=[])], timeout_ms=10000, validate_only=False), 7)
        assert created.topics[0].error_code == 0
        C = field(30, "creations")
        acl = dict(resource_type=2, resource_name="v6", resource_pattern_type=3, principal="User:alice", operation=4)
        allow = C(host="*", permission_type=3, **acl)                              # ALLOW WRITE from anywhere
        deny = C(host="0:0:0:0:0:0:0:1", permission_type=2, **acl)                 # DENY WRITE from ::1
        assert [r.error_code for r in admin.call(req(30, creations=[allow, deny]), 3).results] == [0, 0]
        admin.close()
        T = sub(0, "TopicProduceData")
        alice = Wire(v6_port, host="::1")
        alice.plain_login("alice", "alice-pw")
        r = alice.call(req(0, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            T(name="v6", partition_data=[T.PartitionProduceData(index=0, records=build_batch([(None, b"x")]))])]), 9)
        alice.close()
        assert r.responses[0].partition_responses[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        proc.stop()


def test_non_super_user_cannot_manage_acls(acl_broker):
    alice = AdminClient(conf(acl_broker, "alice"))
    with pytest.raises(KafkaException) as info:
        _wait(alice.create_acls([AclBinding(ResourceType.TOPIC, "x", LITERAL, "User:alice", "*",
                                            AclOperation.ALL, ALLOW)]))
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_an_acl_with_an_empty_host_is_created_and_matches_no_client(acl_broker):
    """Kafka checks no host at CreateAcls (AclApis.handleCreateAcls, AclControlManager.validateNewAcl):
    an empty host is stored, and StandardAuthorizer compares it with the client's address, so it
    matches nobody: alice's ALLOW WRITE from host "" does not let her produce."""
    admin = Wire(int(acl_broker.sasl_bootstrap.rsplit(":", 1)[1]))
    try:
        admin.plain_login("admin", "admin-pw")
        C = field(30, "creations")
        allow = C(resource_type=2, resource_name="acl-read", resource_pattern_type=3, principal="User:alice",
                  host="", operation=4, permission_type=3)
        [created] = admin.call(req(30, creations=[allow]), 3).results
        assert (created.error_code, created.error_message) == (0, None)
        err = produce_error(acl_broker, "alice", "acl-read")
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        F = field(31, "filters")
        [gone] = admin.call(req(31, filters=[F(resource_type_filter=2, resource_name_filter="acl-read",
                                               pattern_type_filter=3, principal_filter="User:alice", host_filter="",
                                               operation=4, permission_type=3)]), 3).filter_results
        assert gone.error_code == 0 and [m.host for m in gone.matching_acls] == [""]
    finally:
        admin.close()


def test_authorized_operations(acl_broker):
    alice = AdminClient(conf(acl_broker, "alice"))
    topic = alice.describe_topics(TopicCollection(["acl-read"]), include_authorized_operations=True)
    ops = topic["acl-read"].result(TIMEOUT_S).authorized_operations
    assert {o.name for o in ops} == {"READ", "DESCRIBE"}
    cluster = alice.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert not cluster.authorized_operations                   # no DESCRIBE on the cluster: empty
    admin = AdminClient(conf(acl_broker, "admin"))           # kept: a dropped client cancels its futures
    admin_cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert {"ALTER", "DESCRIBE", "CREATE"} <= {o.name for o in admin_cluster.authorized_operations}
    group = alice.describe_consumer_groups(["alice-group"], include_authorized_operations=True)
    assert {o.name for o in group["alice-group"].result(TIMEOUT_S).authorized_operations} == {"READ", "DESCRIBE"}


def test_describe_and_delete_filters_then_restart(acl_broker):
    admin = AdminClient(conf(acl_broker, "admin"))
    match = AclBindingFilter(ResourceType.TOPIC, "shared.locked", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(match).result(TIMEOUT_S)
    # MATCH: the literal DENY on shared.locked and the PREFIXED shared. ALLOW that covers it
    assert {(b.name, b.resource_pattern_type, b.permission_type) for b in found} == {
        ("shared.locked", LITERAL, DENY), ("shared.", PREFIXED, ALLOW)}
    bob_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([bob_filter])[bob_filter].result(TIMEOUT_S)
    assert [(b.name, b.principal) for b in deleted] == [("acl-read", "User:bob")]
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    before = sorted(str(b) for b in admin.describe_acls(everything).result(TIMEOUT_S))
    assert len(before) == 7
    acl_broker.restart()
    admin = AdminClient(conf(acl_broker, "admin"))
    after = sorted(str(b) for b in admin.describe_acls(everything).result(TIMEOUT_S))
    assert after == before


def test_create_and_delete_topics_answer_as_kafka_for_what_dave_may_not_see(acl_broker):
    """kafka-python's admin client as dave: configs of a topic he created come back only with
    DESCRIBE_CONFIGS; deleting a topic he may not describe is TOPIC_AUTHORIZATION_FAILED whether
    it exists or not (so absent and hidden topics look alike), a describable absent one is
    UNKNOWN_TOPIC_OR_PARTITION (Kafka's ControllerApis)."""
    from kafka.admin import KafkaAdminClient
    admin = AdminClient(conf(acl_broker, "admin"))           # kept: a dropped client cancels its futures
    _wait(admin.create_acls([
        AclBinding(ResourceType.TOPIC, "dave-", PREFIXED, "User:dave", "*", AclOperation.CREATE, ALLOW),
        AclBinding(ResourceType.TOPIC, "dave-seen", LITERAL, "User:dave", "*", AclOperation.DESCRIBE_CONFIGS, ALLOW),
        AclBinding(ResourceType.TOPIC, "dave-seen", LITERAL, "User:dave", "*", AclOperation.DELETE, ALLOW),
        AclBinding(ResourceType.TOPIC, "dave-gone", LITERAL, "User:dave", "*", AclOperation.DESCRIBE, ALLOW),
    ]))
    dave = KafkaAdminClient(bootstrap_servers=acl_broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="dave", sasl_plain_password="dave-pw",
                            request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        created = dave.create_topics({"dave-seen": {"num_partitions": 2}, "dave-blind": {"num_partitions": 1}},
                                     raise_errors=False)
        got = {t["name"]: t for t in created["topics"]}
        assert got["dave-seen"]["error_code"] == 0 and got["dave-seen"]["topic_config_error_code"] == 0
        assert got["dave-seen"]["num_partitions"] == 2 and got["dave-seen"]["configs"]
        assert got["dave-blind"]["error_code"] == 0 and got["dave-blind"]["topic_config_error_code"] == 29
        assert got["dave-blind"]["num_partitions"] == -1 and not got["dave-blind"].get("configs")
        deleted = dave.delete_topics(["dave-seen", "acl-hidden", "no-such-topic", "dave-gone"], raise_errors=False)
        codes = {t["name"]: t["error_code"] for t in deleted["topics"]}
        assert codes == {"dave-seen": 0, "acl-hidden": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                         "no-such-topic": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                         "dave-gone": KafkaError.UNKNOWN_TOPIC_OR_PART}
    finally:
        dave.close()
    left = admin.list_topics(timeout=TIMEOUT_S).topics
    assert "dave-seen" not in left and {"dave-blind", "acl-hidden"} <= set(left)


def test_mutual_tls_principal_comes_from_the_certificate(acl_broker, tmp_path):
    """Over mutual TLS the principal is the certificate subject as Java writes it (RFC 2253,
    `#` escaped anywhere), rewritten by ssl.principal.mapping.rules: alice's certificate maps
    to User:alice (READ only on acl-read), a certificate the rule does not map is its whole
    subject (DEFAULT), which an ACL names exactly as Kafka would."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    pki = acl_broker.pki

    def mtls(cert, key, **extra):
        return {"bootstrap.servers": acl_broker.mtls_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": pki.ca_file, "ssl.certificate.location": cert, "ssl.key.location": key, **extra}

    alice = mtls(*pki.alice)
    p = Producer({**alice, "message.timeout.ms": 10000})
    errors = []
    p.produce("acl-read", b"by-cert", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert len(errors) == 1 and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "acl-read" in AdminClient(alice).list_topics(timeout=TIMEOUT_S).topics       # READ implies DESCRIBE

    zed = Pki._client(tmp_path, "zed", pki.ca.issue_cert("zed@example.com", common_name="Zed"))
    subject = x509.load_pem_x509_certificate(open(zed[0], "rb").read()).subject
    ou = subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value
    org = subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    principal = "User:CN=Zed,OU=" + ou.replace("#", "\\#") + ",O=" + org    # Java's X500Principal.getName()
    assert "\\#" in principal
    admin = AdminClient(conf(acl_broker, "admin"))
    _wait(admin.create_acls([AclBinding(ResourceType.TOPIC, "acl-hidden", LITERAL, principal, "*",
                                        AclOperation.DESCRIBE, ALLOW)]))
    assert "acl-hidden" in AdminClient(mtls(*zed)).list_topics(timeout=TIMEOUT_S).topics


def _first_assignment(proc, user: str, group: str, pattern: str) -> list[str]:
    """The topics the broker assigns `user`'s member (the admin's ConsumerGroupDescribe: the
    client itself drops topics it cannot see in Metadata, so its own view proves nothing)."""
    admin = AdminClient(conf(proc, "admin"))
    c = Consumer(conf(proc, user, **{"group.id": group, "group.protocol": "consumer",
                                     "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([pattern])
        for _ in range(120):
            msg = c.poll(0.25)
            assert msg is None or not msg.error(), msg.error()
            if c.assignment():
                [member] = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S).members
                return sorted({tp.topic for tp in member.assignment.topic_partitions})
        raise AssertionError(f"{user}'s member got no assignment")
    finally:
        c.close()


def test_regex_subscription_resolves_only_to_topics_the_member_may_describe(acl_broker):
    """KIP-848 regexes are resolved by the broker in the context of the member whose heartbeat
    triggered the resolution (Kafka's filterTopicDescribeAuthorizedTopics): alice (READ, hence
    DESCRIBE, on acl-read only) is assigned acl-read alone; the super user gets every match."""
    assert _first_assignment(acl_broker, "alice", "alice-group", "^acl-.*") == ["acl-read"]
    assert _first_assignment(acl_broker, "admin", "admin-regex", "^acl-.*") == ["acl-hidden", "acl-read", "acl-txn"]


def test_group_config_resources_need_describe_and_alter_configs_on_the_group(acl_broker):
    """DescribeConfigs / IncrementalAlterConfigs of a GROUP resource: DESCRIBE_CONFIGS /
    ALTER_CONFIGS on that group, else GROUP_AUTHORIZATION_FAILED (Kafka's ConfigHelper and
    ControllerApis)."""
    from wire_support import Wire, field, req
    admin = AdminClient(conf(acl_broker, "admin"))           # kept: a dropped client cancels its futures
    _wait(admin.create_acls([AclBinding(ResourceType.GROUP, "alice-conf", LITERAL, "User:alice", "*",
                                        AclOperation.DESCRIBE_CONFIGS, ALLOW)]))
    port = int(acl_broker.sasl_bootstrap.rsplit(":", 1)[1])

    def call(user: str, alter: bool) -> int:
        w = Wire(port)
        w.plain_login(user, f"{user}-pw")
        if alter:
            op = field(44, "resources", "configs")(name="consumer.session.timeout.ms", config_operation=0,
                                                   value="50000")
            return w.call(req(44, resources=[field(44, "resources")(
                resource_type=32, resource_name="alice-conf", configs=[op])], validate_only=False), 1
            ).responses[0].error_code
        return w.call(req(32, resources=[field(32, "resources")(
            resource_type=32, resource_name="alice-conf", configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4).results[0].error_code
    GROUP_AUTHORIZATION_FAILED = KafkaError.GROUP_AUTHORIZATION_FAILED
    assert call("bob", alter=False) == GROUP_AUTHORIZATION_FAILED
    assert call("alice", alter=False) == 0
    assert call("alice", alter=True) == GROUP_AUTHORIZATION_FAILED
    _wait(admin.create_acls([AclBinding(ResourceType.GROUP, "alice-conf", LITERAL, "User:alice", "*",
                                        AclOperation.ALTER_CONFIGS, ALLOW)]))
    assert call("alice", alter=True) == 0
    assert call("bob", alter=True) == GROUP_AUTHORIZATION_FAILED
