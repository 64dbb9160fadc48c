"""Classic group membership: JoinGroup, SyncGroup, Heartbeat and LeaveGroup (Kafka's
GroupMetadataManager, classic part), as a mixin of GroupCoordinator over its groups and timers.

Timers (keys of GroupCoordinator._schedule; rescheduling replaces):
  * ("heartbeat", group, member): session.timeout.ms after the last heartbeat / join / sync /
    commit; on expiry the member is removed unless it is parked in a JoinGroup or SyncGroup. A
    member that never completed a join is bounded by NEW_MEMBER_JOIN_TIMEOUT_MS instead
    (KIP-394); a pending member (given an id with MEMBER_ID_REQUIRED) by its session timeout.
  * ("join", group): ends the join phase - group.initial.rebalance.delay.ms for a group coming
    from Empty (extended while new members arrive, bounded by the rebalance timeout), else the
    largest rebalance.timeout.ms of the members, unless all members rejoin earlier.
  * ("sync", group): members that do not send SyncGroup within the rebalance timeout after the
    join phase are removed and the group rebalances again.

What each request does in each state (Kafka's classicGroupJoinToClassicGroup, ...Sync...,
...Heartbeat..., classicGroupLeaveToClassicGroup; "rebalance" = PREPARE_REBALANCE, "try
complete" = end the join phase if everybody rejoined and nothing is pending, never during the
initial delay of a group coming from Empty):

    request              | Empty               | PreparingRebalance   | CompletingRebalance      | Stable
    ---------------------+---------------------+----------------------+--------------------------+--------------------------
    JoinGroup, no id,    | pending + MEMBER_ID_REQUIRED (the member counts once it is back)
      v4+, dynamic       |                     |                      |                          |
    JoinGroup, no id,    | add, rebalance      | add, try complete    | add, rebalance           | add, rebalance
      static new / <v4   |                     |                      |                          |
    JoinGroup, no id,    | -                   | replace id (old one  | replace id, rebalance    | replace id; same protocol
      static known       |                     | fenced), try complete|                          | selected: no rebalance
    JoinGroup, pending id| add, rebalance      | add, try complete    | add, rebalance           | add, rebalance
    JoinGroup, member id | UNKNOWN_MEMBER_ID   | update protocols and | same metadata: current   | leader or new metadata:
                         |                     | timeouts, park, try  | generation at once;      | update, rebalance; else
                         |                     | complete             | new: update, rebalance   | current generation at once
    SyncGroup            | UNKNOWN_MEMBER_ID   | REBALANCE_IN_PROGRESS| park; the leader's one   | the member's assignment
                         |                     |                      | stores and answers all   |
    Heartbeat            | UNKNOWN_MEMBER_ID   | REBALANCE_IN_PROGRESS| NONE                     | NONE
    LeaveGroup           | UNKNOWN_MEMBER_ID   | remove, try complete | remove, rebalance        | remove, rebalance
    session expiry       | -                   | remove, complete if  | remove, rebalance        | remove, rebalance
                         |                     | all rejoined (even in|                          |
                         |                     | the initial delay)   |                          |
    join timer           | -                   | end the join phase   | -                        | -
    sync timer           | -                   | -                    | remove the members that did not sync, rebalance

An empty group id answers INVALID_GROUP_ID before anything else (Kafka's GroupCoordinatorService).
Every request first checks Dead (COORDINATOR_NOT_AVAILABLE) and the member (UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID for a replaced static id), then the generation (ILLEGAL_GENERATION).

Parked requests: a JoinGroup or SyncGroup that must wait is an asyncio future on the member
(`join_future` / `sync_future`), completed when its phase ends; a member removed meanwhile gets
UNKNOWN_MEMBER_ID, a fenced static member FENCED_INSTANCE_ID. One deliberate difference from
Kafka: when a member sends a second JoinGroup (or SyncGroup) while its first one is parked,
Kafka just drops the first callback (its socket server reads one request per connection at a
time, so that request's client has gone); here requests of one connection are answered in
order, so the replaced one is answered REBALANCE_IN_PROGRESS rather than left to block the
connection's later answers.

Invariant: every transition goes through ClassicGroup.fire (group.py's table); the leader's
assignment is appended to __consumer_offsets before any SyncGroup is answered with it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from kompakt.broker.groups.group import ClassicGroup, GroupEvent, GroupState
from kompakt.broker.groups.member import EMPTY_ASSIGNMENT, ClassicMember
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage.faults import crash_point

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000   # Kafka's classic new-member join timeout (5 min)
UNKNOWN_MEMBER_ID = ""


@dataclass
class JoinResult:
    error: int = 0
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list = field(default_factory=list)   # (member_id, group_instance_id, metadata)


@dataclass
class SyncResult:
    error: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = EMPTY_ASSIGNMENT


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list   # (name, metadata) in preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    # With an authorizer: may the member's principal DESCRIBE the topic? (a consumer group's regexes)
    describable: Callable[[str], bool] | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: list   # (member_id, instance_id, client_id, client_host, metadata, assignment)


def storage_error_to_coordinator_error(exc: KafkaError) -> int:
    """Kafka's appendGroupMetadataErrorToResponseError (also used for offset commits)."""
    code = exc.code
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def complete_future(fut, result) -> bool:
    """Answer a parked JoinGroup/SyncGroup once; False if it was already answered (or none)."""
    if fut is not None and not fut.done():
        fut.set_result(result)
        return True
    return False


class ClassicMembership:
    """JoinGroup / SyncGroup / Heartbeat / LeaveGroup over `self.groups` (GroupCoordinator's state)."""

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicMember,
                              timeout_ms: int | None = None) -> None:
        self._schedule(("heartbeat", group.group_id, member.member_id),
                       member.session_timeout_ms if timeout_ms is None else timeout_ms,
                       self._expire_heartbeat, group.group_id, member.member_id)

    def _remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        """Forget a member that was given an id (MEMBER_ID_REQUIRED) but never rejoined, and its
        session timer: nothing of it may outlive it."""
        group.remove(member_id)
        self._cancel(("heartbeat", group.group_id, member_id))

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return
        if member_id in group.pending_members:
            log.info("pending member %s of group %s expired", member_id, group_id)
            group.remove(member_id)
            self._maybe_complete_join_after_removal(group)
        elif group.has_member(member_id):
            member = group.member(member_id)
            if not member.has_satisfied_heartbeat():
                log.info("member %s of group %s expired after its session timeout", member_id, group_id)
                self.counters["members_expired_total"] += 1
                self._remove_member_and_update_group(group, member)

    # ======================================================================== join / sync

    async def join_group(self, req: JoinRequest) -> JoinResult:
        if self.closing:
            return JoinResult(error=ErrorCode.NOT_COORDINATOR, member_id=req.member_id)
        if self.loading:
            return JoinResult(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, member_id=req.member_id)
        if not req.group_id:
            return JoinResult(error=ErrorCode.INVALID_GROUP_ID, member_id=req.member_id)
        if not (self.config["group.min.session.timeout.ms"] <= req.session_timeout_ms
                <= self.config["group.max.session.timeout.ms"]):
            return JoinResult(error=ErrorCode.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty():      # a classic member of a consumer group
                return self._classic_join_to_consumer_group(consumer_group, req)
            refused = self._replace_empty_consumer_group(consumer_group)
            if refused is not None:
                return refused
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                return JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id)
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, self.time_ms())
        if not self._accept_joining_member(group, req.member_id):
            # Kafka removes the refused member: a pending one, or (group.max.size lowered below
            # the size of a loaded group) a member that was not yet awaiting this join phase.
            if req.member_id in group.pending_members:
                self._remove_pending_member(group, req.member_id)
            elif group.has_member(req.member_id):
                self._remove_member_and_update_group(group, group.member(req.member_id))
            return JoinResult(error=ErrorCode.GROUP_MAX_SIZE_REACHED)
        fut = self._loop.create_future()
        if unknown:
            immediate = self._join_new_member(group, req, fut)
        else:
            immediate = self._join_existing_member(group, req, fut)
        if immediate is not None:
            complete_future(fut, immediate)
        return await fut

    def _replace_empty_consumer_group(self, group) -> JoinResult | None:
        """A classic JoinGroup for an empty consumer-protocol group (Kafka's
        maybeDeleteEmptyConsumerGroup): it makes way for a classic group (None: carry on)."""
        try:
            self._delete_consumer_group(group, [])
        except KafkaError as exc:
            return JoinResult(error=storage_error_to_coordinator_error(exc))
        return None

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config["group.max.size"]
        if group.is_state(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ((group.has_member(member_id) and group.member(member_id).is_awaiting_join)
                    or group.num_awaiting_join() < max_size)
        return group.has_member(member_id) or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, fut) -> JoinResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        new_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                return self._replace_static_member(group, req, existing, new_id, fut)
            self._add_member_and_rebalance(group, req, new_id, fut)
            return None
        if req.api_version >= 4:
            # KIP-394: hand out the id first, count the member only once it comes back with it.
            group.pending_members.add(new_id)
            self._schedule(("heartbeat", group.group_id, new_id), req.session_timeout_ms,
                           self._expire_heartbeat, group.group_id, new_id)
            return JoinResult(error=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
        self._add_member_and_rebalance(group, req, new_id, fut)
        return None

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest, fut) -> JoinResult | None:
        member_id = req.member_id
        if group.is_state(GroupState.DEAD):
            return JoinResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return JoinResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                return JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            self._add_member_and_rebalance(group, req, member_id, fut)
            return None
        try:
            group.validate_member(member_id, req.group_instance_id)
        except KafkaError as exc:
            return JoinResult(error=exc.code, member_id=member_id)
        member = group.member(member_id)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, fut)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # Same metadata: the member probably lost our JoinGroup answer; repeat it.
                return self._join_result(group, member, with_members=group.is_leader(member_id))
            self._update_member_and_rebalance(group, member, req, fut)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, fut)
            else:
                return self._join_result(group, member, with_members=False)
        else:
            return JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        return None

    def _join_result(self, group: ClassicGroup, member: ClassicMember, with_members: bool,
                     leader: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            member_id=member.member_id, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader=(leader if leader is not None else group.leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata() if with_members else [])

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str, fut) -> None:
        member = ClassicMember(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms,
            req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True, join_future=fut)
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member)
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                                     req: JoinRequest, fut) -> None:
        if member.join_future is not fut:
            # A second JoinGroup from the same member replaces the first (which it abandoned).
            complete_future(member.join_future, JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS,
                                                     member_id=member.member_id))
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = (req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0
                                       else req.session_timeout_ms)
        member.session_timeout_ms = req.session_timeout_ms
        member.join_future = fut
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _replace_static_member(self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str,
                               fut) -> JoinResult | None:
        """A static member restarted (same group.instance.id, no member id): fence the old id,
        and avoid a rebalance when the group is Stable and the selected protocol stays."""
        current_leader = group.leader_id
        old = group.member(old_id)
        complete_future(old.join_future, JoinResult(error=ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        complete_future(old.sync_future, SyncResult(error=ErrorCode.FENCED_INSTANCE_ID))
        old.join_future = old.sync_future = None
        self._cancel(("heartbeat", group.group_id, old_id))
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = (req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0
                                       else req.session_timeout_ms)
        member.session_timeout_ms = req.session_timeout_ms
        # (client id and host stay those of the replaced member, as in Kafka's replaceStaticMember)
        member.join_future = fut
        if group.is_state(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                try:
                    self._store_group(group, group.assignments())
                except KafkaError as exc:
                    member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved
                    member.join_future = None
                    back = group.replace_static_member(req.group_instance_id, new_id, old_id)
                    self._cancel(("heartbeat", group.group_id, new_id))
                    self._reschedule_heartbeat(group, back)
                    return JoinResult(error=storage_error_to_coordinator_error(exc),
                                      generation_id=group.generation_id,
                                      protocol_type=group.protocol_type,
                                      protocol_name=group.protocol_name, leader=current_leader or "")
                member.join_future = None
                if req.api_version >= 9:
                    # KIP-814: the leader learns the member list but must not assign again.
                    is_leader = group.is_leader(new_id)
                    return self._join_result(group, member, with_members=is_leader,
                                             skip_assignment=is_leader)
                # Older clients: report the old leader id so the restarted member (even if it was
                # the leader) does not compute an assignment a Stable group would never use.
                return self._join_result(group, member, with_members=False, leader=current_leader)
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {req.group_instance_id} rejoined")
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join_phase(group)
        return None

    # -- rebalance machinery --------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, "membership changed")
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_state(GroupState.EMPTY)
        group.fire(GroupEvent.PREPARE_REBALANCE, self.time_ms())
        log.info("group %s preparing to rebalance (generation %d): %s", group.group_id,
                 group.generation_id, reason)
        if initial:
            delay = self.config["group.initial.rebalance.delay.ms"]
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule(("join", group.group_id), delay, self._try_complete_initial_rebalance,
                           group.group_id, delay, remaining)
        elif group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._schedule(("join", group.group_id), group.rebalance_timeout_ms,
                           self._complete_join_by_id, group.group_id)

    def _try_complete_initial_rebalance(self, group_id: str, delay: int, remaining: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            new_delay = min(self.config["group.initial.rebalance.delay.ms"], remaining)
            self._schedule(("join", group_id), new_delay, self._try_complete_initial_rebalance,
                           group_id, new_delay, max(remaining - delay, 0))
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state is GroupState.EMPTY:
            return   # the initial rebalance always waits for its delay timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _maybe_complete_join_after_removal(self, group: ClassicGroup) -> None:
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        self._cancel(("join", group.group_id))
        for m in [m for m in group.not_yet_rejoined_members() if not m.is_static]:
            log.info("member %s of group %s did not rejoin in time; removed", m.member_id, group.group_id)
            group.remove(m.member_id)
            self._cancel(("heartbeat", group.group_id, m.member_id))
            complete_future(m.sync_future, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            self._schedule(("join", group.group_id), group.rebalance_timeout_ms,
                           self._complete_join_by_id, group.group_id)
            return
        now = self.time_ms()
        group.init_next_generation(now)
        if group.is_state(GroupState.EMPTY):
            log.info("group %s is now empty (generation %d)", group.group_id, group.generation_id)
            try:
                self._store_group(group, {})
            except KafkaError as exc:
                log.warning("failed to write empty metadata of group %s: %s", group.group_id, exc)
            return
        self.counters["rebalances_total"] += 1
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            result = self._join_result(group, member, with_members=group.is_leader(member.member_id))
            complete_future(member.join_future, result)
            member.join_future = None
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule(("sync", group.group_id), group.rebalance_timeout_ms, self._expire_pending_sync,
                       group.group_id, group.generation_id)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._cancel(("sync", group.group_id))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.is_state(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            missing = list(group.pending_sync_members)
            log.info("group %s: members %s never sent SyncGroup; removed", group_id, missing)
            for member_id in missing:
                member = group.remove(member_id)
                self._cancel(("heartbeat", group_id, member_id))
                if member is not None:
                    complete_future(member.sync_future, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            self._prepare_rebalance(group, "pending SyncGroup expired")

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel(("sync", group.group_id))

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: int) -> None:
        group.reset_assignments()
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, EMPTY_ASSIGNMENT)
        self._propagate_assignment(group, ErrorCode.NONE)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ok = error == ErrorCode.NONE
        for member in group.members.values():
            result = SyncResult(error=error,
                                protocol_type=group.protocol_type if ok else None,
                                protocol_name=group.protocol_name if ok else None,
                                assignment=member.assignment)
            if complete_future(member.sync_future, result):
                self._reschedule_heartbeat(group, member)
            member.sync_future = None

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicMember) -> None:
        complete_future(member.join_future, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
        complete_future(member.sync_future, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
        self._cancel(("heartbeat", group.group_id, member.member_id))
        group.remove(member.member_id)
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        else:
            self._maybe_complete_join_after_removal(group)

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: list[tuple[str, bytes]]) -> SyncResult:
        if self.closing:
            return SyncResult(error=ErrorCode.NOT_COORDINATOR)
        if not group_id:     # Kafka's GroupCoordinatorService checks it first (isGroupIdNotEmpty)
            return SyncResult(error=ErrorCode.INVALID_GROUP_ID)
        if self.loading:
            return SyncResult(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.is_empty():
                return SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID)
            return self._classic_sync_to_consumer_group(consumer_group, generation_id, member_id,
                                                        group_instance_id, protocol_type, protocol_name)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.DEAD):
            return SyncResult(error=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(member_id, group_instance_id)
        except KafkaError as exc:
            return SyncResult(error=exc.code)
        if generation_id != group.generation_id:
            return SyncResult(error=ErrorCode.ILLEGAL_GENERATION)
        if (_inconsistent(protocol_type, group.protocol_type)
                or _inconsistent(protocol_name, group.protocol_name)):
            return SyncResult(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.member(member_id)
        if group.is_state(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            return SyncResult(protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                              assignment=member.assignment)
        if group.is_state(GroupState.EMPTY):
            return SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID)
        # CompletingRebalance: park the request until the leader's assignment is stored.
        fut = self._loop.create_future()
        complete_future(member.sync_future, SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = fut
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            assignment = {mid: bytes(a) for mid, a in assignments}
            for mid in group.members:
                assignment.setdefault(mid, EMPTY_ASSIGNMENT)
            try:
                self._store_group(group, assignment)
            except KafkaError as exc:
                self._reset_and_propagate_assignment_error(group, storage_error_to_coordinator_error(exc))
                self._maybe_prepare_rebalance_or_complete_join(group)
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.fire(GroupEvent.SYNC_COMPLETE, self.time_ms())
                log.info("group %s stable at generation %d", group_id, group.generation_id)
        return await fut

    # ======================================================================= heartbeat / leave

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self._classic_heartbeat_to_consumer_group(consumer_group, generation_id, member_id,
                                                             group_instance_id)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(member_id, group_instance_id)
        except KafkaError as exc:
            return exc.code
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.member(member_id))
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove (member id, group instance id) pairs; returns (top-level error, per-member errors)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [ErrorCode.INVALID_GROUP_ID] * len(members)
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * len(members)
        if group_id in self.consumer_groups:
            return self._classic_leave_to_consumer_group(self.consumer_groups[group_id], members)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(members)
        codes: list[int] = []
        removed = False
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                existing = group.static_member_id(instance_id) if instance_id is not None else None
                if existing is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                member_id = existing
            elif member_id in group.pending_members:
                self._remove_pending_member(group, member_id)
                codes.append(ErrorCode.NONE)
                removed = True
                continue
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except KafkaError as exc:
                    codes.append(exc.code)
                    continue
            member = group.member(member_id)
            log.info("member %s left group %s", member_id, group_id)
            self._cancel(("heartbeat", group_id, member_id))
            complete_future(member.join_future, JoinResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            complete_future(member.sync_future, SyncResult(error=ErrorCode.UNKNOWN_MEMBER_ID))
            group.remove(member_id)
            codes.append(ErrorCode.NONE)
            removed = True
        if removed:
            if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.is_state(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.NONE, codes

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        fields = group.metadata_record_fields(assignment)
        crash_point("group_rebalance")
        self.topic.append(group.group_id, [(gr.encode_group_metadata_key(group.group_id),
                                            gr.encode_group_metadata_value(**fields))])


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
