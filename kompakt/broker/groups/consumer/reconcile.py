"""Moving one member's current assignment towards its target (Kafka's CurrentAssignmentBuilder).

Role: a pure function. Given a member, the group's target assignment epoch, the member's target
partitions, who owns each partition now (`owner_epoch(topic_id, partition)`: the epoch of the
member that has it assigned or pending revocation, -1 if free) and the partitions the member
reported owning in this heartbeat (None when it did not say), it returns the member's next
state - never more than one step, which is what makes the protocol incremental:

* Stable at the target epoch: nothing to do.
* Stable at an older epoch (or UnreleasedPartitions): compute the next assignment.
* UnrevokedPartitions: wait until the member no longer reports any partition pending revocation
  (STILL_REVOKING), then move on at epoch + 1.

The next assignment keeps `assigned ∩ target`, asks to revoke `assigned - target` (the member
stays at its epoch: a revocation must be acknowledged before anything new is handed out), and
otherwise moves to the target epoch adding the target partitions nobody owns any more (or that
the member itself was revoking: the target gave them back); the ones still owned by another
member wait (UnreleasedPartitions) - a partition is given to its new owner only after the old
owner revoked it.

Invariant: a partition is never in the result's `assigned` while `owner_epoch` says another
member owns it.
"""
from __future__ import annotations

import uuid
from typing import Callable, Iterable

from kompakt.broker.groups.consumer.member import (
    ConsumerGroupMember, MemberState, Outcome, Partitions, transition)
from kompakt.protocol import errors

OwnedReport = Iterable[tuple[uuid.UUID, Iterable[int]]] | None


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Partitions,
              owner_epoch: Callable[[uuid.UUID, int], int], owned: OwnedReport) -> ConsumerGroupMember:
    """The member's next current assignment (the same object when nothing changes)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            transition(state, Outcome.STILL_REVOKING, member.member_id)
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owner_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    # Unknown state (written by a newer coordinator): start over from no partitions.
    if owned is None or any(True for _, parts in owned if list(parts)):
        raise errors.FencedMemberEpochError(
            "The consumer group member is in an unknown state; it must abandon all its "
            "partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, owner_epoch, owned)


def _owns_any(owned: OwnedReport, partitions: Partitions) -> bool:
    """Does the member still report any of `partitions`? (It did not say: assume it does.)"""
    if owned is None:
        return True
    for topic_id, parts in owned:
        wanted = partitions.get(topic_id)
        if wanted and any(p in wanted for p in parts):
            return True
    return False


def _next(member: ConsumerGroupMember, epoch: int, target_epoch: int, target: Partitions,
          owner_epoch: Callable[[uuid.UUID, int], int], owned: OwnedReport) -> ConsumerGroupMember:
    keep: dict = {}
    revoke: dict = {}
    add: dict = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        goal = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & goal
        if kept:
            keep[topic_id] = kept
        if current - kept:
            revoke[topic_id] = current - kept
        free = set()
        revoking = member.pending_revocation.get(topic_id, frozenset())
        for p in goal - kept:
            # a partition this member holds pending revocation is its own to take back (only
            # one member can hold a partition): not unreleased, as Kafka's computeNextAssignment
            if owner_epoch(topic_id, p) == -1 or p in revoking:
                free.add(p)
            else:
                unreleased = True
        if free:
            add[topic_id] = frozenset(free)

    if revoke and _owns_any(owned, revoke):
        outcome = Outcome.REVOKE
        new = member.with_epoch(epoch, assigned=keep, pending_revocation=revoke)
    elif add:
        for topic_id, parts in add.items():
            keep[topic_id] = keep.get(topic_id, frozenset()) | parts
        outcome = Outcome.WAIT_UNRELEASED if unreleased else Outcome.RECONCILED
        new = member.with_epoch(target_epoch, assigned=keep, pending_revocation={})
    elif unreleased:
        outcome = Outcome.WAIT_UNRELEASED
        new = member.with_epoch(target_epoch, assigned=keep, pending_revocation={})
    else:
        outcome = Outcome.RECONCILED
        new = member.with_epoch(target_epoch, assigned=keep, pending_revocation={})
    return new.replace(state=transition(member.state, outcome, member.member_id))
