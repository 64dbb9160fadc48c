"""The consumer-protocol assignors (uniform, range), reconciliation and the member state table."""
from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.broker.groups.consumer import assignors as A
from kompakt.broker.groups.consumer.member import (
    TRANSITIONS, ConsumerGroupMember, IllegalMemberTransition, MemberState, Outcome, transition)
from kompakt.broker.groups.consumer.reconcile import reconcile

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def spec(mid, topics, current=None, instance=None):
    return A.MemberSpec(mid, frozenset(topics), current or {}, instance)


def counts_of(result):
    return sorted(sum(len(p) for p in a.values()) for a in result.values())


def every_partition_once(result, counts, members):
    seen = [(t, p) for mid, a in result.items() for t, ps in a.items() for p in ps]
    assert len(seen) == len(set(seen))
    for mid, a in result.items():
        assert set(a) <= members[mid].topics
    wanted = {(t, p) for t, n in counts.items() for p in range(n)
              if any(t in m.topics for m in members.values())}
    assert set(seen) == wanted


def test_uniform_homogeneous_balances_and_keeps_partitions():
    counts = {T1: 6, T2: 3}
    first = A.uniform_assign({"a": spec("a", [T1, T2])}, counts)
    assert counts_of(first) == [9]
    members = {"a": spec("a", [T1, T2], first["a"]), "b": spec("b", [T1, T2]), "c": spec("c", [T1, T2])}
    second = A.uniform_assign(members, counts)
    every_partition_once(second, counts, members)
    assert counts_of(second) == [3, 3, 3]
    # a keeps three of its own partitions: only the six that had to move moved
    assert all(p in first["a"][t] for t, ps in second["a"].items() for p in ps)
    # b leaves: a and c keep theirs and share b's
    members = {"a": spec("a", [T1, T2], second["a"]), "c": spec("c", [T1, T2], second["c"])}
    third = A.uniform_assign(members, counts)
    assert counts_of(third) in ([4, 5],)
    for mid in ("a", "c"):
        assert all(p in third[mid].get(t, ()) for t, ps in second[mid].items() for p in ps)


def test_uniform_heterogeneous_respects_subscriptions():
    counts = {T1: 4, T2: 4}
    members = {"a": spec("a", [T1]), "b": spec("b", [T1, T2]), "c": spec("c", [T2])}
    result = A.uniform_assign(members, counts)
    every_partition_once(result, counts, members)
    assert max(counts_of(result)) - min(counts_of(result)) <= 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 5), min_size=1, max_size=3), st.integers(0, 2**32))
def test_assignors_cover_every_partition_once(n_members, partition_counts, seed):
    rng = random.Random(seed)
    topics = [uuid.UUID(int=i + 1) for i in range(len(partition_counts))]
    counts = dict(zip(topics, partition_counts))
    members = {f"m{i}": spec(f"m{i}", rng.sample(topics, rng.randint(1, len(topics))),
                             instance=rng.choice([None, f"i{i}"])) for i in range(n_members)}
    for name in (A.UNIFORM, A.RANGE):
        result = A.assign(name, members, counts)
        every_partition_once(result, counts, members)
        again = A.assign(name, {mid: spec(mid, m.topics, result.get(mid), m.instance_id)
                                for mid, m in members.items()}, counts)
        if name == A.UNIFORM:
            assert again == {mid: a for mid, a in result.items()}   # stable when nothing changes


def test_range_is_contiguous_co_partitioned_and_puts_static_members_first():
    counts = {T1: 3, T2: 3}
    members = {"zz": spec("zz", [T1, T2], instance="i0"), "aa": spec("aa", [T1, T2])}
    result = A.range_assign(members, counts)
    assert result["zz"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert result["aa"] == {T1: frozenset({2}), T2: frozenset({2})}


def test_member_state_table_in_docstring_matches():
    import kompakt.broker.groups.consumer.member as mod
    rows = [line for line in mod.__doc__.splitlines()
            if line.strip().startswith("| ") and "current" not in line]
    labels = {s.label: s for s in MemberState}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        state = labels[cells[0]]
        for outcome, cell in zip(Outcome, cells[1:]):
            expected = TRANSITIONS.get((state, outcome))
            assert cell == (expected.label if expected is not None else "-"), (state, outcome)
    with pytest.raises(IllegalMemberTransition) as info:
        transition(MemberState.STABLE, Outcome.STILL_REVOKING, "m")
    assert "Stable" in str(info.value) and "STILL_REVOKING" in str(info.value)


def test_reconcile_keeps_revokes_then_assigns():
    m = ConsumerGroupMember("a", member_epoch=1, assigned={T1: frozenset({0, 1, 2})})
    free = lambda t, p: -1   # noqa: E731
    # target: keep 0, give up 1 and 2, add 3
    step = reconcile(m, 2, {T1: frozenset({0, 3})}, free, [(T1, [0, 1, 2])])
    assert (step.state, step.member_epoch, step.assigned, step.pending_revocation) == (
        MemberState.UNREVOKED_PARTITIONS, 1, {T1: frozenset({0})}, {T1: frozenset({1, 2})})
    assert reconcile(step, 2, {T1: frozenset({0, 3})}, free, [(T1, [0, 1])]) is step   # still owns 1
    done = reconcile(step, 2, {T1: frozenset({0, 3})}, free, [(T1, [0])])
    assert (done.state, done.member_epoch, done.previous_member_epoch, done.assigned) == (
        MemberState.STABLE, 2, 1, {T1: frozenset({0, 3})})
    # a partition someone else still owns waits
    held = lambda t, p: 5 if p == 3 else -1   # noqa: E731
    waiting = reconcile(step, 2, {T1: frozenset({0, 3})}, held, [(T1, [0])])
    assert (waiting.state, waiting.assigned) == (MemberState.UNRELEASED_PARTITIONS, {T1: frozenset({0})})
