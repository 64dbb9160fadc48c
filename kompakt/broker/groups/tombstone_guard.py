"""Group-safe tombstones: the consumer groups a compacted topic names hold its deletes back.

Role: the broker side of `kompakt.tombstone.retention.groups`. Kafka removes a tombstone (and a
transaction marker) once `delete.retention.ms` has passed since a clean first kept it, so a
consumer offline for longer silently misses the delete (seed 000). A topic may name consumer
groups (or `*`: every group with committed offsets on the topic); then a tombstone also waits
until each of them has a committed offset past it. The cleaner never sees a group: per clean it
asks `LogCleaner.group_horizon(tp, config)` for one number, the partition's group-safe horizon
offset, which this module computes from the group coordinator's committed offsets:

    horizon(p) = min over the holding groups g of committed_offset(g, p)
    holding    = the groups whose latest commit on the topic is younger than
                 kompakt.tombstone.retention.max.ms, among
                 - the named groups: every partition; one without a commit on p holds all of p
                   (horizon 0; a named group that never committed on the topic counts its age
                   from when this broker first looked for it);
                 - for `*`: the groups with a commit on p (a group that only ever read some
                   partitions, by manual assignment, holds only those)
    no holding group, or the key unset  ->  LONG_MAX: Kafka's rule unchanged

A group past the max age stops holding (one dead group must not stop deletes forever): a WARNING
line when it crosses over, the gauge kompakt_tombstone_retention_stale_groups{topic} and the
counter kompakt_tombstone_retention_stale_group_events_total{topic}. The rule a clean applies
with the number is `kompakt.cleaner.rules.tombstones_removable`.

Threads: `horizon` runs in a cleaner thread, `view` in admin threads; both read the coordinator
through `committed_offsets_of_topic`, a copy taken under the GIL, and keep their own small state
behind a lock. Until the coordinator has replayed `__consumer_offsets` (it is `started` and still
`loading` meanwhile) nothing is known about the groups, so every partition of a topic that names
groups is held whole (horizon 0).
"""
from __future__ import annotations

import logging
import threading
import time as _time
from dataclasses import dataclass, field

from kompakt.cleaner.rules import NO_GROUP_HORIZON

log = logging.getLogger("kompakt.tombstones")
ALL_GROUPS = "*"


@dataclass
class GroupPosition:
    group: str
    committed_offset: int | None      # on this partition; None: no commit here (holds everything)
    last_commit_ms: int | None        # latest commit on the topic; None: never committed on it
    age_ms: int
    stale: bool                       # past kompakt.tombstone.retention.max.ms: not holding


@dataclass
class HorizonView:
    """One partition's group-safe horizon and why (the admin API shows it as is)."""
    groups_config: list
    max_age_ms: int
    horizon_offset: int | None        # None: no group holds tombstones back (Kafka's rule)
    held_by: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    note: str | None = None

    def as_dict(self) -> dict:
        return {"groups_config": self.groups_config, "max_age_ms": self.max_age_ms,
                "horizon_offset": self.horizon_offset, "held_by": self.held_by,
                "groups": [g.__dict__ for g in self.groups], "note": self.note}


def configured_groups(config) -> list:
    """The topic's kompakt.tombstone.retention.groups (empty when unset or not compacted)."""
    if not getattr(config, "compact", False):
        return []
    return list(getattr(config, "kompakt_tombstone_retention_groups", None) or [])


def compute(tp, spec: list, max_age_ms: int, committed: dict, first_seen: dict, now_ms: int) -> HorizonView:
    """The pure rule: `committed` is {group: {partition: OffsetAndMetadata}} of the topic,
    `first_seen` {group: ms} for named groups without a commit on it."""
    names = sorted(committed) if spec == [ALL_GROUPS] else list(spec)
    positions = []
    for g in names:
        parts = committed.get(g) or {}
        last = max(om.commit_timestamp_ms for om in parts.values()) if parts else None
        since = last if last is not None else first_seen.get(g, now_ms)
        age = max(0, now_ms - since)
        om = parts.get(tp[1])
        if om is None and spec == [ALL_GROUPS]:
            continue
        positions.append(GroupPosition(g, max(om.offset, 0) if om is not None else None, last, age,
                                       age > max_age_ms))
    holding = [(p.committed_offset if p.committed_offset is not None else 0, p.group)
               for p in positions if not p.stale]
    view = HorizonView(list(spec), max_age_ms, None, groups=positions)
    if holding:
        view.horizon_offset = min(o for o, _ in holding)
        view.held_by = sorted(g for o, g in holding if o == view.horizon_offset)
    elif spec == [ALL_GROUPS] and not positions:
        view.note = "no group has committed offsets on this partition"
    return view


class TombstoneGuard:
    def __init__(self, groups, *, time_ms=None):
        self.groups = groups              # the GroupCoordinator (committed_offsets_of_topic, started)
        self.time_ms = time_ms or (lambda: int(_time.time() * 1000))
        self._lock = threading.Lock()
        self._first_seen: dict = {}       # (topic, group) -> ms: named groups with no commit on the topic
        self._stale: dict = {}            # topic -> set of groups that stopped holding
        self.stale_events: dict = {}      # topic -> crossings into staleness (the counter)

    def _committed(self, topic: str) -> dict | None:
        """The groups' commits on `topic`, or None while they are not all known: before the
        coordinator starts, and while it replays __consumer_offsets (`loading`: it serves from
        the start and applies the replay in slices, so a partial view would miss groups)."""
        if not getattr(self.groups, "started", False) or getattr(self.groups, "loading", False):
            return None
        return self.groups.committed_offsets_of_topic(topic)

    def view(self, tp, config) -> HorizonView | None:
        """The horizon of one partition now, for status (records nothing)."""
        spec = configured_groups(config)
        if not spec:
            return None
        max_age = config.kompakt_tombstone_retention_max_ms
        committed = self._committed(tp[0])
        if committed is None:
            return HorizonView(spec, max_age, 0, note="consumer groups not loaded yet: every tombstone is held")
        with self._lock:
            seen = {g: ms for (t, g), ms in self._first_seen.items() if t == tp[0]}
        return compute(tp, spec, max_age, committed, seen, self.time_ms())

    def horizon(self, tp, config) -> int:
        """LogCleaner.group_horizon: the number a clean of `tp` gets (LONG_MAX: none)."""
        spec = configured_groups(config)
        if not spec:
            return NO_GROUP_HORIZON
        committed = self._committed(tp[0])
        if committed is None:
            return 0
        now = self.time_ms()
        topic = tp[0]
        with self._lock:
            for g in spec:
                if g != ALL_GROUPS and g not in committed:
                    self._first_seen.setdefault((topic, g), now)
            seen = {g: ms for (t, g), ms in self._first_seen.items() if t == topic}
            view = compute(tp, spec, config.kompakt_tombstone_retention_max_ms, committed, seen, now)
            self._note_staleness(topic, view)
        return NO_GROUP_HORIZON if view.horizon_offset is None else view.horizon_offset

    def _note_staleness(self, topic: str, view: HorizonView) -> None:
        before = self._stale.get(topic, set())
        now_stale = {p.group for p in view.groups if p.stale}
        for p in view.groups:
            if p.stale and p.group not in before:
                self.stale_events[topic] = self.stale_events.get(topic, 0) + 1
                log.warning("consumer group %s has not committed offsets on topic %s for %d ms "
                            "(kompakt.tombstone.retention.max.ms=%d): it no longer holds the topic's "
                            "tombstones back, and a consumer of it that comes back later may miss deletes",
                            p.group, topic, p.age_ms, view.max_age_ms)
            elif not p.stale and p.group in before:
                log.info("consumer group %s committed on topic %s again: it holds tombstones back again",
                         p.group, topic)
        self._stale[topic] = now_stale

    def stats(self) -> dict:
        """{topic: (stale groups now, crossings so far)} for /metrics."""
        with self._lock:
            topics = set(self._stale) | set(self.stale_events)
            return {t: (len(self._stale.get(t, ())), self.stale_events.get(t, 0)) for t in topics}

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            self._stale.pop(topic, None)
            self.stale_events.pop(topic, None)
            for key in [k for k in self._first_seen if k[0] == topic]:
                del self._first_seen[key]
