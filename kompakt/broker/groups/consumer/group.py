"""A consumer-protocol group (Kafka's ConsumerGroup): its image of the records, and its state.

Role: everything the coordinator knows of one KIP-848 group, built *only* by applying
`__consumer_offsets` records (`apply()`, used both after an append and when the log is replayed
at start), so memory always equals a replay of the log:

    group_epoch         bumped whenever membership or subscriptions change (record type 3)
    subscription_metadata  {topic name: (topic id, partitions)} of the subscribed topics (4)
    members             member id -> ConsumerGroupMember: subscription (5) + current assignment (8)
    target_assignment   member id -> partitions the assignor gave it (7), at assignment_epoch (6)
    resolved_regexes    regex -> topics it matched when last resolved (16)
and, derived: static members (instance id -> member id), the last regex resolution time, who
owns each partition now and at which epoch (`owner_epoch`), the subscribed topic names with
their subscriber counts.

Group state, derived after every change (Kafka's maybeUpdateGroupState) by the first rule that
holds:

    | rule                                                   | state       |
    |--------------------------------------------------------|-------------|
    | no members                                             | Empty       |
    | group_epoch > assignment_epoch (target not computed)   | Assigning   |
    | a member is not reconciled to the assignment epoch     | Reconciling |
    | otherwise                                              | Stable      |
    (Dead: the group was deleted; a Dead group is dropped by the coordinator.)

Invariants: every member has a subscription record; `owner_epoch` lists each partition of a
member's assigned or pending-revocation set, and no partition twice.
"""
from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from kompakt.broker.groups.consumer.member import (
    LEAVE_GROUP_MEMBER_EPOCH, ClassicMetadata, ConsumerGroupMember, MemberState, freeze)
from kompakt.broker.groups.group import CONSUMER_PROTOCOL_TYPE
from kompakt.protocol import consumer_group_records as cgr


class ConsumerGroupState(str, Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Record:
    """One consumer group record before encoding: type (consumer_group_records' constants),
    group, member id or regex, and the value fields (None = tombstone)."""
    type: int
    group: str
    second: str | None
    value: dict | None

    def key_bytes(self) -> bytes:
        return cgr.encode_key(self.type, self.group, self.second)


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, dict] = {}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        self.resolved_regexes: dict[str, tuple[frozenset, int, int]] = {}
        self.regex_topics: frozenset | None = None   # topic names at the last resolution (memory only)
        self._owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = {}
        self._subscribed: Counter | None = None      # cache of subscribed_topic_names()
        self.state = ConsumerGroupState.EMPTY

    # -- derived views -------------------------------------------------------------------------

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member owning the partition now (assigned or pending revocation);
        -1 when nobody does."""
        owner = self._owners.get((topic_id, partition))
        return owner[1] if owner is not None else -1

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def subscribed_topic_names(self, members=None, resolved=None) -> Counter:
        """Topic name -> number of members subscribed (by name or through a resolved regex);
        `members` and `resolved` (regex -> topics) default to the group's own (then cached until
        a subscription or a resolution changes: every heartbeat asks)."""
        if members is None and resolved is None and self._subscribed is not None:
            return self._subscribed
        counts: Counter = Counter()
        for m in (self.members.values() if members is None else members):
            counts.update(self.member_topics(m, resolved))
        if members is None and resolved is None:
            self._subscribed = counts
        return counts

    def member_topics(self, member: ConsumerGroupMember, resolved=None) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            if resolved is not None and member.subscribed_topic_regex in resolved:
                topics |= resolved[member.subscribed_topic_regex]
            else:
                known = self.resolved_regexes.get(member.subscribed_topic_regex)
                if known is not None:
                    topics |= known[0]
        return topics

    def subscribed_regexes(self, members=None) -> Counter:
        return Counter(m.subscribed_topic_regex for m in (self.members.values() if members is None
                                                           else members) if m.subscribed_topic_regex)

    @property
    def last_regex_refresh_ms(self) -> int:
        """When the regexes were last resolved: the newest resolution kept (0 if none), so a
        replay of the log gives the same answer as memory."""
        return max((ts for _, _, ts in self.resolved_regexes.values()), default=0)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topic_names()[topic] > 0

    def preferred_assignor(self, members=None) -> str | None:
        """The server assignor most members asked for (Kafka's computePreferredServerAssignor)."""
        counts = Counter(m.server_assignor for m in (self.members.values() if members is None
                                                     else members) if m.server_assignor)
        return counts.most_common(1)[0][0] if counts else None

    def is_empty(self) -> bool:
        return self.state is ConsumerGroupState.EMPTY

    # -- members speaking the classic protocol (KIP-848's mixed groups) ------------------------

    def classic_member_count(self) -> int:
        return sum(1 for m in self.members.values() if m.uses_classic_protocol)

    def supports_classic_protocols(self, protocol_type: str, names) -> bool:
        """Kafka's supportsClassicProtocols: a classic JoinGroup fits when it speaks the consumer
        protocol type and shares a protocol with every classic member already in."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        names = set(names)
        if self.is_empty():
            return bool(names)
        classic = [set(n for n, _ in m.classic.protocols) for m in self.members.values()
                   if m.classic is not None]
        return any(all(name in c for c in classic) for name in names)

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        member = self.members.get(member_id)
        return (member is not None and not member.uses_classic_protocol
                and self.classic_member_count() == len(self.members) - 1)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Is a partition of the member's target still owned by another member?"""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, parts in self.target_assignment.get(member.member_id, {}).items():
            have = member.assigned.get(topic_id, frozenset())
            if any(p not in have and self.owner_epoch(topic_id, p) != -1 for p in parts):
                return True
        return False

    # -- applying records ------------------------------------------------------------------------

    def apply(self, rec: Record) -> None:
        """Apply one record of this group (after its append, or on replay)."""
        v = rec.value
        if rec.type in (cgr.MEMBER_METADATA, cgr.REGULAR_EXPRESSION, cgr.CURRENT_MEMBER_ASSIGNMENT):
            self._subscribed = None
        if rec.type == cgr.GROUP_METADATA:
            if v is not None:
                self.group_epoch = v["epoch"]
        elif rec.type == cgr.PARTITION_METADATA:
            self.subscription_metadata = ({} if v is None else
                                          {t["topic_name"]: (t["topic_id"], t["num_partitions"])
                                           for t in v["topics"]})
        elif rec.type == cgr.MEMBER_METADATA:
            self._apply_member_metadata(rec.second, v)
        elif rec.type == cgr.TARGET_ASSIGNMENT_MEMBER:
            if v is None:
                self.target_assignment.pop(rec.second, None)
            else:
                self.target_assignment[rec.second] = freeze(v["partitions"])
        elif rec.type == cgr.TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = v["assignment_epoch"] if v is not None else -1
        elif rec.type == cgr.CURRENT_MEMBER_ASSIGNMENT:
            self._apply_current_assignment(rec.second, v)
        elif rec.type == cgr.REGULAR_EXPRESSION:
            if v is None:
                self.resolved_regexes.pop(rec.second, None)
            else:
                self.resolved_regexes[rec.second] = (frozenset(v["topics"]), v["regex_version"],
                                                     v["timestamp"])
        self._update_state()

    def _apply_member_metadata(self, member_id: str, v: dict | None) -> None:
        old = self.members.get(member_id)
        if v is None:
            if old is not None:
                self._set_member(member_id, None)
            return
        base = old if old is not None else ConsumerGroupMember(member_id)
        self._set_member(member_id, base.replace(
            instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
            client_host=v["client_host"], subscribed_topic_names=tuple(v["subscribed_topic_names"]),
            subscribed_topic_regex=v["subscribed_topic_regex"] or "",
            rebalance_timeout_ms=v["rebalance_timeout_ms"], server_assignor=v["server_assignor"],
            classic=_classic(v.get("classic_member_metadata"))))

    def _apply_current_assignment(self, member_id: str, v: dict | None) -> None:
        if v is None and member_id not in self.members:
            return      # (a replay may meet the tombstone of a member already gone)
        old = self.members.get(member_id) or ConsumerGroupMember(member_id)
        if v is None:
            # The member leaves: it no longer owns anything (its metadata tombstone follows).
            self._set_member(member_id, old.replace(
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned={}, pending_revocation={}))
            return
        try:
            state = MemberState(v["state"])
        except ValueError:
            state = MemberState.UNKNOWN
        self._set_member(member_id, old.replace(
            member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"],
            state=state, assigned=freeze(v["assigned"]), pending_revocation=freeze(v["pending_revocation"])))

    def _set_member(self, member_id: str, new: ConsumerGroupMember | None) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            for topic_id, parts in old.owned_partitions().items():
                for p in parts:
                    if self._owners.get((topic_id, p), (None,))[0] == member_id:
                        del self._owners[(topic_id, p)]
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        if new is None:
            return
        self.members[member_id] = new
        for topic_id, parts in new.owned_partitions().items():
            for p in parts:
                self._owners[(topic_id, p)] = (member_id, new.member_epoch)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = member_id

    def _update_state(self) -> None:
        if not self.members:
            self.state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            self.state = ConsumerGroupState.ASSIGNING
        elif any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            self.state = ConsumerGroupState.RECONCILING
        else:
            self.state = ConsumerGroupState.STABLE

    def __repr__(self) -> str:
        return (f"ConsumerGroup({self.group_id!r}, {self.state.value}, epoch={self.group_epoch}, "
                f"assignment_epoch={self.assignment_epoch}, members={list(self.members)})")


def _classic(value: dict | None) -> ClassicMetadata | None:
    if value is None:
        return None
    return ClassicMetadata(value["session_timeout_ms"],
                           tuple((name, bytes(meta)) for name, meta in value["supported_protocols"]))
