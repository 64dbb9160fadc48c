"""Seed 000's fruit-prices walkthrough, step by step, on a real Log cleaned by the real LogCleaner.

Segment names follow Kafka's code (a cleaned group keeps the base offset of its first segment), so
where the blog's pictures say `002.log` the file here is still `000.log` holding offsets 2 and 3.
"""
import os

from kompakt.cleaner.manager import OFFSET_CHECKPOINT_FILE

from .conftest import append, read_log, segment_map

DAY = 86_400_000


async def clean(cleaner, tp):
    """Admin compact-now; the cleaner thread's own selection may have cleaned the log first (it runs
    again right after each clean), in which case the request finds nothing left to clean."""
    res = await cleaner.clean_now(tp)
    if not res["cleaned"]:
        assert res["reason"].startswith("nothing cleanable"), res
    return cleaner.manager.all_cleaner_checkpoints()[tp]


async def test_fruit_prices(logs, cleaner, clock):
    lg = logs.create("fruit-prices", min_cleanable_dirty_ratio="0.5")
    tp = ("fruit-prices", 0)
    append(lg, [(b"grape", b"$2.69")])
    append(lg, [(b"lime", b"$0.49")])
    append(lg, [(b"grape", None)])        # tombstone
    append(lg, [(b"lime", b"$1.59")])
    # nothing is cleanable while everything is in the active segment
    assert cleaner.manager.grab_filthiest_compacted_log() is None
    lg.roll()
    append(lg, [(b"lime", b"$1.99")])      # offset 4, in the new active segment
    assert segment_map(lg) == {0: [0, 1, 2, 3], 4: [4]}

    # dirty ratio 1.0 > 0.5: the filthiest log; clean it (admin compact-now drives the same path)
    st = cleaner.partition_status(tp)
    assert st["dirty_ratio"] == 1.0 and st["cleaner_point"] == 0
    assert await clean(cleaner, tp) == 4
    assert segment_map(lg) == {0: [2, 3], 4: [4]}
    assert [o for o, _, _ in read_log(lg)] == [2, 3, 4]
    st = cleaner.partition_status(tp)
    assert st["cleaner_point"] == 4 and st["dirty_ratio"] == 0.0 and st["tombstones_retained"] == 1
    cp = open(os.path.join(logs.log_dir, OFFSET_CHECKPOINT_FILE)).read().split("\n")
    assert cp[:3] == ["0", "1", "fruit-prices 0 4"]

    # guava and kiwi arrive; the segment closes, a new guava lands in the active segment 8
    clock.ms += 3_600_000
    append(lg, [(b"guava", b"$0.99")])
    append(lg, [(b"guava", b"$1.09")])
    append(lg, [(b"kiwi", b"$0.39")])
    lg.roll()
    append(lg, [(b"guava", b"$1.19")])
    assert segment_map(lg) == {0: [2, 3], 4: [4, 5, 6, 7], 8: [8]}
    # before delete.retention.ms the grape tombstone survives the second clean
    assert await clean(cleaner, tp) == 8
    assert segment_map(lg) == {0: [2, 4, 6, 7], 8: [8]}

    # more than delete.retention.ms after the first clean stamped it, the tombstone goes
    clock.ms += DAY
    append(lg, [(b"kiwi", b"$0.49")])
    lg.roll()
    append(lg, [(b"lime", b"$2.09")])
    assert await clean(cleaner, tp) == 10
    # grape's tombstone (2) is gone; guava@6 and kiwi@7 gave way to guava@8 and kiwi@9
    assert segment_map(lg) == {0: [4, 8, 9], 10: [10]}
    assert [(o, k) for o, k, _ in read_log(lg)] == [(4, b"lime"), (8, b"guava"), (9, b"kiwi"),
                                                     (10, b"lime")]
    status = cleaner.status()
    assert status["cleanings_total"] == 3 and status["dead_thread_count"] == 0


async def test_cleaned_segments_have_trimmed_indexes(logs, cleaner):
    lg = logs.create("idx", min_cleanable_dirty_ratio="0.01")
    for i in range(3):
        append(lg, [(b"k", b"v%d" % i)])
    lg.roll()
    append(lg, [(b"k", b"last")])
    lg.roll()
    append(lg, [(b"other", b"x")])
    assert await clean(cleaner, ("idx", 0)) == 4
    for seg in lg.segments[:-1]:
        base = seg.log_path[:-len(".log")]
        # no preallocated 10 MiB index left behind on a cleaned (inactive) segment
        assert os.path.getsize(base + ".index") % 8 == 0 and os.path.getsize(base + ".index") < 4096
        assert os.path.getsize(base + ".timeindex") < 4096
