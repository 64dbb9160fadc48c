"""Record batch v2: golden bytes, CRC, codecs, and cross-checks against kafka-python's own codec."""
import struct

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kompakt.protocol import records as R


def test_golden_single_record_batch():
    batch = R.build_batch([(b"k", b"v", [], 1000)], base_offset=5)
    # Header, field by field.
    assert batch[0:8] == struct.pack(">q", 5)                 # baseOffset
    assert struct.unpack(">i", batch[8:12])[0] == len(batch) - 12   # batchLength
    assert batch[12:16] == b"\x00\x00\x00\x00"                 # partitionLeaderEpoch 0
    assert batch[16] == 2                                        # magic
    assert batch[21:23] == b"\x00\x00"                          # attributes: none, CreateTime
    assert batch[23:27] == b"\x00\x00\x00\x00"                 # lastOffsetDelta 0
    assert batch[27:35] == struct.pack(">q", 1000)              # baseTimestamp
    assert batch[35:43] == struct.pack(">q", 1000)              # maxTimestamp
    assert batch[43:51] == b"\xff" * 8                          # producerId -1
    assert batch[51:53] == b"\xff\xff"                          # producerEpoch -1
    assert batch[53:57] == b"\xff" * 4                          # baseSequence -1
    assert batch[57:61] == b"\x00\x00\x00\x01"                 # recordsCount 1
    # Record: length 8 (zigzag 16=0x10), attrs 0, tsDelta 0, offDelta 0, keyLen 1 (0x02), 'k',
    # valueLen 1 (0x02), 'v', headers 0.
    assert batch[61:] == bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])
    header = R.read_header(batch)
    assert R.valid_crc(batch, 0, header)


def test_crc_detects_flipped_byte():
    batch = bytearray(R.build_batch([(b"key", b"value")]))
    header = R.read_header(batch)
    assert R.valid_crc(batch, 0, header)
    batch[-2] ^= 0x01
    assert not R.valid_crc(batch, 0, R.read_header(batch))


def test_base_offset_patch_keeps_crc():
    batch = bytearray(R.build_batch([(b"a", b"1"), (b"b", b"2")]))
    R.patch_base_offset(batch, 0, 1234)
    R.patch_partition_leader_epoch(batch, 0, 7)
    header = R.read_header(batch)
    assert header.base_offset == 1234 and header.last_offset == 1235
    assert header.partition_leader_epoch == 7
    assert R.valid_crc(batch, 0, header)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_codecs_roundtrip_and_kafka_python_reads_ours(codec):
    recs = [(b"key-%d" % i, b"value-%d" % i * 20, [("h", b"x"), ("n", None)], 1_700_000_000_000 + i)
            for i in range(50)]
    batch = R.build_batch(recs, base_offset=100, compression=codec)
    header = R.read_header(batch)
    assert header.compression == codec and R.valid_crc(batch, 0, header)
    decoded = R.decode_records(batch, 0, header)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(k, v, h) for k, v, h, _ in recs]
    assert [R.record_timestamp(header, r) for r in decoded] == [t for *_, t in recs]
    if codec == R.COMPRESSION_SNAPPY:
        return  # kafka-python needs python-snappy for this codec; the xerial test below covers it
    theirs = list(DefaultRecordBatch(batch))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in theirs] == \
        [(100 + i, k, v, t) for i, (k, v, _, t) in enumerate(recs)]


@pytest.mark.parametrize("codec", [0, 1, 3, 4])  # kafka-python cannot write snappy without python-snappy
def test_we_read_kafka_python_batches(codec):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=42, producer_epoch=1, base_sequence=10, batch_size=1 << 20)
    for i in range(20):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=None if i == 3 else b"v" * i,
                       headers=[("a", b"b")])
    batch = bytes(builder.build())
    header = R.read_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 1, 10)
    assert header.last_sequence == 29 and R.valid_crc(batch, 0, header)
    decoded = R.decode_records(batch, 0, header)
    assert decoded[3].value is None and decoded[5].value == b"vvvvv"
    keys = list(R.iter_keys_offsets(batch, 0, header))
    assert keys[3] == (3, b"k3", True) and keys[4] == (4, b"k4", False)


def test_snappy_accepts_raw_and_xerial():
    import cramjam
    data = b"hello snappy " * 1000
    assert R.decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data
    assert R.decompress(2, R.compress(2, data)) == data
    assert R.compress(2, data)[:8] == b"\x82SNAPPY\x00"


def test_iter_batches_stops_at_partial_and_rejects_bad_length():
    a = R.build_batch([(b"a", b"1")], base_offset=0)
    b = R.build_batch([(b"b", b"2")], base_offset=1)
    buf = a + b + b[:30]
    assert [h.base_offset for _, h in R.iter_batches(buf)] == [0, 1]
    bad = bytearray(a)
    struct.pack_into(">i", bad, 8, 3)
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(bytes(bad)))


def test_delete_horizon_keeps_record_timestamps():
    recs = [(b"k", None, [], 5000), (b"j", b"x", [], 6000)]
    batch = R.build_batch(recs)
    header = R.read_header(batch)
    decoded = R.decode_records(batch, 0, header)
    rebuilt = R.build_batch(decoded, base_timestamp=header.base_timestamp, delete_horizon_ms=99_000,
                            max_timestamp=header.max_timestamp)
    h2 = R.read_header(rebuilt)
    assert h2.has_delete_horizon and h2.delete_horizon_ms == 99_000
    assert [R.record_timestamp(h2, r) for r in R.decode_records(rebuilt, 0, h2)] == [5000, 6000]
    theirs = list(DefaultRecordBatch(rebuilt))
    assert [r.timestamp for r in theirs] == [5000, 6000]


def test_log_append_time_patch():
    batch = bytearray(R.build_batch([(b"a", b"1", [], 10)]))
    R.patch_max_timestamp_log_append(batch, 0, 777)
    header = R.read_header(batch)
    assert header.timestamp_type == 1 and header.max_timestamp == 777 and R.valid_crc(batch, 0, header)
    assert R.record_timestamp(header, R.decode_records(batch, 0, header)[0]) == 777


def test_empty_batch_keeps_producer_state():
    batch = R.build_batch([], base_offset=50, producer_id=9, producer_epoch=0, base_sequence=4,
                          last_offset_delta=2, base_timestamp=100)
    header = R.read_header(batch)
    assert header.records_count == 0 and header.last_offset == 52 and header.last_sequence == 6
    assert R.decode_records(batch, 0, header) == []


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_roundtrip(value):
    enc = R.encode_varint(value)
    assert len(enc) == R.size_of_varint(value)
    assert R.decode_varint(enc, 0) == (value, len(enc))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=300))), min_size=1, max_size=30),
       st.sampled_from([0, 1, 2, 3, 4]))
def test_build_decode_roundtrip(recs, codec):
    batch = R.build_batch([(k, v, [], 1000) for k, v in recs], compression=codec)
    header = R.read_header(batch)
    assert [(r.key, r.value) for r in R.decode_records(batch, 0, header)] == recs


_ZSTD_THREADS = """
import os, threading
from kompakt.protocol import records as R
payloads = [os.urandom(64) * (20 + i) for i in range(8)]
bad = []
def work(k):
    for n in range(3000):
        p = payloads[(n + k) % 8]
        try:
            if R.decompress(R.COMPRESSION_ZSTD, R.compress(R.COMPRESSION_ZSTD, p)) != p:
                bad.append("mismatch")
        except Exception as exc:
            bad.append(repr(exc))
threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("bad", len(bad), bad[:3])
"""


def test_zstd_from_several_threads_at_once():
    """zstandard's compressor and decompressor are not thread-safe (a shared compressor crashed
    the process, a shared decompressor answered 'Data corruption detected'); the broker uses the
    codecs on its loop and in worker threads, kompakt.testing runs brokers side by side on
    threads. Run in a child process so that a crash is a failure here, not the end of pytest."""
    import subprocess
    import sys
    import threading
    from pathlib import Path

    mine = R._zstd()
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(R._zstd()))
    t.start()
    t.join()
    assert theirs[0][0] is not mine[0] and theirs[0][1] is not mine[1] and R._zstd() is mine
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", _ZSTD_THREADS], capture_output=True, text=True, timeout=120, cwd=root,
                          env={**__import__("os").environ, "PYTHONPATH": root})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "bad 0 []", proc.stdout


def test_zstd_frames_with_and_without_a_stated_size_and_one_that_lies_about_it():
    # a frame stating its size (librdkafka's) is decompressed in one call, one without (a
    # streaming writer's, as the Java client's zstd-jni) streams; a tiny frame claiming 1 TiB is
    # never trusted with an allocation that size: it streams and is corrupt
    import zstandard
    raw = b"".join(b"record %06d " % i * 8 for i in range(2000))
    stated = zstandard.ZstdCompressor(level=3).compress(raw)
    streamed = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw)
    assert zstandard.frame_content_size(stated) == len(raw) and zstandard.frame_content_size(streamed) == -1
    for frame in (stated, streamed):
        assert R.decompress(R.COMPRESSION_ZSTD, frame) == raw
        assert R.decompress(R.COMPRESSION_ZSTD, memoryview(bytearray(frame))) == raw
    # frame header: magic, descriptor 0xE0 (8-byte content size, single segment), the size, then
    # the first block of a 100-byte frame: the claim no longer matches what the blocks hold
    small = zstandard.ZstdCompressor(level=3).compress(b"x" * 100)
    lying = b"\x28\xb5\x2f\xfd" + b"\xe0" + (1 << 40).to_bytes(8, "little") + small[6:]
    assert zstandard.frame_content_size(lying) == 1 << 40
    with pytest.raises(R.CorruptRecordError, match="cannot decompress zstd payload") as exc:
        R.decompress(R.COMPRESSION_ZSTD, lying)
    assert not isinstance(exc.value.__cause__, MemoryError)    # what trusting the claim gives
