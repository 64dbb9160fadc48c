"""`compact` against a model and against the broker's own cleaner; adoption into a real Log.

The log holds more distinct keys than a deliberately tiny cleaner offset map takes in one pass:
the cleaner needs several passes, Spark's shuffle does it in one, and after adoption the two logs
read back identically (same records in the same batches).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from kompakt.cleaner import LogCleaner
from kompakt.cleaner.cleaner import Cleaner
from kompakt.cleaner.manager import log_dir_of
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.config.broker_config import BrokerConfig
from kompakt.pipeline import reader as rd
from kompakt.pipeline.adopt import StaleStagingError, adopt_staging
from kompakt.pipeline.jobs.compact import compact
from kompakt.protocol import records as R
from tests.cleaner.conftest import Clock   # the cleaner tests' driven clock

from .conftest import model_compact

pytestmark = pytest.mark.spark

N_KEYS = 240
TINY_SLOTS = 60  # a map of 60 slots holds 54 keys per pass at load factor 0.9


def _manager(log_dir, clock):
    from kompakt.storage.log_manager import LogManager

    cfg = BrokerConfig.load(overrides=[f"log.dirs={log_dir}", "log.cleaner.backoff.ms=60000"], environ={})
    m = LogManager(cfg, time=clock)
    m.startup()
    return m, cfg


def _fill(lg, clock):
    """1200 records over 240 keys, every 13th a tombstone, every 97th keyless, 12 per batch."""
    i = 0
    while i < 1200:
        recs = []
        for j in range(i, i + 12):
            key = None if j % 97 == 96 else b"key-%04d" % ((j * 7) % N_KEYS)
            value = None if j % 13 == 12 else b"value-%d" % j
            recs.append((key, value, [("n", b"%d" % j)], clock.ms + j))
        lg.append(R.build_batch(recs, base_offset=lg.log_end_offset, compression=j % 3))
        i += 12
    lg.roll()
    lg.append(R.build_batch([(b"key-0001", b"in-the-active-segment", [], clock.ms)], base_offset=lg.log_end_offset))


def _batches(lg, below):
    """Batch structure and content below `below`. Not the bytes: a batch the cleaner stamped with a
    delete horizon in an early pass keeps the stamp after a later pass removes its tombstone, while
    one exact pass never stamps it (both are valid Kafka batches with the same records)."""
    out = []
    for s in lg.segments:
        data = open(s.log_path, "rb").read()
        for pos, h in R.iter_batches(data):
            if h.base_offset < below:
                recs = [(h.base_offset + r.offset_delta, R.record_timestamp(h, r), r.key, r.value, r.headers)
                        for r in R.decode_records(data, pos, h)]
                out.append((h.base_offset, h.last_offset_delta, h.compression, h.producer_id, recs))
    return out


def _records(lg):
    out = []
    for s in lg.segments:
        data = open(s.log_path, "rb").read()
        for pos, h in R.iter_batches(data):
            assert R.valid_crc(data, pos, h)
            out += [(h.base_offset + r.offset_delta, r.key, r.value) for r in R.decode_records(data, pos, h)]
    return out


def _clean_until_done(cleaner, lg):
    passes = 0
    while True:
        ltc = cleaner.manager.grab_for_clean_now(lg.tp)
        if ltc is None:
            return passes
        job = cleaner.build_job(ltc)
        if job.first_dirty_offset >= job.first_uncleanable_offset:
            cleaner.manager.done_cleaning(lg.tp, None, None)
            return passes
        result = Cleaner(0, SkimpyOffsetMap(24 * TINY_SLOTS, 0.9)).clean(job)
        cleaner.swap_in(lg, result)
        cleaner.manager.done_cleaning(lg.tp, log_dir_of(lg), result.end_offset)
        passes += 1
        assert passes < 50


def test_compact_matches_model_and_the_cleaner_after_adoption(spark, tmp_path):
    clock = Clock()
    dir_a, dir_b = str(tmp_path / "a"), str(tmp_path / "b")
    m, cfg = _manager(dir_a, clock)
    m.create_topic("m", 1, {"cleanup.policy": "compact", "internal.segment.bytes": "3000", "delete.retention.ms": "1000"})
    lg = m.get_log(("m", 0))
    _fill(lg, clock)
    before = _records(lg)
    end = lg.segments[-1].base_offset
    m.shutdown()
    shutil.copytree(dir_a, dir_b)

    # Spark: one pass, exact
    staging = str(tmp_path / "staging")
    res = compact(spark, dir_b, "m", 0, staging, now_ms=clock.ms, delete_retention_ms=1000,
                  segment_bytes=3000, bucket_bytes=5000)
    assert res.end == end and res.records_in == end
    model = [r for r in model_compact(before, end) if r[0] < end]
    staged = [(r.offset, r.key, r.value) for r in rd.read_partition(rd.PartitionDir("m", 0, staging))]
    assert staged == model
    assert len({k for _, k, _ in model}) == N_KEYS > TINY_SLOTS
    manifest = json.load(open(os.path.join(staging, "compact.json")))
    assert manifest["end"] == end and len(manifest["segments"]) > 1  # rolled at segment.bytes

    # the broker's cleaner with a tiny map: several passes over the same log
    m, cfg = _manager(dir_a, clock)
    lg_a = m.get_log(("m", 0))
    cleaner = LogCleaner(cfg, m, time=clock)
    m.cleaner = cleaner
    passes = _clean_until_done(cleaner, lg_a)
    assert passes >= 3

    # adopt the staging dir into the copy, then both logs read back identically
    m_b, _ = _manager(dir_b, clock)
    lg_b = m_b.get_log(("m", 0))
    summary = adopt_staging(lg_b, staging)
    assert summary["first_dirty_offset"] == end
    assert _records(lg_b) == _records(lg_a) == model + [r for r in before if r[0] >= end]
    assert _batches(lg_b, end) == _batches(lg_a, end)
    assert lg_b.log_end_offset == lg_a.log_end_offset
    with pytest.raises(StaleStagingError):
        adopt_staging(lg_b, staging)  # the segments it was made from are gone
    m.shutdown()
    m_b.shutdown()


def test_nothing_to_compact_and_refusals(spark, tmp_path):
    clock = Clock()
    m, _ = _manager(str(tmp_path / "d"), clock)
    m.create_topic("one", 1, {"cleanup.policy": "compact"})
    lg = m.get_log(("one", 0))
    lg.append(R.build_batch([(b"k", b"v")], base_offset=0))
    res = compact(spark, str(tmp_path / "d"), "one", 0, str(tmp_path / "s1"), now_ms=clock.ms)
    assert res.records_in == 0 and not os.path.exists(tmp_path / "s1" / "compact.json")
    with pytest.raises(StaleStagingError, match="compact.json.*nothing to compact"):
        adopt_staging(lg, str(tmp_path / "s1"))
    os.makedirs(tmp_path / "s2")
    open(tmp_path / "s2" / "x", "w").close()
    with pytest.raises(FileExistsError):
        compact(spark, str(tmp_path / "d"), "one", 0, str(tmp_path / "s2"))
    m.shutdown()


def test_offline_adopt_refuses_a_locked_or_uncleanly_stopped_dir(spark, tmp_path):
    import fcntl

    from kompakt.pipeline.adopt_cmd import adopt_offline

    clock = Clock()
    d = str(tmp_path / "d")
    m, _ = _manager(d, clock)
    m.create_topic("x", 1, {"cleanup.policy": "compact", "internal.segment.bytes": "500"})
    lg = m.get_log(("x", 0))
    for i in range(30):
        lg.append(R.build_batch([(b"k%d" % (i % 3), b"v%d" % i, [], clock.ms)], base_offset=lg.log_end_offset))
    compact(spark, d, "x", 0, str(tmp_path / "s"), now_ms=clock.ms)
    with pytest.raises(RuntimeError, match="locked"):
        adopt_offline(d, str(tmp_path / "s"))  # the manager still holds the dir's .lock
    m.shutdown()
    os.unlink(os.path.join(d, ".kafka_cleanshutdown"))
    with pytest.raises(RuntimeError, match="shut down cleanly"):
        adopt_offline(d, str(tmp_path / "s"))
    open(os.path.join(d, ".kafka_cleanshutdown"), "w").close()
    summary = adopt_offline(d, str(tmp_path / "s"))
    assert summary["records"] == 3 and summary["replaced"] > 1
    with open(os.path.join(d, "cleaner-offset-checkpoint")) as f:
        assert f"x 0 {summary['first_dirty_offset']}" in f.read()
    fd = os.open(os.path.join(d, ".lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released again after the adoption
    os.close(fd)
