"""The group-safe horizon rule (broker/groups/tombstone_guard.py) over committed offsets, and its staleness
bookkeeping: WARNING once per crossing, the counter, and a group coming back."""
import logging

from kompakt.broker.groups.offsets import OffsetAndMetadata
from kompakt.broker.groups.tombstone_guard import TombstoneGuard, compute
from kompakt.cleaner.rules import NO_GROUP_HORIZON
from kompakt.config.topic_config import LogConfig

NOW = 1_700_000_000_000
HOUR = 3_600_000


def om(offset, at):
    return OffsetAndMetadata(offset, commit_timestamp_ms=at)


def test_named_groups_take_the_minimum_and_a_missing_commit_holds_everything():
    committed = {"billing": {0: om(40, NOW), 1: om(7, NOW)}, "audit": {0: om(25, NOW - HOUR)}}
    v = compute(("t", 0), ["billing", "audit"], 24 * HOUR, committed, {}, NOW)
    assert v.horizon_offset == 25 and v.held_by == ["audit"]
    # audit never committed on partition 1: it has not read anything there
    v1 = compute(("t", 1), ["billing", "audit"], 24 * HOUR, committed, {}, NOW)
    assert v1.horizon_offset == 0 and v1.held_by == ["audit"]
    # a named group that never committed on the topic holds all, aged from first sight
    v2 = compute(("t", 0), ["billing", "new"], 24 * HOUR, committed, {"new": NOW - HOUR}, NOW)
    assert v2.horizon_offset == 0 and v2.held_by == ["new"]
    assert [p.age_ms for p in v2.groups if p.group == "new"] == [HOUR]


def test_star_is_every_group_with_a_commit_on_the_partition():
    committed = {"a": {0: om(10, NOW)}, "b": {0: om(30, NOW), 1: om(5, NOW)}}
    assert compute(("t", 0), ["*"], HOUR, committed, {}, NOW).horizon_offset == 10
    v = compute(("t", 1), ["*"], HOUR, committed, {}, NOW)
    assert v.horizon_offset == 5 and v.held_by == ["b"] and [p.group for p in v.groups] == ["b"]
    none = compute(("t", 2), ["*"], HOUR, committed, {}, NOW)
    assert none.horizon_offset is None and none.note


def test_a_group_past_the_max_age_stops_holding():
    committed = {"live": {0: om(90, NOW)}, "dead": {0: om(3, NOW - 2 * HOUR)}}
    v = compute(("t", 0), ["live", "dead"], HOUR, committed, {}, NOW)
    assert v.horizon_offset == 90 and [p.group for p in v.groups if p.stale] == ["dead"]
    assert compute(("t", 0), ["dead"], HOUR, committed, {}, NOW).horizon_offset is None


class Groups:
    """What the guard reads of the coordinator: `started`, `loading` and committed_offsets_of_topic."""

    def __init__(self):
        self.started = True
        self.loading = False
        self.offsets = {}

    def committed_offsets_of_topic(self, topic):
        return {g: dict(p) for g, p in self.offsets.items()}


def test_guard_warns_once_per_crossing_and_counts(caplog):
    groups = Groups()
    clock = [NOW]
    guard = TombstoneGuard(groups, time_ms=lambda: clock[0])
    cfg = LogConfig.from_overrides({"cleanup.policy": "compact", "kompakt.tombstone.retention.groups": "billing",
                                    "kompakt.tombstone.retention.max.ms": str(HOUR)})
    assert guard.horizon(("t", 0), LogConfig.from_overrides({"cleanup.policy": "compact"})) == NO_GROUP_HORIZON
    assert guard.horizon(("t", 0), cfg) == 0           # billing has not committed yet: hold all
    groups.offsets["billing"] = {0: om(12, NOW)}
    assert guard.horizon(("t", 0), cfg) == 12
    clock[0] = NOW + HOUR + 1
    with caplog.at_level(logging.WARNING, "kompakt.tombstones"):
        assert guard.horizon(("t", 0), cfg) == NO_GROUP_HORIZON
        assert guard.horizon(("t", 0), cfg) == NO_GROUP_HORIZON
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "billing" in warnings[0].getMessage()
    assert guard.stats() == {"t": (1, 1)}
    groups.offsets["billing"] = {0: om(30, clock[0])}   # it came back and committed
    assert guard.horizon(("t", 0), cfg) == 30
    assert guard.stats() == {"t": (0, 1)}
    assert guard.view(("t", 0), cfg).as_dict()["held_by"] == ["billing"]


def test_nothing_known_before_the_coordinator_loaded():
    groups = Groups()
    groups.started = False
    cfg = LogConfig.from_overrides({"cleanup.policy": "compact", "kompakt.tombstone.retention.groups": "*"})
    guard = TombstoneGuard(groups, time_ms=lambda: NOW)
    assert guard.horizon(("t", 0), cfg) == 0
    assert guard.view(("t", 0), cfg).horizon_offset == 0
    # a delete-policy topic is never cleaned: no horizon whatever it names
    delete = LogConfig.from_overrides({"kompakt.tombstone.retention.groups": "*"})
    assert guard.horizon(("t", 0), delete) == NO_GROUP_HORIZON


def test_nothing_known_while_the_coordinator_is_still_loading():
    """The coordinator is `started` at once and replays __consumer_offsets in the background
    (`loading`), applying it in slices: a partial view must not let a tombstone go that a group
    not replayed yet has not read (with `*`, a missing group would simply not count)."""
    groups = Groups()
    groups.loading = True
    groups.offsets["fast"] = {0: om(50, NOW)}          # replayed so far; "slow" at 3 comes later
    guard = TombstoneGuard(groups, time_ms=lambda: NOW)
    star = LogConfig.from_overrides({"cleanup.policy": "compact", "kompakt.tombstone.retention.groups": "*"})
    named = LogConfig.from_overrides({"cleanup.policy": "compact",
                                      "kompakt.tombstone.retention.groups": "fast,slow"})
    assert guard.horizon(("t", 0), star) == 0
    assert guard.horizon(("t", 0), named) == 0
    assert guard.view(("t", 0), star).horizon_offset == 0
    groups.offsets["slow"] = {0: om(3, NOW)}
    groups.loading = False
    assert guard.horizon(("t", 0), star) == 3
    assert guard.horizon(("t", 0), named) == 3
    # "slow" was replayed, not first seen while loading: no first-sight age was recorded for it
    assert guard._first_seen == {}
