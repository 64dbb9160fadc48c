"""Leader-epoch cache: golden checkpoint text, end offsets (OffsetForLeaderEpoch), truncation."""
from __future__ import annotations

import os

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.storage import Log
from kompakt.storage.leader_epoch import LeaderEpochFileCache


def test_checkpoint_golden_text_and_reload(tmp_path):
    cache = LeaderEpochFileCache(str(tmp_path))
    assert cache.assign(0, 0)
    assert not cache.assign(0, 10)          # same epoch: no new entry
    assert cache.assign(3, 120)
    assert open(tmp_path / "leader-epoch-checkpoint").read() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochFileCache(str(tmp_path)).entries() == [(0, 0), (3, 120)]


def test_end_offset_for():
    cache = LeaderEpochFileCache(None)
    cache.assign(2, 10)
    cache.assign(4, 30)
    cache.assign(7, 50)
    assert cache.end_offset_for(7, 80) == (7, 80)     # latest epoch: the log end offset
    assert cache.end_offset_for(4, 80) == (4, 50)
    assert cache.end_offset_for(5, 80) == (4, 50)     # largest epoch <= requested
    assert cache.end_offset_for(1, 80) == (1, 10)     # before the first epoch
    assert cache.end_offset_for(9, 80) == (-1, -1)
    assert cache.end_offset_for(-1, 80) == (-1, -1)


def test_truncation_both_ends(tmp_path):
    cache = LeaderEpochFileCache(str(tmp_path))
    for e, o in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(e, o)
    cache.truncate_from_end(15)
    assert cache.entries() == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(2, 12)]
    assert open(tmp_path / "leader-epoch-checkpoint").read() == "0\n1\n2 12\n"


def test_log_stamps_epochs_and_keeps_the_checkpoint(tmp_path):
    d = str(tmp_path / "t-0")
    c = LogConfig.default()
    lg = Log.open(d, c)
    lg.append_as_leader(R.build_batch([(b"a", b"1")]), leader_epoch=0)
    lg.append_as_leader(R.build_batch([(b"b", b"2")]), leader_epoch=5)
    assert R.read_header(lg.read(1, 1000).records).partition_leader_epoch == 5
    assert lg.end_offset_for_epoch(0) == (0, 1)
    lg.close()
    os.unlink(os.path.join(d, "leader-epoch-checkpoint"))
    again = Log.open(d, c)                       # like Kafka: a clean load does not scan
    assert again.leader_epoch_cache.entries() == []
    again.close()
    again = Log.open(d, c, had_clean_shutdown=False)   # recovery rebuilds it from the batches
    assert again.leader_epoch_cache.entries() == [(0, 0), (5, 1)]
    assert open(os.path.join(d, "leader-epoch-checkpoint")).read() == "0\n2\n0 0\n5 1\n"
    again.close()


def test_an_empty_checkpoint_left_by_a_power_cut_is_rebuilt_from_the_batches(tmp_path):
    """A new log's first epoch is written unsynced (LogManager._create_log): a cut can leave the
    file empty while synced batches survive; a missing file stays missing (test above)."""
    d = str(tmp_path / "t-0")
    c = LogConfig.default()
    lg = Log.open(d, c)
    lg.append_as_leader(R.build_batch([(b"a", b"1")]), leader_epoch=0)
    lg.append_as_leader(R.build_batch([(b"b", b"2")]), leader_epoch=3)
    lg.close()
    open(os.path.join(d, "leader-epoch-checkpoint"), "wb").close()
    again = Log.open(d, c)
    assert again.leader_epoch_cache.entries() == [(0, 0), (3, 1)]
    assert any("rebuilt from the batches" in r for r in again.repairs)
