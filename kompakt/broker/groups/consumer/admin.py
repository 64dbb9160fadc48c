"""Consumer-protocol groups seen from the other group APIs, as a mixin of GroupCoordinator:
ConsumerGroupDescribe, the replay of their records at start, the member-epoch checks of
OffsetCommit/OffsetFetch, deletion, and what a classic request finds in a consumer group.

Kafka's answers, kept here:
  * ConsumerGroupDescribe: a classic or unknown group is GROUP_ID_NOT_FOUND; members carry their
    current and target assignments (topic id and name), member type 1 (consumer) from v1.
  * OffsetCommit (ConsumerGroup.validateOffsetCommit): a commit with a negative member epoch is
    accepted only while the group has no members (admin tools); otherwise the member must exist
    (UNKNOWN_MEMBER_ID), use OffsetCommit v9+ (UNSUPPORTED_VERSION) and send its current member
    epoch (STALE_MEMBER_EPOCH). TxnOffsetCommit: without member id, generation (-1) and instance
    id it is accepted whatever the members; a stale epoch answers ILLEGAL_GENERATION
    (OffsetMetadataManager.validateTransactionalOffsetCommit). OffsetFetch v9+ (validateOffsetFetch): with a member id or an
    epoch, the same member and epoch checks.
  * JoinGroup to an empty consumer group replaces it by a classic group (its records
    tombstoned, offsets kept); to a non-empty one it joins as a classic member
    (classic_members.py, which also serves its SyncGroup / Heartbeat / LeaveGroup). A classic
    member commits with its generation (= member epoch: ILLEGAL_GENERATION, not
    STALE_MEMBER_EPOCH) at any OffsetCommit version. ConsumerGroupDescribe v1 gives classic
    members member type 0.
  * DeleteGroups: only an Empty group (NON_EMPTY_GROUP otherwise); its offsets and records are
    tombstoned.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kompakt.broker.groups.consumer import records as R
from kompakt.broker.groups.consumer.group import ConsumerGroup, Record
from kompakt.broker.groups.consumer.heartbeat import configured_assignors
from kompakt.broker.groups.consumer.member import MemberState
from kompakt.protocol import consumer_group_records as cgr
from kompakt.protocol import errors

log = logging.getLogger(__name__)

MEMBER_TYPE_CLASSIC = 0        # ConsumerGroupDescribe v1's MemberType
MEMBER_TYPE_CONSUMER = 1


@dataclass
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list
    subscribed_topic_regex: str | None
    assignment: list          # [(topic id, topic name, [partitions])]
    target_assignment: list
    member_type: int = MEMBER_TYPE_CONSUMER


@dataclass
class DescribedConsumerGroup:
    group_id: str
    error: int = 0
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list = field(default_factory=list)


class ConsumerGroupAdmin:

    # ================================================================== describe

    def consumer_group_describe(self, group_ids: list[str]) -> list[DescribedConsumerGroup]:
        out = []
        names = {meta.topic_id: name for name, meta in self.broker.log_manager.topics.items()}
        for group_id in group_ids:
            group = self.consumer_groups.get(group_id)
            if group is None:
                message = (f"Group {group_id} is not a consumer group." if group_id in self.groups
                           else f"Group {group_id} not found.")
                out.append(DescribedConsumerGroup(group_id, error=errors.ErrorCode.GROUP_ID_NOT_FOUND,
                                                  message=message))
                continue
            members = [DescribedMember(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                sorted(m.subscribed_topic_names), m.subscribed_topic_regex or None,
                _named(m.assigned, names), _named(group.target_assignment.get(m.member_id, {}), names),
                MEMBER_TYPE_CLASSIC if m.uses_classic_protocol else MEMBER_TYPE_CONSUMER)
                for m in group.members.values()]
            out.append(DescribedConsumerGroup(
                group_id, state=group.state.value, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor=group.preferred_assignor() or configured_assignors(self.config)[0],
                members=members))
        return out

    # ==================================================================== replay

    def _replay_consumer_record(self, key: dict, value: dict | None) -> None:
        group_id = key["group"]
        group = self.consumer_groups.get(group_id)
        if group is None:
            if value is None:
                return        # a tombstone of a group we no longer have
            classic = self.groups.get(group_id)
            if classic is not None and classic.protocol_type is None and not classic.members:
                del self.groups[group_id]   # the "simple" group made for its offsets (Kafka does the same)
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        record_type = cgr.TYPE_OF[key["type"]]
        group.apply(Record(record_type, group_id, key.get("member_id", key.get("regex")), value))
        if record_type == cgr.GROUP_METADATA and value is None:
            del self.consumer_groups[group_id]     # the group was deleted (its last record)

    def _schedule_consumer_sessions(self) -> None:
        """After a load (Kafka's onLoaded): every member must heartbeat within its session
        timeout; a member asked to revoke must do so within its rebalance timeout."""
        for group in self.consumer_groups.values():
            session = self.group_configs.session_timeout_ms(group.group_id)
            for member in group.members.values():
                gid, mid = group.group_id, member.member_id
                timeout = member.classic.session_timeout_ms if member.classic is not None else session
                self._schedule(("cg-session", gid, mid), timeout, self._expire_consumer_member,
                               gid, mid, "its session expired")
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule(("cg-rebalance", gid, mid), member.rebalance_timeout_ms,
                                   self._expire_consumer_rebalance, gid, mid, member.member_epoch)

    # ============================================================ offsets checks

    def validate_consumer_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                                        api_version: int, transactional: bool = False,
                                        instance_id: str | None = None) -> None:
        if member_epoch < 0 and not group.members:
            return
        # TxnOffsetCommit need not name a member (v0-2 cannot): checked only when it does
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return
        member = group.members.get(member_id)
        if member is None:
            raise errors.UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}.")
        if not transactional and not member.uses_classic_protocol and api_version < 9:
            raise errors.UnsupportedVersionError(
                "OffsetCommit version 9 or above must be used by members using the modern group protocol")
        _check_member_epoch(member, member_epoch)

    def validate_consumer_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+: raises for a consumer group whose member or epoch does not match;
        anything else (classic groups, no member given) passes."""
        group = self.consumer_groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return
        member = group.members.get(member_id) if member_id is not None else None
        if member is None:
            raise errors.UnknownMemberIdError(f"Member {member_id} is not a member of group {group_id}.")
        _check_member_epoch(member, member_epoch)

    # ================================================================= deletion

    def _delete_consumer_group(self, group: ConsumerGroup, offset_keys: list) -> None:
        """Tombstone the group's offsets (`offset_keys`: (key, None) pairs) and all its records,
        in Kafka's order, then forget it."""
        batch = list(offset_keys) + [R.encode(r) for r in R.group_removal(group)]
        self.topic.append(group.group_id, batch)
        self.consumer_groups.pop(group.group_id, None)
        for key in [k for k in self._timers if len(k) > 1 and k[1] == group.group_id]:
            self._cancel(key)
        log.info("consumer group %s deleted", group.group_id)

    def not_classic_message(self, group_id: str) -> str:
        """DescribeGroups' message for an id that is no classic group."""
        if group_id in self.consumer_groups:
            return f"Group {group_id} is not a classic group."
        return f"Group {group_id} not found."


def _check_member_epoch(member, received: int) -> None:
    """Kafka's validateMemberEpoch: a classic member's epoch is its generation."""
    if received == member.member_epoch:
        return
    if member.uses_classic_protocol:
        raise errors.IllegalGenerationError(
            f"The received generation id {received} does not match the expected member epoch "
            f"{member.member_epoch}.")
    raise errors.StaleMemberEpochError(
        f"The received member epoch {received} does not match the expected member epoch "
        f"{member.member_epoch}.")


def _named(partitions: dict, names: dict) -> list:
    return [(tid, names[tid], sorted(parts)) for tid, parts in partitions.items() if tid in names]
