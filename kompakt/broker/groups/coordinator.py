"""The group coordinator: classic consumer groups and committed offsets on one broker.

Role: what the group handlers (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete) call; this broker is the
coordinator of every group. One object, three modules, like Kafka's split:
  * coordinator.py (here): lifecycle, the replay of `__consumer_offsets` at start, the timers,
    /metrics figures, DescribeGroups / ListGroups / DeleteGroups;
  * membership.py: the classic rebalance protocol (join, sync, heartbeat, leave, static members);
  * offset_manager.py: commits, fetches, OffsetDelete and offset expiry;
  * consumer/heartbeat.py and consumer/admin.py: KIP-848 consumer-protocol groups
    (ConsumerGroupHeartbeat, ConsumerGroupDescribe, their records, epochs and timers);
    consumer/classic_members.py: classic members inside consumer groups; consumer/migration.py:
    live groups converted between the two protocols (group.consumer.migration.policy).
State: `groups` (ClassicGroup, group.py with the state machine table), `consumer_groups`
(consumer/group.py's ConsumerGroup, rebuilt from its records), `offsets` (group ->
(topic, partition) -> OffsetAndMetadata, offsets.py), the timers, and `topic` (OffsetsTopic,
offsets_topic.py: the only seam to storage).

Durability: a commit, a new assignment (leader's SyncGroup), a group becoming Empty, a static
member replaced, a deletion or an expiry is answered only after its record batch has been
appended to the group's partition; an append failure is answered with Kafka's mapping of the
storage error (COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / UNKNOWN_SERVER_ERROR) and the
in-memory state is left as it was. `start()` rebuilds everything by replaying the topic; members
loaded with a Stable group must heartbeat within their session timeout or are removed.

Invariants: all state changes run on the event loop between awaits, so each request sees and
leaves a consistent group; appends are synchronous (offsets_topic.py), so a group never changes
while its record is being written.
"""
from __future__ import annotations

import asyncio
import logging
import time as _time
from typing import Callable

from kompakt.broker.groups.consumer.admin import ConsumerGroupAdmin
from kompakt.broker.groups.consumer.classic_members import ClassicMembersOfConsumerGroups
from kompakt.broker.groups.consumer.group import ConsumerGroup, ConsumerGroupState
from kompakt.broker.groups.consumer.heartbeat import ConsumerGroupHeartbeat, check_consumer_group_config
from kompakt.broker.groups.consumer.migration import GroupMigration
from kompakt.broker.groups.group import ClassicGroup, GroupEvent, GroupState
from kompakt.broker.groups.group_configs import GroupConfigs
from kompakt.broker.groups.member import ClassicMember
from kompakt.broker.groups.membership import (  # noqa: F401  (JoinRequest re-exported for handlers)
    ClassicMembership, GroupDescription, JoinRequest, JoinResult, SyncResult, complete_future,
    storage_error_to_coordinator_error)
from kompakt.broker.groups.offset_manager import OffsetManager
from kompakt.broker.groups.offsets import OffsetAndMetadata
from kompakt.broker.groups.offsets_topic import OFFSETS_TOPIC, OffsetsTopic, PartialAppendError
from kompakt.broker.groups.txn_offsets import TxnOffsets
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

LOAD_SLICE = 2000   # replayed records applied per loop pass while loading


class GroupCoordinator(ClassicMembership, OffsetManager, ConsumerGroupHeartbeat, ConsumerGroupAdmin,
                       ClassicMembersOfConsumerGroups, GroupMigration):
    def __init__(self, broker, *, time_ms: Callable[[], int] | None = None):
        self.broker = broker
        self.config = broker.config
        check_consumer_group_config(self.config)
        # per-group consumer.* overrides (group_configs.py); in memory for a broker without one
        self.group_configs = getattr(broker, "group_configs", None) or GroupConfigs(self.config)
        self.time_ms = time_ms or (lambda: int(_time.time() * 1000))
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 groups (consumer/); a group id is in `groups` or here, never both
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.topic = OffsetsTopic(broker.log_manager, self.config, self.time_ms)
        self.txn_offsets = TxnOffsets(self)   # transactional commits (txn_offsets.py)
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retention_task: asyncio.Task | None = None
        self.started = False
        self.loading = False   # start() set it until __consumer_offsets is loaded: COORDINATOR_LOAD_IN_PROGRESS
        self._load_task: asyncio.Task | None = None
        self.deleted_while_loading: set[str] = set()   # DeleteTopics while loading: tombstoned after
        self.closing = False   # release_parked() was called: JoinGroup/SyncGroup answer NOT_COORDINATOR
        self._stopped = False
        # cumulative counters exported by broker/observability/live.py (see stats())
        self.counters = {"rebalances_total": 0, "members_expired_total": 0,
                         "offset_commits_total": 0, "offsets_expired_total": 0}

    # ============================================================================= lifecycle

    async def start(self, *, background: bool = False) -> None:
        """Replay `__consumer_offsets` and start serving. With `background` (the broker) return at
        once and load in the background, as Kafka's scheduleLoadGroupAndOffsets: until it is
        loaded every group API answers COORDINATOR_LOAD_IN_PROGRESS (retriable: clients back off
        and retry), and the listeners need not wait for a large topic."""
        self._loop = asyncio.get_running_loop()
        self.closing, self._stopped = False, False
        self.loading = True
        self._retention_task = asyncio.create_task(self._retention_loop(), name="offsets-retention")
        self.started = True
        self._load_task = asyncio.create_task(self._load_in_background(), name="offsets-load")
        if not background:
            await asyncio.shield(self._load_task)

    async def _load_in_background(self) -> None:
        """Read and decode the topic in a worker thread, apply it on the loop in slices (the state
        belongs to the loop), then the transactional commits (a thread again: they read the log)."""
        t0 = _time.monotonic()
        try:
            exists = self.topic.exists()
            if exists:
                records = await asyncio.to_thread(lambda: list(self.topic.replay()))
                now = self.time_ms()
                for i in range(0, len(records), LOAD_SLICE):
                    self._apply(records[i:i + LOAD_SLICE], now)
                    await asyncio.sleep(0)
                await asyncio.to_thread(self.txn_offsets.load)
                self._reschedule_all()
        except Exception:
            log.exception("loading %s failed: group requests keep answering COORDINATOR_LOAD_IN_PROGRESS "
                          "(fix the partition and restart)", OFFSETS_TOPIC)
            return
        self.loading = False
        for topic in sorted(self.deleted_while_loading):
            self.on_topic_deleted(topic)
        self.deleted_while_loading.clear()
        if exists:
            log.info("group coordinator loaded %d groups and %d committed offsets from %s in %.2f s",
                     len(self.groups), sum(len(o) for o in self.offsets.values()), OFFSETS_TOPIC,
                     _time.monotonic() - t0)

    def release_parked(self) -> None:
        """The broker is shutting down: answer every parked JoinGroup/SyncGroup with
        NOT_COORDINATOR (the client looks the coordinator up again and retries) and answer new
        ones so at once, so that draining the connections does not wait for a rebalance (up to
        rebalance.timeout.ms). Other requests are still served until stop()."""
        self.closing = True
        for group in self.groups.values():
            for m in group.members.values():
                complete_future(m.join_future, JoinResult(error=ErrorCode.NOT_COORDINATOR, member_id=m.member_id))
                complete_future(m.sync_future, SyncResult(error=ErrorCode.NOT_COORDINATOR))

    async def stop(self) -> None:
        """Answer parked requests, stop the retention loop and every timer; nothing is scheduled
        after this (a late request cannot re-arm a timer)."""
        self.release_parked()
        self.started, self._stopped = False, True
        if self._load_task is not None:
            self._load_task.cancel()
        if self._retention_task is not None:
            self._retention_task.cancel()
            try:
                await self._retention_task
            except (asyncio.CancelledError, Exception):
                pass
            self._retention_task = None
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def stats(self) -> dict:
        """Figures for /metrics (read at scrape time by broker/observability/live.py's LiveCollector)."""
        by_state: dict[str, int] = {s.value: 0 for s in GroupState if s is not GroupState.DEAD}
        for g in self.groups.values():
            if g.state is not GroupState.DEAD:
                by_state[g.state.value] += 1
        consumer_by_state = {s.value: 0 for s in ConsumerGroupState if s is not ConsumerGroupState.DEAD}
        for cg in self.consumer_groups.values():
            consumer_by_state[cg.state.value] += 1
        return {"groups_by_state": by_state, "consumer_groups_by_state": consumer_by_state,
                "members": sum(len(g.members) for g in self.groups.values()),
                "consumer_group_members": sum(len(g.members) for g in self.consumer_groups.values()),
                "offsets": sum(len(o) for o in self.offsets.values()), **self.counters}

    def load(self) -> bool:
        """Replay __consumer_offsets into memory at once (tests; start() loads in the background)."""
        if not self.topic.exists():
            return False
        self._apply(self.topic.replay(), self.time_ms())
        self.txn_offsets.load()
        self._reschedule_all()
        self.loading = False
        return True

    def _apply(self, records, now: int) -> None:
        for key, value in records:
            if key["type"] == "offset_commit":
                self._replay_offset(key, value, now)
            elif key["type"] == "group_metadata":
                self._replay_group(key["group"], value, now)
            elif key["type"].startswith("consumer_group_"):
                self._replay_consumer_record(key, value)

    def _reschedule_all(self) -> None:
        """Kafka's onLoaded: every loaded member must heartbeat within its session timeout; a
        classic group larger than group.max.size (lowered since) rebalances at once, so that
        its members commit and only as many as fit rejoin."""
        max_size = self.config["group.max.size"]
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > max_size and group.can_rebalance():
                self._prepare_rebalance(group, f"loaded with {len(group.members)} members, over "
                                               f"group.max.size {max_size}")
        self._schedule_consumer_sessions()

    def _replay_offset(self, key: dict, value: dict | None, now: int) -> None:
        group_id, tp = key["group"], (key["topic"], key["partition"])
        if value is None:
            committed = self.offsets.get(group_id)
            if committed is not None:
                committed.pop(tp, None)
                if not committed:
                    del self.offsets[group_id]
            return
        self.offsets.setdefault(group_id, {})[tp] = OffsetAndMetadata(
            value["offset"], value["leader_epoch"], value["metadata"], value["commit_timestamp"],
            value["expire_timestamp"])
        if group_id not in self.groups and group_id not in self.consumer_groups:
            self.groups[group_id] = ClassicGroup(group_id, now)

    def _replay_group(self, group_id: str, value: dict | None, now: int) -> None:
        if value is None:
            self.groups.pop(group_id, None)
            return
        state = GroupState.STABLE if value["members"] else GroupState.EMPTY
        ts = value["current_state_timestamp"]
        group = ClassicGroup(group_id, ts if ts >= 0 else now, state)
        group.generation_id = value["generation"]
        group.protocol_type = value["protocol_type"] or None
        group.protocol_name = value["protocol"]
        for m in value["members"]:
            group.add(ClassicMember(
                m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                m["rebalance_timeout"] if m["rebalance_timeout"] >= 0 else m["session_timeout"],
                m["session_timeout"], group.protocol_type or "",
                [(value["protocol"], m["subscription"])], m["assignment"]))
        group.protocol_type = value["protocol_type"] or None
        group.leader_id = value["leader"] if value["leader"] in group.members else group.leader_id
        group.subscribed_topics = group._compute_subscribed_topics()
        self.groups[group_id] = group

    # ================================================================================ timers

    def _schedule(self, key: tuple, delay_ms: int, fn, *args) -> None:
        self._cancel(key)
        if self._loop is None or self._stopped:
            return   # not started yet, or stopped: nothing may run after stop()
        self._timers[key] = self._loop.call_later(max(delay_ms, 0) / 1000.0, self._fire, key, fn, args)

    def _cancel(self, key: tuple) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _fire(self, key: tuple, fn, args) -> None:
        self._timers.pop(key, None)
        try:
            fn(*args)
        except Exception:
            log.exception("group coordinator timer %s failed", key)

    # ============================================================== describe / list / delete

    def describe_group(self, group_id: str) -> GroupDescription | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        stable = group.is_state(GroupState.STABLE)
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(group_id, group.state.value, group.protocol_type or "",
                                group.protocol_name or "" if stable else "", members)

    def list_groups(self, states: list[str] | None = None,
                    types: list[str] | None = None) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of every group, filtered by state and
        type names (case-insensitive, Kafka's ListGroups v4/v5 filters); the type is "classic"
        or "consumer" (KIP-848 groups, whose protocol type is "consumer")."""
        # Null entries (a malformed filter) match nothing rather than failing the request;
        # states are trimmed as Kafka's listGroups does (types are not).
        wanted = {s.lower().strip() for s in states if s is not None} if states else None
        kinds = {t.lower() for t in types if t is not None} if types else None
        rows = []
        if kinds is None or "classic" in kinds:
            rows += [(g.group_id, g.protocol_type or "", g.state.value, "classic")
                     for g in self.groups.values() if not g.is_state(GroupState.DEAD)]
        if kinds is None or "consumer" in kinds:
            rows += [(g.group_id, "consumer", g.state.value, "consumer")
                     for g in self.consumer_groups.values()]
        return [r for r in rows if wanted is None or r[2].lower() in wanted]

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        if self.loading:
            return {g: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for g in group_ids}
        codes: dict[str, int] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group_id in self.consumer_groups:
                codes[group_id] = self._delete_consumer_group_request(group_id)
            elif not group_id:
                codes[group_id] = ErrorCode.INVALID_GROUP_ID
            elif group is None or group.is_state(GroupState.DEAD):
                codes[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_state(GroupState.EMPTY):
                # (pending members do not count: Kafka's validateDeleteGroup looks at the state)
                codes[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                try:
                    self._delete_group(group)
                    codes[group_id] = ErrorCode.NONE
                except KafkaError as exc:
                    codes[group_id] = storage_error_to_coordinator_error(exc)
        return codes

    def _delete_consumer_group_request(self, group_id: str) -> int:
        group = self.consumer_groups[group_id]
        if not group.is_empty():
            return ErrorCode.NON_EMPTY_GROUP
        tps = self._offsets_of_deleted_group(group_id)
        try:
            self._delete_consumer_group(group, [(gr.encode_offset_commit_key(group_id, t, p), None)
                                                for t, p in tps])
        except KafkaError as exc:
            if isinstance(exc, PartialAppendError):
                self._forget_offsets(group_id, tps[:exc.appended])
            return storage_error_to_coordinator_error(exc)
        self._forget_offsets(group_id, tps)
        return ErrorCode.NONE

    def _offsets_of_deleted_group(self, group_id: str) -> list:
        """The partitions a deleted group tombstones: its committed offsets and those only pending
        in a transaction (Kafka's deleteAllOffsets)."""
        committed = self.offsets.get(group_id, {})
        return list(committed) + sorted(self.txn_offsets.pending_partitions(group_id) - committed.keys())

    def _delete_group(self, group: ClassicGroup) -> None:
        """Tombstone every offset, then the group metadata (last, so a partial append leaves the
        group alive), then forget the group."""
        group_id = group.group_id
        tps = self._offsets_of_deleted_group(group_id)
        records = [(gr.encode_offset_commit_key(group_id, t, p), None) for t, p in tps]
        records.append((gr.encode_group_metadata_key(group_id), None))
        try:
            self.topic.append(group_id, records)
        except PartialAppendError as exc:
            self._forget_offsets(group_id, tps[:exc.appended])   # keep memory equal to the log
            raise
        group.fire(GroupEvent.DELETE, self.time_ms())
        self._forget_offsets(group_id, tps)
        self.groups.pop(group_id, None)
        for key in [k for k in self._timers if k[1] == group_id]:
            self._cancel(key)
        log.info("group %s deleted", group_id)
