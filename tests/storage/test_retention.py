"""Retention rules over segment lists: log-start, size and time breaches, with Kafka's guards."""
from dataclasses import dataclass

from hypothesis import given, strategies as st

from kompakt.storage.retention import (
    LOG_START_BREACH, RETENTION_MS_BREACH, RETENTION_SIZE_BREACH, log_start_breached, plan_retention,
    retention_ms_breached, retention_size_breached)


@dataclass
class Seg:
    base_offset: int
    size: int
    largest_timestamp: int


def segs(*specs):
    """specs: (base_offset, size, largest_timestamp)"""
    return [Seg(*s) for s in specs]


# (gap to the next base offset, size, largest timestamp) of 1-12 segments
SEGMENT_SPECS = st.lists(st.tuples(st.integers(1, 50), st.integers(0, 1000), st.integers(0, 10_000)),
                         min_size=1, max_size=12)


def from_spec(spec):
    base, out = 0, []
    for gap, size, ts in spec:
        out.append(Seg(base, size, ts))
        base += gap
    return out


S = segs((0, 100, 1000), (10, 100, 2000), (20, 100, 3000), (30, 50, 4000))  # last = active


def test_time_breach_deletes_old_prefix_never_active():
    assert [s.base_offset for s in retention_ms_breached(S, 500, 2600, high_watermark=40)] == [0, 10]
    # everything old: still never the active segment
    assert [s.base_offset for s in retention_ms_breached(S, 1, 10**9, high_watermark=40)] == [0, 10, 20]
    assert retention_ms_breached(S, -1, 10**9, high_watermark=40) == []


def test_time_breach_stops_at_first_young_segment():
    s = segs((0, 1, 1000), (10, 1, 9000), (20, 1, 1000), (30, 1, 1000))
    assert [x.base_offset for x in retention_ms_breached(s, 100, 5000, 40)] == [0]


def test_future_timestamp_is_never_old_enough():
    s = segs((0, 1, 10**12), (10, 1, 0))
    assert retention_ms_breached(s, 0, 5000, 40) == []


def test_size_breach():
    # total 350, keep at most 200 -> must drop 150: first segment (100) fits, second would overshoot
    assert [x.base_offset for x in retention_size_breached(S, 200, 40)] == [0]
    assert [x.base_offset for x in retention_size_breached(S, 150, 40)] == [0, 10]
    assert [x.base_offset for x in retention_size_breached(S, 0, 40)] == [0, 10, 20]
    assert retention_size_breached(S, 350, 40) == [] and retention_size_breached(S, -1, 40) == []


def test_log_start_breach():
    assert [x.base_offset for x in log_start_breached(S, 20, 40)] == [0, 10]
    assert [x.base_offset for x in log_start_breached(S, 19, 40)] == [0]
    assert log_start_breached(S, 5, 40) == []
    assert [x.base_offset for x in log_start_breached(S, 35, 40)] == [0, 10, 20]


def test_high_watermark_guard():
    # segment [10,20) ends at 20 > HW 15: not deletable, and nothing after it either
    assert [x.base_offset for x in retention_ms_breached(S, 1, 10**9, high_watermark=15)] == [0]
    assert retention_ms_breached(S, 1, 10**9, high_watermark=9) == []


def test_plan_order_and_policy():
    plan = plan_retention(S, compact=False, delete=True, retention_ms=1500, retention_bytes=300,
                          log_start_offset=0, high_watermark=40, now_ms=3000)
    # size: 350-300=50 < 100 -> nothing; time: 3000-1000>1500 -> seg 0 only (3000-2000 = 1000)
    assert [(r, [s.base_offset for s in g]) for r, g in plan.steps] == [(RETENTION_MS_BREACH, [0])]
    assert plan.new_log_start_offset == 10 and plan.bytes == 100
    plan = plan_retention(S, compact=False, delete=True, retention_ms=1500, retention_bytes=200,
                          log_start_offset=12, high_watermark=40, now_ms=3600)
    # log start 12 drops seg 0; then 250 bytes vs 200 -> 50 < 100, nothing; then seg 10 (age 1600) expires
    assert [(r, [s.base_offset for s in g]) for r, g in plan.steps] == [
        (LOG_START_BREACH, [0]), (RETENTION_MS_BREACH, [10])]
    assert [s.base_offset for s in plan.segments] == [0, 10]
    plan = plan_retention(S, compact=False, delete=True, retention_ms=-1, retention_bytes=150,
                          log_start_offset=0, high_watermark=40, now_ms=0)
    assert [(r, [s.base_offset for s in g]) for r, g in plan.steps] == [(RETENTION_SIZE_BREACH, [0, 10])]
    # compact-only: only the log-start breach applies
    plan = plan_retention(S, compact=True, delete=False, retention_ms=1, retention_bytes=0,
                          log_start_offset=12, high_watermark=40, now_ms=10**9)
    assert [(r, [s.base_offset for s in g]) for r, g in plan.steps] == [(LOG_START_BREACH, [0])]
    assert not plan_retention(S, compact=True, delete=False, retention_ms=1, retention_bytes=0,
                              log_start_offset=0, high_watermark=40, now_ms=10**9)


@given(SEGMENT_SPECS,
       st.integers(-1, 2000), st.integers(-1, 10_000), st.integers(0, 600), st.integers(0, 20_000),
       st.integers(0, 600))
def test_plan_invariants(spec, retention_bytes, retention_ms, hw, now, log_start):
    segments = from_spec(spec)
    plan = plan_retention(segments, compact=False, delete=True, retention_ms=retention_ms,
                          retention_bytes=retention_bytes, log_start_offset=log_start,
                          high_watermark=hw, now_ms=now)
    chosen = plan.segments
    assert chosen == segments[:len(chosen)]  # an oldest-first prefix
    assert len(chosen) < len(segments)  # the active segment survives
    if chosen:
        assert segments[len(chosen)].base_offset <= hw  # log start never passes the high watermark
        assert plan.new_log_start_offset == segments[len(chosen)].base_offset


def test_an_expired_active_segment_goes_too_when_the_log_end_is_given():
    # Kafka's UnifiedLog.deletableSegments: the active segment is a candidate (upper bound: the log
    # end offset) unless it is empty; Log.delete_segments rolls a new one before deleting it
    assert [s.base_offset for s in retention_ms_breached(S, 1, 10**9, 40, log_end_offset=40)] == [0, 10, 20, 30]
    assert [s.base_offset for s in retention_size_breached(S, 0, 40, log_end_offset=40)] == [0, 10, 20, 30]
    assert [s.base_offset for s in retention_size_breached(S, 50, 40, log_end_offset=40)] == [0, 10, 20]
    # the active segment's upper bound above the high watermark: it stays
    assert [s.base_offset for s in retention_ms_breached(S, 1, 10**9, 35, log_end_offset=40)] == [0, 10, 20]
    # an empty active segment is never chosen
    empty_active = segs((0, 100, 1000), (10, 0, 0))
    assert [s.base_offset for s in retention_ms_breached(empty_active, 1, 10**9, 10, log_end_offset=10)] == [0]
    # the log-start rule never takes the active segment (it has no next segment)
    assert [s.base_offset for s in log_start_breached(S, 40, 40)] == [0, 10, 20]
    plan = plan_retention(S, compact=False, delete=True, retention_ms=1, retention_bytes=-1,
                          log_start_offset=0, high_watermark=40, now_ms=10**9, log_end_offset=40)
    assert [s.base_offset for s in plan.segments] == [0, 10, 20, 30] and plan.new_log_start_offset == 40
    plan = plan_retention(S, compact=True, delete=False, retention_ms=1, retention_bytes=0,
                          log_start_offset=0, high_watermark=40, now_ms=10**9, log_end_offset=40)
    assert not plan   # compact-only: no size or time rule


@given(SEGMENT_SPECS,
       st.integers(-1, 2000), st.integers(-1, 10_000), st.integers(0, 20_000), st.integers(0, 600),
       st.integers(0, 60))
def test_plan_invariants_with_the_active_segment(spec, retention_bytes, retention_ms, now, log_start, tail):
    segments = from_spec(spec)
    leo = segments[-1].base_offset + tail
    plan = plan_retention(segments, compact=False, delete=True, retention_ms=retention_ms,
                          retention_bytes=retention_bytes, log_start_offset=min(log_start, leo),
                          high_watermark=leo, now_ms=now, log_end_offset=leo)
    chosen = plan.segments
    assert chosen == segments[:len(chosen)]
    if len(chosen) == len(segments):
        assert segments[-1].size > 0 and plan.new_log_start_offset == leo
    elif chosen:
        assert plan.new_log_start_offset == segments[len(chosen)].base_offset
