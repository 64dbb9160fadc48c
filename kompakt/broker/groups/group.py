"""A classic consumer group: membership, generation, protocol and its state machine.

Role: the pure, synchronous part of Kafka's ClassicGroup. It knows members, pending members
(dynamic members that were given an id with MEMBER_ID_REQUIRED but have not rejoined yet),
static members (`group.instance.id` -> member id), the generation, the selected protocol and the
leader, and it moves between states only through `transition()`. Timers, futures and disk
writes belong to the coordinator; this module never does I/O and never reads a clock (callers
pass `now_ms`).

Theory of operation (Kafka's classic rebalance protocol, as its GroupMetadataManager and
ClassicGroup do it; membership.py has what each request does in each state):

    Empty --PREPARE_REBALANCE--> PreparingRebalance
        the first member is added. The join phase waits group.initial.rebalance.delay.ms, again
        (up to the rebalance timeout in all) while new members keep arriving, so that a starting
        fleet forms one generation, not N; nothing but that timer ends an initial join phase.
    Stable / CompletingRebalance --PREPARE_REBALANCE--> PreparingRebalance
        a member is added, leaves (LeaveGroup), is expired (session timeout, or no SyncGroup
        within the rebalance timeout), or rejoins with changed protocols; in Stable also when
        the leader rejoins. Parked SyncGroups are answered REBALANCE_IN_PROGRESS.
    PreparingRebalance, no transition: a member rejoining (even with new metadata) or leaving
        only updates the group; the join phase ends as soon as every member has rejoined and no
        pending member (MEMBER_ID_REQUIRED handed out, not yet back) remains, or when the join
        timer fires: the rebalance timeout, i.e. the largest rebalance_timeout_ms of the members.
    PreparingRebalance --JOIN_COMPLETE--> CompletingRebalance
        dynamic members that did not rejoin are removed (static ones stay), a member that
        rejoined becomes leader if the leader did not, generation + 1, protocol chosen by vote,
        every waiting JoinGroup answered; the leader's answer carries all members' metadata.
        (If members remain but none rejoined, the phase waits another rebalance timeout.)
    PreparingRebalance --ALL_MEMBERS_LEFT--> Empty
        no member is left: generation + 1 with no protocol; committed offsets stay.
    CompletingRebalance --SYNC_COMPLETE--> Stable
        the leader's SyncGroup assignment was appended to __consumer_offsets and handed out.
    any --DELETE--> Dead
        DeleteGroups, or offsets expired from an Empty group; Dead groups are forgotten.

Transition table (state, event) -> next state; anything else raises IllegalStateError:

    | current             | PREPARE_REBALANCE  | JOIN_COMPLETE       | ALL_MEMBERS_LEFT | SYNC_COMPLETE | DELETE |
    |---------------------|--------------------|---------------------|------------------|---------------|--------|
    | Empty               | PreparingRebalance | -                   | -                | -             | Dead   |
    | PreparingRebalance  | -                  | CompletingRebalance | Empty            | -             | Dead   |
    | CompletingRebalance | PreparingRebalance | -                   | -                | Stable        | Dead   |
    | Stable              | PreparingRebalance | -                   | -                | -             | Dead   |
    | Dead                | -                  | -                   | -                | -             | Dead   |

Invariants: the leader is a member (or None when there are none); every static member id is in
`members`; `pending_members` and `members` are disjoint; `protocol_name` is None exactly when the
group has no current generation with members (Empty / Dead / before the first join completes).
"""
from __future__ import annotations

import uuid
from collections import Counter
from enum import Enum

from kompakt.broker.groups.member import EMPTY_ASSIGNMENT, ClassicMember
from kompakt.protocol import errors
from kompakt.protocol.consumer_protocol import consumer_subscription_topics


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(str, Enum):
    PREPARE_REBALANCE = "PREPARE_REBALANCE"
    JOIN_COMPLETE = "JOIN_COMPLETE"
    ALL_MEMBERS_LEFT = "ALL_MEMBERS_LEFT"
    SYNC_COMPLETE = "SYNC_COMPLETE"
    DELETE = "DELETE"


S, E = GroupState, GroupEvent
TRANSITIONS: dict[tuple[GroupState, GroupEvent], GroupState] = {
    (S.EMPTY, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.EMPTY, E.DELETE): S.DEAD,
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETE): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.ALL_MEMBERS_LEFT): S.EMPTY,
    (S.PREPARING_REBALANCE, E.DELETE): S.DEAD,
    (S.COMPLETING_REBALANCE, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.SYNC_COMPLETE): S.STABLE,
    (S.COMPLETING_REBALANCE, E.DELETE): S.DEAD,
    (S.STABLE, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.STABLE, E.DELETE): S.DEAD,
    (S.DEAD, E.DELETE): S.DEAD,
}
del S, E

CONSUMER_PROTOCOL_TYPE = "consumer"


class IllegalStateError(Exception):
    """An event that the group's current state does not allow (a coordinator bug, not a client error)."""

    def __init__(self, current: GroupState, event: GroupEvent, group_id: str = ""):
        super().__init__(f"group {group_id!r}: event {event.value} is not allowed in state {current.value}")
        self.current = current
        self.event = event


def transition(current: GroupState, event: GroupEvent, group_id: str = "") -> GroupState:
    try:
        return TRANSITIONS[(current, event)]
    except KeyError:
        raise IllegalStateError(current, event, group_id) from None


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY):
        self.group_id = group_id
        self.state = state
        self.previous_state: GroupState | None = None
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.pending_members: set[str] = set()
        self.static_members: dict[str, str] = {}
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None

    # -- state ---------------------------------------------------------------------------------

    def fire(self, event: GroupEvent, now_ms: int) -> GroupState:
        nxt = transition(self.state, event, self.group_id)
        self.previous_state, self.state = self.state, nxt
        self.state_timestamp_ms = now_ms
        return nxt

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return (self.state, GroupEvent.PREPARE_REBALANCE) in TRANSITIONS

    @property
    def rebalance_timeout_ms(self) -> int:
        """The join phase waits for the slowest member: the largest rebalance timeout."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- membership ----------------------------------------------------------------------------

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """Kafka's scheme: `<group.instance.id or client.id>-<uuid>`."""
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicMember | None:
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> ClassicMember:
        """Give a static member a new member id (a restarted instance); the old one is fenced."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.pending_sync_members.discard(old_member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> None:
        """Kafka's ClassicGroup.validateMember: FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise errors.UnknownMemberIdError(
                    f"static member {group_instance_id} is unknown to group {self.group_id}")
            if existing != member_id:
                raise errors.FencedInstanceIdError(
                    f"static member {group_instance_id} of group {self.group_id} now has member id "
                    f"{existing}, not {member_id}")
        elif member_id not in self.members:
            raise errors.UnknownMemberIdError(f"member {member_id} is unknown to group {self.group_id}")

    # -- protocols -----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.is_state(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts.get(name, 0) == len(self.members) for name, _ in protocols)

    def _protocol_counts(self) -> Counter:
        counts: Counter = Counter()
        for m in self.members.values():
            counts.update(set(m.protocol_names()))
        return counts

    def candidate_protocols(self) -> set[str]:
        counts = self._protocol_counts()
        return {name for name, n in counts.items() if n == len(self.members)}

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-preference votes; ties go to
        the protocol the first member prefers (deterministic, unlike Kafka's map order)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for group {self.group_id} without members")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name in first.protocol_names():
            if votes.get(name) == best:
                return name
        return max(votes, key=votes.get)  # unreachable: the first member voted

    # -- rebalance bookkeeping -----------------------------------------------------------------

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_members

    def not_yet_rejoined_members(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.fire(GroupEvent.JOIN_COMPLETE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._compute_subscribed_topics()
            self.fire(GroupEvent.ALL_MEMBERS_LEFT, now_ms)
        self.pending_sync_members.clear()

    def _compute_subscribed_topics(self) -> set[str] | None:
        """Topics of every member's subscription, when the group speaks the consumer protocol
        (used by OffsetDelete and offset expiry): none without members; None when unknown
        (another protocol type, no protocol selected yet, or a subscription we cannot parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = consumer_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's ClassicGroup.isSubscribedToTopic: a consumer-protocol group whose
        subscriptions are unknown counts as subscribed to every topic."""
        if self.subscribed_topics is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed_topics

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, group instance id, metadata) of every member for the selected protocol:
        what the leader's JoinGroup answer carries."""
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {mid: m.assignment for mid, m in self.members.items()}

    def reset_assignments(self) -> None:
        for m in self.members.values():
            m.assignment = EMPTY_ASSIGNMENT

    def metadata_record_fields(self, assignment: dict[str, bytes]) -> dict:
        """Arguments of group_records.encode_group_metadata_value for this group."""
        members = []
        if self.protocol_name is not None:
            for m in self.members.values():
                members.append({
                    "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata(self.protocol_name),
                    "assignment": assignment.get(m.member_id, EMPTY_ASSIGNMENT)})
        return {"protocol_type": self.protocol_type or "", "generation": self.generation_id,
                "protocol": self.protocol_name, "leader": self.leader_id if members else None,
                "members": members, "current_state_timestamp": self.state_timestamp_ms}

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
                f"protocol={self.protocol_name!r}, leader={self.leader_id!r}, members={list(self.members)})")
