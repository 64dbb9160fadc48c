"""The per-batch seam of the cleaner: index a batch into the offset map, filter a batch.

Role: every piece of per-record work in a clean goes through the two functions here (plus the
map's `put_many` / `get_many`): scanning a batch's keys and offsets, hashing keys, map insert and
lookup, and writing the retained records of a batch. Everything above works on whole batches and
files. A compiled implementation can replace this module (and `offset_map.SkimpyOffsetMap`)
without touching `cleaner.py`: same signatures, same results, byte for byte.

Why hand-written parsing: Kafka's record layout (see kompakt.protocol.records) needs a varint
walk per record; a generic decoder builds a Record object per record, this one only keeps slices
of the batch bytes and inlines the one- and two-byte varint cases that make up nearly every record.

Rules (Kafka's Cleaner.shouldRetainRecord and MemoryRecords.filterTo, decided per record by
`rules.record_fate`, the batch's tombstones by `rules.tombstones_removable`):
  * offset > map.latest_offset                    -> retain (past the mapped range of this pass)
  * no key                                         -> drop, counted as invalid (keyless)
  * offset < map.get(key)                          -> drop (a later record has the key)
  * value null and batch horizon passed and the
    batch ends below the group-safe horizon offset -> drop (tombstone past delete.retention.ms)
  * otherwise                                      -> retain
A batch whose records are all retained and that needs no delete horizon is written byte for byte.
A rebuilt batch keeps base offset, last offset delta (so the batch still covers the producer's
sequence range), producer id/epoch/base sequence, leader epoch and codec (unless the topic's
compression.type names another codec: then a batch that had to be rebuilt takes that codec, and a
batch with nothing removed is still copied unchanged; a batch left with no records is written
uncompressed, like Kafka's writeEmptyHeader); its max timestamp is the largest retained timestamp
(CREATE_TIME) or the original (LOG_APPEND_TIME). A batch left with no records (or already
empty, kept by an earlier clean) goes unless retain_empty (Kafka's DELETE_EMPTY / RETAIN_EMPTY).
A batch that keeps tombstones (or is a marker that
may later go) and has no delete horizon is stamped (KIP-534): attribute bit 6 and baseTimestamp =
now + delete.retention.ms, record timestamp deltas rewritten against the new base.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import struct

import crc32c as _crc32c

from kompakt.cleaner import native as _native
from kompakt.cleaner import rules
from kompakt.protocol.records import CorruptRecordError, compress, decode_varint, decompress, encode_varint
# the batch header and attribute bits are protocol/records.py's; named here too for the cleaner's
# modules, which take them from batch_ops
from kompakt.protocol.records import BATCH_OVERHEAD as HEADER_SIZE, HEADER_FORMAT
from kompakt.protocol.records import COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK
from kompakt.protocol.records import TRANSACTIONAL_MASK  # noqa: F401 (not used here; named for the others)

HEADER = struct.Struct(HEADER_FORMAT)
assert HEADER.size == HEADER_SIZE
_CRC_PART = struct.Struct(">hiqqqhii")   # attributes .. recordsCount, the start of the CRC range
assert _CRC_PART.size == HEADER_SIZE - 21
_PREFIX = struct.Struct(">qiib")         # baseOffset, batchLength, leaderEpoch, magic

# indexes into a HEADER tuple
H_BASE_OFFSET, H_LENGTH, H_EPOCH, H_MAGIC, H_CRC, H_ATTRS, H_LAST_DELTA, H_BASE_TS, H_MAX_TS, \
    H_PID, H_PEPOCH, H_BASE_SEQ, H_COUNT = range(13)

_md5 = hashlib.md5
_LIB = _native.LIB          # the compiled seam, or None (pure Python below)
_INT64_MIN = -(2**63)


def implementation() -> str:
    return "native" if _LIB is not None else "python"


# Zigzag varint at p -> (value, next position): the general case of the inline fast paths below,
# protocol/records.py's decoder (its CorruptRecordError is a ValueError, which _parse_guard turns
# into CorruptBatchError).
_varint_slow = decode_varint


def records_of(batch: bytes, hdr) -> bytes:
    """The decompressed records payload of a batch (the batch bytes themselves when uncompressed)."""
    codec = hdr[H_ATTRS] & COMPRESSION_MASK
    if codec == 0:
        return batch
    if len(batch) == HEADER_SIZE:     # an empty batch with the codec bit (written before it was cleared)
        return b""
    try:
        return decompress(codec, memoryview(batch)[HEADER_SIZE:])
    except CorruptRecordError as exc:  # an unknown codec or bytes that do not decompress
        raise CorruptBatchError(f"batch at offset {hdr[H_BASE_OFFSET]}: {exc}") from exc


def walk_headers(buf, pos: int, end: int):
    """(position, header tuple) of each complete batch of buf[pos, end), in order; stops at the
    first batch length that is below a header or runs past `end`."""
    unpack = HEADER.unpack_from
    while end - pos >= HEADER_SIZE:
        h = unpack(buf, pos)
        size = h[H_LENGTH] + 12
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, h
        pos += size


class CorruptBatchError(ValueError):
    """A batch whose CRC does not match or whose records do not parse: the clean stops and the
    partition becomes uncleanable."""


def _parse_guard(fn):
    """Records that do not parse (a length past its record or batch, fewer records than the header
    counts, an endless varint, bytes that do not decompress) raise CorruptBatchError, as native.c's
    -1 does, instead of an IndexError or a silent read into the next record."""
    @functools.wraps(fn)
    def guarded(batch, hdr, *args):
        try:
            return fn(batch, hdr, *args)
        except CorruptBatchError:
            raise
        except (IndexError, ValueError, struct.error) as exc:
            raise CorruptBatchError(f"batch at offset {hdr[H_BASE_OFFSET]} does not hold {hdr[H_COUNT]} "
                                    f"valid records ({exc})") from exc
    return guarded


def _corrupt(hdr):
    return CorruptBatchError(f"batch at offset {hdr[H_BASE_OFFSET]} does not hold {hdr[H_COUNT]} valid records")


def verify_crc(batch, hdr, where: str = "") -> None:
    """CRC-32C of [attributes, end) against the header: a clean never copies corrupt bytes on."""
    if _crc32c.crc32c(memoryview(batch)[21:]) != hdr[H_CRC]:
        raise CorruptBatchError(f"batch at offset {hdr[H_BASE_OFFSET]}{where} fails its CRC check "
                                "(corrupt segment; the partition is marked uncleanable)")


# ---------------------------------------------------------------------------------------------
# Pass 1: index

def index_batch(batch: bytes, hdr, offset_map, start_offset: int, limit: int) -> tuple[int, int, bool]:
    """Put (MD5(key), offset) of each keyed record at or past start_offset into the map.

    Returns (records read, keyless records, full). `full` means the map reached `limit` entries
    before a record of this batch: the records up to it were put, `map.latest_offset` is the last
    mapped offset, and the clean covers only up to there (Kafka's partial pass).
    """
    if _LIB is None:
        return _py_index_batch(batch, hdr, offset_map, start_offset, limit)
    data = records_of(batch, hdr)
    io = offset_map.native_io
    io[0] = offset_map.size
    io[1] = offset_map.latest_offset
    io[2] = io[3] = io[4] = 0
    rc = _LIB.km_index(data, len(data), HEADER_SIZE if data is batch else 0, hdr[H_COUNT], hdr[H_BASE_OFFSET],
                       start_offset, offset_map.address, offset_map.slots, limit, io)
    if rc < 0:
        raise _corrupt(hdr)
    offset_map.size = io[0]
    offset_map.latest_offset = io[1]
    offset_map.probes += io[3]
    offset_map.lookups += io[4]
    return hdr[H_COUNT], io[2], rc == 1


@_parse_guard
def _py_index_batch(batch: bytes, hdr, offset_map, start_offset: int, limit: int) -> tuple[int, int, bool]:
    data = records_of(batch, hdr)
    p = HEADER_SIZE if data is batch else 0
    base = hdr[H_BASE_OFFSET]
    count = hdr[H_COUNT]
    digests = []
    offsets = []
    dappend = digests.append
    oappend = offsets.append
    keyless = 0
    for _ in range(count):
        # length
        b = data[p]
        if b < 0x80:
            ln = (b >> 1) ^ -(b & 1)       # zigzag: an odd byte is a negative length (corrupt below)
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                ln = (b & 0x7F) | (b2 << 7)
                ln = (ln >> 1) ^ -(ln & 1)
                p += 2
            else:
                ln, p = _varint_slow(data, p)
        rec_end = p + ln
        if ln < 1 or rec_end > len(data):
            raise _corrupt(hdr)
        q = p + 1                      # attributes byte
        while data[q] >= 0x80:         # timestampDelta: skipped in pass 1
            q += 1
        q += 1
        b = data[q]                    # offsetDelta (two bytes from 64 on)
        if b < 0x80:
            od = (b >> 1) ^ -(b & 1)
            q += 1
        elif data[q + 1] < 0x80:
            od = (b & 0x7F) | (data[q + 1] << 7)
            od = (od >> 1) ^ -(od & 1)
            q += 2
        else:
            od, q = _varint_slow(data, q)
        b = data[q]                    # keyLength
        if b < 0x80:
            kl = (b >> 1) ^ -(b & 1)
            q += 1
        else:
            kl, q = _varint_slow(data, q)
        if q + max(kl, 0) > rec_end:
            raise _corrupt(hdr)
        if kl >= 0:
            off = base + od
            if off >= start_offset:
                dappend(_md5(data[q:q + kl]).digest())
                oappend(off)
        else:
            keyless += 1
        p = rec_end
    if p != len(data):                 # bytes left over after `count` records
        raise _corrupt(hdr)
    put = offset_map.put_many(digests, offsets, limit)
    if put < len(digests):
        return count, keyless, True
    return count, keyless, False


# ---------------------------------------------------------------------------------------------
# Pass 2: filter

class FilterResult:
    """What filter_batch did with one batch. `output` is None when the batch is dropped."""

    __slots__ = ("output", "read", "retained", "tombstones", "keyless", "copied", "stamped", "held")

    def __init__(self, output, read, retained, tombstones, keyless, copied, stamped, held=0):
        self.output = output
        self.read = read
        self.retained = retained
        self.tombstones = tombstones   # tombstones retained
        self.keyless = keyless         # keyless records dropped
        self.copied = copied           # True when output is the input batch byte for byte
        self.stamped = stamped         # True when a delete horizon was stamped in this pass
        self.held = held               # tombstones retained only because of the group-safe horizon


def build_header_bytes(base_offset: int, leader_epoch: int, attrs: int, last_delta: int,
                       base_ts: int, max_ts: int, pid: int, pepoch: int, base_seq: int,
                       count: int, payload) -> bytes:
    """A complete batch: header with CRC-32C over [attributes, end) followed by payload."""
    crc_part = _CRC_PART.pack(attrs, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count)
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(crc_part))
    length = HEADER_SIZE - 12 + len(payload)
    return _PREFIX.pack(base_offset, length, leader_epoch, 2) + struct.pack(">I", crc) + crc_part + bytes(payload)


def filter_batch(batch: bytes, hdr, offset_map, now_ms: int, delete_retention_ms: int, *,
                 discard_records: bool = False, retain_empty: bool = False,
                 stamp_marker: bool = False, target_codec: int | None = None,
                 group_horizon_offset: int = rules.NO_GROUP_HORIZON) -> FilterResult:
    """Decide each record of a data batch (control batches: pass discard_records / stamp_marker).

    discard_records: drop every record (aborted transaction data, or a marker past its horizon
    whose transaction has no records left). retain_empty: keep the batch even with no records
    (last batch of an active producer, last batch before the first uncleanable offset).
    stamp_marker: a control batch that may be removed once its horizon passes gets one now.
    group_horizon_offset: tombstones of a batch ending at or past it stay (rules.tombstones_removable).
    """
    attrs = hdr[H_ATTRS]
    count = hdr[H_COUNT]
    has_horizon = bool(attrs & DELETE_HORIZON_MASK)
    base_ts = hdr[H_BASE_TS]
    if discard_records:   # data or control batch alike
        if retain_empty:
            return FilterResult(_rebuild(batch, hdr, b"", 0, attrs, base_ts, hdr[H_MAX_TS]),
                                count, 0, 0, 0, False, False)
        return FilterResult(None, count, 0, 0, 0, False, False)
    if attrs & CONTROL_MASK:
        if stamp_marker and not has_horizon:
            horizon = rules.delete_horizon(now_ms, delete_retention_ms)
            data = records_of(batch, hdr)
            recs, max_ts = _restamp_all(data, 0 if data is not batch else HEADER_SIZE, count, base_ts, horizon)
            out = _rebuild(batch, hdr, recs, count, attrs | DELETE_HORIZON_MASK, horizon, hdr[H_MAX_TS],
                           target_codec)
            return FilterResult(out, count, count, 0, 0, False, True)
        return FilterResult(batch, count, count, 0, 0, True, False)

    # The compiled filter probes the MD5 map's buffer itself; maps without one (the pipeline's
    # exact map) answer through get_many in the Python filter.
    last = hdr[H_BASE_OFFSET] + hdr[H_LAST_DELTA]
    removable = rules.tombstones_removable(has_horizon, base_ts, last, now_ms, group_horizon_offset)
    held = rules.held_back(has_horizon, base_ts, last, now_ms, group_horizon_offset)
    if _LIB is not None and getattr(offset_map, "address", None) is not None:
        res = _native_filter(batch, hdr, offset_map, removable, retain_empty, target_codec)
    else:
        res = None
    if res is None:
        res = _py_filter_records(batch, hdr, offset_map, now_ms, delete_retention_ms, removable, retain_empty,
                                 target_codec)
    if held:
        res.held = res.tombstones
    return res


_OUT = [None, 0]   # a reusable output buffer for the compiled filter: [ctypes buffer, size]


def _native_filter(batch, hdr, offset_map, removable, retain_empty, target_codec):
    """The compiled filter; None when the batch needs a delete horizon stamped (Python does that)."""
    attrs = hdr[H_ATTRS]
    count = hdr[H_COUNT]
    has_horizon = bool(attrs & DELETE_HORIZON_MASK)
    base_ts = hdr[H_BASE_TS]
    data = records_of(batch, hdr)
    p = HEADER_SIZE if data is batch else 0
    if _OUT[1] < len(data):
        _OUT[1] = max(len(data), 1 << 20)
        _OUT[0] = ctypes.create_string_buffer(_OUT[1])
    out = _OUT[0]
    io = offset_map.native_io
    io[5] = 0
    rc = _LIB.km_filter(data, len(data), p, count, hdr[H_BASE_OFFSET], offset_map.address, offset_map.slots,
                        offset_map.latest_offset, 1 if removable else 0, out, io)
    if rc < 0:
        raise _corrupt(hdr)
    kept, tombstones, keyless, maxtd, outlen = io[0], io[1], io[2], io[3], io[4]
    offset_map.probes += io[5]
    offset_map.lookups += count
    if tombstones > 0 and not has_horizon:
        return None
    if kept == 0 and not retain_empty:   # an already empty batch too (Kafka's DELETE_EMPTY)
        return FilterResult(None, count, 0, 0, keyless, False, False)
    if kept == count:   # nothing removed: the batch byte for byte, whatever compression.type says
        return FilterResult(batch, count, count, tombstones, 0, True, False)
    payload = ctypes.string_at(out, outlen)
    if kept and not (attrs & TIMESTAMP_TYPE_MASK):
        max_ts = base_ts + maxtd
    else:
        max_ts = hdr[H_MAX_TS]
    return FilterResult(_rebuild(batch, hdr, payload, kept, attrs, base_ts, max_ts, target_codec),
                        count, kept, tombstones, keyless, False, False)



@_parse_guard
def _py_filter_records(batch, hdr, offset_map, now_ms, delete_retention_ms, removable, retain_empty,
                       target_codec):
    attrs = hdr[H_ATTRS]
    count = hdr[H_COUNT]
    has_horizon = bool(attrs & DELETE_HORIZON_MASK)
    base_ts = hdr[H_BASE_TS]
    data = records_of(batch, hdr)
    p = HEADER_SIZE if data is batch else 0
    base = hdr[H_BASE_OFFSET]
    latest = offset_map.latest_offset
    # per record: start, end, position after timestampDelta, timestampDelta, offset, digest|None, tombstone
    starts = []
    ends = []
    after_ts = []
    ts_deltas = []
    offs = []
    digests = []
    tomb = []
    keyless_idx = []
    for i in range(count):
        start = p
        b = data[p]
        if b < 0x80:
            ln = (b >> 1) ^ -(b & 1)       # zigzag: an odd byte is a negative length (corrupt below)
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                ln = (b & 0x7F) | (b2 << 7)
                ln = (ln >> 1) ^ -(ln & 1)
                p += 2
            else:
                ln, p = _varint_slow(data, p)
        rec_end = p + ln
        if ln < 1 or rec_end > len(data):
            raise _corrupt(hdr)
        q = p + 1
        b = data[q]                    # timestampDelta
        if b < 0x80:
            td = (b >> 1) ^ -(b & 1)
            q += 1
        else:
            td, q = _varint_slow(data, q)
        aq = q
        b = data[q]                    # offsetDelta (two bytes from 64 on)
        if b < 0x80:
            od = (b >> 1) ^ -(b & 1)
            q += 1
        elif data[q + 1] < 0x80:
            od = (b & 0x7F) | (data[q + 1] << 7)
            od = (od >> 1) ^ -(od & 1)
            q += 2
        else:
            od, q = _varint_slow(data, q)
        b = data[q]                    # keyLength
        if b < 0x80:
            kl = (b >> 1) ^ -(b & 1)
            q += 1
        else:
            kl, q = _varint_slow(data, q)
        starts.append(start)
        ends.append(rec_end)
        after_ts.append(aq)
        ts_deltas.append(td)
        offs.append(base + od)
        if q + max(kl, 0) >= rec_end:  # the key and at least the valueLength byte lie in the record
            raise _corrupt(hdr)
        if data[q + max(kl, 0)] >= 0x80 and _varint_slow(data, q + max(kl, 0))[1] > rec_end:
            raise _corrupt(hdr)              # a valueLength running out of its record (as native.c)
        if kl >= 0:
            digests.append(_md5(data[q:q + kl]).digest())
            q += kl
            tomb.append((data[q] & 1) == 1)  # valueLength < 0 (null value): zigzag puts the sign in bit 0
        else:
            digests.append(None)
            tomb.append(False)
            keyless_idx.append(i)
        p = rec_end
    if p != len(data):                 # bytes left over after `count` records
        raise _corrupt(hdr)

    found = offset_map.get_many([d for d in digests if d is not None]) if digests else []
    keep = []
    keyless = 0
    tombstones = 0
    fi = 0
    fate_of = rules.record_fate
    for i in range(count):
        d = digests[i]
        f = -1
        if d is not None:
            f = found[fi]
            fi += 1
        fate = fate_of(offs[i], latest, d is not None, f, tomb[i], removable)
        if fate == rules.KEEP:
            keep.append(i)
            if tomb[i]:
                tombstones += 1
        elif fate == rules.DROP_KEYLESS:
            keyless += 1

    need_stamp = tombstones > 0 and not has_horizon
    kept = len(keep)
    if kept == 0 and not retain_empty:     # an already empty batch too (Kafka's DELETE_EMPTY)
        return FilterResult(None, count, 0, 0, keyless, False, False)
    if kept == count and not need_stamp:   # byte for byte, whatever compression.type says
        return FilterResult(batch, count, count, tombstones, 0, True, False)

    ts_create = not (attrs & TIMESTAMP_TYPE_MASK)
    if need_stamp:
        horizon = rules.delete_horizon(now_ms, delete_retention_ms)
        parts = []
        max_ts = -1
        for i in keep:
            ts = base_ts + ts_deltas[i]
            if ts > max_ts:
                max_ts = ts
            body = b"\x00" + encode_varint(ts - horizon) + data[after_ts[i]:ends[i]]
            parts.append(encode_varint(len(body)))
            parts.append(body)
        payload = b"".join(parts)
        new_attrs = attrs | DELETE_HORIZON_MASK
        new_base_ts = horizon
    else:
        payload = b"".join([data[starts[i]:ends[i]] for i in keep])
        max_ts = max(base_ts + ts_deltas[i] for i in keep) if keep else -1
        new_attrs = attrs
        new_base_ts = base_ts
    if not ts_create or kept == 0:
        max_ts = hdr[H_MAX_TS]
    out = _rebuild(batch, hdr, payload, kept, new_attrs, new_base_ts, max_ts, target_codec)
    return FilterResult(out, count, kept, tombstones, keyless, False, need_stamp)


def _restamp_all(data, p: int, count: int, base_ts: int, horizon: int):
    """Re-encode every record of a batch against a new base timestamp; (payload, max_ts)."""
    parts = []
    max_ts = -1
    for _ in range(count):
        ln, p = _varint_slow(data, p)
        rec_end = p + ln
        td, q = _varint_slow(data, p + 1)
        ts = base_ts + td
        max_ts = max(max_ts, ts)
        body = b"\x00" + encode_varint(ts - horizon) + bytes(data[q:rec_end])
        parts.append(encode_varint(len(body)))
        parts.append(body)
        p = rec_end
    return b"".join(parts), max_ts


def _rebuild(batch, hdr, payload, count: int, attrs: int, base_ts: int, max_ts: int,
             target_codec: int | None = None) -> bytes:
    codec = attrs & COMPRESSION_MASK
    if target_codec is not None and target_codec != codec and not attrs & CONTROL_MASK:
        attrs = (attrs & ~COMPRESSION_MASK) | target_codec
        codec = target_codec
    if not payload:
        # nothing to compress: compression none, like Kafka's writeEmptyHeader (a codec bit over an
        # empty payload is a stream no decompressor accepts)
        attrs &= ~COMPRESSION_MASK
    elif codec:
        payload = compress(codec, payload)
    return build_header_bytes(hdr[H_BASE_OFFSET], hdr[H_EPOCH], attrs, hdr[H_LAST_DELTA], base_ts,
                              max_ts, hdr[H_PID], hdr[H_PEPOCH], hdr[H_BASE_SEQ], count, payload)


# ---------------------------------------------------------------------------------------------
# Control batches

@_parse_guard
def control_type(batch: bytes, hdr) -> int:
    """The marker type of a control batch: 0 ABORT, 1 COMMIT (key: version int16, type int16);
    -1 for an unknown type or an emptied marker (count 0: a marker a clean already removed and kept
    only as its producer's last batch; Kafka treats it as already cleaned)."""
    if hdr[H_COUNT] <= 0:
        return -1
    data = records_of(batch, hdr)
    p = HEADER_SIZE if data is batch else 0
    ln, p = _varint_slow(data, p)
    _, q = _varint_slow(data, p + 1)    # timestampDelta
    _, q = _varint_slow(data, q)        # offsetDelta
    kl, q = _varint_slow(data, q)
    if ln < 1 or p + ln > len(data) or q + max(kl, 0) > p + ln:
        raise _corrupt(hdr)
    if kl < 4:
        return -1
    return struct.unpack_from(">h", data, q + 2)[0]
