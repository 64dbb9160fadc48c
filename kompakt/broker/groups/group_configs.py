"""Dynamic group configs (KIP-848): Kafka's GroupConfig and GroupConfigManager for one node.

Role: the per-group overrides that DescribeConfigs / IncrementalAlterConfigs / AlterConfigs
read and write for resource type GROUP (32), and the values the consumer-group coordinator uses
for that group's members:

    group key                        broker default (and bounds)                         used for
    consumer.session.timeout.ms      group.consumer.session.timeout.ms                   a member's session timer
                                     (group.consumer.min/max.session.timeout.ms)
    consumer.heartbeat.interval.ms   group.consumer.heartbeat.interval.ms                the interval a member is told
                                     (group.consumer.min/max.heartbeat.interval.ms)

Kafka 4 also has `share.*` group keys (share groups, which Kompakt does not have): they are
refused as unknown names here. A group's overrides may be set before the group exists and stay
when it is deleted (Kafka keeps them in its metadata log, apart from the group).

Checks (Kafka's GroupConfigManager.validate: the broker's group.consumer.* values, overlaid with
the group's complete new set, then GroupConfig.validateValues), each INVALID_CONFIG with Kafka's
message: an unknown name ("Unknown group config name: X"); a value that is not an int >= 1; a
value outside the broker's min/max bounds ("consumer.session.timeout.ms must be greater than or
equal to group.consumer.min.session.timeout.ms"); a session timeout not above the heartbeat
interval. An empty group name is INVALID_REQUEST ("Default group resources are not allowed.").

Persistence: the whole map goes to `kompakt-group-configs.json` in the first log dir
({"groups": {group id: {key: value}}}, metadata/state_files.StateFile: temp file, fsync, rename, fsync
dir) before the change is acknowledged; memory follows after the save, so a crash leaves the
old set or the new, and start-up loads what was saved (a stored entry that no longer parses is
dropped with an ERROR line, never a failed start). Changes apply at the member's next heartbeat
(its new interval in the answer, its session timer restarted with the new timeout), as in Kafka.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Mapping

log = logging.getLogger(__name__)

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True)
class GroupKey:
    name: str
    broker_key: str        # the broker's default for it (Kafka's extractConsumerGroupConfigMap)
    min_key: str
    max_key: str
    doc: str


GROUP_KEYS: dict[str, GroupKey] = {k.name: k for k in (
    GroupKey(SESSION_TIMEOUT, "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
             "group.consumer.max.session.timeout.ms",
             "The timeout to detect client failures when using the consumer group protocol."),
    GroupKey(HEARTBEAT_INTERVAL, "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
             "group.consumer.max.heartbeat.interval.ms",
             "The heartbeat interval given to the members of a consumer group."),
)}


class GroupConfigError(Exception):
    """A refused group config: INVALID_CONFIG, or INVALID_REQUEST when `invalid_request`."""

    def __init__(self, message: str, invalid_request: bool = False):
        super().__init__(message)
        self.invalid_request = invalid_request


def _parse_int(name: str, value) -> int:
    try:
        parsed = int(str(value).strip())
    except (TypeError, ValueError):
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    if not -2**31 <= parsed < 2**31:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
    if parsed < 1:
        raise GroupConfigError(f"Invalid value {parsed} for configuration {name}: Value must be at least 1")
    return parsed


def check_group_name(group_id: str | None) -> None:
    if not group_id:
        raise GroupConfigError("Default group resources are not allowed.", invalid_request=True)


class GroupConfigs:
    """group id -> overrides (raw strings), persisted through `store` (`load()`, `save(body)`)."""

    def __init__(self, config, store=None):
        self.config = config
        self.store = store
        self.groups: dict[str, dict[str, str]] = {}
        self._lock: asyncio.Lock | None = None

    def load(self) -> None:
        stored = self.store.load() if self.store is not None else None
        for group_id, overrides in ((stored or {}).get("groups") or {}).items():
            good = {}
            for name, value in (overrides or {}).items():
                try:
                    if name not in GROUP_KEYS:
                        raise GroupConfigError(f"Unknown group config name: {name}")
                    _parse_int(name, value)
                    good[name] = str(value)
                except GroupConfigError as exc:
                    log.error("group %s config %s=%s is invalid and is ignored: %s", group_id, name, value, exc)
            if good:
                self.groups[str(group_id)] = good
        if self.groups:
            log.info("dynamic group configs: %s", self.groups)

    # -- what the coordinator uses ---------------------------------------------------------------
    def value(self, group_id: str, name: str) -> int:
        """The group's override of `name`, else the broker's group.consumer.* value."""
        raw = self.groups.get(group_id, {}).get(name)
        return int(raw) if raw is not None else self.config[GROUP_KEYS[name].broker_key]

    def session_timeout_ms(self, group_id: str) -> int:
        return self.value(group_id, SESSION_TIMEOUT)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.value(group_id, HEARTBEAT_INTERVAL)

    # -- DescribeConfigs -------------------------------------------------------------------------
    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self.groups.get(group_id, {}))

    def describe(self, group_id: str) -> list[tuple[GroupKey, int, bool]]:
        """(key, effective value, whether the group overrides it) for every group key."""
        check_group_name(group_id)
        mine = self.groups.get(group_id, {})
        return [(key, self.value(group_id, name), name in mine) for name, key in GROUP_KEYS.items()]

    # -- the alter path --------------------------------------------------------------------------
    def validate(self, group_id: str, new: Mapping[str, str]) -> dict[str, str]:
        """Check `new` as the group's complete override set; returns it normalised."""
        check_group_name(group_id)
        for name in new:
            if name not in GROUP_KEYS:
                raise GroupConfigError(f"Unknown group config name: {name}")
        values = {name: self.config[key.broker_key] for name, key in GROUP_KEYS.items()}
        values.update({name: _parse_int(name, value) for name, value in new.items()})
        for name, key in GROUP_KEYS.items():
            if values[name] < self.config[key.min_key]:
                raise GroupConfigError(f"{name} must be greater than or equal to {key.min_key}")
            if values[name] > self.config[key.max_key]:
                raise GroupConfigError(f"{name} must be less than or equal to {key.max_key}")
        if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
            raise GroupConfigError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
        return {name: str(value).strip() for name, value in new.items()}

    async def alter(self, group_id: str, new: Mapping[str, str]) -> None:
        """Validate, persist (in a worker thread: the save fsyncs), then swap in `new` as the
        group's whole override set. One alter at a time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            checked = self.validate(group_id, new)
            groups = {gid: dict(o) for gid, o in self.groups.items()}
            if checked:
                groups[group_id] = checked
            else:
                groups.pop(group_id, None)
            if self.store is not None:
                await asyncio.to_thread(self.store.save, {"groups": groups})
            self.groups = groups
            log.info("group %s configs are now %s", group_id, checked or "default")
