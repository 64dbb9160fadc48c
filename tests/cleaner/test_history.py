"""The cleaner's in-memory history for the console: bounded, newest kept, gone partitions dropped."""
from kompakt.cleaner.history import MIN_SAMPLE_INTERVAL_MS, CleanerHistory
from kompakt.cleaner.stats import CleanerStats


def _stats(read: int, written: int) -> CleanerStats:
    s = CleanerStats(monotonic=lambda: 10.0)
    s.bytes_read, s.bytes_written, s.messages_read, s.messages_written = read * 100, written * 100, read, written
    s.all_done()
    return s


def test_passes_are_bounded_and_keep_the_newest():
    h = CleanerHistory(max_passes=3)
    for i in range(5):
        h.record_pass(1000 * i, ("t", i % 2), _stats(10 + i, 4), 0.5, 0, 10 + i)
    passes = h.passes()
    assert [p["time_ms"] for p in passes] == [2000, 3000, 4000]
    assert passes[-1]["records_removed"] == 14 - 4 and passes[-1]["bytes_read"] == 1400
    assert [p["time_ms"] for p in h.passes("t", 0)] == [2000, 4000]


def test_dirty_samples_are_bounded_spaced_and_follow_the_partitions():
    h = CleanerHistory(max_samples=4)
    for i in range(10):
        h.sample_dirty(i * MIN_SAMPLE_INTERVAL_MS, {("a", 0): i / 10, ("b", 0): 0.5})
    assert [r for _, r in h.dirty()[("a", 0)]] == [0.6, 0.7, 0.8, 0.9]
    # a round sooner than the interval adds nothing: the first of a burst (before a pass) stays
    h.sample_dirty(9 * MIN_SAMPLE_INTERVAL_MS + 1, {("a", 0): 0.0, ("b", 0): 0.5})
    assert h.dirty()[("a", 0)][-1] == (9 * MIN_SAMPLE_INTERVAL_MS, 0.9) and len(h.dirty()[("a", 0)]) == 4
    # a partition the cleaner no longer selects (topic deleted) is dropped
    h.sample_dirty(20 * MIN_SAMPLE_INTERVAL_MS, {("a", 0): 0.1})
    assert set(h.dirty()) == {("a", 0)} and set(h.dirty("b")) == set()
