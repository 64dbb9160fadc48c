"""OffsetIndex: golden bytes, lookups (model-checked with hypothesis), truncation, trim, reload."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.storage.offset_index import (CorruptIndexError, IndexOffsetOverflowError,
                                          OffsetIndex)


def test_golden_bytes_after_close(tmp_path):
    path = str(tmp_path / "00000000000000001000.index")
    idx = OffsetIndex(path, 1000, max_index_size=80)
    assert os.path.getsize(path) == 80          # preallocated
    idx.append(1005, 4200)
    idx.append(1010, 8400)
    idx.close()                                 # trimmed to its entries
    assert open(path, "rb").read() == bytes.fromhex(
        "00000005" "00001068"                   # relative offset 5, position 4200
        "0000000a" "000020d0")                  # relative offset 10, position 8400


def test_max_size_rounds_down_to_whole_entries(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=20)
    assert idx.max_entries == 2 and os.path.getsize(idx.path) == 16
    idx.append(1, 10)
    idx.append(2, 20)
    assert idx.is_full()
    with pytest.raises(ValueError):
        idx.append(3, 30)


def test_lookup_and_append_rules(tmp_path):
    idx = OffsetIndex(str(tmp_path / "x.index"), 100, max_index_size=1024)
    assert idx.lookup(150) == (100, 0)
    idx.append(110, 50)
    idx.append(120, 90)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(110) == (110, 50)
    assert idx.lookup(119) == (110, 50)
    assert idx.lookup(10**12) == (120, 90)
    with pytest.raises(ValueError):
        idx.append(120, 100)  # not larger than the last offset
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(100 + 2**31, 100)


def test_reload_drops_zero_tail_of_preallocated_file(tmp_path):
    path = str(tmp_path / "y.index")
    idx = OffsetIndex(path, 0, max_index_size=800)
    idx.append(3, 100)
    idx.append(9, 300)
    idx.close_handler()           # crash: the file keeps its preallocated zeros
    assert os.path.getsize(path) == 800
    again = OffsetIndex(path, 0, max_index_size=800)
    assert again.entries == 2 and again.lookup(100) == (9, 300)
    again.sanity_check(log_size=400)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=200)  # points past the end of the .log


def test_sanity_check_rejects_partial_entry(tmp_path):
    path = str(tmp_path / "z.index")
    with open(path, "wb") as f:
        f.write(bytes.fromhex("0000000100000010") + b"\x00\x01\x02")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0).sanity_check()


def test_truncate_keeps_entries_below_offset_and_zeroes_the_rest(tmp_path):
    path = str(tmp_path / "t.index")
    idx = OffsetIndex(path, 0, max_index_size=160)
    for i in range(1, 11):
        idx.append(i * 10, i * 100)
    idx.truncate_to(50)        # removes 50 and above
    assert idx.entries == 4 and idx.lookup(1000) == (40, 400)
    idx.close_handler()
    assert OffsetIndex(path, 0).entries == 4


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 500)), max_size=60),
       st.lists(st.integers(-10, 3000), max_size=30),
       st.integers(-5, 3000))
def test_lookup_matches_a_model(tmp_path_factory, steps, targets, cut):
    base = 1000
    path = str(tmp_path_factory.mktemp("idx") / "m.index")
    idx = OffsetIndex(path, base, max_index_size=8 * 100)
    model = []
    off, pos = base, 0
    for d_off, d_pos in steps:
        off += d_off
        pos += d_pos
        idx.append(off, pos)
        model.append((off, pos))

    def expect(t):
        best = (base, 0)
        for o, p in model:
            if o <= t:
                best = (o, p)
        return best

    for t in targets:
        assert idx.lookup(base + t) == expect(base + t)
    idx.truncate_to(base + cut)
    model = [(o, p) for o, p in model if o < base + cut]
    idx.close()
    reloaded = OffsetIndex(path, base)
    assert reloaded.entries == len(model)
    for t in targets:
        assert reloaded.lookup(base + t) == expect(base + t)
    reloaded.close()


def test_a_preallocated_index_without_holes_is_read_only_up_to_its_entries(tmp_path):
    """A file system that reports no hole (FUSE ones like LazyFS, NFS; here: zeros written for
    real, so the blocks are allocated) still finds the end of the entries without reading the
    whole preallocated file: the first all-zero page is the end, as a hole would be."""
    from kompakt.storage import offset_index as oi
    path = tmp_path / "00000000000000000000.index"
    entries = b"".join(oi._ENTRY.pack(i + 1, 100 * (i + 1)) for i in range(700))     # 5600 bytes
    path.write_bytes(entries + bytes(4 * 1024 * 1024 - len(entries)))
    fd = os.open(path, os.O_RDONLY)
    try:
        end = oi._data_end(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert len(entries) <= end <= 2 * 4096 + 24
    idx = oi.OffsetIndex(str(path), 0)
    assert idx.entries == 700 and idx.last_entry() == (700, 70000)
