"""Classic-protocol members inside a consumer group (KIP-848's mixed groups: Kafka's
classicGroupJoinToConsumerGroup, ...SyncToConsumerGroup, ...HeartbeatToConsumerGroup,
...LeaveToConsumerGroup), as a mixin of GroupCoordinator.

A consumer that still speaks JoinGroup / SyncGroup / Heartbeat / LeaveGroup (group.protocol=
classic) can be a member of a consumer group - one upgraded from a classic group while it ran
(migration.py), or one it joins. The coordinator assigns for it as for everyone (its subscription
comes from its JoinGroup metadata, ConsumerProtocolSubscription, and what it still owns from
that metadata's owned partitions), and maps the classic requests onto the member's epoch:

    JoinGroup   no member id, v4+, dynamic: MEMBER_ID_REQUIRED with a new id (nothing kept);
                else the member is created or updated and reconciled one step, as a heartbeat
                would (its protocols and session timeout kept in tag 0 of its subscription
                record), and answered at once: generation = its member epoch, protocol type
                "consumer", protocol name = its first protocol, no leader (it never assigns).
                A static member replaces the previous incarnation of its instance at once; if
                that was the last consumer-protocol member, the group downgrades (migration.py).
                Errors: INCONSISTENT_GROUP_PROTOCOL (no protocol every classic member shares, or
                not the consumer protocol), GROUP_MAX_SIZE_REACHED (group.consumer.max.size),
                UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID.
    SyncGroup   generation must be its epoch (ILLEGAL_GENERATION), protocol type / name its own
                (INCONSISTENT_GROUP_PROTOCOL); REBALANCE_IN_PROGRESS while the group epoch is
                ahead of its epoch (unless it is revoking: it must first give partitions back);
                else its current assignment, in its subscription's consumer protocol version
                (partitions pending revocation are not in it: the member drops them).
    Heartbeat   generation must be its epoch; REBALANCE_IN_PROGRESS when it must rejoin: the group
                epoch moved, it must revoke, or partitions it waits for are free now.
    LeaveGroup  removes the named classic members (UNKNOWN_MEMBER_ID for consumer-protocol ones),
                group epoch + 1.
Timers (keys of GroupCoordinator._schedule): ("cg-session", ...) with the member's own session
timeout, restarted by each of its requests; ("cg-join", ...) set when it is told to rejoin, and
("cg-sync", ...) set by its JoinGroup answer, both its rebalance timeout: it is fenced when it
does not rejoin, or does not send SyncGroup, in time.

A member that switches protocol keeps its id: a ConsumerGroupHeartbeat makes a classic member a
consumer-protocol one, a JoinGroup the reverse (as in Kafka).
"""
from __future__ import annotations

import logging

from kompakt.broker.groups.consumer.group import ConsumerGroup
from kompakt.broker.groups.consumer.heartbeat import kafka_uuid
from kompakt.broker.groups.consumer.member import ClassicMetadata, ConsumerGroupMember, MemberState
from kompakt.broker.groups.group import CONSUMER_PROTOCOL_TYPE
from kompakt.broker.groups.membership import UNKNOWN_MEMBER_ID, JoinRequest, JoinResult, SyncResult
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def topic_ids(log_manager) -> dict:
    """Topic name -> topic id (uuid.UUID) of the live topics."""
    return {name: meta.topic_id for name, meta in log_manager.topics.items()}


def assignment_bytes(partitions: dict, subscription: bytes, names: dict) -> bytes:
    """A ConsumerProtocolAssignment of `partitions` ({topic id: partitions}; `names`: topic id ->
    name, a deleted topic is left out) in the version of the member's `subscription`."""
    try:
        version = cp.subscription_version(subscription)
    except gr.GroupRecordError:
        version = cp.HIGHEST_VERSION
    return cp.encode_assignment({names[t]: sorted(p) for t, p in partitions.items() if t in names}, version)


class ClassicMembersOfConsumerGroups:
    """The classic group APIs when the group id names a consumer group."""

    # ======================================================================== JoinGroup

    def _classic_join_to_consumer_group(self, group: ConsumerGroup, req: JoinRequest) -> JoinResult:
        try:
            return self._classic_join(group, req)
        except KafkaError as exc:
            return JoinResult(error=exc.code, member_id=req.member_id)

    def _classic_join(self, group: ConsumerGroup, req: JoinRequest) -> JoinResult:
        gid = group.group_id
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        member_id = kafka_uuid() if unknown else req.member_id
        self._throw_if_consumer_group_full(group, member_id)
        if not req.protocols or not group.supports_classic_protocols(
                req.protocol_type, [name for name, _ in req.protocols]):
            raise errors.InconsistentGroupProtocolError(f"Member {member_id}'s protocols are not supported.")
        if unknown and req.group_instance_id is None and req.api_version >= 4:
            log.info("consumer group %s: a classic member without id joins; it is given %s",
                     gid, member_id)
            return JoinResult(error=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        try:
            subscription = cp.decode_subscription(req.protocols[0][1])
        except gr.GroupRecordError as exc:
            raise errors.InconsistentGroupProtocolError(
                f"Member {member_id}'s subscription is not the consumer protocol's: {exc}") from None
        recs: list = []
        if req.group_instance_id is None:
            member, replaced = self._dynamic_member(group, member_id, True, None), None
        else:
            member, replaced = self._static_member(group, member_id, req.group_instance_id,
                                                   unknown, None, recs)
        # (v0 has no rebalance timeout: the session timeout stands in, as in Kafka)
        rebalance = req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms
        updated = member.replace(
            instance_id=req.group_instance_id if req.group_instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance, subscribed_topic_names=tuple(subscription.topics),
            client_id=req.client_id, client_host=req.client_host,
            classic=ClassicMetadata(req.session_timeout_ms, tuple((n, bytes(m)) for n, m in req.protocols)))
        ids = topic_ids(self.broker.log_manager)
        owned = [(ids[t], p) for t, p in subscription.owned_partitions.items() if t in ids]
        previous = group.static_members.get(req.group_instance_id) if req.group_instance_id else None
        reconciled, _ = self._update_member(group, member, updated, replaced, owned, recs, req.describable)
        result = JoinResult(member_id=member_id, generation_id=reconciled.member_epoch,
                            protocol_type=CONSUMER_PROTOCOL_TYPE,
                            protocol_name=updated.classic.protocol_name)
        if previous is not None and self._may_downgrade_replacing(group, previous):
            self._consumer_to_classic_group(group, previous, reconciled, recs)
            return result
        self._append_consumer_records(group, [], recs)
        self._after_update(group, member, reconciled, replaced)
        self._cancel(("cg-join", gid, member_id))
        self._schedule_classic_session(group, reconciled)
        self._schedule(("cg-sync", gid, member_id), rebalance, self._expire_consumer_member, gid,
                       member_id, "it did not send SyncGroup within its rebalance timeout")
        return result

    # ======================================================================== SyncGroup

    def _classic_sync_to_consumer_group(self, group: ConsumerGroup, generation_id: int, member_id: str,
                                        instance_id: str | None, protocol_type: str | None,
                                        protocol_name: str | None) -> SyncResult:
        try:
            member = self._classic_member_of(group, member_id, instance_id)
            _check_generation(member, generation_id)
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise errors.InconsistentGroupProtocolError(
                    f"The protocol type {protocol_type} from member {member.member_id} request is "
                    f"not equal to the group protocol type {CONSUMER_PROTOCOL_TYPE}.")
            if protocol_name is not None and protocol_name != member.classic.protocol_name:
                raise errors.InconsistentGroupProtocolError(
                    f"The protocol name {protocol_name} from member {member.member_id} request is "
                    f"not equal to the protocol name {member.classic.protocol_name} returned in "
                    f"the join response.")
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._schedule_join_timeout(group, member)
                raise errors.RebalanceInProgressError(
                    f"A new rebalance is triggered in group {group.group_id} and member "
                    f"{member.member_id} should rejoin to catch up.")
        except KafkaError as exc:
            return SyncResult(error=exc.code)
        self._cancel(("cg-sync", group.group_id, member.member_id))
        self._schedule_classic_session(group, member)
        names = {tid: name for name, tid in topic_ids(self.broker.log_manager).items()}
        return SyncResult(protocol_type=protocol_type, protocol_name=protocol_name,
                          assignment=assignment_bytes(member.assigned, member.classic.protocols[0][1], names))

    # ======================================================================== Heartbeat

    def _classic_heartbeat_to_consumer_group(self, group: ConsumerGroup, generation_id: int,
                                             member_id: str, instance_id: str | None) -> int:
        try:
            member = self._classic_member_of(group, member_id, instance_id)
            _check_generation(member, generation_id)
        except KafkaError as exc:
            return exc.code
        self._schedule_classic_session(group, member)
        if (member.member_epoch < group.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased_partition(member))):
            self._schedule_join_timeout(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ======================================================================= LeaveGroup

    def _classic_leave_to_consumer_group(self, group: ConsumerGroup,
                                         members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        codes: list[int] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for member_id, instance_id in members:
            try:
                if instance_id is None:
                    member = _member(group, member_id)
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise errors.UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
                    if member_id != UNKNOWN_MEMBER_ID:   # (an admin names the instance alone)
                        _check_not_fenced(member, member_id, instance_id)
                _check_classic(member)
            except KafkaError as exc:
                codes.append(exc.code)
                continue
            log.info("consumer group %s: classic member %s left", group.group_id, member.member_id)
            leaving[member.member_id] = member
            codes.append(ErrorCode.NONE)
        if leaving:
            try:
                self._remove_consumer_members(group, list(leaving.values()))
            except KafkaError as exc:
                return exc.code, [exc.code] * len(members)
        return ErrorCode.NONE, codes

    # ========================================================================== helpers

    def _classic_member_of(self, group: ConsumerGroup, member_id: str,
                           instance_id: str | None) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember, then: it must speak the classic protocol."""
        if instance_id is None:
            member = _member(group, member_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise errors.UnknownMemberIdError(
                    f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
            _check_not_fenced(member, member_id, instance_id)
        _check_classic(member)
        return member

    def _schedule_classic_session(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        self._schedule(("cg-session", group.group_id, member.member_id), member.classic.session_timeout_ms,
                       self._expire_consumer_member, group.group_id, member.member_id, "its session expired")

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Told to rejoin: it must within its rebalance timeout (set once, not pushed back)."""
        key = ("cg-join", group.group_id, member.member_id)
        if key not in self._timers:
            self._schedule(key, member.rebalance_timeout_ms, self._expire_consumer_member, group.group_id,
                           member.member_id, "the classic member did not rejoin within its rebalance timeout")


def _member(group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
    member = group.members.get(member_id)
    if member is None:
        raise errors.UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
    return member


def _check_not_fenced(member: ConsumerGroupMember, member_id: str, instance_id: str) -> None:
    if member.member_id != member_id:
        raise errors.FencedInstanceIdError(
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.")


def _check_classic(member: ConsumerGroupMember) -> None:
    if not member.uses_classic_protocol:
        raise errors.UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    if member.member_epoch != generation_id:
        raise errors.IllegalGenerationError(
            f"The request generation id {generation_id} is not equal to the member epoch "
            f"{member.member_epoch} of member {member.member_id}.")
