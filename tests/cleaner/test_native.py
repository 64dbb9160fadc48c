"""The compiled seam against the Python one: MD5 (one and eight lanes), CRC-32C, and whole cleans
giving byte-identical output."""
import hashlib
import os
import random

import crc32c
import pytest

from kompakt.cleaner import batch_ops, native
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R

from .segfiles import job_for, write_segment

pytestmark = pytest.mark.skipif(native.LIB is None, reason="no C compiler: the Python seam is in use")


def test_md5_matches_hashlib():
    rnd = random.Random(3)
    for n in list(range(0, 130)) + [1000, 4096]:
        data = bytes(rnd.randrange(256) for _ in range(n))
        assert native.md5(data) == hashlib.md5(data).digest(), n


@pytest.mark.parametrize("variant", [1, 2, 3], ids=["baseline", "avx2", "avx512vl"])
def test_md5_eight_lanes_matches_hashlib(variant):
    if not native.LIB.km_md5_variant(variant):
        pytest.skip("this CPU cannot run that variant")
    try:
        rnd = random.Random(5)
        for trial in range(40):
            keys = [bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 7, 20, 55, 56, 64, 100])))
                    for _ in range(rnd.randrange(1, 33))]
            assert native.md5_many(keys) == [hashlib.md5(k).digest() for k in keys]
    finally:
        native.LIB.km_md5_variant(0)


def test_md5_many_refuses_more_keys_than_its_arrays_hold():
    assert len(native.md5_many([b"k"] * 32)) == 32
    with pytest.raises(ValueError):
        native.md5_many([b"k"] * 33)


def test_crc32c_matches_library():
    data = os.urandom(10007)
    for n in (0, 1, 7, 8, 9, 100, 10007):
        assert native.LIB.km_crc32c(0, data[:n], n) == crc32c.crc32c(data[:n])


def _clean(d, monkeypatch, lib, slots, target_codec=None):
    monkeypatch.setattr(batch_ops, "_LIB", lib)
    res = C.Cleaner(0, SkimpyOffsetMap(24 * slots)).clean(job_for(d, 0, 1_700_000_000_000, index_interval_bytes=500,
                                                                  target_codec=target_codec))
    out = {}
    for g in res.groups:
        for ext in (".log", ".index", ".timeindex"):
            p = C.segment_file(d, g.base_offset, ext, ".cleaned")
            out[p] = open(p, "rb").read()
    C.delete_cleaned_files(d)
    return res, out


CODEC_MIXES = {"plain+gzip": [0, 0, 0, 1], "lz4": [3], "zstd": [4], "snappy": [2], "all": [0, 1, 2, 3, 4]}


@pytest.mark.parametrize("slots", [7, 50, 5000])
@pytest.mark.parametrize("codecs", sorted(CODEC_MIXES))
def test_native_and_python_cleans_are_identical(tmp_path, monkeypatch, slots, codecs):
    _compare_cleans(tmp_path, monkeypatch, slots, CODEC_MIXES[codecs])


@pytest.mark.parametrize("target", [0, 1, 3, 4], ids=["none", "gzip", "lz4", "zstd"])
def test_native_and_python_agree_on_a_topic_codec(tmp_path, monkeypatch, target):
    """compression.type other than producer: rebuilt batches take the topic's codec."""
    _compare_cleans(tmp_path, monkeypatch, 50, CODEC_MIXES["all"], target)


@pytest.mark.parametrize("out_cap, stage_cap", [(700, 4 << 20), (4 << 20, 700), (700, 700)])
def test_native_and_python_agree_with_buffers_smaller_than_a_batch(tmp_path, monkeypatch, out_cap, stage_cap):
    """A staged batch whose compressed records do not fit the empty output buffer, and records
    larger than the stage, go through the Python side: still the same bytes."""
    monkeypatch.setattr(C, "OUT_CAP", out_cap)
    monkeypatch.setattr(C, "STAGE_CAP", stage_cap)
    _compare_cleans(tmp_path / "random", monkeypatch, 50, CODEC_MIXES["all"])
    # compressible values written uncompressed by the topic codec: rebuilt batches outgrow the buffer
    _compare_cleans(tmp_path / "repetitive", monkeypatch, 50, [1, 3, 4], 0, repetitive=True)


def _compare_cleans(tmp_path, monkeypatch, slots, codecs, target=None, repetitive=False):
    tmp_path.mkdir(exist_ok=True)
    d = str(tmp_path)
    rnd = random.Random(slots + 17 * len(codecs) + (target or 0))
    off = 0
    for s in range(4):
        batches = []
        for _ in range(30):
            recs = []
            for _ in range(rnd.randrange(1, 12)):
                k = rnd.randrange(60)
                key = None if k == 0 else b"key-%d" % k * rnd.choice([1, 1, 1, 9])
                size = rnd.randrange(0, 300)
                value = None if rnd.random() < 0.1 else b"x" * size if repetitive else os.urandom(size)
                recs.append((key, value, [], 1_700_000_000_000 + rnd.randrange(1000)))
            pid = rnd.choice([-1, -1, 5])
            batches.append(R.build_batch(recs, base_offset=off, base_timestamp=1_700_000_000_000,
                                         producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                         base_sequence=off if pid >= 0 else -1,
                                         compression=rnd.choice(codecs)))
            off += len(recs)
            if pid == 5 and rnd.random() < 0.2:     # a transaction of producer 7 (aborted or committed)
                batches.append(R.build_batch([(b"key-%d" % rnd.randrange(60), b"t", [], 1_700_000_000_000)],
                                             base_offset=off, base_timestamp=1_700_000_000_000, producer_id=7,
                                             producer_epoch=0, base_sequence=off, is_transactional=True,
                                             compression=rnd.choice(codecs)))
                kind = rnd.randrange(2)
                batches.append(R.build_batch([(b"\x00\x00" + kind.to_bytes(2, "big"), b"\x00" * 6, [],
                                               1_700_000_000_000)], base_offset=off + 1, is_control=True,
                                             is_transactional=True, producer_id=7, producer_epoch=0,
                                             base_timestamp=1_700_000_000_000))
                off += 2
        write_segment(d, batches and R.read_header(batches[0]).base_offset, batches)
    write_segment(d, off, [])
    py_res, py_out = _clean(d, monkeypatch, None, slots, target)
    c_res, c_out = _clean(d, monkeypatch, native.LIB, slots, target)
    assert py_out == c_out
    assert py_res.end_offset == c_res.end_offset
    assert (py_res.stats.messages_written, py_res.stats.bytes_written, py_res.stats.tombstones_retained,
            py_res.stats.invalid_messages) == (c_res.stats.messages_written, c_res.stats.bytes_written,
                                               c_res.stats.tombstones_retained, c_res.stats.invalid_messages)


def test_native_prescan_matches_python(tmp_path, monkeypatch):
    d = str(tmp_path)
    now = 1_700_000_000_000

    def marker(kind, base, pid):
        return R.build_batch([(b"\x00\x00" + kind.to_bytes(2, "big"), b"\x00" * 6, [], now)], base_offset=base,
                             is_control=True, is_transactional=True, producer_id=pid, producer_epoch=2,
                             base_timestamp=now)
    batches, off = [], 0
    for i in range(50):
        pid = i % 4 - 1
        batches.append(R.build_batch([(b"k%d" % i, b"v")] * 3, base_offset=off, producer_id=pid,
                                     producer_epoch=1 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                                     is_transactional=pid == 2, base_timestamp=now))
        off += 3
        if pid == 2:
            batches.append(marker(i % 2, off, 2))
            off += 1
    write_segment(d, 0, batches)
    segs = C.SegmentInfo(0, C.segment_file(d, 0, ".log"), os.path.getsize(C.segment_file(d, 0, ".log")))
    monkeypatch.setattr(C, "_PRESCAN_CAP", 3)          # several round trips through the output arrays
    monkeypatch.setattr(batch_ops, "_LIB", None)
    py = C.prescan_counting([segs], 30, 120)
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB)
    nat = C.prescan_counting([segs], 30, 120)
    assert py == nat
    assert py[2] > 0 and py[0][2][0] and py[1][2][1] == 2


@pytest.mark.parametrize("slots", [7, 5000])
def test_native_and_python_second_clean_after_the_horizon_is_identical(tmp_path, monkeypatch, slots):
    """The first clean stamps delete horizons (Python path in both seams); the second, past the
    horizon, drops tombstones from stamped batches, which native.c's range loop does itself: the
    two seams must still write the same bytes. Transactional batches and markers ride along."""
    import shutil
    from .segfiles import read_all, swap_files
    now = 1_700_000_000_000
    drm = 1000
    src = tmp_path / "src"
    src.mkdir()
    rnd = random.Random(slots + 1)
    off = 0
    for s in range(3):
        batches = []
        for i in range(25):
            if i % 8 == 7:       # a committed or aborted transaction of producer 9
                batches.append(R.build_batch([(b"key-%d" % rnd.randrange(30), b"t")], base_offset=off,
                                             base_timestamp=now, producer_id=9, producer_epoch=0,
                                             base_sequence=off, is_transactional=True))
                off += 1
                kind = rnd.randrange(2)
                batches.append(R.build_batch([(b"\x00\x00" + kind.to_bytes(2, "big"), b"\x00" * 6, [], now)],
                                             base_offset=off, is_control=True, is_transactional=True,
                                             producer_id=9, producer_epoch=0, base_timestamp=now))
                off += 1
                continue
            recs = [(b"key-%d" % rnd.randrange(30), None if rnd.random() < 0.3 else os.urandom(rnd.randrange(50)),
                     [], now + rnd.randrange(100)) for _ in range(rnd.randrange(1, 8))]
            batches.append(R.build_batch(recs, base_offset=off, base_timestamp=now))
            off += len(recs)
        write_segment(str(src), R.read_header(batches[0]).base_offset, batches)
    write_segment(str(src), off, [])
    outs = []
    for lib in (None, native.LIB):
        d = tmp_path / ("py" if lib is None else "c")
        shutil.copytree(src, d)
        d = str(d)
        monkeypatch.setattr(batch_ops, "_LIB", lib)
        cl = C.Cleaner(0, SkimpyOffsetMap(24 * slots))
        first_dirty = 0
        while first_dirty < off:          # partial passes with the tiny map
            res = cl.clean(job_for(d, first_dirty, now, delete_retention_ms=drm))
            swap_files(d, res)
            first_dirty = res.end_offset
        before = len(read_all(d))
        out = []
        first_dirty = 0
        while first_dirty < off:          # the second round, past every horizon
            res = cl.clean(job_for(d, first_dirty, now + drm + 1, delete_retention_ms=drm,
                                   index_interval_bytes=300))
            for g in res.groups:
                for ext in (".log", ".index", ".timeindex"):
                    out.append(open(C.segment_file(d, g.base_offset, ext, ".cleaned"), "rb").read())
            out.append((res.end_offset, res.stats.messages_written, res.stats.tombstones_retained))
            swap_files(d, res)
            first_dirty = res.end_offset
        assert len(read_all(d)) < before     # tombstones past their horizon went in the second round
        outs.append(out)
    assert outs[0] == outs[1]
    assert outs[0][0]
