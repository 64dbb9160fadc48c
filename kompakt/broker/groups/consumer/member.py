"""One member of a consumer-protocol group (Kafka's ConsumerGroupMember) and its state machine.

Role: an immutable value - what the coordinator knows of a member: identity (member id, static
`instance_id`), where it runs (client id, host, rack), what it subscribes (topic names and/or a
regular expression), its rebalance timeout and preferred server assignor, whether it speaks the
classic protocol (`classic`: session timeout and JoinGroup protocols), and its *current*
assignment: member epoch, previous epoch, reconciliation state, the partitions it owns
(`assigned`) and those it still has to give back (`pending_revocation`). Partitions are keyed by
topic id (uuid.UUID) -> frozenset of partition numbers. Changes make a new member
(`dataclasses.replace`), so the old one can still be compared with it, as Kafka's builder does.

Member states (MemberState, the int8 Kafka persists) and how reconciliation moves between them
(reconcile.py computes the outcome; `transition()` applies this table):

    | current               | REVOKE                | WAIT_UNRELEASED       | RECONCILED | STILL_REVOKING        |
    |-----------------------|-----------------------|-----------------------|------------|-----------------------|
    | Stable                | UnrevokedPartitions   | UnreleasedPartitions  | Stable     | -                     |
    | UnrevokedPartitions   | UnrevokedPartitions   | UnreleasedPartitions  | Stable     | UnrevokedPartitions   |
    | UnreleasedPartitions  | UnrevokedPartitions   | UnreleasedPartitions  | Stable     | -                     |
    | Unknown               | UnrevokedPartitions   | UnreleasedPartitions  | Stable     | -                     |

    REVOKE            the new target takes partitions away: the member keeps its epoch and must
                      stop using them (reported in its next heartbeat) within its rebalance timeout.
    WAIT_UNRELEASED   it moves to the target epoch but some target partitions are still owned by
                      members that have not revoked them; it gets them once they are free.
    RECONCILED        it owns exactly its target at the target epoch.
    STILL_REVOKING    it still reports a partition it was asked to revoke: nothing changes.
    (Unknown is a state value this coordinator does not know, read from a log written by a
    newer one: the member must come back with no partitions and is reconciled from scratch.)

Invariants: `assigned` and `pending_revocation` are disjoint; a member is reconciled to epoch E
exactly when it is Stable at member epoch E.
"""
from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from enum import Enum, IntEnum

Partitions = dict   # uuid.UUID -> frozenset[int]
EMPTY: Partitions = {}

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return {0: "Stable", 1: "UnrevokedPartitions", 2: "UnreleasedPartitions"}.get(self.value, "Unknown")


class Outcome(str, Enum):
    REVOKE = "REVOKE"
    WAIT_UNRELEASED = "WAIT_UNRELEASED"
    RECONCILED = "RECONCILED"
    STILL_REVOKING = "STILL_REVOKING"


M, O = MemberState, Outcome
TRANSITIONS: dict[tuple[MemberState, Outcome], MemberState] = {
    (M.STABLE, O.REVOKE): M.UNREVOKED_PARTITIONS,
    (M.STABLE, O.WAIT_UNRELEASED): M.UNRELEASED_PARTITIONS,
    (M.STABLE, O.RECONCILED): M.STABLE,
    (M.UNREVOKED_PARTITIONS, O.REVOKE): M.UNREVOKED_PARTITIONS,
    (M.UNREVOKED_PARTITIONS, O.WAIT_UNRELEASED): M.UNRELEASED_PARTITIONS,
    (M.UNREVOKED_PARTITIONS, O.RECONCILED): M.STABLE,
    (M.UNREVOKED_PARTITIONS, O.STILL_REVOKING): M.UNREVOKED_PARTITIONS,
    (M.UNRELEASED_PARTITIONS, O.REVOKE): M.UNREVOKED_PARTITIONS,
    (M.UNRELEASED_PARTITIONS, O.WAIT_UNRELEASED): M.UNRELEASED_PARTITIONS,
    (M.UNRELEASED_PARTITIONS, O.RECONCILED): M.STABLE,
    (M.UNKNOWN, O.REVOKE): M.UNREVOKED_PARTITIONS,
    (M.UNKNOWN, O.WAIT_UNRELEASED): M.UNRELEASED_PARTITIONS,
    (M.UNKNOWN, O.RECONCILED): M.STABLE,
}
del M, O


class IllegalMemberTransition(Exception):
    """An outcome the member's state does not allow (a coordinator bug, not a client error)."""

    def __init__(self, current: MemberState, outcome: Outcome, member_id: str = ""):
        super().__init__(f"member {member_id!r}: outcome {outcome.value} is not allowed in state "
                         f"{current.label}")
        self.current = current
        self.outcome = outcome


def transition(current: MemberState, outcome: Outcome, member_id: str = "") -> MemberState:
    try:
        return TRANSITIONS[(current, outcome)]
    except KeyError:
        raise IllegalMemberTransition(current, outcome, member_id) from None


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member speaking the classic protocol inside a consumer group sent in its last
    JoinGroup (Kafka's ClassicMemberMetadata): its session timeout and its protocols (name,
    consumer-protocol subscription bytes) in preference order."""
    session_timeout_ms: int
    protocols: tuple

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name: its first (Kafka's choice)."""
        return self.protocols[0][0]


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str = ""          # "" = none (Kafka's default); None never stored
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMetadata | None = None     # set while it speaks the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def replace(self, **changes) -> "ConsumerGroupMember":
        return dataclasses.replace(self, **changes)

    def with_epoch(self, epoch: int, **changes) -> "ConsumerGroupMember":
        """The member at a new epoch; the old one becomes the previous epoch (Kafka's
        updateMemberEpoch)."""
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch,
                                   **changes)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def subscription(self) -> tuple:
        """What the record ConsumerGroupMemberMetadata holds (a change of it is written)."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex,
                self.rebalance_timeout_ms, self.server_assignor, self.classic)

    def owned_partitions(self) -> Partitions:
        """Assigned plus pending revocation: what no other member may be given yet."""
        out = {t: set(p) for t, p in self.assigned.items()}
        for t, p in self.pending_revocation.items():
            out.setdefault(t, set()).update(p)
        return {t: frozenset(p) for t, p in out.items()}


def freeze(partitions) -> Partitions:
    """{topic id: iterable of ints} -> {uuid.UUID: frozenset}, without empty topics."""
    out: Partitions = {}
    for topic_id, parts in partitions.items():
        parts = frozenset(parts)
        if parts:
            out[topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))] = parts
    return out
