"""A dynamic broker config change that cannot be applied or saved is answered with an error for
its resource and leaves nothing behind: not saved, not live, and the next start is clean (Kafka
validates a change fully before it is persisted and answers a failure per resource, never with a
closed connection). Topics stored by older versions with overrides today's rules refuse load
leniently, so pushing new log defaults to them cannot fail either. Real brokers, confluent-kafka.
"""
from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from kompakt.broker.metadata.state_files import BROKER_CONFIGS_FILE
from kompakt.storage.faults import IO_ERROR_ENV
from config_support import restart_with_stored_overrides, topic_configs
from wire_support import Wire, req, sub


def _set(admin, key: str, value: str | None, op=AlterConfigOpType.SET):
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])]).values()
    return future


def _broker_value(admin, key: str) -> str:
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    return future.result(30)[key].value


def test_a_dynamic_change_that_cannot_be_saved_is_answered_and_changes_nothing(start_broker, monkeypatch):
    """The save of the dynamic layers fails (an I/O error on kompakt-broker-configs.json): the
    resource gets an error answer (the connection was closed), the change is not live, and the
    broker restarts with the old value."""
    monkeypatch.setenv(IO_ERROR_ENV, BROKER_CONFIGS_FILE)
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as caught:
        _set(admin, "log.cleaner.backoff.ms", "5000").result(30)
    err = caught.value.args[0]
    assert err.code() == 42 and "could not be saved" in err.str(), err   # INVALID_REQUEST, the cause named
    assert _broker_value(admin, "log.cleaner.backoff.ms") == "15000"          # not live
    assert not os.path.exists(os.path.join(broker.log_dir, BROKER_CONFIGS_FILE))  # not saved
    # the legacy AlterConfigs, raw on one connection: the same answer, and the connection lives on
    R = sub(33, "AlterConfigsResource")
    wire = Wire(broker.port)
    try:
        for _ in range(2):
            legacy = wire.call(req(33, resources=[R(resource_type=4, resource_name="1", configs=[
                R.AlterableConfig(name="log.cleaner.backoff.ms", value="5000")])], validate_only=False), 2)
            [(code, message)] = [(r.error_code, r.error_message) for r in legacy.responses]
            assert code == 42 and "could not be saved" in message
    finally:
        wire.close()
    assert _broker_value(admin, "log.cleaner.backoff.ms") == "15000"

    monkeypatch.delenv(IO_ERROR_ENV)
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _broker_value(admin, "log.cleaner.backoff.ms") == "15000"
    _set(admin, "log.cleaner.backoff.ms", "5000").result(30)
    assert _broker_value(admin, "log.cleaner.backoff.ms") == "5000"


def test_stored_overrides_todays_rules_refuse_load_and_take_new_log_defaults(start_broker):
    """A topic stored with overrides today's rules refuse as a set (min.compaction.lag.ms above
    its own max.compaction.lag.ms, cleanup.policy with a duplicated item) loads (the broker refused
    to start: 'conflict topic config setting min.compaction.lag.ms (500) > max.compaction.lag.ms
    (100)'), keeps compacting, and a dynamic log default pushed to every topic applies to it and
    survives a restart."""
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [created] = admin.create_topics([NewTopic("dyn-stored", 1, config={"cleanup.policy": "compact"})],
                                    operation_timeout=30).values()
    created.result(30)
    restart_with_stored_overrides(broker, "dyn-stored", {
        "min.compaction.lag.ms": "500", "max.compaction.lag.ms": "100", "cleanup.policy": "compact,compact"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _set(admin, "log.cleaner.delete.retention.ms", "1000").result(30)
    _set(admin, "log.segment.bytes", str(8 << 20)).result(30)
    described = topic_configs(admin, "dyn-stored")
    assert (described["delete.retention.ms"], described["segment.bytes"]) == ("1000", str(8 << 20))
    assert (described["min.compaction.lag.ms"], described["max.compaction.lag.ms"]) == ("500", "100")
    with open(os.path.join(broker.log_dir, BROKER_CONFIGS_FILE)) as f:
        assert "log.cleaner.delete.retention.ms" in f.read()

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic_configs(admin, "dyn-stored")["delete.retention.ms"] == "1000"


def test_a_huge_dedupe_buffer_is_checked_without_stalling_the_broker(module_broker):
    """log.cleaner.dedupe.buffer.size=Long.MAX_VALUE: each cleaner thread's offset map is capped at
    Int.MAX_VALUE bytes, as Kafka's LogCleaner does; checking the uncapped size searched for a
    prime near 4e17 on the event loop (15 s per check, three checks per change: the client timed
    out and the next alter failed too)."""
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    try:
        _set(admin, "log.cleaner.dedupe.buffer.size", str(2**63 - 1)).result(30)
        assert _broker_value(admin, "log.cleaner.dedupe.buffer.size") == str(2**63 - 1)
    finally:
        _set(admin, "log.cleaner.dedupe.buffer.size", None, AlterConfigOpType.DELETE).result(30)
    assert _broker_value(admin, "log.cleaner.dedupe.buffer.size") == "134217728"
