"""The group-safe horizon (kompakt.tombstone.retention.groups): a clean keeps every tombstone and
marker of a batch ending at or past `CleanJob.group_horizon_offset` even when its delete horizon
passed, counts them as held back, and removes them once the horizon moves past; in both seams."""
import pytest

from kompakt.cleaner import batch_ops, native, rules
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R

from .segfiles import job_for, read_all, swap_files, write_segment

NOW = 1_700_000_000_000
DAY = 86_400_000
IMPLS = [pytest.param(None, id="python"),
         pytest.param("native", id="native",
                      marks=pytest.mark.skipif(native.LIB is None, reason="no C compiler"))]


def b(recs, base, **kw):
    return R.build_batch([(k, v, [], NOW) for k, v in recs], base_offset=base, base_timestamp=NOW, **kw)


def test_rules():
    assert rules.tombstones_removable(True, NOW, 10, NOW)
    assert not rules.tombstones_removable(False, NOW, 10, NOW + DAY)
    assert not rules.tombstones_removable(True, NOW + 1, 10, NOW)
    assert not rules.tombstones_removable(True, NOW, 10, NOW, group_horizon_offset=10)
    assert rules.tombstones_removable(True, NOW, 10, NOW, group_horizon_offset=11)
    assert rules.held_back(True, NOW, 10, NOW, group_horizon_offset=10)
    assert not rules.held_back(True, NOW + 1, 10, NOW, group_horizon_offset=10)
    assert rules.record_fate(5, 4, True, 9, False, True) == rules.KEEP          # past the mapped range
    assert rules.record_fate(5, 9, False, -1, False, True) == rules.DROP_KEYLESS
    assert rules.record_fate(5, 9, True, 7, False, True) == rules.DROP_SUPERSEDED
    assert rules.record_fate(7, 9, True, 7, True, True) == rules.DROP_TOMBSTONE
    assert rules.record_fate(7, 9, True, 7, True, False) == rules.KEEP


def _stamped_log(d):
    """Offsets 0-5: values of a, b, c, then tombstones of a (3) and b (4) each in its own batch, c again
    (5); one first clean stamps the tombstones' horizon at NOW + 1 day."""
    write_segment(d, 0, [b([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], 0), b([(b"a", None)], 3),
                         b([(b"b", None)], 4), b([(b"c", b"2")], 5)])
    write_segment(d, 6, [])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW))
    swap_files(d, res)
    assert [o for o, _, _ in read_all(d)] == [3, 4, 5]
    write_segment(d, 6, [b([(b"d", b"1")], 6)])
    write_segment(d, 7, [])


@pytest.mark.parametrize("impl", IMPLS)
def test_group_horizon_holds_tombstones_then_lets_them_go(tmp_path, monkeypatch, impl):
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    d = str(tmp_path)
    _stamped_log(d)
    later = NOW + DAY + 1
    # a group has committed 4: it read the tombstone of a (3), not the one of b (4)
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 6, later, group_horizon_offset=4))
    swap_files(d, res)
    assert [o for o, _, _ in read_all(d)] == [4, 5, 6]
    assert res.stats.tombstones_held_back == 1 and res.stats.tombstones_retained == 1
    # once it commits past 4 the tombstone of b goes at the next clean
    write_segment(d, 7, [b([(b"e", b"1")], 7)])
    write_segment(d, 8, [])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 7, later, group_horizon_offset=5))
    swap_files(d, res)
    assert [o for o, _, _ in read_all(d)] == [5, 6, 7]
    assert res.stats.tombstones_held_back == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_no_group_horizon_is_kafkas_rule(tmp_path, monkeypatch, impl):
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    d = str(tmp_path)
    _stamped_log(d)
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 6, NOW + DAY + 1))
    swap_files(d, res)
    assert [o for o, _, _ in read_all(d)] == [5, 6]
    assert res.stats.tombstones_held_back == 0


def test_markers_held_back_too(tmp_path):
    d = str(tmp_path)
    pid = 7
    write_segment(d, 0, [b([(b"a", b"1")], 0, producer_id=pid, producer_epoch=0, base_sequence=0,
                           is_transactional=True),
                         _commit_marker(1, pid),
                         b([(b"a", b"2")], 2)])
    write_segment(d, 3, [])
    # the first clean empties the transaction (a@0 superseded; Kafka keeps the marker since this
    # pass read a batch of it), the second stamps the marker
    for now in (NOW - 1, NOW):
        res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now, active_producers={}))
        swap_files(d, res)
        assert res.stats.tombstones_held_back == 0
    write_segment(d, 3, [b([(b"z", b"1")], 3)])
    write_segment(d, 4, [])
    held = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(
        job_for(d, 3, NOW + DAY + 1, group_horizon_offset=1, active_producers={}))
    assert held.stats.tombstones_held_back == 1
    C.delete_cleaned_files(d)
    gone = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(
        job_for(d, 3, NOW + DAY + 1, group_horizon_offset=2, active_producers={}))
    swap_files(d, gone)
    assert gone.stats.tombstones_held_back == 0
    assert [o for o, _, _ in read_all(d)] == [2, 3]


def _commit_marker(offset, pid):
    # control record: key = version 0, type 1 (COMMIT); value = version 0, coordinator epoch 0
    return R.build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], NOW)], base_offset=offset,
                         base_timestamp=NOW, producer_id=pid, producer_epoch=0, is_transactional=True,
                         is_control=True)


def test_a_failing_horizon_holds_everything_instead_of_failing_the_clean(tmp_path):
    from kompakt.cleaner import LogCleaner

    from .conftest import Clock, Logs

    logs = Logs(str(tmp_path), Clock())
    try:
        lg = logs.create("g")
        cleaner = LogCleaner(logs.config, logs.manager)

        def broken(tp, cfg):
            raise RuntimeError("groups not reachable")

        cleaner.group_horizon = broken
        assert cleaner._group_horizon(("g", 0), lg.config) == 0
        cleaner.group_horizon = lambda tp, cfg: None
        assert cleaner._group_horizon(("g", 0), lg.config) == rules.NO_GROUP_HORIZON
    finally:
        logs.close()
