"""The guarantee check (cleaner/guarantees.py) on real cleans of real segment files: silent on a
good clean, and one test per kind of broken output (the test seam drops a batch; others edit the
`.cleaned` file or the offset map the way a bug would)."""
import pytest

from kompakt.cleaner import batch_ops, guarantees, native
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R
from kompakt.storage import faults

from .segfiles import job_for, write_segment

NOW = 1_700_000_000_000
IMPLS = [pytest.param(None, id="python"),
         pytest.param("native", id="native",
                      marks=pytest.mark.skipif(native.LIB is None, reason="no C compiler"))]


def b(recs, base, **kw):
    return R.build_batch([(k, v, [], NOW + i) for i, (k, v) in enumerate(recs)], base_offset=base,
                         base_timestamp=NOW, **kw)


def _log(d, tombstone_last=False):
    """40 records over 8 keys in batches of 4, two segments, and an active one."""
    batches = []
    for base in range(0, 40, 4):
        recs = [(b"key-%d" % ((base + i) % 8), b"value-%03d" % (base + i)) for i in range(4)]
        if tombstone_last and base == 36:
            recs[-1] = (recs[-1][0], None)
        batches.append(b(recs, base))
    write_segment(d, 0, batches[:5])
    write_segment(d, 20, batches[5:])
    write_segment(d, 40, [b([(b"z", b"1")], 40)])


def clean(d, ratio=1.0, omap=None, **kw):
    cl = C.Cleaner(0, omap or SkimpyOffsetMap(24 * 1000))
    return cl.clean(job_for(d, 0, NOW, guarantee_check_ratio=ratio, segment_bytes=10**9, **kw))


@pytest.mark.parametrize("impl", IMPLS)
def test_a_good_clean_passes_and_is_sampled(tmp_path, monkeypatch, impl):
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    d = str(tmp_path)
    _log(d, tombstone_last=True)
    res = clean(d)
    rep = res.guarantee
    assert rep.ok, rep.violations
    assert rep.input_batches == 10 and rep.sampled_batches == 10 and rep.records_checked == 40
    assert rep.output_batches >= 2
    C.delete_cleaned_files(d)
    few = clean(d, ratio=0.01).guarantee
    assert few.ok and few.sampled_batches == 1
    assert clean(d, ratio=0).guarantee is None


def test_batch_walks_agree(tmp_path, monkeypatch):
    d = str(tmp_path)
    _log(d)
    path = C.segment_file(d, 0, ".log")
    import os
    size = os.path.getsize(path)
    monkeypatch.setattr(batch_ops, "_LIB", None)
    py = guarantees._File(path, size)
    assert len(py.positions) == 5 and py.end == size and py.bases == [0, 4, 8, 12, 16]
    if native.LIB is not None:
        monkeypatch.setattr(batch_ops, "_LIB", native.LIB)
        c = guarantees._File(path, size)
        assert (c.positions, c.bases, c.lasts, c.end) == (py.positions, py.bases, py.lasts, py.end)
        c.close()
    py.close()


@pytest.mark.parametrize("tombstone", [False, True])
def test_the_test_seam_drops_the_newest_records_and_the_check_names_them(tmp_path, monkeypatch, tombstone):
    d = str(tmp_path)
    _log(d, tombstone_last=tombstone)
    monkeypatch.setattr(faults, "_cleaner_break", "drop_last_batch")   # what the env var arms at import
    res = clean(d)
    kinds = {v.kind for v in res.guarantee.violations}
    assert kinds == ({"latest", "tombstone"} if tombstone else {"latest"})
    offsets = {v.offset for v in res.guarantee.violations}
    assert {36, 37, 38} <= offsets


def test_a_rewritten_value_is_changed(tmp_path):
    d = str(tmp_path)
    _log(d)
    res = clean(d, ratio=0)
    path = res.groups[0].log_path
    data = open(path, "rb").read()
    assert data.count(b"value-039") == 1
    open(path, "wb").write(data.replace(b"value-039", b"VALUE-039"))
    job = job_for(d, 0, NOW, guarantee_check_ratio=1.0, segment_bytes=10**9)
    omap = SkimpyOffsetMap(24 * 1000)
    for off in range(40):
        omap.put(b"key-%d" % (off % 8), off)
    omap.update_latest_offset(39)
    rep = guarantees.check_clean(job, res, omap, 1.0)
    assert [(v.kind, v.offset) for v in rep.violations] == [("changed", 39)]


def test_batches_out_of_order(tmp_path):
    d = str(tmp_path)
    _log(d)
    res = clean(d, ratio=0)
    path = res.groups[0].log_path
    data = open(path, "rb").read()
    bounds = [(pos, h.size) for pos, h in R.iter_batches(data)]
    (p0, n0), (p1, n1) = bounds[0], bounds[1]
    open(path, "wb").write(data[p1:p1 + n1] + data[p0:p0 + n0] + data[p1 + n1:])
    job = job_for(d, 0, NOW, guarantee_check_ratio=0.01, segment_bytes=10**9)
    rep = guarantees.check_clean(job, res, SkimpyOffsetMap(24 * 100), 0.01)
    assert "order" in {v.kind for v in rep.violations}


def test_a_group_replacing_a_segment_past_the_end_offset(tmp_path):
    d = str(tmp_path)
    _log(d)
    res = clean(d, ratio=0)
    res.end_offset = 20                    # as if the map had stopped at 19: segment 20 is not cleanable
    job = job_for(d, 0, NOW, segment_bytes=10**9)
    rep = guarantees.check_clean(job, res, SkimpyOffsetMap(24 * 100), 0.01)
    assert [(v.kind, v.offset) for v in rep.violations if v.kind == "range"] == [("range", 20)]


def test_a_lying_offset_map_is_caught(tmp_path):
    """The map says key-0's latest is offset 33 (key-1's record): the filter drops key-0@32, the
    real latest; the check follows the map's entry and finds another key there."""
    d = str(tmp_path)
    _log(d)
    omap = SkimpyOffsetMap(24 * 1000)

    class Lying(C.Cleaner):
        def build_offset_map(self, job, markers, stats, dirty_records=None):
            full = super().build_offset_map(job, markers, stats, dirty_records)
            self.offset_map.put(b"key-0", 33)
            return full

    res = Lying(0, omap).clean(job_for(d, 0, NOW, guarantee_check_ratio=1.0, segment_bytes=10**9))
    assert ("latest", 33) in [(v.kind, v.offset) for v in res.guarantee.violations]
