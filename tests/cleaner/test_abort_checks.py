"""Abort checks inside a segment of compressed batches: batches the compiled range loops hand back
to Python one at a time (compressed, control, transactional) must still reach `check_done` about
every RANGE_BUDGET bytes, in both passes and in both seams; otherwise an abort of a partition
whose producers compress would wait for a whole segment (up to segment.bytes) to be read."""
import os

import pytest

from kompakt.cleaner import batch_ops, native
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R

from .segfiles import job_for, write_segment

T = 1_700_000_000_000
IMPLS = [pytest.param(None, id="python"),
         pytest.param("native", id="native",
                      marks=pytest.mark.skipif(native.LIB is None, reason="no C compiler"))]
BATCHES = 20


def _log(d):
    rnd = os.urandom
    batches = [R.build_batch([(b"k%d" % (i % 5), rnd(5000), [], T)], base_offset=i, base_timestamp=T,
                             compression=R.COMPRESSION_GZIP) for i in range(BATCHES)]
    write_segment(d, 0, batches)
    write_segment(d, BATCHES, [R.build_batch([(b"a", b"b", [], T)], base_offset=BATCHES, base_timestamp=T)])


@pytest.mark.parametrize("impl", IMPLS)
def test_check_done_about_every_budget_bytes_in_both_passes(tmp_path, monkeypatch, impl):
    d = str(tmp_path)
    _log(d)
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    monkeypatch.setattr(C, "RANGE_BUDGET", 4096)     # each ~5 KB batch crosses it
    calls = []
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 1000), check_done=lambda: calls.append(1)).clean(job_for(d, 0, T))
    assert res.end_offset == BATCHES and res.stats.messages_written == 5
    # one check per batch in pass 1 and in pass 2 (plus the per-segment one)
    assert len(calls) >= 2 * BATCHES


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("at", [5, 2 * BATCHES - 5], ids=["pass1", "pass2"])
def test_abort_mid_segment_stops_and_deletes_output(tmp_path, monkeypatch, impl, at):
    d = str(tmp_path)
    _log(d)
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    monkeypatch.setattr(C, "RANGE_BUDGET", 4096)
    calls = []

    def check_done():
        calls.append(1)
        if len(calls) >= at:
            raise C.CleaningAbortedError()
    with pytest.raises(C.CleaningAbortedError):
        C.Cleaner(0, SkimpyOffsetMap(24 * 1000), check_done=check_done).clean(job_for(d, 0, T))
    assert len(calls) == at
    assert not [n for n in os.listdir(d) if n.endswith(C.CLEANED_SUFFIX)]
