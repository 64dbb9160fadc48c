"""ConsumerGroupHeartbeat: joining, staying in and leaving a consumer-protocol group (Kafka's
GroupMetadataManager.consumerGroupHeartbeat), as a mixin of GroupCoordinator.

One heartbeat does, in order (each step's records go into one batch, appended to the group's
`__consumer_offsets` partition before anything changes in memory, then applied to the group):

 1. validate the request (INVALID_REQUEST / UNSUPPORTED_ASSIGNOR / INVALID_REGULAR_EXPRESSION);
    epoch -1 or -2 is a leave (see below);
 2. find the group - epoch 0 creates it, replacing an *empty* classic group (its GroupMetadata
    tombstoned, offsets kept) or upgrading a live one whose members speak the consumer protocol
    type (migration.py, when group.consumer.migration.policy allows; else GROUP_ID_NOT_FOUND) -
    and the member: epoch 0 joins (a static member replaces its previous incarnation only once
    that one left with epoch -2, else UNRELEASED_INSTANCE_ID - or at once if that one was a
    classic member), otherwise the member must exist (UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID
    for a replaced static member) at the epoch the coordinator gave it, or the previous one with
    a subset of its partitions (a lost answer), else FENCED_MEMBER_EPOCH;
 3. update the member's subscription (record type 5 when it changed); re-resolve regexes when due
    (type 16; with an authorizer, only to topics this member's principal may DESCRIBE); recompute the subscribed topics' metadata (type 4); bump the group epoch (type 3)
    when the group is new, a subscription or the subscribed topics changed;
 4. when the group epoch is ahead of the assignment epoch, run the assignor and write the members'
    changed targets (type 7) and the new assignment epoch (type 6);
 5. reconcile this member one step towards its target (reconcile.py; type 8 when it moved): keep
    what stays, revoke what goes (the member keeps its epoch until it reports the revocation, and
    is fenced if that takes longer than its rebalance timeout), add what is free.
 6. answer with the member id, its epoch, the group's heartbeat interval, and the partitions
    it may use now when the request was a full one (epoch 0, or every field sent) or they
    changed; restart its session timer with the group's session timeout (the group's
    `consumer.heartbeat.interval.ms` / `consumer.session.timeout.ms` configs, else the broker's
    `group.consumer.*`: group_configs.py).

Leaving: epoch -1 (or -2 of a dynamic member) fences the member: tombstones of its current
assignment, target assignment and subscription (and of its regex if it was the last to use it),
subscription metadata without it, group epoch + 1; its partitions are free at once - unless it
was the last consumer-protocol member beside classic ones: then the group downgrades to a classic
group (migration.py). A static member's -2 keeps it in the group at epoch -2 with its partitions
for its session timeout, so a restarted instance takes them over without a rebalance.

Timers (keys of GroupCoordinator._schedule): ("cg-session", group, member) fences a member that
does not heartbeat within the session timeout; ("cg-rebalance", group, member) fences a member
still at the epoch in which it was asked to revoke partitions after its rebalance timeout
(classic members have ("cg-join", ...) and ("cg-sync", ...) instead: classic_members.py).
"""
from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass
from typing import Callable

from kompakt.broker.groups.consumer import assignors, records as R, regex as rx
from kompakt.broker.groups.consumer.group import ConsumerGroup, Record
from kompakt.broker.groups.consumer.member import (
    LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroupMember, MemberState, freeze)
from kompakt.broker.groups.consumer.reconcile import reconcile
from kompakt.broker.groups.group import GroupState
from kompakt.broker.groups.membership import (
    JoinResult, SyncResult, complete_future, storage_error_to_coordinator_error)
from kompakt.config.broker_config import ConfigError
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1   # v1+: the member chooses its id (KIP-1082)
# A member's timers: session; rebalance (revocation); join and sync (classic members only).
CONSUMER_MEMBER_TIMERS = ("cg-session", "cg-rebalance", "cg-join", "cg-sync")


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: list | None            # [(topic id uuid.UUID, [partitions])] or None
    client_id: str
    client_host: str
    api_version: int
    # With an authorizer: may this member's principal DESCRIBE the topic? (regex resolution)
    describable: Callable[[str], bool] | None = None


@dataclass
class HeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict | None = None    # topic id -> frozenset, or None when not sent


def configured_assignors(config) -> list[str]:
    """group.consumer.assignors as assignor names (Kafka's class names accepted)."""
    names = [assignors.CLASS_NAMES.get(n.strip(), n.strip()) for n in config["group.consumer.assignors"]]
    return [n for n in names if n]


def consumer_protocol_enabled(config, group_version: int) -> bool:
    """Kafka's KafkaApis.isConsumerGroupProtocolEnabled: `consumer` is among
    group.coordinator.rebalance.protocols and the finalized group.version is >= 1 (GV_1; an
    UpdateFeatures can set it to 0). Kafka also needs its new coordinator; Kompakt always has it.
    Without both, ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION
    before any authorization, and no consumer-protocol group can come to exist."""
    return group_version >= 1 and "consumer" in config["group.coordinator.rebalance.protocols"]


def check_consumer_group_config(config) -> None:
    """Kafka's GroupCoordinatorConfig checks of the group.consumer.* keys and of
    group.coordinator.rebalance.protocols (KafkaConfig: the classic protocol cannot be disabled);
    ConfigError, which stops the start with the message."""
    protocols = config["group.coordinator.rebalance.protocols"]
    if "classic" not in protocols:
        raise ConfigError("Disabling the 'classic' protocol is not supported: "
                          f"group.coordinator.rebalance.protocols={','.join(protocols)} must list classic")
    for other in ("share", "streams"):
        if other in protocols:
            log.warning("group.coordinator.rebalance.protocols lists %r: Kompakt has no %s groups, "
                        "so it is accepted and has no effect", other, other)
    def between(key, lo, hi):
        if not config[lo] <= config[key] <= config[hi]:
            raise ConfigError(f"{key} must be between {lo} ({config[lo]}) and {hi} ({config[hi]}), "
                              f"not {config[key]}")
    between("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms")
    between("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms")
    if config["group.consumer.heartbeat.interval.ms"] >= config["group.consumer.session.timeout.ms"]:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than "
                          "group.consumer.session.timeout.ms")
    names = configured_assignors(config)
    unknown = [n for n in names if n not in (assignors.UNIFORM, assignors.RANGE)]
    if not names or unknown:
        raise ConfigError(f"group.consumer.assignors: unknown assignor(s) {unknown or names}; "
                          f"Kompakt has {assignors.UNIFORM} and {assignors.RANGE} (or Kafka's "
                          f"class names for them)")


class ConsumerGroupHeartbeat:
    """Mixin of GroupCoordinator: `consumer_groups` (id -> ConsumerGroup) and the heartbeat."""

    # ====================================================================== entry point

    def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        if self.closing:
            return HeartbeatResult(error=ErrorCode.NOT_COORDINATOR)
        if self.loading:      # __consumer_offsets is still being replayed (retriable)
            return HeartbeatResult(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        try:
            self._validate_heartbeat(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._consumer_group_leave(req)
            return self._consumer_group_heartbeat(req)
        except KafkaError as exc:
            return HeartbeatResult(error=exc.code, message=str(exc) or None)

    def _validate_heartbeat(self, req: HeartbeatRequest) -> None:
        def not_empty(value, what):
            if value is not None and value == "":
                raise errors.InvalidRequestError(f"{what} can't be empty.")
        if (req.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or req.member_epoch > 0
                or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH):
            not_empty(req.member_id, "MemberId")
        not_empty(req.group_id, "GroupId")
        not_empty(req.instance_id, "InstanceId")
        not_empty(req.rack_id, "RackId")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise errors.InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise errors.InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise errors.InvalidRequestError(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise errors.InvalidRequestError("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise errors.InvalidRequestError("MemberEpoch is invalid.")
        names = configured_assignors(self.config)
        if req.server_assignor is not None and req.server_assignor not in names:
            raise errors.UnsupportedAssignorError(
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(names)}.")

    # ================================================================ join / heartbeat

    def _consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        raw: list[tuple[bytes, bytes | None]] = []   # a replaced classic group's tombstone
        pre: list[Record] = []                       # an upgraded classic group's records
        recs: list[Record] = []
        joining = req.member_epoch == 0
        group = self._consumer_group_for_heartbeat(req.group_id, joining, raw, pre)
        gid = group.group_id
        self._throw_if_consumer_group_full(group, req.member_id)
        member_id = req.member_id or kafka_uuid()
        epoch = (req.member_epoch, req.owned)
        if req.instance_id is None:
            member, replaced = self._dynamic_member(group, member_id, joining, epoch), None
        else:
            member, replaced = self._static_member(group, member_id, req.instance_id, joining, epoch, recs)
        updated = member.replace(
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(req.subscribed_topic_names)
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=req.client_id, client_host=req.client_host,
            classic=None)      # (a classic member heartbeating this way now speaks this protocol)
        reconciled, new_member = self._update_member(group, member, updated, replaced, req.owned, recs,
                                                     req.describable)

        self._append_consumer_records(group, raw, recs, pre)
        if pre:
            self._after_upgrade(group, pre)
        self._after_update(group, member, reconciled, replaced)
        self._schedule(("cg-session", gid, member_id), self.group_configs.session_timeout_ms(gid),
                       self._expire_consumer_member, gid, member_id, "its session expired")
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.owned is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        changed = reconciled.assigned != member.assigned or new_member
        return HeartbeatResult(member_id=member_id, member_epoch=reconciled.member_epoch,
                               heartbeat_interval_ms=self.group_configs.heartbeat_interval_ms(gid),
                               assignment=dict(reconciled.assigned) if (full or changed) else None)

    def _update_member(self, group: ConsumerGroup, member: ConsumerGroupMember,
                       updated: ConsumerGroupMember, replaced: str | None, owned,
                       recs: list[Record], describable=None) -> tuple[ConsumerGroupMember, bool]:
        """Steps 3-5 of a heartbeat (or of a classic member's JoinGroup): record the member's
        change, bump the group epoch when subscriptions changed, compute a new target assignment
        when the epoch moved, and reconcile the member one step with what it reports it `owns`.
        `describable` (with an authorizer) filters a regex resolution this request triggers.
        Returns (the reconciled member, whether it is new to the group)."""
        gid, member_id = group.group_id, updated.member_id
        bump = group.group_epoch == 0
        new_member = member_id not in group.members and replaced is None
        if new_member or updated.subscription() != member.subscription():
            recs.append(R.member_subscription(gid, updated))
            if sorted(updated.subscribed_topic_names) != sorted(member.subscribed_topic_names):
                bump = True
        members_after = {mid: m for mid, m in group.members.items() if mid != replaced}
        members_after[member_id] = updated
        resolved, regex_bump = self._update_regexes(group, member, updated, members_after, recs, self.time_ms(),
                                                    describable)
        bump |= regex_bump
        unchanged = (not new_member and replaced is None and not recs
                     and updated.subscription() == member.subscription())
        # (nothing about subscriptions changed: the group's cached counts serve)
        metadata = (self._subscription_metadata(group, None, None) if unchanged
                    else self._subscription_metadata(group, members_after.values(), resolved))
        if metadata != group.subscription_metadata:
            recs.append(R.subscription_metadata(gid, metadata))
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            recs.append(R.group_epoch(gid, group_epoch))

        if group_epoch > group.assignment_epoch:
            target = self._compute_target(group, members_after, group_epoch, metadata, resolved,
                                          {member_id: replaced} if replaced else {}, recs)
            member_target, target_epoch = target.get(member_id, {}), group_epoch
        else:
            target_epoch = group.assignment_epoch
            member_target = group.target_assignment.get(
                member_id, group.target_assignment.get(replaced, {}) if replaced else {})

        reconciled = reconcile(updated, target_epoch, member_target, group.owner_epoch, owned)
        if reconciled != updated or new_member:
            recs.append(R.current_assignment(gid, reconciled))
        return reconciled, new_member

    def _after_update(self, group: ConsumerGroup, member: ConsumerGroupMember,
                      reconciled: ConsumerGroupMember, replaced: str | None) -> None:
        """Timers once a member's update is appended: a replaced static member's go; a
        consumer-protocol member asked to revoke must do so within its rebalance timeout (Kafka
        gives classic members join and sync timers instead)."""
        gid, member_id = group.group_id, reconciled.member_id
        if replaced is not None:
            self._cancel_consumer_timers(gid, replaced)
        if reconciled.uses_classic_protocol:
            return
        if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
            if member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != reconciled.member_epoch:
                self._schedule(("cg-rebalance", gid, member_id), reconciled.rebalance_timeout_ms,
                               self._expire_consumer_rebalance, gid, member_id, reconciled.member_epoch)
        else:
            self._cancel(("cg-rebalance", gid, member_id))

    def _consumer_group_for_heartbeat(self, group_id: str, create: bool, raw: list,
                                      pre: list) -> ConsumerGroup:
        """Kafka's getOrMaybeCreateConsumerGroup: the consumer group; or, for a joining member
        (`create`), a new one - replacing an Empty classic group (its GroupMetadata tombstone
        goes to `raw`) or upgrading a live one (migration.py: its records go to `pre`)."""
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.groups.get(group_id)
        if classic is None:
            if not create:
                raise errors.GroupIdNotFoundError(f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id)
        if create and classic.is_state(GroupState.EMPTY):
            # Kafka's maybeDeleteEmptyClassicGroup (pending members, which hold nothing, go too)
            raw.append((gr.encode_group_metadata_key(group_id), None))
            return ConsumerGroup(group_id)
        if create and self._may_upgrade(classic):
            group, conversion = self._classic_to_consumer_group(classic, raw)
            pre.extend(conversion)
            return group
        raise errors.GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")

    def _throw_if_consumer_group_full(self, group: ConsumerGroup, member_id: str) -> None:
        limit = self.config["group.consumer.max.size"]
        if len(group.members) >= limit and (not member_id or member_id not in group.members):
            raise errors.GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {limit} members.")

    @staticmethod
    def _check_member_epoch(member: ConsumerGroupMember, epoch) -> None:
        """`epoch`: (received member epoch, owned partitions), or None for a classic member
        (JoinGroup carries no member epoch)."""
        if epoch is None:
            return
        received, owned = epoch
        if received > member.member_epoch:
            raise errors.FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({received}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                f"all its partitions and rejoin.")
        if received < member.member_epoch:
            # The answer with the new epoch may have been lost: the previous epoch is accepted
            # while the member owns no more than it is assigned.
            if received != member.previous_member_epoch or not _is_subset(owned, member.assigned):
                raise errors.FencedMemberEpochError(
                    f"The consumer group member has a smaller member epoch ({received}) than the "
                    f"one known by the group coordinator ({member.member_epoch}). The member must "
                    f"abandon all its partitions and rejoin.")

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, joining: bool,
                        epoch) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise errors.UnknownMemberIdError(
                    f"Member {member_id} is not a member of group {group.group_id}.")
            member = ConsumerGroupMember(member_id)
            log.info("consumer group %s: member %s joins with the %s protocol", group.group_id,
                     member_id, "consumer" if epoch is not None else "classic")
        self._check_member_epoch(member, epoch)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, instance_id: str, joining: bool,
                       epoch, recs: list) -> tuple[ConsumerGroupMember, str | None]:
        """The member, and the id of the static member it replaces (or None). `epoch` is None
        for a classic member: it replaces the previous incarnation at once, as does any member
        replacing a classic one; two consumer-protocol incarnations need the old one to have
        left with epoch -2 (else UNRELEASED_INSTANCE_ID)."""
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                log.info("consumer group %s: static member %s (instance %s) joins",
                         group.group_id, member_id, instance_id)
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            if (epoch is not None and not existing.uses_classic_protocol
                    and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                raise errors.UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the "
                    f"group because the instance id is owned by {existing.member_id} member.")
            new = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
            gid = group.group_id
            recs.extend(R.member_removal(gid, existing.member_id))
            recs.append(R.member_subscription(gid, new))
            recs.append(R.target_assignment(gid, member_id, group.target_assignment.get(existing.member_id, {})))
            recs.append(R.current_assignment(gid, new))
            # (its timers are cancelled once the records are appended: a failed append keeps it)
            log.info("consumer group %s: static member %s (instance %s) replaces %s",
                     gid, member_id, instance_id, existing.member_id)
            return new, existing.member_id
        if existing is None:
            raise errors.UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise errors.FencedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{existing.member_id}.")
        self._check_member_epoch(existing, epoch)
        return existing, None

    # ============================================================ subscriptions and regexes

    def _update_regexes(self, group: ConsumerGroup, member: ConsumerGroupMember,
                        updated: ConsumerGroupMember, members_after: dict, recs: list, now: int,
                        describable=None):
        """Records for regex changes and resolutions; returns (regex -> topics to use now,
        whether the group epoch must be bumped). A resolution keeps only the topics that the
        principal of the member whose request triggered it may DESCRIBE (`describable`, set when
        an authorizer is on): Kafka's refreshRegularExpressions / filterTopicDescribeAuthorizedTopics
        resolve every regex of the group in that member's request context."""
        old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
        bump = require_refresh = False
        before = group.subscribed_regexes()
        if old != new:
            if old and before[old] == 1:
                recs.append(R.regex_tombstone(group.group_id, old))
            if new:
                if before[new] == 0:
                    rx.compile_regex(new)           # INVALID_REGULAR_EXPRESSION
                    require_refresh = True
                else:
                    bump = new in group.resolved_regexes
            elif old:
                bump = True
        regexes = group.subscribed_regexes(members_after.values())
        resolved = {r: group.resolved_regexes[r][0] for r in regexes if r in group.resolved_regexes}
        if not regexes:
            return resolved, bump
        if now <= group.last_regex_refresh_ms + rx.REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
            return resolved, bump
        topic_names = frozenset(self.broker.log_manager.topics)
        require_refresh |= (any(r not in group.resolved_regexes for r in regexes)
                            or group.regex_topics != topic_names
                            or now > group.last_regex_refresh_ms + rx.REGEX_REFRESH_MAX_INTERVAL_MS)
        if not require_refresh:
            return resolved, bump
        group.regex_topics = topic_names
        fresh = rx.resolve(regexes, topic_names)
        if describable is not None:
            matched = set().union(*fresh.values())
            denied = {t for t in matched if not describable(t)}
            if denied:
                log.info("consumer group %s: regex resolution leaves out %d topic(s) that member %s "
                         "may not describe", group.group_id, len(denied), updated.member_id)
                fresh = {regex: topics - denied for regex, topics in fresh.items()}
        for regex, topics in fresh.items():
            known = group.resolved_regexes.get(regex)
            # The version Kafka stores is its metadata image offset; ours is the refresh time.
            recs.append(R.resolved_regex(group.group_id, regex, topics, now, now))
            if known is None or known[0] != topics:
                bump = True
        return fresh, bump

    def _subscription_metadata(self, group: ConsumerGroup, members, resolved) -> dict:
        """{topic name: (topic id, partitions)} of the existing topics the members subscribe."""
        topics = self.broker.log_manager.topics
        out = {}
        for name in group.subscribed_topic_names(members, resolved):
            meta = topics.get(name)
            if meta is not None:
                out[name] = (meta.topic_id, meta.partitions)
        return out

    def _compute_target(self, group: ConsumerGroup, members: dict, epoch: int, metadata: dict,
                        resolved: dict, inherits: dict, recs: list) -> dict:
        name_to_id = {name: tid for name, (tid, _) in metadata.items()}
        counts = {tid: n for tid, n in metadata.values()}
        specs = {}
        for mid, m in members.items():
            topic_ids = frozenset(name_to_id[t] for t in group.member_topics(m, resolved) if t in name_to_id)
            current = group.target_assignment.get(inherits.get(mid, mid), {})
            specs[mid] = assignors.MemberSpec(mid, topic_ids, current, m.instance_id)
        name = group.preferred_assignor(members.values()) or configured_assignors(self.config)[0]
        target = assignors.assign(name, specs, counts)
        for mid in specs:
            new = freeze(target.get(mid, {}))
            target[mid] = new
            if group.target_assignment.get(mid) != new:
                recs.append(R.target_assignment(group.group_id, mid, new))
        recs.append(R.target_assignment_epoch(group.group_id, epoch))
        log.info("consumer group %s: target assignment for epoch %d with %r: %s", group.group_id,
                 epoch, name, {mid: {str(t)[:8]: sorted(p) for t, p in a.items()} for mid, a in target.items()})
        return target

    # ========================================================================== leaving

    def _consumer_group_leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.consumer_groups.get(req.group_id)
        if group is None:
            raise errors.GroupIdNotFoundError(
                f"Group {req.group_id} not found." if req.group_id not in self.groups
                else f"Group {req.group_id} is not a consumer group.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise errors.UnknownMemberIdError(
                    f"Member {req.member_id} is not a member of group {req.group_id}.")
            log.info("consumer group %s: member %s left", req.group_id, req.member_id)
            self._fence_consumer_member(group, member)
            return HeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)
        member = group.static_member(req.instance_id)
        if member is None:
            raise errors.UnknownMemberIdError(f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise errors.FencedInstanceIdError(
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                f"member {member.member_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("consumer group %s: static member %s (instance %s) left for now",
                     req.group_id, member.member_id, req.instance_id)
            leaving = member.replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            self._append_consumer_records(group, [], [R.current_assignment(group.group_id, leaving)])
            return HeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("consumer group %s: static member %s (instance %s) left", req.group_id,
                 member.member_id, req.instance_id)
        self._fence_consumer_member(group, member)
        return HeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence_consumer_member(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Remove a member (left, or a session, rebalance, join or sync timeout): its partitions
        are free at once and the group epoch moves on so the others get a new target - unless it
        was the last consumer-protocol member among classic ones: then the group goes back to
        the classic protocol (migration.py's downgrade)."""
        if self._may_downgrade_without(group, member.member_id):
            self._consumer_to_classic_group(group, member.member_id)
            return
        self._remove_consumer_members(group, [member])

    def _remove_consumer_members(self, group: ConsumerGroup, members: list[ConsumerGroupMember]) -> None:
        """Tombstone the members' records, and their regexes nobody else uses; the subscription
        metadata without them; group epoch + 1 - one batch; then their timers go."""
        gid = group.group_id
        gone = {m.member_id for m in members}
        recs: list[Record] = []
        for m in members:
            recs.extend(R.member_removal(gid, m.member_id))
        remaining = [m for mid, m in group.members.items() if mid not in gone]
        left = group.subscribed_regexes(remaining)
        recs.extend(R.regex_tombstone(gid, regex) for regex in group.subscribed_regexes()
                    if not left[regex])
        metadata = self._subscription_metadata(group, remaining, None)
        if metadata != group.subscription_metadata:
            recs.append(R.subscription_metadata(gid, metadata))
        recs.append(R.group_epoch(gid, group.group_epoch + 1))
        self._append_consumer_records(group, [], recs)
        for member_id in gone:
            self._cancel_consumer_timers(gid, member_id)

    def _cancel_consumer_timers(self, group_id: str, member_id: str) -> None:
        for kind in CONSUMER_MEMBER_TIMERS:
            self._cancel((kind, group_id, member_id))

    def _expire_consumer_member(self, group_id: str, member_id: str, reason: str) -> None:
        """A session, join or sync timer fired: fence the member (Kafka's
        consumerGroupFenceMemberOperation)."""
        group = self.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return
        log.info("consumer group %s: member %s fenced: %s", group_id, member_id, reason)
        self.counters["members_expired_total"] += 1
        try:
            self._fence_consumer_member(group, member)
        except KafkaError as exc:
            log.warning("could not fence member %s of group %s: %s", member_id, group_id, exc)

    def _expire_consumer_rebalance(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member.member_epoch != epoch:
            return
        log.info("consumer group %s: member %s fenced: it did not revoke its partitions from "
                 "epoch %d within %d ms", group_id, member_id, epoch, member.rebalance_timeout_ms)
        try:
            self._fence_consumer_member(group, member)
        except KafkaError as exc:
            log.warning("could not fence member %s of group %s: %s", member_id, group_id, exc)

    # ========================================================================= records

    def _append_consumer_records(self, group: ConsumerGroup, raw: list, recs: list[Record],
                                 pre: list[Record] = ()) -> None:
        """Append `raw` (a replaced classic group's tombstone), `pre` (the records of a classic
        group upgraded into `group`, already applied to it) and `recs` in one batch, then make
        memory follow: the classic group goes, the consumer group is registered, each of `recs`
        is applied. Raises the mapped KafkaError when the append fails (nothing changes then)."""
        batch = list(raw) + [R.encode(r) for r in pre] + [R.encode(r) for r in recs]
        if batch:
            self._append_group_batch(group.group_id, batch)
        if raw and group.group_id in self.groups:
            self._forget_classic_group(group.group_id)
        self.consumer_groups[group.group_id] = group
        for r in recs:
            group.apply(r)

    def _append_group_batch(self, group_id: str, batch: list) -> None:
        try:
            self.topic.append(group_id, batch)
        except KafkaError as exc:
            raise errors.error_for_code(storage_error_to_coordinator_error(exc))(str(exc)) from exc

    def _forget_classic_group(self, group_id: str) -> None:
        """The classic group made way for a consumer group: parked JoinGroup / SyncGroup are
        answered REBALANCE_IN_PROGRESS (they rejoin, now into the consumer group), its timers go."""
        classic = self.groups.pop(group_id, None)
        for m in classic.members.values() if classic is not None else ():
            complete_future(m.join_future, JoinResult(error=ErrorCode.REBALANCE_IN_PROGRESS,
                                                      member_id=m.member_id))
            complete_future(m.sync_future, SyncResult(error=ErrorCode.REBALANCE_IN_PROGRESS))
        for key in [k for k in self._timers if len(k) > 1 and k[1] == group_id]:
            self._cancel(key)


def kafka_uuid() -> str:
    """A random id as Kafka's Uuid.toString() writes it: URL-safe base64, no padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _is_subset(owned, assigned) -> bool:
    if owned is None:
        return False
    for topic_id, parts in owned:
        have = assigned.get(topic_id)
        if any(have is None or p not in have for p in parts):
            return False
    return True
