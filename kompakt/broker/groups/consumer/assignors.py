"""Server-side assignors of consumer-protocol groups: `uniform` and `range` (Kafka's
UniformAssignor and RangeAssignor, KIP-848), chosen with `group.consumer.assignors`.

Role: pure functions from the group's members (subscribed topic ids, current target assignment,
static instance id) and the subscribed topics' partition counts to a new target assignment
(member id -> {topic id: frozenset of partitions}). The coordinator then moves each member
towards its target without stopping the others (reconcile.py).

* uniform: spreads all subscribed partitions so that member counts differ by at most one (per
  subscriber set when subscriptions differ) and moves as few partitions as it can: a member keeps
  what it had up to its quota; the extra partition of an uneven split goes first to members
  that already hold more than the minimum. With identical subscriptions (Kafka's homogeneous
  case) that is exact; with different subscriptions (heterogeneous) partitions go, rarest topic
  first, to the least-loaded subscriber, then moves between subscribers even the counts out.
* range: per topic, contiguous ranges of partitions over the subscribed members sorted by
  instance id (static members first) then member id, the first `partitions % members` getting
  one more; with identical subscriptions and partition counts, co-partitioned (a member gets the
  same partition numbers of every topic).

Invariants: every partition of a subscribed topic is assigned to exactly one subscribed member
(when the group has one); nothing of an unsubscribed or missing topic is assigned.
"""
from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

Partitions = dict   # uuid.UUID -> frozenset[int]

UNIFORM = "uniform"
RANGE = "range"
# Kafka's class names are accepted in group.consumer.assignors as well.
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE}


@dataclass(frozen=True)
class MemberSpec:
    member_id: str
    topics: frozenset           # subscribed topic ids that exist
    current: Partitions = field(default_factory=dict)   # the member's current target assignment
    instance_id: str | None = None


def assign(name: str, members: dict[str, MemberSpec], partition_counts: dict[uuid.UUID, int]
           ) -> dict[str, Partitions]:
    """The new target assignment of every member with assignor `name` (uniform or range)."""
    if name == RANGE:
        return range_assign(members, partition_counts)
    if name == UNIFORM:
        return uniform_assign(members, partition_counts)
    raise ValueError(f"unknown assignor {name!r}")


def _pack(owned: dict[str, set]) -> dict[str, Partitions]:
    out: dict[str, Partitions] = {}
    for member_id, tps in owned.items():
        by_topic: dict = {}
        for topic_id, p in tps:
            by_topic.setdefault(topic_id, set()).add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


# -------------------------------------------------------------------------------- uniform

def uniform_assign(members: dict[str, MemberSpec], counts: dict[uuid.UUID, int]) -> dict[str, Partitions]:
    if not members:
        return {}
    subscriptions = {m.topics for m in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, counts, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, counts)


def _valid(topic_id, p, topics, counts) -> bool:
    return topic_id in topics and topic_id in counts and 0 <= p < counts[topic_id]


def _uniform_homogeneous(members, counts, topics) -> dict[str, Partitions]:
    topics = [t for t in topics if t in counts]
    every = [(t, p) for t in sorted(topics, key=lambda u: u.bytes) for p in range(counts[t])]
    n = len(members)
    minimum, extra = divmod(len(every), n)
    current = {mid: {(t, p) for t, ps in m.current.items() for p in ps if _valid(t, p, topics, counts)}
               for mid, m in members.items()}
    # Members already above the minimum keep their extra partition first (fewest moves).
    order = sorted(members, key=lambda mid: (-len(current[mid]), mid))
    quota = {mid: minimum + (1 if i < extra else 0) for i, mid in enumerate(order)}
    owned: dict[str, set] = {}
    taken: set = set()
    for mid in order:
        keep = sorted(current[mid] - taken, key=lambda tp: (tp[0].bytes, tp[1]))[:quota[mid]]
        owned[mid] = set(keep)
        taken.update(keep)
    free = iter([tp for tp in every if tp not in taken])   # (an iterator: pop(0) is quadratic)
    for mid in order:
        owned[mid].update(itertools.islice(free, quota[mid] - len(owned[mid])))
    return _pack(owned)


def _uniform_heterogeneous(members, counts) -> dict[str, Partitions]:
    owned: dict[str, set] = {mid: set() for mid in members}
    holder: dict = {}
    for mid in sorted(members):
        m = members[mid]
        for t, ps in m.current.items():
            for p in ps:
                if _valid(t, p, m.topics, counts) and (t, p) not in holder:
                    holder[(t, p)] = mid
                    owned[mid].add((t, p))
    subscribers = {t: sorted(mid for mid, m in members.items() if t in m.topics) for t in counts}
    rarest_first = sorted((t for t in counts if subscribers[t]),
                          key=lambda t: (len(subscribers[t]), t.bytes))
    for t in rarest_first:
        for p in range(counts[t]):
            if (t, p) not in holder:
                mid = min(subscribers[t], key=lambda m: (len(owned[m]), m))
                holder[(t, p)] = mid
                owned[mid].add((t, p))
    # Even the counts out: move one partition at a time from a member to a subscriber of that
    # topic with at least two fewer, until no such move exists.
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[giver], key=lambda x: (x[0].bytes, x[1])):
                takers = [m for m in subscribers[tp[0]] if len(owned[m]) + 1 < len(owned[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(owned[m]), m))
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
    return _pack(owned)


# ---------------------------------------------------------------------------------- range

def _range_order(members: dict[str, MemberSpec]) -> list[str]:
    """Static members first, by instance id; then the others by member id (Kafka's order)."""
    return sorted(members, key=lambda mid: (members[mid].instance_id is None,
                                            members[mid].instance_id or "", mid))


def range_assign(members: dict[str, MemberSpec], counts: dict[uuid.UUID, int]) -> dict[str, Partitions]:
    order = _range_order(members)
    out: dict[str, dict] = {mid: {} for mid in members}
    for topic_id in sorted(counts, key=lambda u: u.bytes):
        subscribed = [mid for mid in order if topic_id in members[mid].topics]
        if not subscribed:
            continue
        minimum, extra = divmod(counts[topic_id], len(subscribed))
        start = 0
        for i, mid in enumerate(subscribed):
            size = minimum + (1 if i < extra else 0)
            if size:
                out[mid][topic_id] = frozenset(range(start, start + size))
            start += size
    return out
