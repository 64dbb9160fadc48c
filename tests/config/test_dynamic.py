"""Dynamic broker configs (config/dynamic.py): layers, Kafka's refusals and messages, the
reconfigurable hooks, and the persisted store (a real file through broker/metadata/state_files)."""
import asyncio

import pytest

from kompakt.broker.metadata.state_files import BROKER_CONFIGS_FILE, StateFile
from kompakt.config.broker_config import BrokerConfig, ConfigError
from kompakt.config.dynamic import (CLUSTER_DEFAULT, PER_BROKER, DynamicBrokerConfig, DynamicConfigError,
                                    Reconfigurable, is_dynamic)


@pytest.fixture
def dyn(tmp_path):
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "log.retention.hours": "10", "log.segment.bytes": "5000"})
    return DynamicBrokerConfig(cfg, StateFile(str(tmp_path), BROKER_CONFIGS_FILE))


def test_kafkas_dynamic_keys():
    assert is_dynamic("log.retention.ms") and is_dynamic("log.cleaner.threads") and is_dynamic("message.max.bytes")
    # Kafka refuses the hours/minutes spellings at run time (only each topic config's first synonym)
    assert not is_dynamic("log.retention.hours") and not is_dynamic("log.roll.hours")
    assert not is_dynamic("log.dirs") and not is_dynamic("node.id")


async def test_layers_precedence_and_persistence(dyn, tmp_path):
    cfg = dyn.config
    assert cfg["log.segment.bytes"] == 5000 and cfg.layers("log.segment.bytes") == [(4, 5000)]
    await dyn.update(CLUSTER_DEFAULT, {"log.segment.bytes": "6000", "log.retention.ms": "60000"})
    assert cfg["log.segment.bytes"] == 6000 and cfg.log_retention_ms == 60000   # ms beats static hours
    await dyn.update(PER_BROKER, {"log.segment.bytes": "7000"})
    assert cfg["log.segment.bytes"] == 7000
    assert cfg.layers("log.segment.bytes") == [(2, 7000), (3, 6000), (4, 5000)]
    assert cfg.is_static("log.segment.bytes") and not cfg.is_static("log.retention.ms")
    # a new broker on the same dir starts with both layers
    again = BrokerConfig({"log.dirs": str(tmp_path), "log.segment.bytes": "5000"})
    DynamicBrokerConfig(again, StateFile(str(tmp_path), BROKER_CONFIGS_FILE)).load()
    assert (again["log.segment.bytes"], again["log.retention.ms"]) == (7000, 60000)
    await dyn.update(PER_BROKER, {})
    assert cfg["log.segment.bytes"] == 6000


@pytest.mark.parametrize("level, layer, message", [
    (PER_BROKER, {"log.retention.hours": "1"}, "Cannot update these configs dynamically: Set(log.retention.hours)"),
    (PER_BROKER, {"log.dirs": "/x", "node.id": "3"}, "Cannot update these configs dynamically: Set(log.dirs, node.id)"),
    (PER_BROKER, {"process.roles": "broker"}, "Cannot update these configs dynamically: Set(process.roles)"),
    (PER_BROKER, {"log.cleaner.threads": "two"}, "Invalid value 'two' for configuration log.cleaner.threads"),
    (PER_BROKER, {"log.cleanup.policy": "shred"}, "Invalid value shred for configuration log.cleanup.policy"),
    (PER_BROKER, {"ssl.keystore.location": "/k"}, "only per-listener using the listener prefix"),
    (CLUSTER_DEFAULT, {"listener.name.plaintext.ssl.keystore.location": "/k"},
     "Cannot update these configs at default cluster level, broker id must be specified"),
])
async def test_refusals_change_nothing(dyn, level, layer, message):
    with pytest.raises(DynamicConfigError) as info:
        await dyn.update(level, layer)
    assert message in str(info.value)
    assert dyn.config.dynamic_broker == {} and dyn.config.dynamic_default == {}
    assert dyn.store.load() is None


async def test_custom_and_ignored_keys_are_kept_like_kafka(dyn):
    # Kafka accepts custom names and its own dynamic keys a single node has no use for
    await dyn.update(CLUSTER_DEFAULT, {"my.custom.setting": "x", "num.io.threads": "16"})
    assert dyn.config.dynamic_default == {"my.custom.setting": "x", "num.io.threads": "16"}


async def test_reconfigurables_validate_then_apply_only_for_their_keys(dyn):
    calls = []

    def validate(candidate):
        if candidate["log.cleaner.threads"] > 4:
            raise ConfigError("too many")

    async def apply(config):
        await asyncio.sleep(0)
        calls.append(("cleaner", config["log.cleaner.threads"]))

    dyn.register(Reconfigurable("cleaner", frozenset({"log.cleaner.threads"}), validate, apply))
    dyn.register(Reconfigurable("logs", frozenset({"log.retention.ms"}), None, lambda c: calls.append(("logs",))))
    with pytest.raises(DynamicConfigError, match="Invalid dynamic configuration: too many"):
        await dyn.update(PER_BROKER, {"log.cleaner.threads": "5"})
    assert calls == []
    changed = await dyn.update(PER_BROKER, {"log.cleaner.threads": "2"})
    assert changed == {"log.cleaner.threads"} and calls == [("cleaner", 2)]
    # the same effective value at another level: nothing to apply
    assert await dyn.update(CLUSTER_DEFAULT, {"log.cleaner.threads": "3"}) == set()
    assert calls == [("cleaner", 2)]


def test_load_drops_stored_values_that_no_longer_parse(dyn, caplog):
    dyn.store.save({"default": {"log.segment.bytes": "oops", "log.retention.ms": "5"}, "broker": {}})
    dyn.load()
    assert dyn.config.dynamic_default == {"log.retention.ms": "5"} and dyn.config["log.segment.bytes"] == 5000
    assert "log.segment.bytes=oops is invalid and is ignored" in caplog.text


def test_a_damaged_store_stops_the_start_naming_the_file(dyn):
    with open(dyn.store.path, "w") as fh:
        fh.write('{"body": {"default": {}, "broker": {}}, "crc32c": 1, "version": 1}')
    with pytest.raises(Exception, match=BROKER_CONFIGS_FILE):
        dyn.load()


async def test_the_save_runs_off_the_loop_and_updates_run_one_at_a_time(tmp_path):
    """The store fsyncs: it runs in a worker thread, so the event loop keeps serving meanwhile;
    two updates started together both end up in the persisted layers."""
    import threading

    loop_thread = threading.current_thread()
    saved_on = []

    class SlowStore(StateFile):
        def save(self, body):
            saved_on.append(threading.current_thread())
            threading.Event().wait(0.05)          # a slow disk
            super().save(body)

    cfg = BrokerConfig({"log.dirs": str(tmp_path)})
    dyn = DynamicBrokerConfig(cfg, SlowStore(str(tmp_path), BROKER_CONFIGS_FILE))
    await asyncio.gather(dyn.update(CLUSTER_DEFAULT, {"log.retention.ms": "60000"}),
                         dyn.update(PER_BROKER, {"log.segment.bytes": "7000"}))
    assert saved_on and loop_thread not in saved_on
    again = BrokerConfig({"log.dirs": str(tmp_path)})
    DynamicBrokerConfig(again, StateFile(str(tmp_path), BROKER_CONFIGS_FILE)).load()
    assert (again["log.retention.ms"], again["log.segment.bytes"]) == (60000, 7000)
    assert (cfg["log.retention.ms"], cfg["log.segment.bytes"]) == (60000, 7000)


async def test_a_failed_apply_is_rolled_back_and_nothing_is_saved(dyn):
    """An apply that raises (after validation passed): the old layers come back, the components
    already called (the failing one too: it may have applied part) are called again with them,
    nothing is saved, and the caller gets DynamicConfigError naming the component."""
    await dyn.update(PER_BROKER, {"log.retention.ms": "60000"})
    calls = []

    def breaks(config):
        calls.append(("threads", config["log.cleaner.threads"]))
        if config["log.cleaner.threads"] == 2:
            raise OSError("cannot start a worker")

    dyn.register(Reconfigurable("logs", frozenset({"log.retention.ms"}), None,
                                lambda c: calls.append(("logs", c["log.retention.ms"]))))
    dyn.register(Reconfigurable("cleaner", frozenset({"log.cleaner.threads"}), None, breaks))
    with pytest.raises(DynamicConfigError, match="cleaner could not apply the change .OSError: cannot start a "
                                                 "worker.; nothing was changed"):
        await dyn.update(PER_BROKER, {"log.retention.ms": "5000", "log.cleaner.threads": "2"})
    assert calls == [("logs", 5000), ("threads", 2), ("logs", 60000), ("threads", 1)]
    assert dyn.config.dynamic_broker == {"log.retention.ms": "60000"} and dyn.config["log.cleaner.threads"] == 1
    assert dyn.store.load() == {"default": {}, "broker": {"log.retention.ms": "60000"}}


async def test_a_check_that_breaks_refuses_the_change(dyn):
    def broken(candidate):
        raise KeyError("no such thing")

    dyn.register(Reconfigurable("cleaner", frozenset({"log.cleaner.threads"}), broken, None))
    with pytest.raises(DynamicConfigError, match="the check of cleaner failed: KeyError"):
        await dyn.update(PER_BROKER, {"log.cleaner.threads": "2"})
    assert dyn.config.dynamic_broker == {} and dyn.store.load() is None
