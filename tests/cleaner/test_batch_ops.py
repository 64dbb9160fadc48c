"""batch_ops: pass-1 indexing and pass-2 filtering of single batches, checked with records.py."""
import pytest

from kompakt.cleaner import batch_ops
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R

NOW = 1_700_000_000_000


def hdr(b):
    return batch_ops.HEADER.unpack_from(b, 0)


def batch(recs, base=0, **kw):
    kw.setdefault("base_timestamp", NOW)
    return R.build_batch(recs, base_offset=base, **kw)


def decoded(b):
    h = R.read_header(b)
    assert R.valid_crc(b, 0, h)
    return h, [(h.base_offset + r.offset_delta, r.key, r.value, R.record_timestamp(h, r))
               for r in R.decode_records(b, 0, h)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_index_batch_puts_keys(codec):
    b = batch([(b"a", b"1"), (None, b"x"), (b"b", b"2"), (b"a", b"3")], base=10, compression=codec)
    m = SkimpyOffsetMap(24 * 100)
    read, keyless, full = batch_ops.index_batch(b, hdr(b), m, 0, m.max_desired_size)
    assert (read, keyless, full) == (4, 1, False)
    assert m.get(b"a") == 13 and m.get(b"b") == 12


def test_index_batch_respects_start_offset_and_limit():
    b = batch([(b"k%d" % i, b"v") for i in range(10)], base=100)
    m = SkimpyOffsetMap(24 * 100)
    batch_ops.index_batch(b, hdr(b), m, 104, 100)
    assert m.size == 6 and m.get(b"k3") == -1
    m2 = SkimpyOffsetMap(24 * 100)
    _, _, full = batch_ops.index_batch(b, hdr(b), m2, 0, 3)
    assert full and m2.size == 3 and m2.latest_offset == 102


def test_long_values_and_keys_use_multibyte_varints():
    big = [(b"key-%05d" % i * 30, b"v" * 20000) for i in range(3)]
    b = batch(big, base=0)
    m = SkimpyOffsetMap(24 * 100)
    batch_ops.index_batch(b, hdr(b), m, 0, 100)
    assert m.get(big[2][0]) == 2


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_filter_drops_superseded_and_keyless_keeps_offsets(codec):
    b = batch([(b"a", b"1", [], NOW), (None, b"x", [], NOW + 1), (b"b", b"2", [], NOW + 2),
               (b"a", b"3", [], NOW + 3)], base=10, compression=codec, producer_id=7,
              producer_epoch=1, base_sequence=5)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"a", 13)
    m.put(b"b", 20)
    res = batch_ops.filter_batch(b, hdr(b), m, NOW, 1000)
    h, recs = decoded(res.output)
    assert [r[0] for r in recs] == [13]
    assert recs[0][2] == b"3" and recs[0][3] == NOW + 3
    assert (res.read, res.retained, res.keyless, res.copied) == (4, 1, 1, False)
    assert (h.base_offset, h.last_offset_delta, h.producer_id, h.base_sequence) == (10, 3, 7, 5)
    assert h.max_timestamp == NOW + 3 and h.compression == codec


def test_filter_copies_untouched_batch_byte_for_byte():
    b = batch([(b"a", b"1"), (b"b", b"2")], base=0)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"a", 0)
    res = batch_ops.filter_batch(b, hdr(b), m, NOW, 1000)
    assert res.copied and res.output is b


def test_records_past_latest_mapped_offset_are_kept():
    b = batch([(b"a", b"1"), (None, b"2")], base=50)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"a", 60)
    m.update_latest_offset(49)
    m.latest_offset = 49
    res = batch_ops.filter_batch(b, hdr(b), m, NOW, 1000)
    assert res.copied


def test_tombstone_gets_horizon_then_goes_after_it():
    b = batch([(b"grape", None, [], NOW - 5), (b"lime", b"1.59", [], NOW - 4)], base=2)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"grape", 2)
    m.put(b"lime", 3)
    first = batch_ops.filter_batch(b, hdr(b), m, NOW, 86_400_000)
    h, recs = decoded(first.output)
    assert first.stamped and h.has_delete_horizon and h.delete_horizon_ms == NOW + 86_400_000
    assert recs == [(2, b"grape", None, NOW - 5), (3, b"lime", b"1.59", NOW - 4)]
    assert h.max_timestamp == NOW - 4
    # a second clean before the horizon keeps it untouched, after it drops the tombstone
    m2 = SkimpyOffsetMap(24 * 100)
    m2.put(b"other", 9)
    again = batch_ops.filter_batch(first.output, hdr(first.output), m2, NOW + 1000, 86_400_000)
    assert again.copied
    later = batch_ops.filter_batch(first.output, hdr(first.output), m2, NOW + 86_400_000, 86_400_000)
    h3, recs3 = decoded(later.output)
    assert recs3 == [(3, b"lime", b"1.59", NOW - 4)] and h3.has_delete_horizon


def test_retain_empty_and_discard():
    b = batch([(b"a", b"1")], base=5, producer_id=3, producer_epoch=0, base_sequence=0)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"a", 9)
    assert batch_ops.filter_batch(b, hdr(b), m, NOW, 0).output is None
    kept = batch_ops.filter_batch(b, hdr(b), m, NOW, 0, retain_empty=True)
    h, recs = decoded(kept.output)
    assert recs == [] and h.base_offset == 5 and h.last_offset == 5 and h.producer_id == 3
    gone = batch_ops.filter_batch(b, hdr(b), SkimpyOffsetMap(48), NOW, 0, discard_records=True)
    assert gone.output is None


def test_target_codec_applies_to_rebuilt_batches_only():
    b = batch([(b"a", b"1" * 100), (b"b", b"2"), (b"a", b"3")], base=0)
    m = SkimpyOffsetMap(24 * 100)
    m.put(b"a", 2)
    m.put(b"b", 1)
    res = batch_ops.filter_batch(b, hdr(b), m, NOW, 0, target_codec=4)
    h, recs = decoded(res.output)
    assert h.compression == 4 and [r[2] for r in recs] == [b"2", b"3"]
    m.put(b"a", 0)
    m2 = SkimpyOffsetMap(24 * 100)
    m2.put(b"a", 2)
    m2.put(b"b", 1)
    untouched = batch([(b"b", b"2"), (b"a", b"3")], base=1)
    assert batch_ops.filter_batch(untouched, hdr(untouched), m2, NOW, 0, target_codec=4).output is untouched


def test_control_batch_marker_type_and_stamp():
    marker = R.build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], NOW)], base_offset=30,
                           is_control=True, is_transactional=True, producer_id=4, producer_epoch=0)
    h = hdr(marker)
    assert batch_ops.control_type(marker, h) == 1
    m = SkimpyOffsetMap(48)
    res = batch_ops.filter_batch(marker, h, m, NOW, 100, stamp_marker=True)
    hh, recs = decoded(res.output)
    assert hh.is_control and hh.delete_horizon_ms == NOW + 100 and recs[0][3] == NOW
    gone = batch_ops.filter_batch(res.output, hdr(res.output), m, NOW + 200, 100, discard_records=True)
    assert gone.output is None
