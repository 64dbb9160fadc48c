"""Exact compaction's compiled pieces against their Python references, without Spark: the key
scan (pipeline/keyscan.py over kompakt/native/keys.c vs the reader's light path) and the bucket
filter with an exact offset set (km_filter's set mode vs the cleaner's Python filter)."""
from __future__ import annotations

import os
import random
import struct

import pyarrow as pa
import pytest

from kompakt import native
from kompakt.cleaner import batch_ops
from kompakt.pipeline import keyscan
from kompakt.pipeline import reader as rd
from kompakt.protocol import records as R

from .conftest import txn_batches, write_partition

needs_native = pytest.mark.skipif(native.LIB is None, reason="no C compiler: nothing to compare")
T = 1_700_000_000_000
COLS = ["key", "offset", "batch_base_offset"]


def random_log(tmp_path, seed: int, n_batches: int = 120) -> str:
    rnd = random.Random(seed)
    specs = []
    for i in range(n_batches):
        if i % 15 == 14:
            specs += txn_batches(T)          # committed and aborted transactions, markers
            continue
        recs = [(None if rnd.random() < 0.1 else b"k%d" % rnd.randrange(50), None if rnd.random() < 0.1 else
                 os.urandom(rnd.randrange(40)), [], T + j) for j in range(rnd.randrange(1, 20))]
        specs.append(dict(records=recs, compression=rnd.choice([0, 0, 1, 2, 3, 4])))
    return write_partition(str(tmp_path), "t", 0, specs, segment_bytes=3000)


def scan(pdir, monkeypatch, lib, *, split_bytes=4000, bounds=None, read_committed=False):
    monkeypatch.setattr(keyscan, "_lib", lambda: lib)
    parts = rd.find_partitions(pdir)
    splits = rd.plan_splits(parts, bounds, split_bytes, read_committed=True)
    batches = [b for s in splits for b in keyscan.iter_keyed_batches(s, COLS, bounds, read_committed=read_committed)]
    return pa.Table.from_batches(batches, schema=pa.schema([(c, keyscan.ARROW[c]) for c in COLS]))


@needs_native
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_key_scan_matches_the_reader(tmp_path, monkeypatch, seed):
    pdir = random_log(tmp_path, seed)
    ref = scan(pdir, monkeypatch, None)
    assert ref.num_rows > 500
    assert scan(pdir, monkeypatch, native.LIB).equals(ref)
    # aborted data and keyless records are out, offsets ascend
    offs = ref.column("offset").to_pylist()
    assert offs == sorted(offs) and None not in ref.column("key").to_pylist()
    # tiny output buffers: flushed and grown in the middle of chunks
    monkeypatch.setattr(keyscan, "ROWS", 3)
    monkeypatch.setattr(keyscan, "KEY_BYTES", 8)
    assert scan(pdir, monkeypatch, native.LIB).equals(ref)


@needs_native
def test_key_scan_bounds_and_read_committed(tmp_path, monkeypatch):
    pdir = random_log(tmp_path, 4)
    for bounds in (rd.Bounds(min_offset=100, max_offset=700), rd.Bounds(max_offset=5), rd.Bounds(min_offset=10**6)):
        ref = scan(pdir, monkeypatch, None, bounds=bounds)
        assert scan(pdir, monkeypatch, native.LIB, bounds=bounds).equals(ref), bounds
    # an open transaction bounds read_committed at its first offset (the LSO)
    open_txn = [dict(records=[(b"a", b"1", [], T)]),
                dict(records=[(b"b", b"2", [], T)], producer_id=9, producer_epoch=0, base_sequence=0,
                     is_transactional=True),
                dict(records=[(b"c", b"3", [], T)])]
    pdir2 = write_partition(str(tmp_path / "open"), "o", 0, open_txn)
    for rc in (False, True):
        ref = scan(pdir2, monkeypatch, None, read_committed=rc)
        got = scan(pdir2, monkeypatch, native.LIB, read_committed=rc)
        assert got.equals(ref)
        assert got.column("offset").to_pylist() == ([0] if rc else [0, 1, 2])


@pytest.mark.parametrize("impl", [None, "native"])
def test_key_scan_corrupt_batches_fail_torn_tail_ends(tmp_path, monkeypatch, impl):
    lib = native.LIB if impl else None
    if impl and lib is None:
        pytest.skip("no C compiler")
    pdir = write_partition(str(tmp_path / "a"), "a", 0, [dict(records=[(b"k", b"v", [], T)]) for _ in range(5)])
    path = os.path.join(pdir, "00000000000000000000.log")
    good = scan(pdir, monkeypatch, lib)
    with open(path, "ab") as f:                 # a torn tail of the last segment: not an error
        f.write(R.build_batch([(b"k", b"v", [], T)], base_offset=5)[:30])
    assert scan(pdir, monkeypatch, lib).equals(good)
    data = bytearray(open(path, "rb").read())
    data[R.RECORDS_POS + 75] ^= 0xFF             # inside the second batch: its CRC no longer matches
    open(path, "wb").write(bytes(data))
    with pytest.raises(rd.CorruptSegmentError, match="position 75|CRC"):
        scan(pdir, monkeypatch, lib)


@needs_native
@pytest.mark.parametrize("codec", [1, 3, 4])
def test_key_scan_payload_that_does_not_decompress(tmp_path, monkeypatch, codec):
    good = R.compress(codec, b"\x10" * 40)
    body = good[:4] + bytes(b ^ 0x5A for b in good[4:])
    batch = batch_ops.build_header_bytes(0, 0, codec, 0, T, T, -1, -1, -1, 1, body)
    pdir = str(tmp_path / "t-0")
    os.makedirs(pdir)
    with open(os.path.join(pdir, "00000000000000000000.log"), "wb") as f:
        f.write(batch)
    for lib in (None, native.LIB):
        with pytest.raises(rd.CorruptSegmentError):
            scan(pdir, monkeypatch, lib)


# ---- the bucket filter with an exact offset set ------------------------------------------------

def _bucket_outputs(tmp_path, monkeypatch, pdir, lib, name):
    from kompakt.pipeline.jobs import compact as CJ

    monkeypatch.setattr(batch_ops, "_LIB", lib)
    monkeypatch.setattr(native, "LIB", lib)
    p = CJ.plan(rd.PartitionDir("t", 0, pdir), buckets=7)
    latest = {}
    for r in rd.read_partition(rd.PartitionDir("t", 0, pdir), light=True):
        if r.offset < p.end and r.key is not None and not r.is_control and not r.is_aborted:
            latest[r.key] = r.offset

    def load(b):          # Spark's output: retained offsets partitioned by their own bucket
        lo, hi = CJ.bucket_range(p, b)
        offs = sorted(o for o in latest.values() if lo <= o <= hi)
        return pa.array(offs, pa.int64()) if b % 2 else offs     # both kinds of input
    outs = []
    for b in range(p.buckets):
        path = str(tmp_path / f"{name}-{b}.bin")
        stats = CJ.filter_bucket(p, b, load, path, now_ms=T + 10, delete_retention_ms=5)
        outs.append((open(path, "rb").read(), {k: v for k, v in stats.items() if k != "path"}))
    return outs


@needs_native
@pytest.mark.parametrize("seed", [5, 6])
def test_bucket_filter_same_bytes_with_and_without_the_compiled_seam(tmp_path, monkeypatch, seed):
    rnd = random.Random(seed)
    specs = []
    for i in range(60):
        if i % 9 == 8:
            specs += txn_batches(T)
            continue
        # horizons already stamped on some batches (tombstones past it go), none on others
        horizon = T if rnd.random() < 0.3 else None
        recs = [(b"k%d" % rnd.randrange(40) if rnd.random() > 0.05 else None,
                 None if rnd.random() < 0.2 else b"v" * rnd.randrange(30), [], T + j)
                for j in range(rnd.randrange(1, 12))]
        specs.append(dict(records=recs, compression=rnd.choice([0, 1, 3, 4]), delete_horizon_ms=horizon))
    pdir = write_partition(str(tmp_path / "log"), "t", 0, specs, segment_bytes=2500)
    lib = native.LIB                  # (_bucket_outputs patches native.LIB)
    calls = []
    monkeypatch.setattr(batch_ops, "_native_filter", lambda *a, f=batch_ops._native_filter: calls.append(1) or f(*a))
    py = _bucket_outputs(tmp_path, monkeypatch, pdir, None, "py")
    assert not calls
    c = _bucket_outputs(tmp_path, monkeypatch, pdir, lib, "c")
    assert len(calls) > 40           # the compiled filter did the work
    assert py == c
    assert sum(s["records_out"] for _, s in c) < sum(s["records_in"] for _, s in c)


def test_exact_offset_set_layout_and_growth():
    from kompakt.pipeline.jobs.compact import _ExactOffsetMap

    m = _ExactOffsetMap(100, 10)
    m.add([10, 17, 30], 30)
    m.add(pa.array([31, 45], pa.int64()), 50)
    assert [o for o in range(0, 60) if o in m] == [10, 17, 30, 31, 45]
    base, nbits = struct.unpack_from("=qq", m.buffer.raw)
    assert (base, nbits, m.slots, m.covered) == (10, 41, -1, 50)
    with pytest.raises(AssertionError, match="outside"):
        m.add([9], 50)
