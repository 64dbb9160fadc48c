"""`audit` figures against a small log computed by hand."""
from __future__ import annotations

import json
import math

import pytest

from kompakt.pipeline import reader as rd
from kompakt.pipeline.jobs.audit import JSON_KEYS, audit, map_capacity
from kompakt.protocol import records as R

from .conftest import txn_batches, write_partition

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def small_log(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("audit"))
    write_partition(d, "t", 0, [
        dict(records=[(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (None, b"x")]),   # offsets 0-3, segment 0
        dict(records=[(b"c", b"1"), (b"a", None), (b"b", b"2")], roll=True),      # 4-6, segment 4
        dict(records=[(b"d", b"1")], roll=True),                                  # 7, active segment 7
    ])
    write_partition(d, "t", 1, [
        dict(records=[(b"k1", b"v"), (b"k2", b"v")]),                             # 0-1
        dict(records=[(b"k1", b"w")], base_offset=5),                             # 5: offsets 2-4 gone
    ])
    with open(f"{d}/cleaner-offset-checkpoint", "w") as f:
        f.write("0\n1\nt 0 4\n")
    return d


def _batch_sizes(pdir):
    out = []
    for seg in rd.list_segments(pdir):
        data = open(seg.log_path, "rb").read()
        out += [(h.size, h.records_count) for _, h in R.iter_batches(data)]
    return out


def test_audit_figures_match_hand_computation(spark, small_log):
    rows = audit(spark, small_log, dedupe_buffer_size=24 * 3)  # 3 slots: 2 keys per pass
    p0, p1 = rows
    assert all(k in p0 for k in JSON_KEYS)
    (s1, n1), (s2, n2), (s3, n3) = _batch_sizes(f"{small_log}/t-0")
    assert (p0["topic"], p0["partition"]) == ("t", 0)
    assert p0["records"] == 8 and p0["keyless"] == 1 and p0["tombstones"] == 1
    assert p0["distinct_keys"] == 4                      # a b c d
    assert p0["duplicate_ratio"] == round(1 - 4 / 7, 4)  # 7 keyed records, 4 keys
    assert p0["projected_records"] == 3                  # a's latest is a tombstone
    assert p0["projected_bytes"] == round(2 * s2 / n2 + s3 / n3)
    assert p0["bytes"] == s1 + s2 + s3
    assert p0["dirty_ratio"] == round(s2 / (s1 + s2), 4)  # checkpoint at 4: segment 0 clean, 4 dirty
    assert p0["dirty_keys"] == 3 and map_capacity(24 * 3) == 2
    assert p0["cleaner_passes"] == math.ceil(3 / 2)
    assert (p0["first_gap_offset"], p0["last_gap_offset"]) == (-1, -1)
    assert p1["records"] == 3 and p1["distinct_keys"] == 2 and p1["duplicate_ratio"] == round(1 - 2 / 3, 4)
    assert (p1["first_gap_offset"], p1["last_gap_offset"]) == (2, 4)
    assert p1["log_end_offset"] == 6 and p1["dirty_ratio"] == 0.0  # one segment: all active
    assert math.ceil(3 / map_capacity(134_217_728)) == 1  # the default map: one pass
    json.dumps(rows)  # plain JSON types only


def test_audit_counts_transaction_markers_apart(spark, tmp_path):
    # the source's rows hold no markers by default; audit opts in (include_control) to count them
    write_partition(str(tmp_path), "tx", 0, txn_batches())
    (row,) = audit(spark, str(tmp_path))
    assert (row["records"], row["control_records"], row["aborted_records"]) == (8, 2, 2)


def test_audit_cli_writes_json_and_chart(spark, small_log, tmp_path, capsys):
    from kompakt import cli

    out, png = str(tmp_path / "audit.json"), str(tmp_path / "audit.png")
    assert cli.main(["pipeline", "audit", small_log, "--output", out, "--chart", png]) == 0
    rows = json.load(open(out))
    assert [(r["topic"], r["partition"]) for r in rows] == [("t", 0), ("t", 1)]
    assert all(set(JSON_KEYS) <= set(r) for r in rows)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "records" in table and "audit: 2 partitions" in table


def test_audit_counts_corrupt_batches_instead_of_failing(spark, tmp_path):
    pdir = write_partition(str(tmp_path), "c", 0, [dict(records=[(b"k%d" % i, b"v")]) for i in range(6)])
    seg = rd.list_segments(pdir)[0]
    with open(seg.log_path, "r+b") as f:
        data = f.read()
        pos = [p for p, _ in R.iter_batches(data)][2]
        f.seek(pos + R.RECORDS_POS + 1)
        f.write(bytes([data[pos + R.RECORDS_POS + 1] ^ 0x20]))
    (row,) = audit(spark, str(tmp_path))
    assert row["corrupt_batches"] == 1 and row["corrupt_positions"] == [f"{seg.log_path}@{pos}"]
    assert row["records"] == 5 and row["distinct_keys"] == 5


def test_header_scan_takes_the_log_start_and_first_dirty_offset_as_the_cleaner_does(tmp_path):
    # DeleteRecords moved the log start to 5 (inside segment 4): the log starts there, and with no
    # cleaner checkpoint, or one below the log start, the cleaner's first dirty offset is the log
    # start (LogCleanerManager.cleanableOffsets), so segment 0 counts as clean
    from kompakt.pipeline.jobs.audit import header_scan

    d = str(tmp_path)
    write_partition(d, "t", 0, [dict(records=[(b"a", b"1")] * 4), dict(records=[(b"b", b"1")] * 3, roll=True),
                                dict(records=[(b"c", b"1")], roll=True)])
    with open(f"{d}/{rd.LOG_START_CHECKPOINT}", "w") as f:
        f.write("0\n1\nt 0 5\n")
    part = rd.find_partitions(d)[0]
    sizes = [s.size for s in rd.list_segments(part.path)]
    for checkpoint in (None, "t 0 2\n", "t 0 99\n"):
        if checkpoint:
            with open(f"{d}/cleaner-offset-checkpoint", "w") as f:
                f.write("0\n1\n" + checkpoint)
        scan = header_scan(part)
        assert (scan["log_start_offset"], scan["first_dirty_offset"]) == (5, 5), checkpoint
        assert scan["dirty_ratio"] == round(sizes[1] / (sizes[0] + sizes[1]), 4)
