"""Record batches, magic v2: header view, CRC, records, building batches, compression codecs.

Role: the one place that knows the bytes of a Kafka record batch. Storage validates and appends
batches with it, the cleaner filters them, fetch serves them untouched, the pipeline decodes them.
Sans-io: functions over `bytes`/`bytearray`/`memoryview`, no files, no sockets.

Batch layout (all integers big-endian; offsets are from the batch start):

    0  baseOffset            int64   first offset of the batch (assigned by the log; not under the CRC)
    8  batchLength           int32   bytes after this field (so the batch is batchLength + 12 bytes)
   12  partitionLeaderEpoch  int32   stamped by the leader (not under the CRC)
   16  magic                 int8    always 2 here
   17  crc                   uint32  CRC-32C of bytes [21, end)
   21  attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                     bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional,
                                     bit 5 control batch, bit 6 hasDeleteHorizonMs (KIP-534)
   23  lastOffsetDelta       int32   offset of the last record minus baseOffset
   27  baseTimestamp         int64   first timestamp; the delete horizon when bit 6 is set
   35  maxTimestamp          int64   largest timestamp in the batch
   43  producerId            int64   -1 when not idempotent
   51  producerEpoch         int16
   53  baseSequence          int32
   57  recordsCount          int32
   61  records               (compressed as a whole when the codec is not none)

Record layout (varints are zigzag-encoded like protobuf sint):

    length varint | attributes int8 (unused) | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | headers: keyLength varint, key (UTF-8), valueLength varint (-1 = null), value

Invariants: `iter_batches` never yields a batch that extends past the buffer; `build_batch` output
always passes `valid_crc`; compression codecs round-trip every payload byte for byte.
"""
from __future__ import annotations

import gzip
import struct
import threading
import time
import zlib
from typing import Iterable, Iterator, NamedTuple, Sequence

import crc32c as _crc32c

# ---------------------------------------------------------------------------------------------
# Header

HEADER_FORMAT = ">qiibIhiqqqhii"
BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
assert struct.calcsize(HEADER_FORMAT) == BATCH_OVERHEAD
_HEADER = struct.Struct(HEADER_FORMAT)
_LENGTH_AND_MAGIC = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
RECORDS_COUNT_POS = 57
RECORDS_POS = 61

CURRENT_MAGIC = 2

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_BY_NAME = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class CorruptRecordError(ValueError):
    """Bytes that are not a well-formed v2 batch or record; the message says where and why."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else NO_TIMESTAMP

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`; raises CorruptRecordError if the buffer is too short."""
    if len(buf) - pos < BATCH_OVERHEAD:
        raise CorruptRecordError(f"batch header at {pos} needs {BATCH_OVERHEAD} bytes, "
                                 f"{len(buf) - pos} available")
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def peek_size_and_magic(buf, pos: int = 0) -> tuple[int, int, int]:
    """(base_offset, total batch size, magic) from the first 17 bytes, for scanning files cheaply."""
    base_offset, length, _, magic = _LENGTH_AND_MAGIC.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD, magic


def iter_batches(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in buf[pos:end].

    Stops silently at a trailing partial batch (the normal end of a fetch or a torn write);
    raises CorruptRecordError for a batch whose length field cannot be right (below the header
    size), since nothing after it can be located.
    """
    end = len(buf) if end is None else end
    unpack = _HEADER.unpack_from
    make = BatchHeader._make
    while end - pos >= BATCH_OVERHEAD:
        header = make(unpack(buf, pos))
        size = header.batch_length + LOG_OVERHEAD
        if size < BATCH_OVERHEAD:
            raise CorruptRecordError(f"batch at {pos} declares length {header.batch_length}, "
                                     f"below the minimum {BATCH_OVERHEAD - LOG_OVERHEAD}")
        if pos + size > end:
            return
        yield pos, header
        pos += size


def compute_crc(buf, pos: int, header_or_size) -> int:
    size = header_or_size if isinstance(header_or_size, int) else header_or_size.size
    return _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_POS: pos + size])


def valid_crc(buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches bytes [attributes, end) of the batch."""
    return compute_crc(buf, pos, header) == header.crc


def patch_base_offset(buf, pos: int, base_offset: int) -> None:
    """Overwrite baseOffset in place; the CRC does not cover it, so nothing else changes."""
    struct.pack_into(">q", buf, pos + BASE_OFFSET_POS, base_offset)


def patch_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Overwrite partitionLeaderEpoch in place (not under the CRC)."""
    struct.pack_into(">i", buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def rewrite_crc(buf, pos: int, size: int) -> None:
    """Store the CRC-32C of bytes [attributes, end) of the `size`-byte batch at `pos`."""
    struct.pack_into(">I", buf, pos + CRC_POS, compute_crc(buf, pos, size))


_rewrite_crc = rewrite_crc


def pack_header(buf, pos: int, *, base_offset: int, batch_length: int, partition_leader_epoch: int,
                attributes: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                producer_id: int, producer_epoch: int, base_sequence: int, records_count: int) -> None:
    """Write a v2 batch header at `pos` with crc 0 (rewrite_crc once the records follow it)."""
    _HEADER.pack_into(buf, pos, base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, 0,
                      attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, records_count)


def patch_max_timestamp_log_append(buf, pos: int, timestamp: int) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and max timestamp, then recompute the CRC.

    Kafka also sets maxTimestamp (and, for magic 2, leaves record deltas alone): consumers read the
    batch's maxTimestamp as every record's timestamp when the type is LogAppendTime.
    """
    header = read_header(buf, pos)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, header.attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_POS, timestamp)
    _rewrite_crc(buf, pos, header.size)


def patch_max_timestamp(buf, pos: int, timestamp: int) -> None:
    """Set a batch's maxTimestamp (timestamp type kept), then recompute the CRC."""
    header = read_header(buf, pos)
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_POS, timestamp)
    _rewrite_crc(buf, pos, header.size)


# ---------------------------------------------------------------------------------------------
# Varints (zigzag)

def _decode_varint(buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint at {pos} is longer than 10 bytes")


decode_varint = _decode_varint


def encode_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    value &= 0xFFFFFFFFFFFFFFFF
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    value = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


# ---------------------------------------------------------------------------------------------
# Compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy():
    import cramjam
    return cramjam.snappy


def _lz4frame():
    import lz4.frame
    return lz4.frame


_zstd_local = threading.local()


def _zstd():
    """This thread's zstd (compressor, decompressor). zstandard's objects must not be used by two
    threads at once (a shared compressor crashes the process, a shared decompressor reports
    corruption), and the broker compresses and decompresses on its loop thread and in worker
    threads (appends that fsync or roll, a fetch off the loop; kompakt.testing runs brokers on
    threads of their own), so each thread keeps its own pair."""
    pair = getattr(_zstd_local, "pair", None)
    if pair is None:
        import zstandard
        pair = _zstd_local.pair = (zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor())
    return pair


def _zstd_compressor(level: int):
    """This thread's zstd compressor at `level` (compression.zstd.level: a topic's recompression),
    kept like `_zstd`'s: a new one per call cost 11 of 32 us for a 16 KiB batch, 80 of 1,640 us
    for 1 MB. Level 3 is `_zstd`'s own."""
    if level == 3:
        return _zstd()[0]
    cache = getattr(_zstd_local, "by_level", None)
    if cache is None:
        cache = _zstd_local.by_level = {}
    compressor = cache.get(level)
    if compressor is None:
        import zstandard
        compressor = cache[level] = zstandard.ZstdCompressor(level=level)
    return compressor


_ZSTD_ONE_SHOT_MIN = 1 << 20      # see _zstd_decompress
_ZSTD_ONE_SHOT_RATIO = 32


def _zstd_decompress(data) -> bytes:
    """A zstd frame's content. A frame that states its size (librdkafka's, the zstd CLI's) is
    decompressed in one call into a buffer of that size: 20% less CPU than the streaming object
    (~200 against ~250 us per MB); one that does not (a streaming writer's: the Java client's
    zstd-jni) streams. A stated size is trusted only up to 32x the frame or 1 MiB, whichever is
    more (a tiny frame must not make us allocate what it claims); above that it streams too,
    which reads only what is there."""
    import zstandard
    size = zstandard.frame_content_size(data)
    if 0 <= size <= max(_ZSTD_ONE_SHOT_MIN, _ZSTD_ONE_SHOT_RATIO * len(data)):
        return _zstd()[1].decompress(data)
    return _zstd()[1].decompressobj().decompress(bytes(data))


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a records payload the way Kafka's Java producer does for the codec."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return gzip.compress(bytes(data), compresslevel=6 if level is None else level, mtime=0)
    if codec == COMPRESSION_SNAPPY:
        # xerial framing, as Kafka's Java client writes; every client reads it.
        snappy = _snappy()
        mv = memoryview(data)
        out = bytearray(_XERIAL_HEADER)
        for start in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(snappy.compress_raw(bytes(mv[start:start + _XERIAL_BLOCK])))
            out += struct.pack(">i", len(block))
            out += block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        frame = _lz4frame()
        return frame.compress(bytes(data), block_size=frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, store_size=False,
                              compression_level=0 if level is None else level)
    if codec == COMPRESSION_ZSTD:
        return _zstd_compressor(3 if level is None else level).compress(bytes(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data) -> bytes:
    """Decompress a records payload; snappy accepts both raw and xerial-framed input."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    try:
        if codec == COMPRESSION_GZIP:
            return zlib.decompress(bytes(data), 47)  # 32 + 15: gzip or zlib header, auto-detected
        if codec == COMPRESSION_SNAPPY:
            snappy = _snappy()
            raw = bytes(data)
            if raw[:8] != _XERIAL_MAGIC:
                return bytes(snappy.decompress_raw(raw))
            out = bytearray()
            pos = 16
            while pos < len(raw):
                (n,) = struct.unpack_from(">i", raw, pos)
                pos += 4
                out += bytes(snappy.decompress_raw(raw[pos:pos + n]))
                pos += n
            return bytes(out)
        if codec == COMPRESSION_LZ4:
            return _lz4frame().decompress(bytes(data))
        if codec == COMPRESSION_ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # every codec library raises its own types
        raise CorruptRecordError(f"cannot decompress {CODEC_NAMES.get(codec, codec)} payload: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


# ---------------------------------------------------------------------------------------------
# Records

class Record(NamedTuple):
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list = []
    attributes: int = 0


def records_payload(buf, pos: int, header: BatchHeader) -> bytes:
    """The (decompressed) bytes holding the batch's records."""
    start = pos + RECORDS_POS
    end = pos + header.size
    data = memoryview(buf)[start:end]
    if header.compression == COMPRESSION_NONE:
        return bytes(data)
    return decompress(header.compression, data)


def _within(n: int, p: int, rec_end: int, what: str) -> None:
    """A length field must stay inside its record: a huge or crafted one must not make the decoder
    slice past it (or walk backwards, looping for ever over a huge header count)."""
    if n > rec_end - p:
        raise CorruptRecordError(f"record {what} of {n} bytes runs past the record's end")


def _decode_record(data: bytes, p: int, end: int):
    length, p = _decode_varint(data, p)
    rec_end = p + length
    if length < 0 or rec_end > end:
        raise CorruptRecordError(f"record at {p} declares length {length}, past the batch end")
    attributes = data[p]
    p += 1
    ts_delta, p = _decode_varint(data, p)
    off_delta, p = _decode_varint(data, p)
    klen, p = _decode_varint(data, p)
    if klen >= 0:
        _within(klen, p, rec_end, "key")
        key = data[p:p + klen]
        p += klen
    else:
        key = None
    vlen, p = _decode_varint(data, p)
    if vlen >= 0:
        _within(vlen, p, rec_end, "value")
        value = data[p:p + vlen]
        p += vlen
    else:
        value = None
    hcount, p = _decode_varint(data, p)
    if hcount < 0 or hcount > rec_end - p:   # a header takes at least 2 bytes (Kafka: InvalidRecordException)
        raise CorruptRecordError(f"invalid number of record headers {hcount}")
    headers = []
    for _ in range(hcount):
        hklen, p = _decode_varint(data, p)
        if hklen < 0:
            raise CorruptRecordError(f"invalid negative header key size {hklen}")
        _within(hklen, p, rec_end, "header key")
        hkey = data[p:p + hklen].decode("utf-8", "replace")
        p += hklen
        hvlen, p = _decode_varint(data, p)
        if hvlen >= 0:
            _within(hvlen, p, rec_end, "header value")
            hval = data[p:p + hvlen]
            p += hvlen
        else:
            hval = None
        headers.append((hkey, hval))
    if p != rec_end:
        raise CorruptRecordError(f"record ends at {p}, its length says {rec_end}")
    return Record(off_delta, ts_delta, key, value, headers, attributes), rec_end


def decode_records(buf, pos: int, header: BatchHeader) -> list[Record]:
    """Every record of the batch at `pos`, decompressed; raises CorruptRecordError on bad bytes."""
    data = records_payload(buf, pos, header)
    out = []
    p = 0
    end = len(data)
    try:
        for _ in range(header.records_count):
            rec, p = _decode_record(data, p, end)
            out.append(rec)
    except IndexError:
        raise CorruptRecordError(f"batch at offset {header.base_offset} ends inside a record") from None
    if p != end:
        raise CorruptRecordError(f"batch at offset {header.base_offset} has {end - p} bytes after "
                                 f"its {header.records_count} records")
    return out


def iter_keys_offsets(buf, pos: int, header: BatchHeader) -> Iterator[tuple[int, bytes | None, bool]]:
    """(offset, key, is_tombstone) for each record: the cleaner's fast path (skips headers' content)."""
    data = records_payload(buf, pos, header)
    base = header.base_offset
    dv = _decode_varint
    p = 0
    for _ in range(header.records_count):
        length, p = dv(data, p)
        rec_end = p + length
        p += 1  # attributes
        _, p = dv(data, p)  # timestamp delta
        off_delta, p = dv(data, p)
        klen, p = dv(data, p)
        if klen >= 0:
            key = data[p:p + klen]
            p += klen
        else:
            key = None
        vlen, _ = dv(data, p)
        yield base + off_delta, key, vlen < 0
        p = rec_end


def encode_record(offset_delta: int, timestamp_delta: int, key, value, headers=(), attributes: int = 0) -> bytes:
    body = bytearray()
    body.append(attributes & 0xFF)
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    if key is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(key))
        body += key
    if value is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(value))
        body += value
    body += encode_varint(len(headers))
    for hkey, hval in headers:
        hk = hkey.encode("utf-8") if isinstance(hkey, str) else bytes(hkey)
        body += encode_varint(len(hk))
        body += hk
        if hval is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(hval))
            body += hval
    return encode_varint(len(body)) + bytes(body)


def build_batch(records: Sequence, *, base_offset: int = 0, compression: int = COMPRESSION_NONE,
                base_timestamp: int | None = None, timestamp_type: int = TIMESTAMP_CREATE_TIME,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, is_transactional: bool = False,
                is_control: bool = False, partition_leader_epoch: int = 0,
                delete_horizon_ms: int | None = None, max_timestamp: int | None = None,
                last_offset_delta: int | None = None, compression_level: int | None = None) -> bytes:
    """Build one v2 batch.

    `records` holds `Record`s (their deltas are kept: used when re-encoding a filtered batch) or
    tuples `(key, value[, headers[, timestamp_ms]])` (offset deltas 0..n-1; timestamps default to now).
    With `Record`s, `base_timestamp` must be given (the base their timestamp deltas refer to).
    `delete_horizon_ms` sets the KIP-534 flag; baseTimestamp becomes the horizon and record
    timestamp deltas are rebased so every record keeps its absolute timestamp.
    An empty `records` with `last_offset_delta` builds the empty batch the cleaner keeps to
    preserve a producer's last sequence.
    """
    now = int(time.time() * 1000)
    encoded: list[bytes] = []
    timestamps: list[int] = []
    deltas: list[int] = []
    if records and isinstance(records[0], Record):
        if base_timestamp is None:
            raise ValueError("build_batch with Record objects needs base_timestamp")
        for rec in records:
            timestamps.append(base_timestamp + rec.timestamp_delta)
            deltas.append(rec.offset_delta)
        items = [(r.key, r.value, r.headers, r.attributes) for r in records]
    else:
        items = []
        for i, rec in enumerate(records):
            key, value = rec[0], rec[1]
            headers = rec[2] if len(rec) > 2 and rec[2] is not None else []
            ts = rec[3] if len(rec) > 3 and rec[3] is not None else (base_timestamp if base_timestamp is not None else now)
            timestamps.append(ts)
            deltas.append(i)
            items.append((key, value, headers, 0))
    if delete_horizon_ms is not None:
        first_ts = delete_horizon_ms
    elif timestamps:
        first_ts = base_timestamp if (base_timestamp is not None and isinstance(records[0], Record)) else timestamps[0]
    else:
        first_ts = base_timestamp if base_timestamp is not None else NO_TIMESTAMP
    for (key, value, headers, attrs), ts, od in zip(items, timestamps, deltas):
        encoded.append(encode_record(od, ts - first_ts, key, value, headers, attrs))
    payload = b"".join(encoded)
    if compression != COMPRESSION_NONE:
        payload = compress(compression, payload, compression_level)
    if max_timestamp is None:
        max_timestamp = max(timestamps) if timestamps else first_ts
    if last_offset_delta is None:
        last_offset_delta = deltas[-1] if deltas else 0
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    total = BATCH_OVERHEAD + len(payload)
    buf = bytearray(total)
    _HEADER.pack_into(buf, 0, base_offset, total - LOG_OVERHEAD, partition_leader_epoch, CURRENT_MAGIC,
                      0, attributes, last_offset_delta, first_ts, max_timestamp, producer_id,
                      producer_epoch, base_sequence, len(items))
    buf[RECORDS_POS:] = payload
    _rewrite_crc(buf, 0, total)
    return bytes(buf)


def record_timestamp(header: BatchHeader, record: Record) -> int:
    """A record's timestamp as a consumer sees it (LogAppendTime batches use maxTimestamp)."""
    if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        return header.max_timestamp
    base = header.base_timestamp
    return base + record.timestamp_delta
