"""TimeIndex: golden bytes, maybe_append rules, reserved last slot, lookups against a model."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kompakt.storage.offset_index import CorruptIndexError
from kompakt.storage.time_index import TimeIndex


def test_golden_bytes_after_close(tmp_path):
    path = str(tmp_path / "00000000000000000500.timeindex")
    idx = TimeIndex(path, 500, max_index_size=120)
    assert os.path.getsize(path) == 120
    idx.maybe_append(1_700_000_000_000, 510)
    idx.maybe_append(1_700_000_000_000, 520)  # same timestamp: not appended
    idx.maybe_append(1_700_000_000_500, 530)
    idx.close()
    assert open(path, "rb").read() == bytes.fromhex(
        "0000018bcfe56800" "0000000a"            # timestamp 1700000000000, relative offset 10
        "0000018bcfe569f4" "0000001e")           # timestamp 1700000000500, relative offset 30


def test_lookup_and_ordering_rules(tmp_path):
    idx = TimeIndex(str(tmp_path / "t.timeindex"), 0, max_index_size=12 * 10)
    assert idx.lookup(5) == (-1, 0)
    idx.maybe_append(100, 5)
    idx.maybe_append(200, 9)
    assert idx.lookup(99) == (-1, 0)
    assert idx.lookup(150) == (100, 5)
    assert idx.lookup(10**15) == (200, 9)
    with pytest.raises(ValueError):
        idx.maybe_append(300, 8)   # offset going backwards
    with pytest.raises(ValueError):
        idx.maybe_append(150, 20)  # timestamp going backwards


def test_full_keeps_one_slot_for_the_final_entry(tmp_path):
    idx = TimeIndex(str(tmp_path / "f.timeindex"), 0, max_index_size=36)  # 3 slots
    idx.maybe_append(1, 1)
    idx.maybe_append(2, 2)
    assert idx.is_full()
    with pytest.raises(ValueError):
        idx.maybe_append(3, 3)
    idx.maybe_append(3, 3, skip_full_check=True)
    assert idx.entries == 3
    idx.trim_to_valid_size()
    idx.maybe_append(4, 4, skip_full_check=True)  # a trimmed index grows by the reserved slot
    assert idx.entries == 4 and os.path.getsize(idx.path) == 48


def test_reload_and_sanity(tmp_path):
    path = str(tmp_path / "r.timeindex")
    idx = TimeIndex(path, 0, max_index_size=1200)
    idx.maybe_append(10, 1)
    idx.maybe_append(20, 2)
    idx.close_handler()  # crash with the preallocated tail
    again = TimeIndex(path, 0)
    assert again.entries == 2 and again.last_entry() == (20, 2)
    again.sanity_check()
    with open(path, "r+b") as f:     # last timestamp smaller than the first
        f.write(bytes.fromhex("0000000000000064" "00000001" "0000000000000005" "00000002"))
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, 0).sanity_check()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40)), max_size=50),
       st.lists(st.integers(-5, 1500), max_size=20), st.integers(0, 2000))
def test_lookup_matches_a_model(tmp_path_factory, steps, targets, cut):
    path = str(tmp_path_factory.mktemp("ti") / "m.timeindex")
    idx = TimeIndex(path, 0, max_index_size=12 * 100)
    model, ts, off = [], 0, 0
    for d_ts, d_off in steps:
        ts += d_ts
        off += d_off
        before = idx.entries
        idx.maybe_append(ts, off)
        if not model or ts > model[-1][0]:
            model.append((ts, off))
        assert idx.entries == len(model) >= before

    def expect(t):
        best = (-1, 0)
        for a, b in model:
            if a <= t:
                best = (a, b)
        return best

    for t in targets:
        assert idx.lookup(t) == expect(t)
    idx.truncate_to(cut)
    model = [(a, b) for a, b in model if b < cut]
    idx.close()
    again = TimeIndex(path, 0)
    for t in targets:
        assert again.lookup(t) == expect(t)
    again.close()
