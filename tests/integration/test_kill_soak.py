"""The kill soak (bench/bench_kill_soak.py) in short: a loaded broker SIGKILLed ten times, twice at a
uniform moment and once inside each kind of risky step (segment roll, clean, swap, retention
deletion, checkpoint write, group rebalance, transaction commit), restarted on the same data and
checked each time: nothing acknowledged lost, offsets and per-key order intact, read_committed sees
committed transactions whole and aborted ones not at all, no leftovers, committed offsets and the
cleaner checkpoint sane. The 200-cycle figure is in bench/RESULTS.md."""
from __future__ import annotations

import io
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_kill_soak as soak  # noqa: E402

PLAN = [None, "segment_roll:2", "before_swap:1", "swap_renamed:1", "swap_old_deleted:1",
        "retention_delete:1", "checkpoint_write:2", "group_rebalance:1", "txn_prepare_written:1", None]


@pytest.mark.slow
def test_ten_kills_lose_nothing(tmp_path):
    out = io.StringIO()
    result = soak.run(len(PLAN), str(tmp_path), seed=12, run_s=1.0, out=out, plan=PLAN)
    report = out.getvalue()
    assert result["cycles"] == len(PLAN), report
    assert result["lost"] == 0 and result["violations"] == 0, report
    assert result["acked"] > 1000 and result["checked_total"] > 1000, report
    assert result["transactions"]["committed"] > 10 and result["transactions"]["aborted"] > 0, report
    # the broker killed itself at most chosen moments (a clean may not come round in time)
    assert result["chosen_reached"] >= 6, report


def rec(o, k, seq, topic="t"):
    return (o, k, b"%s|%s|%d|x" % (topic.encode(), k, seq))


def test_the_checks_catch_loss_reorder_and_gaps():
    acked = {(0, 0): (b"a", b"t|a|1|x"), (0, 1): (b"b", b"t|b|2|x"), (0, 2): (b"a", b"t|a|3|x")}
    records = [rec(0, b"a", 1), rec(1, b"b", 2), rec(2, b"a", 3)]
    assert soak.check_topic("t", False, records, 0, 0, 3, acked, 0) == (3, 0, [])
    # a lost acknowledged record, and the gap it leaves in a delete topic
    checked, lost, v = soak.check_topic("t", False, [records[0], records[2]], 0, 0, 3, acked, 0)
    assert (checked, lost) == (3, 1) and any("contiguous" in x for x in v)
    # on a compact topic, an older record of a key superseded by a later one is no loss ...
    assert soak.check_topic("t", True, records[1:], 0, 0, 3, acked, 0)[1] == 0
    # ... but the latest one of a key is
    assert soak.check_topic("t", True, records[:2], 0, 0, 3, acked, 0)[1] == 1
    # per-key order and foreign records
    swapped = [rec(0, b"a", 3), rec(1, b"b", 2), rec(2, b"a", 1)]
    assert any("out of order" in x for x in soak.check_topic("t", True, swapped, 0, 0, 3, {}, 0)[2])
    assert any("not one we produced" in x for x in soak.check_topic("t", True, [rec(0, b"a", 1, "u")], 0, 0, 1, {}, 0)[2])
    # an acknowledged offset the log does not reach
    assert soak.check_topic("t", False, records[:2], 0, 0, 2, acked, 0)[1] == 1


def test_leftovers_only_count_files_from_before_the_kill(tmp_path):
    d = tmp_path / f"{soak.DELETE_TOPIC}-0"
    d.mkdir()
    (d / "00000000000000000000.log.cleaned").write_bytes(b"")
    (d / "00000000000000000000.log").write_bytes(b"")
    os.utime(d / "00000000000000000000.log.cleaned", (1, 1))     # the cleaner backdates mtimes: not "old"
    later = os.stat(d / "00000000000000000000.log").st_ctime + 10
    assert soak.leftovers(str(tmp_path), later) == [f"{soak.DELETE_TOPIC}-0/00000000000000000000.log.cleaned"]
    assert soak.leftovers(str(tmp_path), later - 20) == []


def test_retention_settled_follows_the_retention_bytes_rule(tmp_path):
    def segments(partition, *sizes):
        d = tmp_path / f"{soak.DELETE_TOPIC}-{partition}"
        d.mkdir(exist_ok=True)
        for i, size in enumerate(sizes):
            (d / f"{i * 100:020d}.log").write_bytes(b"x" * size)
    segments(0, 60, 50)                      # without the first: 50 < 100, nothing to delete
    segments(1, 30, 40, 70)                  # without the first: 110 >= 100, the first goes
    assert not soak.retention_settled(str(tmp_path), soak.DELETE_TOPIC, 100)
    (tmp_path / f"{soak.DELETE_TOPIC}-1" / f"{0:020d}.log").rename(
        tmp_path / f"{soak.DELETE_TOPIC}-1" / f"{0:020d}.log.deleted")   # what retention does first
    assert soak.retention_settled(str(tmp_path), soak.DELETE_TOPIC, 100)
    # the active segment alone is never deleted, however large
    (tmp_path / f"{soak.DELETE_TOPIC}-0" / f"{100:020d}.log").unlink()
    segments(0, 500)
    assert soak.retention_settled(str(tmp_path), soak.DELETE_TOPIC, 100)
