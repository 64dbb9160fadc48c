"""What-if replay (cleaner/whatif.py) on logs whose answer is known by construction.

The log: one 100-byte batch of one record per second, keys cycling over 5; with segment.bytes =
1000 a segment holds 10 batches (the 11th does not fit), so segment n closes when batch 10(n+1)
arrives, at second 10(n+1); 200 batches make 19 closed segments and an active one. The cleaner
wakes every second (log.cleaner.backoff.ms=1000)."""
import pytest

from kompakt.cleaner import whatif as W
from kompakt.config.topic_config import LogConfig

T0 = 1_700_000_000_000
B = 100


def log(n=200, keys=5, tombstone_at=None):
    out = []
    for i in range(n):
        key, tomb = b"k%d" % (i % keys), False
        if i == tombstone_at:
            key, tomb = b"gone", True
        elif tombstone_at is not None and i == tombstone_at - 30:
            key = b"gone"
        out.append(W.InputBatch(i, i, B, T0 + i * 1000, [(i, key, tomb)]))
    return out


def settings(capacity=1_000_000, **topic):
    overrides = {"cleanup.policy": "compact", "internal.segment.bytes": str(10 * B)}
    overrides.update({k.replace("_", "."): str(v) for k, v in topic.items()})
    return W.Settings(LogConfig.from_overrides(overrides), backoff_ms=1000, map_capacity=capacity)


def test_a_low_dirty_ratio_cleans_every_closed_segment():
    s = W.replay(log(), settings(min_cleanable_dirty_ratio=0.01))["summary"]
    # each clean: the clean section (5 records) and the new segment (10) in two groups; all 5 old
    # records are superseded, the new segment keeps its newest 5
    assert s["cleans"] == 19
    assert s["bytes_read"] == 10 * B + 18 * 15 * B
    assert s["bytes_written"] == 19 * 5 * B
    assert s["disk_bytes_end"] == 5 * B + 10 * B          # clean section + active segment
    # a segment waits 10 s for its roll, then the cleaner's next wake-up (the same second) cleans it
    assert s["oldest_uncleaned_age_ms_max"] == 10_000
    # at a roll, before its clean: 5 clean records, the closed segment's 10, the new active's first
    assert s["disk_bytes_max"] == 16 * B


def test_a_high_dirty_ratio_cleans_once():
    s = W.replay(log(), settings(min_cleanable_dirty_ratio=0.99))["summary"]
    # after the first clean: 5 clean records against 10 n dirty ones: 10n / (5 + 10n) > 0.99 needs n >= 50
    assert s["cleans"] == 1
    assert s["bytes_read"] == 10 * B and s["bytes_written"] == 5 * B
    assert s["disk_bytes_end"] == 5 * B + 18 * 10 * B + 10 * B
    assert s["oldest_uncleaned_age_ms_max"] == 199_000 - 10_000    # batch 10 waits to the end


def test_segment_ms_rolls_on_time():
    s = W.replay(log(), settings(min_cleanable_dirty_ratio=0.01, segment_ms=5000))["summary"]
    # a batch rolls when it is more than 5 s younger than the segment's first: segments of 6
    assert s["cleans"] == 200 // 6
    assert s["oldest_uncleaned_age_ms_max"] == 6000


def test_tombstone_visibility_follows_delete_retention():
    # "gone" written at 20, deleted at 50; segment [50, 60) closes at 60 s: the clean then stamps
    # the horizon 60 + 30 = 90 s; the clean at 90 s (segment [80, 90) closing) removes it
    s = W.replay(log(tombstone_at=50), settings(min_cleanable_dirty_ratio=0.01, delete_retention_ms=30_000))["summary"]
    assert s["tombstones_removed"] == 1
    assert s["tombstone_visible_ms"]["min"] == s["tombstone_visible_ms"]["max"] == 90_000 - 50_000
    longer = W.replay(log(tombstone_at=50), settings(min_cleanable_dirty_ratio=0.01, delete_retention_ms=95_000))
    assert longer["summary"]["tombstone_visible_ms"]["max"] == 160_000 - 50_000
    never = W.replay(log(tombstone_at=50), settings(min_cleanable_dirty_ratio=0.01, delete_retention_ms=10**9))
    assert never["summary"]["tombstones_removed"] == 0 and never["summary"]["tombstones_still_visible"] == 1


def test_a_small_offset_map_needs_partial_passes():
    full = W.replay(log(), settings(min_cleanable_dirty_ratio=0.01))["summary"]
    small = W.replay(log(), settings(capacity=3, min_cleanable_dirty_ratio=0.01))["summary"]
    # a pass ends at the first record of a 4th key: 3 consecutive records (keys cycle), so a
    # segment of 10 takes 4 passes (Kafka's partial passes: the map fills, the rest waits)
    assert small["cleans"] == 4 * full["cleans"]
    assert small["disk_bytes_end"] == full["disk_bytes_end"]


def test_min_compaction_lag_delays_cleaning():
    s = W.replay(log(), settings(min_cleanable_dirty_ratio=0.01, min_compaction_lag_ms=25_000))["summary"]
    # a closed segment is cleanable once its newest record is 25 s old: segment n (newest at
    # 10n + 9 s) at 10n + 34 s; the oldest uncleaned record then waits 34 s
    assert s["oldest_uncleaned_age_ms_max"] == 34_000
    assert s["cleans"] == 17          # segments closing after 200 - 34 s wait past the end


def test_timeline_and_settings_are_reported():
    r = W.replay(log(), settings(min_cleanable_dirty_ratio=0.01))
    assert len(r["timeline"]) == W.SAMPLES
    assert r["timeline"][-1]["cleans"] == r["summary"]["cleans"]
    assert r["timeline"][-1]["time_ms"] == T0 + 199_000
    assert r["settings"]["min.cleanable.dirty.ratio"] == 0.01 and r["model"]
    assert W.replay([], settings())["summary"]["records"] == 0


@pytest.mark.parametrize("n", [1, 2])
def test_tiny_logs(n):
    s = W.replay(log(n), settings())["summary"]
    assert s["cleans"] == 0 and s["disk_bytes_end"] == n * B
