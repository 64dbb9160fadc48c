"""Online migration of live groups between the classic and the consumer protocol (KIP-848's
upgrade and downgrade, Kafka's GroupMetadataManager.convertToConsumerGroup /
convertToClassicGroup), as a mixin of GroupCoordinator, ruled by `group.consumer.migration.policy`
(bidirectional - Kafka's default -, upgrade, downgrade or disabled; empty groups convert
whatever the policy, heartbeat.py and membership.py do that).

Upgrade - a consumer-protocol member (ConsumerGroupHeartbeat, epoch 0) joins a live classic group
whose protocol type is "consumer" and whose size fits group.consumer.max.size:
    * one batch: the classic GroupMetadata tombstone, then the consumer group built from the
      classic one in Kafka's order - every member's subscription (its classic protocols and
      session timeout in tag 0), the group epoch (= the generation), every member's target
      assignment (= its classic assignment), the target assignment epoch, every member's current
      assignment (Stable at the generation) - and then the joining member's own records;
    * parked JoinGroup / SyncGroup of the classic group are answered REBALANCE_IN_PROGRESS;
      its members stay, as classic members of the consumer group (classic_members.py): the new
      member moved the group epoch, so their next Heartbeat says REBALANCE_IN_PROGRESS and their
      JoinGroup reconciles them like any member;
    * a subscription or assignment that is not the consumer protocol's refuses the upgrade
      (GROUP_ID_NOT_FOUND, Kafka's message). One deliberate difference: a member that has no
      assignment yet (empty bytes: it joined during the rebalance) owns nothing, where Kafka's
      parser fails and refuses the upgrade.
Downgrade - the last consumer-protocol member is fenced (it left with epoch -1, or its session or
rebalance timeout expired), or a classic static member takes its place, while at least one
classic member stays and they fit group.max.size:
    * one batch: tombstones of every consumer group record (the replaced static member's under
      its successor's id), then a classic GroupMetadata record: Stable, generation = the group
      epoch, protocol type "consumer", the protocol every member supports, each member's target
      assignment in its own consumer protocol version;
    * in memory the classic group starts a rebalance at once (members rejoin the classic way),
      except after a static replacement, whose JoinGroup answer stands.

Invariant: both conversions are one append; memory changes only once it succeeded, so a replay
of `__consumer_offsets` rebuilds exactly the group in memory.
"""
from __future__ import annotations

import logging

from kompakt.broker.groups.consumer import records as R
from kompakt.broker.groups.consumer.classic_members import assignment_bytes, topic_ids
from kompakt.broker.groups.consumer.group import ConsumerGroup, Record
from kompakt.broker.groups.consumer.member import ClassicMetadata, ConsumerGroupMember, MemberState, freeze
from kompakt.broker.groups.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from kompakt.broker.groups.member import ClassicMember
from kompakt.protocol import consumer_group_records as cgr
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr

log = logging.getLogger(__name__)

POLICIES = {"bidirectional": (True, True), "upgrade": (True, False),
            "downgrade": (False, True), "disabled": (False, False)}


class GroupMigration:

    def _policy(self) -> tuple[bool, bool]:
        """(upgrade enabled, downgrade enabled) of group.consumer.migration.policy."""
        return POLICIES[self.config["group.consumer.migration.policy"]]

    # ========================================================================== upgrade

    def _may_upgrade(self, classic: ClassicGroup) -> bool:
        """Kafka's validateOnlineUpgrade."""
        gid = classic.group_id
        if not self._policy()[0]:
            log.info("cannot upgrade classic group %s to a consumer group: "
                     "group.consumer.migration.policy does not allow it", gid)
            return False
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("cannot upgrade classic group %s to a consumer group: it does not use the "
                     "consumer protocol type (%r)", gid, classic.protocol_type)
            return False
        if len(classic.members) > self.config["group.consumer.max.size"]:
            log.info("cannot upgrade classic group %s to a consumer group: its %d members exceed "
                     "group.consumer.max.size", gid, len(classic.members))
            return False
        return True

    def _classic_to_consumer_group(self, classic: ClassicGroup, raw: list) -> tuple[ConsumerGroup, list[Record]]:
        """The consumer group made of `classic` (not registered yet) and its records (applied to
        it already); the classic tombstone goes to `raw`."""
        gid, epoch = classic.group_id, classic.generation_id
        ids = topic_ids(self.broker.log_manager)
        members = []
        try:
            for m in classic.members.values():
                protocol = classic.protocol_name or m.protocols[0][0]
                sub = cp.decode_subscription(m.metadata(protocol))
                owned = cp.decode_assignment(m.assignment)
                members.append(ConsumerGroupMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id,
                    client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=tuple(sub.topics), rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
                    assigned=freeze({ids[t]: p for t, p in owned.items() if t in ids}),
                    classic=ClassicMetadata(m.session_timeout_ms, tuple(m.protocols))))
        except gr.GroupRecordError as exc:
            log.warning("cannot upgrade classic group %s: its consumer protocol is malformed: %s", gid, exc)
            raise errors.GroupIdNotFoundError(
                f"Cannot upgrade the classic group {gid} to consumer group because the embedded "
                f"consumer protocol is malformed.") from None
        raw.append((gr.encode_group_metadata_key(gid), None))
        recs = [R.member_subscription(gid, m) for m in members]
        recs.append(R.group_epoch(gid, epoch))
        recs += [R.target_assignment(gid, m.member_id, m.assigned) for m in members]
        recs.append(R.target_assignment_epoch(gid, epoch))
        recs += [R.current_assignment(gid, m) for m in members]
        group = ConsumerGroup(gid)
        for r in recs:
            group.apply(r)
        log.info("classic group %s (generation %d, %d members) upgrades to a consumer group",
                 gid, epoch, len(members))
        return group, recs

    def _after_upgrade(self, group: ConsumerGroup, converted: list[Record]) -> None:
        """Session timers of the members an upgrade brought in (their classic timers went with
        the classic group)."""
        for member_id in {r.second for r in converted if r.type == cgr.MEMBER_METADATA}:
            member = group.members.get(member_id)
            if member is not None and member.uses_classic_protocol:
                self._schedule_classic_session(group, member)

    # ======================================================================== downgrade

    def _may_downgrade_without(self, group: ConsumerGroup, leaving_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: `leaving_id` is the last
        consumer-protocol member and classic members remain."""
        if not group.all_members_use_classic_protocol_except(leaving_id):
            return False
        if len(group.members) <= 1:
            return False
        return self._downgrade_allowed(group, len(group.members) - 1)

    def _may_downgrade_replacing(self, group: ConsumerGroup, replaced_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static member takes
        the place of the last consumer-protocol member."""
        if not group.all_members_use_classic_protocol_except(replaced_id):
            return False
        return self._downgrade_allowed(group, len(group.members))

    def _downgrade_allowed(self, group: ConsumerGroup, size: int) -> bool:
        if not self._policy()[1]:
            log.info("cannot downgrade consumer group %s to a classic group: "
                     "group.consumer.migration.policy does not allow it", group.group_id)
            return False
        if size > self.config["group.max.size"]:
            log.info("cannot downgrade consumer group %s to a classic group: its %d members "
                     "exceed group.max.size", group.group_id, size)
            return False
        return True

    def _consumer_to_classic_group(self, group: ConsumerGroup, leaving_id: str,
                                   joining: ConsumerGroupMember | None = None,
                                   recs: list[Record] = ()) -> ClassicGroup:
        """Append `recs` (a joining member's), the consumer group's tombstones and the classic
        group's record in one batch; then the classic group replaces the consumer group."""
        gid = group.group_id
        classic = ClassicGroup(gid, self.time_ms(), GroupState.STABLE)
        classic.generation_id = group.group_epoch
        for m in group.members.values():
            if m.member_id != leaving_id:
                classic.add(_classic_member(m))
        if joining is not None:
            classic.add(_classic_member(joining))
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic._compute_subscribed_topics()
        names = {tid: name for name, tid in topic_ids(self.broker.log_manager).items()}
        assignment = {}
        for m in classic.members.values():
            source = leaving_id if joining is not None and m.member_id == joining.member_id else m.member_id
            m.assignment = assignment[m.member_id] = assignment_bytes(
                group.target_assignment.get(source, {}), m.metadata(classic.protocol_name), names)
        renamed = {leaving_id: joining.member_id} if joining is not None else {}
        batch = [R.encode(r) for r in recs] + [R.encode(r) for r in R.group_removal(group, renamed)]
        batch.append((gr.encode_group_metadata_key(gid),
                      gr.encode_group_metadata_value(**classic.metadata_record_fields(assignment))))
        self._append_group_batch(gid, batch)

        self.consumer_groups.pop(gid, None)
        for key in [k for k in self._timers if len(k) > 1 and k[1] == gid]:
            self._cancel(key)
        self.groups[gid] = classic
        for m in classic.members.values():
            self._reschedule_heartbeat(classic, m)
        log.info("consumer group %s (epoch %d) downgrades to a classic group of %d members",
                 gid, classic.generation_id, len(classic.members))
        if joining is None:
            self._prepare_rebalance(classic, f"downgrade of group {gid} from consumer to classic")
        return classic


def _classic_member(m: ConsumerGroupMember) -> ClassicMember:
    return ClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                         m.rebalance_timeout_ms, m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                         list(m.classic.protocols))
