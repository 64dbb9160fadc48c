"""BROKER resources through IncrementalAlterConfigs, AlterConfigs and DescribeConfigs on a real
Broker (real LogManager on a tmp dir): the two dynamic levels, sources and synonyms as Kafka
describes them, live LogConfig re-derivation (topics without overrides follow, topics with
overrides keep theirs), persistence across a new Broker on the same dir, validate_only."""
import pytest
from kafka.protocol.admin.configs import (AlterConfigsRequest, DescribeConfigsRequest,
                                          IncrementalAlterConfigsRequest)

from admin_harness import Harness

from kompakt.storage import TopicPartition

BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
IR = IncrementalAlterConfigsRequest.AlterConfigsResource
IC = IR.AlterableConfig
DR = DescribeConfigsRequest.DescribeConfigsResource


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, **{"log.retention.hours": "10"})
    yield harness
    harness.close()


async def alter(h, name, *ops, validate_only=False, version=1):
    request = IncrementalAlterConfigsRequest(resources=[IR(resource_type=BROKER, resource_name=name, configs=[
        IC(name=k, config_operation=op, value=v) for k, op, v in ops])], validate_only=validate_only)
    (result,) = (await h.call(request, version)).responses
    return result


async def describe(h, name, keys=None, synonyms=True):
    request = DescribeConfigsRequest(resources=[DR(resource_type=BROKER, resource_name=name, configuration_keys=keys)],
                                     include_synonyms=synonyms, include_documentation=False)
    (result,) = (await h.call(request, 4)).results
    assert result.error_code == 0, result
    return {c.name: c for c in result.configs}


def retention(h, topic):
    return h.lm.get_log(TopicPartition(topic, 0)).config.retention_ms


async def test_cluster_default_and_per_broker_apply_live_to_topics_without_overrides(h):
    h.create("plain")
    h.create("pinned", 1, {"retention.ms": "1234"})
    assert retention(h, "plain") == 36_000_000
    r = await alter(h, "", ("log.retention.ms", SET, "60000"))
    assert (r.error_code, r.error_message) == (0, None)
    assert (retention(h, "plain"), retention(h, "pinned")) == (60000, 1234)
    r = await alter(h, "1", ("log.retention.ms", SET, "30000"))
    assert r.error_code == 0 and retention(h, "plain") == 30000
    rows = await describe(h, "1", ["log.retention.ms", "log.retention.hours", "log.cleaner.threads", "log.dirs"])
    row = rows["log.retention.ms"]
    assert (row.value, row.config_source, row.read_only) == ("30000", 2, False)
    assert [(s.name, s.value, s.source) for s in row.synonyms] == [
        ("log.retention.ms", "30000", 2), ("log.retention.ms", "60000", 3),
        ("log.retention.hours", "10", 4), ("log.retention.hours", "168", 5)]
    assert rows["log.retention.hours"].read_only and rows["log.dirs"].read_only
    assert not rows["log.cleaner.threads"].read_only and rows["log.cleaner.threads"].config_source == 5
    # the cluster-default resource lists its own layer only
    default_rows = await describe(h, "")
    assert list(default_rows) == ["log.retention.ms"]
    assert default_rows["log.retention.ms"].config_source == 3
    assert [(s.source) for s in default_rows["log.retention.ms"].synonyms] == [3]
    # a topic describes the dynamic layers as its synonyms
    from kafka.protocol.admin.configs import DescribeConfigsRequest as D
    (topic,) = (await h.call(D(resources=[DR(resource_type=2, resource_name="plain",
                                             configuration_keys=["retention.ms"])],
                               include_synonyms=True, include_documentation=False), 4)).results
    (row,) = topic.configs
    assert (row.value, row.config_source) == ("30000", 2)
    assert [s.source for s in row.synonyms][:2] == [2, 3]
    # DELETE at the broker level falls back to the default level
    r = await alter(h, "1", ("log.retention.ms", DELETE, None))
    assert r.error_code == 0 and retention(h, "plain") == 60000


async def test_persisted_and_loaded_by_the_next_broker_on_the_dir(tmp_path):
    first = Harness(tmp_path)
    try:
        first.create("t")
        r = await alter(first, "", ("log.segment.bytes", SET, "2000000"), ("my.custom", SET, "x"))
        assert r.error_code == 0
    finally:
        first.close()
    again = Harness(tmp_path)
    try:
        assert again.broker.config["log.segment.bytes"] == 2_000_000
        assert again.lm.get_log(TopicPartition("t", 0)).config.segment_bytes == 2_000_000
        assert again.broker.config.dynamic_default["my.custom"] == "x"
        rows = await describe(again, "1", ["log.segment.bytes", "my.custom"])
        assert rows["log.segment.bytes"].config_source == 3
        # a custom key's type is unknown, so Kafka shows it as sensitive: no value (maybeSensitive)
        custom = rows["my.custom"]
        assert (custom.config_source, custom.value, custom.is_sensitive) == (3, None, True)
    finally:
        again.close()


async def test_refusals_validate_only_and_list_ops(h):
    r = await alter(h, "1", ("log.retention.hours", SET, "1"))
    assert r.error_code == 42 and "Cannot update these configs dynamically: Set(log.retention.hours)" in r.error_message
    r = await alter(h, "1", ("log.cleaner.threads", SET, "3"))
    assert r.error_code == 42 and "more than double the current value 1" in r.error_message
    r = await alter(h, "1", ("log.segment.bytes", SET, "big"))
    assert r.error_code == 42 and "log.segment.bytes" in r.error_message
    r = await alter(h, "7", ("log.retention.ms", SET, "1"))
    assert r.error_code == 42 and "Unexpected broker id" in r.error_message
    r = await alter(h, "1", ("log.retention.ms", APPEND, "1"))
    assert r.error_code == 42 and "append is not allowed" in r.error_message
    r = await alter(h, "1", ("log.retention.ms", SET, "5000"), validate_only=True)
    assert r.error_code == 0 and h.broker.config.dynamic_broker == {}
    # list keys start from the layer's value, else the default (["delete"])
    r = await alter(h, "1", ("log.cleanup.policy", APPEND, "compact"))
    assert r.error_code == 0 and h.broker.config["log.cleanup.policy"] == ["delete", "compact"]
    r = await alter(h, "1", ("log.cleanup.policy", SUBTRACT, "delete"))
    assert r.error_code == 0 and h.broker.config.dynamic_broker == {"log.cleanup.policy": "compact"}
    h.create("c")
    assert h.lm.get_log(TopicPartition("c", 0)).config.compact


async def test_legacy_alter_configs_replaces_the_whole_layer(h):
    assert (await alter(h, "1", ("log.retention.ms", SET, "1000"), ("message.max.bytes", SET, "2000"))).error_code == 0
    LR = AlterConfigsRequest.AlterConfigsResource
    request = AlterConfigsRequest(resources=[LR(resource_type=BROKER, resource_name="1", configs=[
        LR.AlterableConfig(name="message.max.bytes", value="3000")])], validate_only=False)
    (result,) = (await h.call(request, 2)).responses
    assert result.error_code == 0
    assert h.broker.config.dynamic_broker == {"message.max.bytes": "3000"}
    assert h.broker.config.log_retention_ms == 36_000_000


async def test_secrets_are_neither_described_nor_logged(h, caplog):
    """A JAAS line or key password set per listener at run time is sensitive (Kafka types it as
    its unprefixed key): DescribeConfigs answers null and no log line carries the value; a
    non-secret listener override is shown as it is."""
    import logging
    secret = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_eve="hunter2-secret";'
    caplog.set_level(logging.DEBUG)
    r = await alter(h, "1", ("listener.name.sasl_ssl.plain.sasl.jaas.config", SET, secret),
                    ("listener.name.ssl.ssl.key.password", SET, "hunter2-secret"),
                    ("listener.name.ssl.ssl.client.auth", SET, "required"))
    assert r.error_code == 0
    rows = await describe(h, "1", ["listener.name.sasl_ssl.plain.sasl.jaas.config", "listener.name.ssl.ssl.key.password",
                                   "listener.name.ssl.ssl.client.auth"])
    assert [(rows[k].value, rows[k].is_sensitive) for k in sorted(rows)] == [
        (None, True), ("required", False), (None, True)]
    assert "hunter2" not in caplog.text and "listener.name.ssl.ssl.key.password" in caplog.text


def test_ignored_keys_are_logged_without_their_values(caplog):
    import logging

    from kompakt.config.broker_config import BrokerConfig, is_sensitive
    caplog.set_level(logging.INFO)
    BrokerConfig({"password.encoder.secret": "hunter2-secret", "sasl.oauthbearer.client.secret": "hunter2-too"})
    assert "password.encoder.secret" in caplog.text and "hunter2" not in caplog.text
    assert is_sensitive("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config") and is_sensitive("my.custom")
    assert not is_sensitive("log.retention.ms") and not is_sensitive("listener.name.ssl.ssl.client.auth")
