"""Corrupt segments against both seams: a batch whose CRC is right but whose records do not parse
(lengths pointing past the record or the batch, a count larger than the records, a varint that
never ends), or whose CRC is wrong, must stop the clean with CorruptBatchError in the Python and in
the compiled implementation alike, in pass 1 and in pass 2, and leave no `.cleaned` file behind.
Reading past a buffer in native.c would show up here as a crash of the test process or as a
silent success of one implementation."""
import os

import pytest

from kompakt.cleaner import batch_ops, native
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R
from kompakt.protocol.records import encode_varint as vi

from .segfiles import job_for, write_segment

T = 1_700_000_000_000
IMPLS = [pytest.param(None, id="python"),
         pytest.param("native", id="native",
                      marks=pytest.mark.skipif(native.LIB is None, reason="no C compiler"))]


def _record(body: bytes) -> bytes:
    return vi(len(body)) + body


def _good_body(key=b"k", value=b"v", od=0):
    return b"\x00" + vi(0) + vi(od) + vi(len(key)) + key + vi(len(value)) + value + vi(0)


# payload (records bytes), declared record count
CASES = {
    "record_length_past_batch": (vi(200) + _good_body(), 1),
    "key_length_past_record": (_record(b"\x00" + vi(0) + vi(0) + vi(40) + b"key"), 1),
    "key_length_past_record_mid_batch": (_record(b"\x00" + vi(0) + vi(0) + vi(9) + b"key" + vi(1) + b"v" + vi(0))
                                         + _record(_good_body(od=1)), 2),
    "value_length_missing": (_record(b"\x00" + vi(0) + vi(0) + vi(3) + b"key"), 1),
    "count_larger_than_records": (_record(_good_body()), 3),
    "count_smaller_than_records": (_record(_good_body()) + _record(_good_body(od=1)), 1),
    "endless_varint": (b"\xff" * 30, 1),
    "negative_record_length": (vi(-5) + _good_body(), 1),
    "zero_record_length": (vi(0) + _good_body(), 1),
}


def _batch(payload, count, base, codec=0):
    if codec:
        payload = R.compress(codec, payload)
    return batch_ops.build_header_bytes(base, 0, codec, max(count - 1, 0), T, T, -1, -1, -1, count, payload)


def _good(base, n=3):
    return R.build_batch([(b"g%d" % i, b"x", [], T) for i in range(n)], base_offset=base, base_timestamp=T)


def _write(d, corrupt: bytes):
    # segment 0: good batch at 0..2, the corrupt one at 3, good batch at 10..12; active segment at 20
    write_segment(d, 0, [_good(0), corrupt, _good(10)])
    write_segment(d, 20, [_good(20)])


def _clean(d, impl, monkeypatch, first_dirty):
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl else None)
    cleaner = C.Cleaner(0, SkimpyOffsetMap(24 * 1000))
    return cleaner.clean(job_for(d, first_dirty, T))


def _assert_rejected(d, impl, monkeypatch, first_dirty):
    with pytest.raises(batch_ops.CorruptBatchError):
        _clean(d, impl, monkeypatch, first_dirty)
    assert not [n for n in os.listdir(d) if n.endswith(C.CLEANED_SUFFIX)]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["plain", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("first_dirty", [0, 13], ids=["pass1", "pass2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_records_stop_the_clean(tmp_path, monkeypatch, impl, codec, first_dirty, case):
    payload, count = CASES[case]
    _write(str(tmp_path), _batch(payload, count, 3, codec))
    _assert_rejected(str(tmp_path), impl, monkeypatch, first_dirty)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("first_dirty", [0, 13], ids=["pass1", "pass2"])
def test_payload_the_codec_refuses_stops_the_clean(tmp_path, monkeypatch, impl, codec, first_dirty):
    """A right CRC over compressed bytes that do not decompress (the native loops get their records
    from a table Python fills ahead of them: the error must surface when the loop reaches it)."""
    good = R.compress(codec, _record(_good_body()))
    garbage = good[:4] + bytes(b ^ 0x5A for b in good[4:]) + b"\x00" * 8
    bad = batch_ops.build_header_bytes(3, 0, codec, 0, T, T, -1, -1, -1, 1, garbage)
    _write(str(tmp_path), bad)
    _assert_rejected(str(tmp_path), impl, monkeypatch, first_dirty)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("first_dirty", [0, 13], ids=["pass1", "pass2"])
def test_crc_mismatch_stops_the_clean(tmp_path, monkeypatch, impl, first_dirty):
    bad = bytearray(_good(3))
    bad[-2] ^= 0xFF
    _write(str(tmp_path), bytes(bad))
    _assert_rejected(str(tmp_path), impl, monkeypatch, first_dirty)


@pytest.mark.parametrize("impl", IMPLS)
def test_corrupt_control_record_stops_the_clean(tmp_path, monkeypatch, impl):
    # a transaction marker whose key length points past its record (seen by the prescan)
    payload = _record(b"\x00" + vi(0) + vi(0) + vi(40) + b"\x00\x00")
    marker = batch_ops.build_header_bytes(3, 0, batch_ops.CONTROL_MASK | batch_ops.TRANSACTIONAL_MASK, 0, T, T,
                                          7, 0, -1, 1, payload)
    _write(str(tmp_path), marker)
    _assert_rejected(str(tmp_path), impl, monkeypatch, 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_same_batches_uncorrupted_clean(tmp_path, monkeypatch, impl):
    """The control experiment: the frame above with a well-formed middle batch cleans fine."""
    payload = _record(_good_body(b"n1", b"new", 0))
    _write(str(tmp_path), _batch(payload, 1, 3))
    res = _clean(str(tmp_path), impl, monkeypatch, 0)
    # g0..g2 at 0..2 are superseded by 10..12; n1 at 3 stays
    assert res.end_offset == 20 and res.stats.messages_written == 4


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("first_dirty", [0, 13], ids=["pass1", "pass2"])
@pytest.mark.parametrize("length", [10, 1 << 30], ids=["below_header", "past_segment"])
def test_corrupt_batch_length_stops_the_clean(tmp_path, monkeypatch, impl, first_dirty, length):
    """batchLength is outside the CRC: a bad one in the middle of an immutable segment must not end
    the walk as if the segment ended there (the swap would then drop every batch after it)."""
    bad = bytearray(_good(3))
    bad[8:12] = length.to_bytes(4, "big")
    _write(str(tmp_path), bytes(bad))
    _assert_rejected(str(tmp_path), impl, monkeypatch, first_dirty)


@pytest.mark.skipif(native.LIB is None, reason="no C compiler")
def test_any_negative_value_length_is_a_null_value_in_both_seams(tmp_path, monkeypatch):
    """Kafka reads a negative valueLength as a null value (a tombstone); native.c does (vl < 0), so
    the Python seam must too, not only for the canonical -1 byte."""
    body = b"\x00" + vi(0) + vi(0) + vi(1) + b"t" + vi(-2) + vi(0)
    counts = []
    for impl in (None, "native"):
        d = tmp_path / str(impl)
        d.mkdir()
        _write(str(d), _batch(_record(body), 1, 3))
        res = _clean(str(d), impl, monkeypatch, 0)
        counts.append(res.stats.tombstones_retained)
    assert counts == [1, 1]
