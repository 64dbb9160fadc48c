"""GroupConfigs (KIP-848 dynamic group configs): validation against the broker's bounds, the
values the coordinator reads, and persistence through the broker's state file (a stored entry
that no longer parses is dropped at load, never a failed start)."""
from __future__ import annotations

import asyncio
import json

import pytest

from kompakt.broker.groups.group_configs import GroupConfigError, GroupConfigs
from kompakt.broker.metadata.state_files import GROUP_CONFIGS_FILE, StateFile
from kompakt.config.broker_config import BrokerConfig

BOUNDS = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "100"}


def test_values_fall_back_to_the_broker_and_follow_alters(tmp_path):
    cfg = BrokerConfig(BOUNDS)
    store = StateFile(str(tmp_path), GROUP_CONFIGS_FILE)
    gc = GroupConfigs(cfg, store)
    assert (gc.session_timeout_ms("g"), gc.heartbeat_interval_ms("g")) == (45000, 5000)
    asyncio.run(gc.alter("g", {"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": " 200"}))
    assert (gc.session_timeout_ms("g"), gc.heartbeat_interval_ms("g")) == (3000, 200)
    assert gc.session_timeout_ms("other") == 45000
    assert json.loads((tmp_path / GROUP_CONFIGS_FILE).read_text())["body"]["groups"]["g"] == {
        "consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "200"}
    again = GroupConfigs(cfg, store)
    again.load()
    assert again.overrides("g") == {"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "200"}
    asyncio.run(again.alter("g", {}))                       # an empty set forgets the group
    reloaded = GroupConfigs(cfg, store)
    reloaded.load()
    assert reloaded.groups == {}


def test_load_drops_what_no_longer_parses(tmp_path, caplog):
    store = StateFile(str(tmp_path), GROUP_CONFIGS_FILE)
    store.save({"groups": {"g": {"consumer.session.timeout.ms": "abc", "consumer.heartbeat.interval.ms": "300",
                                 "share.session.timeout.ms": "50000"}, "h": {"bogus": "1"}}})
    gc = GroupConfigs(BrokerConfig(BOUNDS), store)
    gc.load()
    assert gc.groups == {"g": {"consumer.heartbeat.interval.ms": "300"}}
    assert "is invalid and is ignored" in caplog.text


@pytest.mark.parametrize("new, message", [
    ({"consumer.session.timeout.ms": "999"}, "must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"}, "must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"consumer.heartbeat.interval.ms": "99"}, "greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "2000"},
     "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "99999999999"}, "Not a number of type INT"),
])
def test_validation_uses_the_broker_bounds(new, message):
    with pytest.raises(GroupConfigError, match=message):
        GroupConfigs(BrokerConfig(BOUNDS)).validate("g", new)
