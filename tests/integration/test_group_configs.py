"""KIP-848 dynamic group configs: resource type GROUP (32) in DescribeConfigs,
IncrementalAlterConfigs and AlterConfigs (Kafka's GroupConfig), used by the coordinator.

One broker for the module whose group.consumer.* defaults are far from what the tests set per
group (session 60 s, heartbeat 5 s), so a member that gets the group's values proves they are
applied: the interval it is told, and the session timeout that fences a SIGKILLed confluent-kafka
member long before the broker default would. kafka-python 3's admin describes and alters;
refusals are checked on the wire for Kafka's exact codes; the overrides survive a restart.
"""
from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from groups_support import Member, create_topic
from kompakt.testing.poll import wait_until
from wire_support import Wire, field, heartbeat_request, req

GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
INVALID_CONFIG, INVALID_REQUEST = 40, 42
BROKER = {
    "offsets.topic.num.partitions": "1",
    "group.consumer.heartbeat.interval.ms": "5000", "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "60000", "group.consumer.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    from broker_process import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("group-configs"), BROKER).start()
    yield b
    b.kill()


def describe(port: int, group: str, keys=None) -> dict[str, tuple[str, int]]:
    res = Wire(port).call(req(32, resources=[field(32, "resources")(
        resource_type=32, resource_name=group, configuration_keys=keys)],
        include_synonyms=True, include_documentation=True), 4).results[0]
    assert res.error_code == 0, res
    for c in res.configs:
        assert [(s.name, s.value, s.source) for s in c.synonyms] == [(c.name, c.value, c.config_source)]
        assert c.config_type == 3 and c.documentation and not c.read_only
    return {c.name: (c.value, c.config_source) for c in res.configs}


def incremental(port: int, group: str, ops, validate_only=False):
    """ops: [(name, op, value)]; returns (error code, message)."""
    Op = field(44, "resources", "configs")
    res = Wire(port).call(req(44, resources=[field(44, "resources")(
        resource_type=32, resource_name=group,
        configs=[Op(name=n, config_operation=o, value=v) for n, o, v in ops])],
        validate_only=validate_only), 1).responses[0]
    return res.error_code, res.error_message


def legacy(port: int, group: str, configs: dict):
    Entry = field(33, "resources", "configs")
    res = Wire(port).call(req(33, resources=[field(33, "resources")(
        resource_type=32, resource_name=group,
        configs=[Entry(name=k, value=v) for k, v in configs.items()])], validate_only=False), 2).responses[0]
    return res.error_code, res.error_message


def heartbeat_interval_of_new_member(port: int, group: str) -> int:
    hb = Wire(port).call(heartbeat_request(group, "m-" + group, 0, ["gc-topic"]), 1)
    assert hb.error_code == 0, hb
    Wire(port).call(heartbeat_request(group, "m-" + group, -1, None, rebalance_timeout_ms=-1), 1)
    return hb.heartbeat_interval_ms


def test_describe_alter_and_apply_with_kafka_python_admin(gbroker):
    create_topic(gbroker.bootstrap, "gc-topic", 2)
    admin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
    try:
        assert describe(gbroker.port, "gc-a") == {
            "consumer.session.timeout.ms": ("60000", DEFAULT_CONFIG),
            "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG)}
        result = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, "gc-a", configs={
            "consumer.heartbeat.interval.ms": "250"})], raise_on_unknown=False)
        assert "gc-a" in str(result) and "Error" not in str(result).replace("NoError", ""), result
        described = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, "gc-a")],
                                           config_filter="all")
        assert "250" in str(described), described
        assert describe(gbroker.port, "gc-a", ["consumer.heartbeat.interval.ms"]) == {
            "consumer.heartbeat.interval.ms": ("250", GROUP_CONFIG)}
        # the coordinator tells this group's members 250 ms; another group gets the broker's 5 s
        assert heartbeat_interval_of_new_member(gbroker.port, "gc-a") == 250
        assert heartbeat_interval_of_new_member(gbroker.port, "gc-other") == 5000
        # DELETE: back to the broker's value
        assert incremental(gbroker.port, "gc-a", [("consumer.heartbeat.interval.ms", 1, None)]) == (0, None)
        assert describe(gbroker.port, "gc-a")["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG)
        assert heartbeat_interval_of_new_member(gbroker.port, "gc-a") == 5000
    finally:
        admin.close()


@pytest.mark.parametrize("ops, code, message", [
    ([("consumer.bogus.ms", 0, "1")], INVALID_CONFIG, "Unknown group config name: consumer.bogus.ms"),
    ([("share.session.timeout.ms", 0, "50000")], INVALID_CONFIG, "Unknown group config name"),
    ([("consumer.heartbeat.interval.ms", 0, "abc")], INVALID_CONFIG, "Not a number of type INT"),
    ([("consumer.heartbeat.interval.ms", 0, "0")], INVALID_CONFIG, "Value must be at least 1"),
    ([("consumer.heartbeat.interval.ms", 0, "50")], INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ([("consumer.heartbeat.interval.ms", 0, "20000")], INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ([("consumer.session.timeout.ms", 0, "500")], INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ([("consumer.session.timeout.ms", 0, "4000")], INVALID_CONFIG,   # not above the 5 s broker interval
     "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
    ([("consumer.session.timeout.ms", 2, "1")], INVALID_CONFIG, "Config value append is not allowed"),
    ([("consumer.session.timeout.ms", 0, None)], INVALID_REQUEST, "Null value not supported"),
])
def test_bad_group_configs_get_kafkas_errors_and_change_nothing(gbroker, ops, code, message):
    before = describe(gbroker.port, "gc-bad")
    got_code, got_message = incremental(gbroker.port, "gc-bad", ops)
    assert got_code == code and message in (got_message or ""), (got_code, got_message)
    assert describe(gbroker.port, "gc-bad") == before


def test_empty_group_name_and_validate_only(gbroker):
    assert incremental(gbroker.port, "", [("consumer.session.timeout.ms", 0, "30000")]) == (
        INVALID_REQUEST, "Default group resources are not allowed.")
    res = Wire(gbroker.port).call(req(32, resources=[field(32, "resources")(
        resource_type=32, resource_name="", configuration_keys=None)],
        include_synonyms=False, include_documentation=False), 4).results[0]
    assert (res.error_code, res.error_message) == (INVALID_REQUEST, "Group name must not be empty")
    assert incremental(gbroker.port, "gc-v", [("consumer.session.timeout.ms", 0, "30000")], validate_only=True) \
        == (0, None)
    assert describe(gbroker.port, "gc-v")["consumer.session.timeout.ms"] == ("60000", DEFAULT_CONFIG)


def test_legacy_alter_configs_replaces_the_groups_set(gbroker):
    assert incremental(gbroker.port, "gc-l", [("consumer.session.timeout.ms", 0, "30000"),
                                              ("consumer.heartbeat.interval.ms", 0, "1000")]) == (0, None)
    assert legacy(gbroker.port, "gc-l", {"consumer.heartbeat.interval.ms": "2000"}) == (0, None)
    assert describe(gbroker.port, "gc-l") == {"consumer.session.timeout.ms": ("60000", DEFAULT_CONFIG),
                                              "consumer.heartbeat.interval.ms": ("2000", GROUP_CONFIG)}
    assert legacy(gbroker.port, "gc-l", {"consumer.session.timeout.ms": "999"})[0] == INVALID_CONFIG


def test_group_session_timeout_fences_a_killed_confluent_member_and_survives_restart(gbroker, tmp_path):
    create_topic(gbroker.bootstrap, "gc-fence", 2)
    group = "gc-fence"
    assert incremental(gbroker.port, group, [("consumer.session.timeout.ms", 0, "2000"),
                                             ("consumer.heartbeat.interval.ms", 0, "200")]) == (0, None)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})

    def members():
        return {m.member_id for m in admin.describe_consumer_groups([group])[group].result(30).members}
    first = Member("confluent", gbroker.bootstrap, group, "gc-fence", tmp_path, protocol="consumer")
    second = Member("confluent", gbroker.bootstrap, group, "gc-fence", tmp_path, protocol="consumer")
    try:
        wait_until(lambda: sorted(len(m.assignment() or ()) for m in (first, second)) == [1, 1],
                   "two members with one partition each")
        assert len(members()) == 2
        second.kill()        # no leave: only the group's 2 s session timeout removes it (broker: 60 s)
        wait_until(lambda: first.assignment() == {0, 1}, "the survivor to own both partitions", timeout=30)
        assert len(members()) == 1
        first.close()
    finally:
        first.kill()
        second.kill()
    gbroker.restart()
    assert describe(gbroker.port, group) == {"consumer.session.timeout.ms": ("2000", GROUP_CONFIG),
                                             "consumer.heartbeat.interval.ms": ("200", GROUP_CONFIG)}


def test_confluent_admin_alters_and_describes_a_group_resource(gbroker):
    """librdkafka 2.16's admin sends its GROUP resource type as Kafka's ConfigResource GROUP (32)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    res = ConfigResource(ResourceType.GROUP, "gc-cf", incremental_configs=[ConfigEntry(
        "consumer.session.timeout.ms", "30000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    entries = admin.describe_configs([ConfigResource(ResourceType.GROUP, "gc-cf")])
    got = next(iter(entries.values())).result(30)
    assert {k: (e.value, int(e.source)) for k, e in got.items()} == {
        "consumer.session.timeout.ms": ("30000", GROUP_CONFIG), "consumer.heartbeat.interval.ms": ("5000", DEFAULT_CONFIG)}
