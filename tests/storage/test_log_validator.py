"""LogValidator rules for magic v2, each with the Kafka error code it must produce."""
from __future__ import annotations

import struct

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage.log_validator import validate_and_assign

NOW = 1_700_000_000_000


def cfg(**kw):
    return LogConfig.from_overrides({k.replace("_", "."): str(v) for k, v in kw.items()})


def run(data, config=None, **kw):
    return validate_and_assign(data, next_offset=kw.pop("next_offset", 100), config=config or cfg(),
                               now_ms=NOW, **kw)


def code_of(data, config=None, **kw):
    with pytest.raises(KafkaError) as exc:
        run(data, config, **kw)
    return exc.value.code


def batch(recs=((b"k", b"v"),), ts=NOW, **kw):
    return R.build_batch([(k, v, None, ts) for k, v in recs], **kw)


def rewrite_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, R.CRC_POS, R.compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_offsets_and_leader_epoch_are_patched_in_place():
    data = batch([(b"a", b"1"), (b"b", b"2")])
    vr = run(data, next_offset=42, leader_epoch=7)
    h = R.read_header(vr.buffer)
    assert (vr.first_offset, vr.last_offset) == (42, 43)
    assert h.base_offset == 42 and h.partition_leader_epoch == 7
    assert R.valid_crc(vr.buffer, 0, h) and h.crc == R.read_header(data).crc  # CRC untouched
    assert bytes(vr.buffer[R.ATTRIBUTES_POS:]) == data[R.ATTRIBUTES_POS:]
    assert not vr.recompressed and vr.log_append_time == -1


def test_magic_crc_size_and_shape_errors():
    v1 = bytearray(batch())
    v1[R.MAGIC_POS] = 1
    # a client's batch: ProduceRequest.validateRecords says INVALID_RECORD for a magic other than 2
    # and for bytes holding no complete batch (its iterator yields none)
    assert code_of(bytes(v1)) == ErrorCode.INVALID_RECORD
    bad = bytearray(batch())
    bad[-1] ^= 1
    assert code_of(bytes(bad)) == ErrorCode.CORRUPT_MESSAGE
    assert code_of(batch()[:40]) == ErrorCode.INVALID_RECORD
    assert code_of(batch()[:-3]) == ErrorCode.INVALID_RECORD
    assert code_of(batch()[:11]) == ErrorCode.INVALID_RECORD
    tiny = bytearray(batch())
    tiny[R.BATCH_LENGTH_POS:R.BATCH_LENGTH_POS + 4] = (13).to_bytes(4, "big")
    assert code_of(bytes(tiny)) == ErrorCode.CORRUPT_MESSAGE      # below any magic's overhead
    assert code_of(batch() + batch()) == ErrorCode.INVALID_RECORD
    assert code_of(b"") == ErrorCode.INVALID_RECORD
    big = batch([(b"k", b"x" * 3000)])
    assert code_of(big, cfg(max_message_bytes=2000)) == ErrorCode.MESSAGE_TOO_LARGE
    assert code_of(big, cfg(internal_segment_bytes=1000)) == ErrorCode.RECORD_LIST_TOO_LARGE


def test_client_rules():
    assert code_of(batch(base_offset=3)) == ErrorCode.INVALID_RECORD
    count = bytearray(batch([(b"a", b"1"), (b"b", b"2")]))
    struct.pack_into(">i", count, R.RECORDS_COUNT_POS, 3)
    assert code_of(rewrite_crc(count)) == ErrorCode.INVALID_RECORD
    assert code_of(batch(is_control=True)) == ErrorCode.INVALID_RECORD
    assert code_of(batch(producer_id=5, producer_epoch=0, base_sequence=-1)) == ErrorCode.INVALID_RECORD
    # the same control batch from the coordinator is accepted
    run(batch(is_control=True), origin="coordinator")


def test_compacted_topic_needs_keys():
    compact = cfg(cleanup_policy="compact")
    assert code_of(batch([(None, b"v")]), compact) == ErrorCode.INVALID_RECORD
    run(batch([(b"k", None)]), compact)  # a tombstone is fine
    run(batch([(None, b"v")]))           # a delete topic takes keyless records


def test_uncompressed_records_are_always_walked_compressed_ones_only_when_needed():
    # Garbage record bytes under a valid CRC: an uncompressed batch's records are always walked
    # (Kafka's LogValidator reads every record), so every topic refuses it ...
    buf = bytearray(batch([(b"k", b"v" * 30)]))
    buf[R.RECORDS_POS:] = b"\xff" * (len(buf) - R.RECORDS_POS)
    data = rewrite_crc(buf)
    assert code_of(data) == ErrorCode.INVALID_RECORD          # Kafka's InvalidRecordException
    assert code_of(data, cfg(cleanup_policy="compact")) == ErrorCode.INVALID_RECORD
    # ... a compressed one kept as is on a delete topic costs header + CRC only (no decompression);
    # the compacted path must decode and so refuses it
    zbuf = bytearray(batch([(b"k", b"v" * 30)], compression=R.COMPRESSION_ZSTD))
    zbuf[R.RECORDS_POS + 8:] = b"\xff" * (len(zbuf) - R.RECORDS_POS - 8)
    zdata = rewrite_crc(zbuf)
    assert run(zdata).last_offset == 100
    assert code_of(zdata, cfg(cleanup_policy="compact")) == ErrorCode.CORRUPT_MESSAGE


def test_create_time_bounds():
    after = cfg(message_timestamp_after_max_ms=1000)
    run(batch(ts=NOW + 1000), after)
    assert code_of(batch(ts=NOW + 1001), after) == ErrorCode.INVALID_TIMESTAMP
    before = cfg(message_timestamp_before_max_ms=1000)
    run(batch(ts=NOW - 1000), before)
    # the old record is not the first one: only decoding finds it
    data = R.build_batch([(b"a", b"1", None, NOW), (b"b", b"2", None, NOW - 5000)])
    assert code_of(data, before) == ErrorCode.INVALID_TIMESTAMP


def test_log_append_time_is_stamped():
    c = cfg(message_timestamp_type="LogAppendTime")
    vr = run(batch(ts=5), c)
    h = R.read_header(vr.buffer)
    assert h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == NOW
    assert R.valid_crc(vr.buffer, 0, h)
    assert vr.log_append_time == NOW and vr.max_timestamp == NOW


def test_recompression_to_topic_codec():
    data = batch([(b"a", b"1" * 100), (b"b", b"2" * 100)])
    vr = run(data, cfg(compression_type="gzip"), next_offset=7)
    h = R.read_header(vr.buffer)
    assert vr.recompressed and h.compression == R.COMPRESSION_GZIP and h.base_offset == 7
    assert [(r.key, r.value) for r in R.decode_records(vr.buffer, 0, h)] == \
        [(b"a", b"1" * 100), (b"b", b"2" * 100)]
    keep = run(R.build_batch([(b"a", b"x", None, NOW)], compression=R.COMPRESSION_LZ4), cfg(compression_type="producer"))
    assert not keep.recompressed and R.read_header(keep.buffer).compression == R.COMPRESSION_LZ4
    plain = run(R.build_batch([(b"a", b"x", None, NOW)], compression=R.COMPRESSION_ZSTD), cfg(compression_type="uncompressed"))
    assert R.read_header(plain.buffer).compression == R.COMPRESSION_NONE


def test_recompression_uses_the_topic_level():
    data = batch([(b"k%d" % i, b"abcdefgh" * 200) for i in range(20)])
    fast = run(data, cfg(compression_type="zstd", compression_zstd_level=1)).buffer
    best = run(data, cfg(compression_type="zstd", compression_zstd_level=19)).buffer
    assert len(best) < len(fast)
    for buf in (fast, best):
        h = R.read_header(buf)
        assert [r.value for r in R.decode_records(buf, 0, h)] == [b"abcdefgh" * 200] * 20


def test_a_writable_view_is_patched_in_place_anything_else_copied():
    data = batch([(b"a", b"1"), (b"b", b"2")])
    frame = bytearray(b"\x00" * 7 + data)               # a request frame the handler owns
    view = memoryview(frame)[7:]
    vr = run(view, next_offset=42)
    assert vr.buffer.obj is frame and R.read_header(frame, 7).base_offset == 42   # no copy
    readonly = memoryview(data)
    vr = run(readonly, next_offset=43)
    assert isinstance(vr.buffer, bytearray) and R.read_header(data).base_offset == 0  # input untouched
    vr = run(data, next_offset=44)
    assert isinstance(vr.buffer, bytearray) and R.read_header(vr.buffer).base_offset == 44


def test_a_batch_recompressed_past_the_segment_size_is_a_record_list_too_large():
    # UnifiedLog.append checks the validated records against segment.bytes after validation, so
    # a batch that recompression (here: to uncompressed) grows past it is refused, not given a
    # segment larger than segment.bytes
    c = cfg(segment_bytes=1_048_576, max_message_bytes=3_000_000, compression_type="uncompressed")
    small = R.build_batch([(b"k", b"a" * 1_200_000, None, NOW)], compression=R.COMPRESSION_ZSTD)
    with pytest.raises(KafkaError) as exc:
        run(small, c)
    assert exc.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert "exceeds the maximum configured segment size of 1048576" in exc.value.message
    run(R.build_batch([(b"k", b"a" * 1_000_000, None, NOW)], compression=R.COMPRESSION_ZSTD), c)  # fits


def test_a_header_max_timestamp_past_the_bound_is_refused_even_when_the_records_are_walked():
    # the header's maxTimestamp is what gets indexed: an uncompressed batch whose records are in
    # range but whose header claims a future maxTimestamp is still INVALID_TIMESTAMP
    after = cfg(message_timestamp_after_max_ms=1000)
    lying = R.build_batch([(b"k", b"v", None, NOW)], max_timestamp=NOW + 5000)
    assert code_of(lying, after) == ErrorCode.INVALID_TIMESTAMP
    run(R.build_batch([(b"k", b"v", None, NOW)], max_timestamp=NOW + 1000), after)


@pytest.mark.parametrize("codec", [R.COMPRESSION_NONE, R.COMPRESSION_ZSTD], ids=["none", "zstd"])
def test_an_unset_max_timestamp_is_taken_from_the_records(codec):
    # Kafka writes a CreateTime batch's maxTimestamp from its records; one below the first record's
    # timestamp (a client that left it unset) is replaced, the CRC recomputed, the codec kept
    data = R.build_batch([(b"a", b"1", None, NOW - 30), (b"b", b"2", None, NOW - 10), (b"c", b"3", None, NOW - 20)],
                         compression=codec, max_timestamp=-1)
    vr = run(data)
    h = R.read_header(vr.buffer)
    assert h.max_timestamp == vr.max_timestamp == NOW - 10 and R.valid_crc(vr.buffer, 0, h)
    assert h.compression == codec and not vr.recompressed
    # ... and is then held to message.timestamp.after.max.ms like any other
    future = R.build_batch([(b"a", b"1", None, NOW), (b"b", b"2", None, NOW + 5000)], compression=codec,
                           max_timestamp=-1)
    assert code_of(future, cfg(message_timestamp_after_max_ms=1000)) == ErrorCode.INVALID_TIMESTAMP


# ---- prepare / assign (validation beside the loop: storage/validation_pool.py) ----------------

CODECS = [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD]
CODEC_NAME = {R.COMPRESSION_NONE: "uncompressed", R.COMPRESSION_GZIP: "gzip", R.COMPRESSION_SNAPPY: "snappy",
              R.COMPRESSION_LZ4: "lz4", R.COMPRESSION_ZSTD: "zstd"}


def _records(n=30):
    return [(b"k%d" % i, b"value %d " % i * 20, [("h", b"x")] if i % 3 == 0 else None, NOW - 100 + i)
            for i in range(n)]


@pytest.mark.parametrize("source,target", [(s, t) for s in CODECS for t in CODECS if s != t],
                         ids=lambda c: R.CODEC_NAMES[c])
def test_recompression_gives_the_bytes_a_record_by_record_rebuild_gives(source, target):
    # the payload is re-encoded whole (no per-record work): the result must be exactly the batch
    # build_batch makes from the same records in the topic's codec at the topic's level
    recs = _records()
    data = R.build_batch(recs, compression=source, producer_id=7, producer_epoch=2, base_sequence=40)
    config = cfg(compression_type=CODEC_NAME[target])
    vr = run(data, config, next_offset=500, leader_epoch=3)
    expected = R.build_batch(recs, compression=target, producer_id=7, producer_epoch=2, base_sequence=40,
                             base_offset=500, partition_leader_epoch=3,
                             compression_level=config.compression_zstd_level if target == R.COMPRESSION_ZSTD
                             else config.compression_lz4_level if target == R.COMPRESSION_LZ4 else None)
    assert vr.recompressed and bytes(vr.buffer) == expected
    assert (vr.first_offset, vr.last_offset, vr.records_count) == (500, 529, 30)


def test_recompression_under_log_append_time_stamps_the_header_and_keeps_the_record_deltas():
    recs = _records(5)
    data = R.build_batch(recs, compression=R.COMPRESSION_LZ4, is_transactional=True, producer_id=3,
                         producer_epoch=0, base_sequence=0)
    vr = run(data, cfg(compression_type="zstd", message_timestamp_type="LogAppendTime"))
    h = R.read_header(vr.buffer)
    assert h.compression == R.COMPRESSION_ZSTD and h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
    assert h.max_timestamp == NOW and h.is_transactional and R.valid_crc(vr.buffer, 0, h)
    assert [(r.key, r.timestamp_delta) for r in R.decode_records(vr.buffer, 0, h)] == \
        [(k, i) for i, (k, *_rest) in enumerate(recs)]


def test_a_recompressed_batch_with_an_unset_max_timestamp_takes_it_from_the_records():
    data = R.build_batch([(b"a", b"1", None, NOW - 30), (b"b", b"2", None, NOW - 10)],
                         compression=R.COMPRESSION_LZ4, max_timestamp=-1)
    vr = run(data, cfg(compression_type="zstd"))
    h = R.read_header(vr.buffer)
    assert h.compression == R.COMPRESSION_ZSTD and h.max_timestamp == vr.max_timestamp == NOW - 10


@pytest.mark.parametrize("codec", [R.COMPRESSION_NONE, R.COMPRESSION_ZSTD], ids=["none", "zstd"])
def test_prepare_leaves_the_bytes_alone_and_assign_can_run_twice(codec):
    from kompakt.storage.log_validator import assign, prepare
    data = R.build_batch(_records(4), compression=codec)
    frame = bytearray(data)
    for config in (cfg(), cfg(message_timestamp_type="LogAppendTime"), cfg(compression_type="gzip")):
        frame[:] = data
        p = prepare(memoryview(frame), config=config, now_ms=NOW)
        assert bytes(frame) == data                         # checked, not touched
        first = assign(p, memoryview(frame), next_offset=10, leader_epoch=1)
        once = bytes(first.buffer)
        again = assign(p, memoryview(frame), next_offset=10, leader_epoch=1)   # a retried append
        assert bytes(again.buffer) == once == bytes(validate_and_assign(
            bytearray(data), next_offset=10, config=config, now_ms=NOW, leader_epoch=1).buffer)


def test_the_validations_that_run_a_codec_are_the_ones_the_pool_may_take():
    from kompakt.storage.log_validator import needs_codec
    zstd, plain = batch(compression=R.COMPRESSION_ZSTD), batch()
    assert not needs_codec(zstd, cfg())                                   # CRC only: stays on the loop
    assert needs_codec(zstd, cfg(cleanup_policy="compact"))                # decompressed to read keys
    assert not needs_codec(plain, cfg(cleanup_policy="compact"))           # walked in place
    assert needs_codec(plain, cfg(compression_type="zstd"))                # recompressed
    assert not needs_codec(zstd, cfg(compression_type="zstd"))
    assert needs_codec(zstd, cfg(message_timestamp_before_max_ms=1000))    # every timestamp read
    assert not needs_codec(zstd, cfg(message_timestamp_before_max_ms=1000, message_timestamp_type="LogAppendTime"))
    assert not needs_codec(b"\x00" * 10, cfg(cleanup_policy="compact"))    # malformed: the checks refuse it
