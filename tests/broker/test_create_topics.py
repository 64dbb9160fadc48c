"""CreateTopics (key 19): golden bytes and Kafka's per-topic error rules, on a real LogManager."""
import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest

from admin_harness import Harness, framed, h, s16

from kompakt.broker.handlers._common import invalid_topic_reason

CT = CreateTopicsRequest.CreatableTopic
CFG = CT.CreatableTopicConfig


def topic(name, partitions=1, rf=-1, configs=None, assignments=None):
    return CT(name=name, num_partitions=partitions, replication_factor=rf,
              assignments=assignments or [],
              configs=[CFG(name=k, value=v) for k, v in (configs or {}).items()])


async def create(h, *topics, version=7, validate_only=False):
    response = await h.call(CreateTopicsRequest(topics=list(topics), timeout_ms=30000,
                                                validate_only=validate_only), version)
    return {t.name: t for t in response.topics}


async def test_golden_v4_create_with_config(h):
    request = (
        bytes.fromhex("0013 0004 00000001") + s16("test")   # header v1: CreateTopics v4, corr 1, client "test"
        + bytes.fromhex("00000001")                         # topics: 1
        + s16("t1")                                         #   name
        + bytes.fromhex("00000002")                         #   num_partitions 2
        + bytes.fromhex("ffff")                             #   replication_factor -1 (default)
        + bytes.fromhex("00000000")                         #   assignments: none
        + bytes.fromhex("00000001")                         #   configs: 1
        + s16("cleanup.policy") + s16("compact")            #     name, value
        + bytes.fromhex("00007530")                         # timeout_ms 30000
        + bytes.fromhex("00")                               # validate_only false
    )
    expected = framed(
        bytes.fromhex("00000001")                           # correlation id (response header v0)
        + bytes.fromhex("00000000")                         # throttle_time_ms
        + bytes.fromhex("00000001")                         # topics: 1
        + s16("t1")                                         #   name
        + bytes.fromhex("0000")                             #   error_code NONE
        + bytes.fromhex("ffff")                             #   error_message null
    )
    assert await h.send(request) == expected
    meta = h.lm.topics["t1"]
    assert meta.partitions == 2 and meta.configs == {"cleanup.policy": "compact"}


async def test_golden_v4_invalid_name(h):
    request = (bytes.fromhex("0013 0004 00000002") + s16("test") + bytes.fromhex("00000001") + s16("a b")
               + bytes.fromhex("00000001 ffff 00000000 00000000 00007530 00"))
    message = ("Topic name is invalid: 'a b' contains one or more characters other than ASCII "
               "alphanumerics, '.', '_' and '-'")
    expected = framed(bytes.fromhex("00000002 00000000 00000001") + s16("a b")
                      + bytes.fromhex("0011")               # INVALID_TOPIC_EXCEPTION (17)
                      + s16(message))
    assert await h.send(request) == expected
    assert "a b" not in h.lm.topics


async def test_v7_returns_topic_id_and_configs(h):
    result = (await create(h, topic("orders", 3, 1, {"retention.ms": "1000"})))["orders"]
    assert result.error_code == 0 and result.error_message is None
    assert result.topic_id == h.lm.topics["orders"].topic_id
    assert (result.num_partitions, result.replication_factor) == (3, 1)
    configs = {c.name: c for c in result.configs}
    assert configs["retention.ms"].value == "1000" and configs["retention.ms"].config_source == 1
    assert configs["segment.bytes"].config_source == 5


async def test_defaults_from_broker_config(tmp_path):
    h = Harness(tmp_path, **{"num.partitions": "4"})
    try:
        result = (await create(h, topic("d", -1, -1)))["d"]
        assert result.error_code == 0 and result.num_partitions == 4
        assert h.lm.topics["d"].partitions == 4
    finally:
        h.close()


async def test_validate_only_creates_nothing(h):
    results = await create(h, topic("v", 2, 1, {"cleanup.policy": "compact"}), validate_only=True)
    assert results["v"].error_code == 0 and results["v"].num_partitions == 2
    assert "v" not in h.lm.topics
    # and still reports errors
    results = await create(h, topic("v2", 2, 1, {"cleanup.policy": "nope"}), validate_only=True)
    assert results["v2"].error_code == 40


@pytest.mark.parametrize("kwargs, code, fragment", [
    (dict(partitions=0), 37, "non-positive"),
    (dict(partitions=-2), 37, "non-positive"),
    (dict(rf=0), 38, "larger than 0"),
    (dict(rf=3), 38, "only 1 broker"),
    (dict(configs={"retention.ms": "abc"}), 40, "retention.ms"),
    (dict(configs={"segment.bytes": "100"}), 40, "segment.bytes"),
    (dict(configs={"no.such.config": "1"}), 40, "Unknown topic config name"),
    (dict(configs={"retention.ms": None}), 40, "Null value"),
])
async def test_bad_requests(h, kwargs, code, fragment):
    result = (await create(h, topic("bad", **kwargs)))["bad"]
    assert (result.error_code, result.num_partitions) == (code, -1)
    assert fragment in result.error_message
    assert "bad" not in h.lm.topics


async def test_existing_duplicate_and_colliding_names(h):
    h.create("a.b")
    results = await create(h, topic("a.b"), topic("a_b"), topic("dup"), topic("dup"), topic("ok"))
    assert results["a.b"].error_code == 36 and "already exists" in results["a.b"].error_message
    assert results["a_b"].error_code == 17 and "collides" in results["a_b"].error_message
    assert results["dup"].error_code == 42 and results["dup"].error_message == "Duplicate topic name."
    assert results["ok"].error_code == 0
    assert set(h.lm.topics) >= {"a.b", "ok"} and "a_b" not in h.lm.topics and "dup" not in h.lm.topics


async def test_manual_assignment(h):
    A = CT.CreatableReplicaAssignment
    results = await create(h, topic("m", -1, -1, assignments=[A(partition_index=0, broker_ids=[1]),
                                                             A(partition_index=1, broker_ids=[1])]))
    assert results["m"].error_code == 0 and h.lm.topics["m"].partitions == 2
    results = await create(h, topic("m2", -1, -1, assignments=[A(partition_index=0, broker_ids=[2])]))
    assert results["m2"].error_code == 39
    results = await create(h, topic("m3", 2, -1, assignments=[A(partition_index=0, broker_ids=[1])]))
    assert results["m3"].error_code == 42


async def test_partition_budget_per_request(h):
    results = await create(h, topic("huge", 10_001))
    assert results["huge"].error_code == 44
    assert "huge" not in h.lm.topics


@pytest.mark.parametrize("name, ok", [
    ("a", True), ("A-b_c.9", True), ("x" * 249, True), ("x" * 250, False), ("", False), (".", False),
    ("..", False), ("...", True), ("a/b", False), ("é", False), ("a b", False),
])
def test_topic_name_rules(name, ok):
    assert (invalid_topic_reason(name) is None) == ok


async def test_os_errors_become_kafka_storage_error():
    from kompakt.broker.handlers._common import run_storage
    from kompakt.protocol.errors import KafkaStorageErrorError

    def full_disk(name):
        raise OSError(28, "No space left on device")

    with pytest.raises(KafkaStorageErrorError, match="No space left"):
        await run_storage(full_disk, "t")


async def test_topic_configs_need_describe_configs(h):
    """Kafka's ControllerApis/ReplicationControlManager: CREATE (on the cluster or the topic)
    creates; the v5+ partition count, replication factor and configs come back only with
    DESCRIBE_CONFIGS on the topic (ALTER_CONFIGS implies it), else -1/-1/none and
    topic_config_error_code TOPIC_AUTHORIZATION_FAILED."""
    from kompakt.broker.security.acl import AclBinding, Op, PatternType, PermissionType, Res
    from kompakt.broker.security.authorizer import Authorizer

    def allow(rtype, name, op, pattern=PatternType.LITERAL):
        return AclBinding(rtype, name, pattern, "User:ANONYMOUS", "*", op, PermissionType.ALLOW)

    h.broker.authorizer = az = Authorizer()
    az.create([allow(Res.TOPIC, "mine-", Op.CREATE, PatternType.PREFIXED),
               allow(Res.TOPIC, "mine-seen", Op.DESCRIBE_CONFIGS), allow(Res.TOPIC, "mine-altered", Op.ALTER_CONFIGS)])
    got = await create(h, topic("mine-seen", 2), topic("mine-altered"), topic("mine-blind", 3), topic("other"))
    assert (got["mine-seen"].error_code, got["mine-seen"].topic_config_error_code) == (0, 0)
    assert got["mine-seen"].num_partitions == 2 and got["mine-seen"].replication_factor == 1
    assert {c.name for c in got["mine-seen"].configs} >= {"cleanup.policy", "retention.ms"}
    assert got["mine-altered"].topic_config_error_code == 0 and got["mine-altered"].configs
    blind = got["mine-blind"]
    assert (blind.error_code, blind.topic_config_error_code) == (0, 29)       # TOPIC_AUTHORIZATION_FAILED
    assert (blind.num_partitions, blind.replication_factor, blind.configs) == (-1, -1, [])
    assert h.lm.topics["mine-blind"].partitions == 3                          # created all the same
    assert got["other"].error_code == 29 and "other" not in h.lm.topics
    # CREATE on the cluster creates anything, but shows configs only where DESCRIBE_CONFIGS allows
    az.create([allow(Res.CLUSTER, "kafka-cluster", Op.CREATE)])
    got = await create(h, topic("other"), topic("mine-seen2"), validate_only=True)
    assert [(got[n].error_code, got[n].topic_config_error_code) for n in ("other", "mine-seen2")] == [(0, 29), (0, 29)]
    # v4 has no such fields: the answer is the same as without an authorizer
    assert (await create(h, topic("mine-v4"), version=4))["mine-v4"].error_code == 0
