"""Second read of the topic and config admin APIs against Kafka 4's semantics: each test is a
behaviour a Kafka user would see differently, found by the review and fixed (real clients and raw
requests over TCP to one module broker).
"""
from __future__ import annotations

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)
from confluent_kafka import KafkaException

from kompakt.protocol.errors import ErrorCode as EC
from config_support import restart_with_stored_overrides, topic_configs
from wire_support import Wire, req, sub

TIERED_OFF = ("Tiered Storage functionality is disabled in the broker. "
              "Topic cannot be configured with remote log storage.")


@pytest.fixture(scope="module")
def admin(module_broker):
    return AdminClient({"bootstrap.servers": module_broker.bootstrap})


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    yield w
    w.close()


def _error(future) -> tuple[int, str]:
    with pytest.raises(KafkaException) as caught:
        future.result(30)
    err = caught.value.args[0]
    return err.code(), err.str()


def test_remote_storage_enable_is_refused_as_kafka_without_tiered_storage(admin, wire):
    """Kafka's LogConfig.validateRemoteStorageOnlyIfSystemEnabled: remote.storage.enable=true on a
    broker without remote.log.storage.system.enable is INVALID_CONFIG, on create and on alter (it
    was accepted and silently did nothing)."""
    [created] = admin.create_topics([NewTopic("r9-tiered", 1, config={"remote.storage.enable": "true"})],
                                    operation_timeout=30).values()
    assert _error(created) == (EC.INVALID_CONFIG, TIERED_OFF)
    assert "r9-tiered" not in admin.list_topics(timeout=30).topics

    [plain] = admin.create_topics([NewTopic("r9-tiered", 1, config={"remote.storage.enable": "false"})],
                                  operation_timeout=30).values()
    plain.result(30)
    resource = ConfigResource(ResourceType.TOPIC, "r9-tiered", incremental_configs=[
        ConfigEntry("remote.storage.enable", "TRUE", incremental_operation=AlterConfigOpType.SET)])
    [altered] = admin.incremental_alter_configs([resource]).values()
    assert _error(altered) == (EC.INVALID_CONFIG, TIERED_OFF)

    R = sub(33, "AlterConfigsResource")
    legacy = wire.call(req(33, resources=[R(resource_type=2, resource_name="r9-tiered", configs=[
        R.AlterableConfig(name="remote.storage.enable", value="true")])], validate_only=False), 2)
    assert [(r.error_code, r.error_message) for r in legacy.responses] == [(EC.INVALID_CONFIG, TIERED_OFF)]
    assert topic_configs(admin, "r9-tiered")["remote.storage.enable"] == "false"


def _broker_entries(admin, node: str, keys: list[str]) -> dict:
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, node)]).values()
    return {name: entry for name, entry in future.result(30).items() if name in keys}


def test_kafka_broker_keys_a_single_node_accepts_are_described_not_hidden(admin, module_broker):
    """min.insync.replicas, unclean.leader.election.enable, log.local.retention.* and the thread
    counts are Kafka broker keys of known types: DescribeConfigs lists them with their defaults,
    and once set dynamically shows the value (they were treated as custom keys: absent, then
    is_sensitive with a null value), and a topic's min.insync.replicas follows the broker's, as
    Kafka's ServerTopicConfigSynonyms make it."""
    keys = ["min.insync.replicas", "unclean.leader.election.enable", "log.local.retention.ms",
            "log.local.retention.bytes", "num.io.threads", "num.network.threads", "num.replica.fetchers"]
    node = "1"
    before = _broker_entries(admin, node, keys)
    assert {k: (e.value, e.is_sensitive, e.is_default) for k, e in before.items()} == {
        "min.insync.replicas": ("1", False, True), "unclean.leader.election.enable": ("false", False, True),
        "log.local.retention.ms": ("-2", False, True), "log.local.retention.bytes": ("-2", False, True),
        "num.io.threads": ("8", False, True), "num.network.threads": ("3", False, True),
        "num.replica.fetchers": ("1", False, True)}

    [created] = admin.create_topics([NewTopic("r9-isr", 1)], operation_timeout=30).values()
    created.result(30)
    resource = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("num.io.threads", "16", incremental_operation=AlterConfigOpType.SET)])
    [altered] = admin.incremental_alter_configs([resource]).values()
    altered.result(30)
    try:
        after = _broker_entries(admin, node, keys)
        assert (after["min.insync.replicas"].value, after["min.insync.replicas"].is_sensitive) == ("2", False)
        assert (after["num.io.threads"].value, after["num.io.threads"].is_sensitive) == ("16", False)
        [topic_future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "r9-isr")]).values()
        isr = topic_future.result(30)["min.insync.replicas"]
        assert (isr.value, isr.source) == ("2", 2)   # DYNAMIC_BROKER_CONFIG
    finally:
        undo = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("min.insync.replicas", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("num.io.threads", None, incremental_operation=AlterConfigOpType.DELETE)])
        [undone] = admin.incremental_alter_configs([undo]).values()
        undone.result(30)


def test_broker_logger_levels_are_described_with_log4j_names(wire):
    """Kafka's DescribeConfigs BROKER_LOGGER answers log4j level names (TRACE, DEBUG, INFO, WARN,
    ERROR, FATAL, OFF): a level set as TRACE read back as 'Level 5', WARN as 'WARNING', OFF as
    'Level 60' and FATAL as 'CRITICAL' (Python's names), which Kafka tools cannot set back."""
    prefix = "kompakt.broker.handlers."
    levels = {prefix + "create_partitions": "TRACE", prefix + "create_topics": "WARN",
              prefix + "delete_records": "OFF", prefix + "delete_topics": "FATAL", prefix + "alter_configs": "ERROR"}
    try:
        assert _set_loggers(wire, {name: (0, level) for name, level in levels.items()}) == [(0, None)]
        D = sub(32, "DescribeConfigsResource")
        described = wire.call(req(32, resources=[D(resource_type=8, resource_name="1",
                                                   configuration_keys=list(levels))],
                                  include_synonyms=False, include_documentation=False), 4)
        assert {c.name: c.value for c in described.results[0].configs} == levels
    finally:
        _set_loggers(wire, {name: (1, None) for name in levels})


def _set_loggers(wire, ops: dict) -> list[tuple[int, str | None]]:
    """IncrementalAlterConfigs on BROKER_LOGGER "1": {logger: (operation, level)}."""
    R = sub(44, "AlterConfigsResource")
    altered = wire.call(req(44, resources=[R(resource_type=8, resource_name="1", configs=[
        R.AlterableConfig(name=name, config_operation=op, value=level) for name, (op, level) in ops.items()])],
        validate_only=False), 1)
    return [(r.error_code, r.error_message) for r in altered.responses]


def test_a_logger_that_does_not_exist_is_refused_as_kafka(wire):
    """Kafka's ConfigAdminManager.validateLogLevelConfigs: SET or DELETE of a logger the broker
    does not have is INVALID_CONFIG "Logger X does not exist!" (a misspelt name was accepted,
    created a logger nothing logs to, and answered success)."""
    name = "kompakt.broker.handlers.no_such_module"
    assert _set_loggers(wire, {name: (0, "DEBUG")}) == [(EC.INVALID_CONFIG, f"Logger {name} does not exist!")]
    assert _set_loggers(wire, {name: (1, None)}) == [(EC.INVALID_CONFIG, f"Logger {name} does not exist!")]
    D = sub(32, "DescribeConfigsResource")
    described = wire.call(req(32, resources=[D(resource_type=8, resource_name="1", configuration_keys=None)],
                          include_synonyms=False, include_documentation=False), 4)
    assert name not in {c.name for c in described.results[0].configs}


def _create_error(admin, name: str, configs: dict[str, str]) -> tuple[int, str]:
    [future] = admin.create_topics([NewTopic(name, 1, config=configs)], operation_timeout=30).values()
    return _error(future)


def test_list_configs_refuse_duplicated_and_empty_items_as_kafka_4_4(admin):
    """Kafka 4.2+ (KIP-1161) ConfigDef.ValidList: cleanup.policy may be empty, but an item twice
    or an empty item is INVALID_CONFIG (they were accepted: 'compact,compact' was stored as is)."""
    dup = "Configuration 'cleanup.policy' values must not be duplicated."
    empty = "Configuration 'cleanup.policy' values must not be empty."
    assert _create_error(admin, "r9-dup", {"cleanup.policy": "compact, compact"}) == (EC.INVALID_CONFIG, dup)
    assert _create_error(admin, "r9-dup", {"cleanup.policy": "compact,,delete"}) == (EC.INVALID_CONFIG, empty)
    assert "r9-dup" not in admin.list_topics(timeout=30).topics

    [ok] = admin.create_topics([NewTopic("r9-lists", 1, config={"cleanup.policy": " compact , delete "})],
                               operation_timeout=30).values()
    ok.result(30)
    resource = ConfigResource(ResourceType.TOPIC, "r9-lists", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete,delete", incremental_operation=AlterConfigOpType.SET)])
    [altered] = admin.incremental_alter_configs([resource]).values()
    assert _error(altered) == (EC.INVALID_CONFIG, dup)
    assert topic_configs(admin, "r9-lists")["cleanup.policy"] == "compact,delete"


def test_throttled_replica_lists_are_validated_as_kafka(admin):
    """Kafka's ThrottledReplicaListValidator: leader/follower.replication.throttled.replicas are
    '*' or partition:broker pairs; anything else is INVALID_CONFIG (it was accepted)."""
    code, message = _create_error(admin, "r9-throttle", {"leader.replication.throttled.replicas": "all"})
    assert code == EC.INVALID_CONFIG
    assert ("leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the "
            "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...") in message
    [ok] = admin.create_topics([NewTopic("r9-throttle", 1, config={
        "leader.replication.throttled.replicas": "0:1, 1:1", "follower.replication.throttled.replicas": "*"})],
        operation_timeout=30).values()
    ok.result(30)
    described = topic_configs(admin, "r9-throttle")
    assert (described["leader.replication.throttled.replicas"],
            described["follower.replication.throttled.replicas"]) == ("0:1,1:1", "*")


def test_append_to_a_topic_key_that_is_not_a_list_has_kafkas_message(admin):
    """Kafka's ConfigurationControlManager.incrementalAlterConfigResource (the controller handles
    TOPIC resources): APPEND/SUBTRACT on a key that is not LIST-typed, or not a topic key at all,
    is INVALID_CONFIG "Can't APPEND to key retention.ms because its type is not LIST." (the
    message was the ZooKeeper-era broker's)."""
    [created] = admin.create_topics([NewTopic("r9-append", 1)], operation_timeout=30).values()
    created.result(30)
    for op, key in ((AlterConfigOpType.APPEND, "retention.ms"), (AlterConfigOpType.SUBTRACT, "no.such.key")):
        resource = ConfigResource(ResourceType.TOPIC, "r9-append", incremental_configs=[
            ConfigEntry(key, "5", incremental_operation=op)])
        [altered] = admin.incremental_alter_configs([resource]).values()
        assert _error(altered) == (EC.INVALID_CONFIG,
                                   f"Can't {op.name} to key {key} because its type is not LIST.")


def test_metadata_never_auto_creates_the_cluster_metadata_topic(wire, admin):
    """`__cluster_metadata` is KRaft's own log, which Kafka's CreateTopics refuses to create (and
    auto-creation goes through CreateTopics): a Metadata request naming it must not create a
    regular topic of that name (it did, with one partition)."""
    M = sub(3, "MetadataRequestTopic")
    answer = wire.call(req(3, topics=[M(name="__cluster_metadata", topic_id=None)], allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False), 12)
    assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
        ("__cluster_metadata", EC.UNKNOWN_TOPIC_OR_PARTITION, [])]
    assert "__cluster_metadata" not in admin.list_topics(timeout=30).topics


def test_altering_the_default_topic_resource_is_invalid_request(wire):
    """Kafka's ControllerConfigurationValidator: a TOPIC resource named "" (a "default topic") is
    INVALID_REQUEST "Default topic resources are not allowed." on both alter APIs (it was
    INVALID_TOPIC_EXCEPTION, Topic.validate's answer, which DescribeConfigs keeps)."""
    expected = [(EC.INVALID_REQUEST, "Default topic resources are not allowed.")]
    R44 = sub(44, "AlterConfigsResource")
    incremental = wire.call(req(44, resources=[R44(resource_type=2, resource_name="", configs=[
        R44.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])], validate_only=False), 1)
    assert [(r.error_code, r.error_message) for r in incremental.responses] == expected
    R33 = sub(33, "AlterConfigsResource")
    legacy = wire.call(req(33, resources=[R33(resource_type=2, resource_name="", configs=[
        R33.AlterableConfig(name="retention.ms", value="1000")])], validate_only=True), 2)
    assert [(r.error_code, r.error_message) for r in legacy.responses] == expected
    D = sub(32, "DescribeConfigsResource")
    described = wire.call(req(32, resources=[D(resource_type=2, resource_name="", configuration_keys=None)],
                          include_synonyms=False, include_documentation=False), 4)
    assert [r.error_code for r in described.results] == [EC.INVALID_TOPIC_EXCEPTION]


def test_append_to_a_broker_key_that_is_not_a_list_is_invalid_request(admin):
    """Kafka's ConfigAdminManager.prepareIncrementalConfigs (the broker validates BROKER
    resources before forwarding): APPEND/SUBTRACT on a broker key that is not LIST-typed is
    INVALID_REQUEST "Config value append is not allowed for config key: X" (the code was
    INVALID_CONFIG)."""
    for op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.ms", "5", incremental_operation=op)])
        [altered] = admin.incremental_alter_configs([resource]).values()
        assert _error(altered) == (EC.INVALID_REQUEST,
                                   f"Config value {op.name.lower()} is not allowed for config key: log.retention.ms")


def test_validate_only_checks_topic_configs_against_the_broker_defaults_too(admin):
    """Kafka's LogConfig.validate checks a topic's configs combined with the broker's log
    defaults, for validate_only as for the real thing: min.compaction.lag.ms above the broker's
    log.cleaner.max.compaction.lag.ms was refused on create and alter but validate_only said yes."""
    def broker(op, value):
        [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.cleaner.max.compaction.lag.ms", value, incremental_operation=op)])]).values()
        future.result(30)
    conflict = (EC.INVALID_CONFIG,
                "conflict topic config setting min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)")
    [created] = admin.create_topics([NewTopic("r9-lag", 1)], operation_timeout=30).values()
    created.result(30)
    broker(AlterConfigOpType.SET, "1000")
    try:
        [checked] = admin.create_topics([NewTopic("r9-lag2", 1, config={"min.compaction.lag.ms": "5000"})],
                                        validate_only=True, operation_timeout=30).values()
        assert _error(checked) == conflict
        resource = ConfigResource(ResourceType.TOPIC, "r9-lag", incremental_configs=[
            ConfigEntry("min.compaction.lag.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
        [altered] = admin.incremental_alter_configs([resource], validate_only=True).values()
        assert _error(altered) == conflict
    finally:
        broker(AlterConfigOpType.DELETE, None)


def test_a_broker_default_that_conflicts_with_a_topic_override_never_bricks_the_broker(start_broker):
    """Kafka checks min.compaction.lag.ms <= max.compaction.lag.ms when a topic's configs are
    set, never when a topic's effective config is resolved: a broker default changed later
    (log.cleaner.max.compaction.lag.ms below a topic's min.compaction.lag.ms) is accepted and the
    topic keeps its override. Here the IncrementalAlterConfigs connection was closed after the
    change was persisted, and the broker then refused to start ("could not load partition logs")."""
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [created] = admin.create_topics([NewTopic("r9-lagged", 1, config={"min.compaction.lag.ms": "500"})],
                                    operation_timeout=30).values()
    created.result(30)
    [altered] = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.cleaner.max.compaction.lag.ms", "100", incremental_operation=AlterConfigOpType.SET)])]).values()
    altered.result(30)
    described = topic_configs(admin, "r9-lagged")
    assert (described["min.compaction.lag.ms"], described["max.compaction.lag.ms"]) == ("500", "100")

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "r9-lagged" in admin.list_topics(timeout=30).topics
    assert topic_configs(admin, "r9-lagged")["min.compaction.lag.ms"] == "500"


def test_alters_name_a_wrong_broker_with_kafkas_messages(wire):
    """Kafka's ConfigAdminManager.validateResourceNameIsCurrentNodeId (alters of BROKER and
    BROKER_LOGGER): "Node id must be an integer, but it is: x" and "Unexpected broker id, expected
    1, but received 2" (the alters answered DescribeConfigs' wording, which stays)."""
    R = sub(44, "AlterConfigsResource")

    def alter(rtype, name):
        answer = wire.call(req(44, resources=[R(resource_type=rtype, resource_name=name, configs=[
            R.AlterableConfig(name="kompakt.broker" if rtype == 8 else "log.retention.ms", config_operation=0,
                              value="INFO" if rtype == 8 else "1000")])], validate_only=True), 1)
        return [(r.error_code, r.error_message) for r in answer.responses]

    assert alter(4, "2") == [(EC.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")]
    assert alter(4, "x") == [(EC.INVALID_REQUEST, "Node id must be an integer, but it is: x")]
    assert alter(8, "") == [(EC.INVALID_REQUEST, "Node id must be an integer, but it is: ")]
    assert alter(8, "7") == [(EC.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 7")]
    assert alter(4, "") == [(0, None)]
    D = sub(32, "DescribeConfigsResource")
    described = wire.call(req(32, resources=[D(resource_type=4, resource_name="2", configuration_keys=None)],
                          include_synonyms=False, include_documentation=False), 4)
    assert [(r.error_code, r.error_message) for r in described.results] == [
        (EC.INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 2")]


def test_a_stored_config_that_no_longer_validates_is_described_not_fatal(start_broker):
    """A topic override stored by an older version that today's rules refuse (a throttled-replica
    list other than '*' or partition:broker pairs) must not break DescribeConfigs or CreateTopics
    answers for the topic: it is shown as stored. (Describing it raised and closed the connection.)"""
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [created] = admin.create_topics([NewTopic("r9-stored", 1, config={"retention.ms": "3600000"})],
                                    operation_timeout=30).values()
    created.result(30)
    restart_with_stored_overrides(broker, "r9-stored", {"leader.replication.throttled.replicas": "all"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = topic_configs(admin, "r9-stored")
    assert (described["leader.replication.throttled.replicas"], described["retention.ms"]) == ("all", "3600000")
