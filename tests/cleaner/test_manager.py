"""LogCleanerManager: selection of the filthiest log, cleanable range bounds, checkpoints, pauses."""
import os
import threading

import pytest

from kompakt.cleaner import state as S
from kompakt.cleaner.manager import OFFSET_CHECKPOINT_FILE, LogCleanerManager
from kompakt.storage.checkpoint import OffsetCheckpointFile

from .conftest import append

HOUR = 3_600_000


@pytest.fixture
def mgr(logs, clock):
    return LogCleanerManager([logs.log_dir], logs.all_logs, time=clock)


def fill(lg, keys, segments, value=b"x" * 50):
    for _ in range(segments):
        for k in keys:
            append(lg, [(k, value)])
        lg.roll()


def test_filthiest_first_then_the_next(logs, mgr):
    a = logs.create("a", min_cleanable_dirty_ratio="0.5")
    b = logs.create("b", min_cleanable_dirty_ratio="0.5")
    fill(a, [b"k1", b"k2"], 3)
    fill(b, [b"k1", b"k2"], 1)
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("a", 0), 2))   # a: 2 of 3 segments dirty
    first = mgr.grab_filthiest_compacted_log()
    assert first.tp == ("b", 0) and first.cleanable_ratio == 1.0
    assert mgr.state_of(("b", 0)) == S.IN_PROGRESS
    second = mgr.grab_filthiest_compacted_log()
    assert second.tp == ("a", 0)
    assert second.first_dirty_offset == 2 and second.first_uncleanable_offset == 6
    assert second.cleanable_ratio == pytest.approx(2 / 3)
    assert mgr.grab_filthiest_compacted_log() is None


def test_ratio_threshold_and_max_compaction_lag(logs, mgr, clock):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.9")
    fill(lg, [b"k"], 2)
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("t", 0), 1))   # ratio 0.5
    assert mgr.grab_filthiest_compacted_log() is None
    # Kafka's dirtiestLogCleanableRatio (max-dirty-percent): the largest ratio of every non-empty
    # compacted log, eligible or not, so an operator sees how close the log is to its threshold
    assert mgr.dirtiest_ratio == 0.5
    logs.manager.alter_topic_config("t", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.9",
                                          "max.compaction.lag.ms": str(HOUR)})
    lg = logs.manager.get_log(("t", 0))
    assert mgr.grab_filthiest_compacted_log() is None          # not overdue yet
    clock.ms += 2 * HOUR
    ltc = mgr.grab_filthiest_compacted_log()
    assert ltc is not None and ltc.needs_compaction_now and ltc.max_compaction_delay_ms == HOUR
    assert mgr.max_compaction_delay_ms == HOUR


def test_min_compaction_lag_bounds_the_cleanable_range(logs, mgr, clock):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.01", min_compaction_lag_ms=str(HOUR))
    append(lg, [(b"a", b"1")])
    lg.roll()
    clock.ms += 2 * HOUR
    append(lg, [(b"a", b"2")])     # young: this segment may not be cleaned yet
    lg.roll()
    append(lg, [(b"a", b"3")])
    ltc = mgr.grab_filthiest_compacted_log()
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (0, 1)


def test_checkpoint_self_heals(logs, mgr):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.01")
    fill(lg, [b"k"], 2)
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("t", 0), 999))   # above the log end
    ltc = mgr.grab_filthiest_compacted_log()
    assert ltc.first_dirty_offset == 0
    cp = OffsetCheckpointFile(os.path.join(logs.log_dir, OFFSET_CHECKPOINT_FILE)).read()
    assert {tuple(k): v for k, v in cp.items()} == {("t", 0): 0}


def test_corrupt_checkpoint_file_is_not_fatal(logs, mgr):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.01")
    fill(lg, [b"k"], 1)
    with open(os.path.join(logs.log_dir, OFFSET_CHECKPOINT_FILE), "w") as f:
        f.write("garbage\n")
    assert mgr.grab_filthiest_compacted_log().first_dirty_offset == 0


def test_uncleanable_and_non_compacted_are_skipped(logs, mgr):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.01")
    d = logs.create("d", cleanup_policy="delete")
    fill(lg, [b"k"], 1)
    fill(d, [b"k"], 2)
    mgr.mark_uncleanable(logs.log_dir, ("t", 0), "boom")
    assert mgr.grab_filthiest_compacted_log() is None
    counts, sizes = mgr.uncleanable_counts()
    assert counts == {logs.log_dir: 1} and sizes[logs.log_dir] > 0
    paused = mgr.pause_cleaning_for_non_compacted_partitions()
    assert [tp for tp, _ in paused] == [("d", 0)] and mgr.state_of(("d", 0)) == S.paused(1)


def test_abort_and_pause_waits_for_the_running_clean(logs, mgr):
    lg = logs.create("t", min_cleanable_dirty_ratio="0.01")
    fill(lg, [b"k"], 1)
    ltc = mgr.grab_filthiest_compacted_log()
    returned = threading.Event()
    t = threading.Thread(target=lambda: (mgr.abort_and_pause_cleaning(ltc.tp), returned.set()))
    t.start()
    # the aborter waits while the (simulated) worker has not unwound
    assert not returned.wait(0.3)
    assert mgr.is_aborted(ltc.tp)
    mgr.done_cleaning(ltc.tp, logs.log_dir, 5)    # the worker unwinds; no checkpoint when aborted
    t.join(10)
    assert returned.is_set() and mgr.state_of(ltc.tp) == S.paused(1)
    assert mgr.all_cleaner_checkpoints().get(("t", 0)) is None
    assert mgr.grab_filthiest_compacted_log() is None            # paused partitions are skipped
    mgr.resume_cleaning(ltc.tp)
    assert mgr.grab_filthiest_compacted_log().tp == ("t", 0)


def test_truncation_moves_checkpoint_down(logs, mgr):
    lg = logs.create("t")
    fill(lg, [b"k"], 3)
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("t", 0), 3))
    mgr.maybe_truncate_checkpoint(("t", 0), 1)
    assert mgr.all_cleaner_checkpoints()[("t", 0)] == 1
    mgr.maybe_truncate_checkpoint(("t", 0), 2)                     # never moves it up
    assert mgr.all_cleaner_checkpoints()[("t", 0)] == 1
    # the single-partition lookup a scrape uses answers as the merged dict does
    assert mgr.cleaner_checkpoint(("t", 0)) == 1 and mgr.cleaner_checkpoint(("t", 9)) is None


def test_max_dirty_ratio_counts_logs_below_their_threshold(logs, mgr):
    """Kafka computes dirtiestLogCleanableRatio before the min.cleanable.dirty.ratio filter: a log
    at 0.75 below its threshold of 0.9 outranks the eligible one at 0.5 in max-dirty-percent, while
    the eligible one is still the one cleaned."""
    high = logs.create("high", min_cleanable_dirty_ratio="0.9")
    low = logs.create("low", min_cleanable_dirty_ratio="0.1")
    fill(high, [b"k"], 4)
    fill(low, [b"k"], 2)
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("high", 0), 1))   # 3 of 4 dirty
    mgr.update_checkpoints(logs.log_dir, partition_to_update=(("low", 0), 1))    # 1 of 2 dirty
    ltc = mgr.grab_filthiest_compacted_log()
    assert ltc.tp == ("low", 0) and ltc.cleanable_ratio == 0.5
    assert mgr.dirtiest_ratio == 0.75
    assert mgr.grab_filthiest_compacted_log() is None          # "low" is in progress, "high" below 0.9
    assert mgr.dirtiest_ratio == 0.75


def test_an_open_transaction_keeps_its_whole_segment_out_of_the_clean(logs, mgr):
    """Kafka's LogToClean (calculateCleanableBytes): the first uncleanable offset is the base offset
    of the segment holding the bound (here the last stable offset, inside a segment), so that
    segment is neither counted as cleanable nor rewritten; the cleaner point stops at its base."""
    from kompakt.protocol import records as R
    lg = logs.create("txn", min_cleanable_dirty_ratio="0.1")
    fill(lg, [b"k1", b"k2"], 1)                                   # segment [0, 2)
    append(lg, [(b"k1", b"a")])                                   # segment [2, ...): 2
    now = lg._time.ms
    lg.append_as_leader(R.build_batch([(b"k2", None, [], now)], base_timestamp=now, producer_id=7,
                                      producer_epoch=0, base_sequence=0, is_transactional=True),
                        verification_guard=lg.start_verification(7, 0))
    append(lg, [(b"k1", b"b")])                                   # 4, after the open transaction
    lg.roll()                                                     # active segment [5, ...)
    assert lg.last_stable_offset == 3 and [s.base_offset for s in lg.segments] == [0, 2, 5]
    ltc = mgr.grab_filthiest_compacted_log()
    assert ltc.first_dirty_offset == 0 and ltc.first_uncleanable_offset == 2
    assert ltc.cleanable_bytes == lg.segments[0].size
    assert ltc.clean_bytes == 0 and ltc.cleanable_ratio == 1.0
