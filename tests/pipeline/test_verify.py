"""`verify` passes a correct compaction and names each kind of violation."""
from __future__ import annotations

import os
import shutil

import pytest

from kompakt.pipeline import reader as rd
from kompakt.pipeline.jobs.compact import compact
from kompakt.pipeline.jobs.verify import verify
from kompakt.protocol import records as R

from .conftest import keyed_batches, write_partition

pytestmark = pytest.mark.spark
NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def compacted(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("verify")
    write_partition(str(d / "src"), "v", 0, keyed_batches(600, 80, tombstone_every=9), segment_bytes=4000)
    compact(spark, str(d / "src"), "v", 0, str(d / "staging"), now_ms=NOW, delete_retention_ms=1000)
    return d


def _rewrite_first_segment(staging, drop=None, change=None):
    """Rebuild the staged segment's batches, dropping or changing the record at one offset."""
    _rewrite_segment(rd.list_segments(staging)[0].log_path, drop, change)


def _rewrite_segment(log_path, drop=None, change=None):
    data = open(log_path, "rb").read()
    out = bytearray()
    for pos, h in R.iter_batches(data):
        recs = R.decode_records(data, pos, h)
        kept = []
        for r in recs:
            off = h.base_offset + r.offset_delta
            if off == drop:
                continue
            if off == change:
                r = r._replace(value=b"tampered")
            kept.append(r)
        if kept:
            out += R.build_batch(kept, base_offset=h.base_offset, base_timestamp=h.base_timestamp,
                                 last_offset_delta=h.last_offset_delta,
                                 delete_horizon_ms=h.delete_horizon_ms if h.has_delete_horizon else None)
    with open(log_path, "wb") as f:
        f.write(out)
    for ext in (".index", ".timeindex"):
        os.unlink(log_path[:-4] + ext)


def test_correct_compaction_verifies(spark, compacted):
    rep = verify(spark, str(compacted / "staging"), source=str(compacted / "src"), now_ms=NOW)
    assert rep["ok"], rep["violations"]
    assert rep["changed_records"] == 0 and rep["missing_latest"] == 0 and rep["superseded_kept"] == 0
    assert rep["records"] > 0 and rep["end"] > 0


def test_violations_are_reported(spark, compacted, tmp_path):
    staged = [r for r in rd.read_partition(rd.PartitionDir("v", 0, str(compacted / "staging")))]
    victim = next(r for r in staged if not r.is_tombstone)
    tomb = next(r for r in staged if r.is_tombstone)
    changed = next(r for r in staged if not r.is_tombstone and r.offset != victim.offset)
    bad = tmp_path / "bad"
    shutil.copytree(compacted / "staging", bad)
    _rewrite_first_segment(str(bad), drop=victim.offset)
    rep = verify(spark, str(bad), source=str(compacted / "src"), now_ms=NOW)
    assert not rep["ok"] and [v["kind"] for v in rep["violations"]] == ["latest"]
    assert rep["violations"][0]["offset"] == victim.offset
    bad2 = tmp_path / "bad2"
    shutil.copytree(compacted / "staging", bad2)
    _rewrite_first_segment(str(bad2), drop=tomb.offset, change=changed.offset)
    kinds = sorted(v["kind"] for v in verify(spark, str(bad2), source=str(compacted / "src"), now_ms=NOW)["violations"])
    assert kinds == ["changed", "tombstone"]


def test_crc_and_order_without_source(compacted, tmp_path):
    bad = tmp_path / "crc"
    shutil.copytree(compacted / "staging", bad)
    seg = rd.list_segments(str(bad))[0]
    with open(seg.log_path, "r+b") as f:
        f.seek(R.RECORDS_POS + 1)
        b = f.read(1)
        f.seek(R.RECORDS_POS + 1)
        f.write(bytes([b[0] ^ 1]))
    rep = verify(None, str(bad))
    assert not rep["ok"] and rep["violations"][0]["kind"] == "crc" and rep["corrupt_batches"] == 1


def test_a_whole_topic_is_verified_partition_by_partition(spark, tmp_path):
    """A log dir holding two partitions of a topic, against its own copy before compaction: every
    partition is checked and a violation names its partition."""
    src = tmp_path / "src"
    for p in (0, 1):
        write_partition(str(src), "w", p, keyed_batches(120, 20, tombstone_every=7), segment_bytes=2000)
    live = tmp_path / "live"
    shutil.copytree(src, live)
    # verified range: up to the active segment; its newest record is the latest of its key: drop it
    segs = rd.list_segments(str(live / "w-1"))
    newest = segs[-1].base_offset - 1
    _rewrite_segment(segs[-2].log_path, drop=newest)
    rep = verify(spark, str(live), source=str(src), topic="w", now_ms=NOW)
    assert [(p["partition"], p["ok"]) for p in rep["partitions"]] == [(0, True), (1, False)]
    assert not rep["ok"] and [(v["partition"], v["kind"], v["offset"]) for v in rep["violations"]] == [(1, "latest", newest)]
    assert rep["records"] == sum(p["records"] for p in rep["partitions"]) > 0
    assert set(rep["checks"]) >= {"order", "latest", "changed", "tombstone"}


def test_marker_removed_while_its_transaction_remains_is_a_violation(tmp_path):
    """Pure Python (no Spark): the `marker` check of verify over batch headers."""
    from kompakt.pipeline.jobs.verify import marker_violations
    from kompakt.protocol import txn_records as T

    def txn(offset_value, pid=5):
        return {"records": [(b"k", offset_value)], "producer_id": pid, "producer_epoch": 0,
                "base_sequence": 0, "is_transactional": True}

    def marker(kind, pid=5):
        return {"records": [(T.CONTROL_KEY.pack(0, kind), T.MARKER_VALUE.pack(0, 0))], "producer_id": pid,
                "producer_epoch": 0, "is_transactional": True, "is_control": True}

    src = write_partition(str(tmp_path / "src"), "t", 0, [txn(b"1"), marker(T.COMMIT), txn(b"2"), marker(T.ABORT),
                                                            {"records": [(b"z", b"x")], "roll": True}])
    segs = rd.list_segments(src)
    assert marker_violations(src, segs, 0, 4) == []
    # a "compacted" copy that kept the first transaction's batch but dropped its marker
    bad = write_partition(str(tmp_path / "bad"), "t", 0, [txn(b"1"), {**marker(T.ABORT), "base_offset": 3}])
    assert marker_violations(bad, segs, 0, 4) == [
        dict(kind="marker", offset=1, batch=0, detail="marker removed while a batch of its transaction remains")]
    # the marker past the compacted range is not this check's business
    assert marker_violations(bad, segs, 0, 1) == []


def test_a_changed_transaction_marker_is_a_changed_record(spark, tmp_path):
    """verify reads markers (include_control=true): a copy whose COMMIT marker now says ABORT fails."""
    from kompakt.protocol import txn_records as T

    def batches(marker_kind):
        ts = NOW - 5000  # fixed: the copies differ only where asked
        return [{"records": [(b"k", b"1", [], ts)], "producer_id": 5, "producer_epoch": 0, "base_sequence": 0,
                 "is_transactional": True},
                {"records": [(T.CONTROL_KEY.pack(0, marker_kind), T.MARKER_VALUE.pack(0, 0), [], ts)],
                 "producer_id": 5, "producer_epoch": 0, "is_transactional": True, "is_control": True},
                {"records": [(b"z", b"x", [], ts)], "roll": True}]

    write_partition(str(tmp_path / "src"), "m", 0, batches(T.COMMIT))
    write_partition(str(tmp_path / "same"), "m", 0, batches(T.COMMIT))
    write_partition(str(tmp_path / "bad"), "m", 0, batches(T.ABORT))
    assert verify(spark, str(tmp_path / "same"), source=str(tmp_path / "src"), now_ms=NOW)["ok"]
    rep = verify(spark, str(tmp_path / "bad"), source=str(tmp_path / "src"), now_ms=NOW)
    assert not rep["ok"]
    assert [(v["kind"], v["offset"]) for v in rep["violations"] if v["kind"] == "changed"] == [("changed", 1)]
