"""Records of transactions: `__transaction_state` keys and values, and end-transaction markers.

Role: sans-io codecs, bytes in and dicts out, in Apache Kafka 4's formats, so Kafka's tools read
our logs (kafka-dump-log.sh --transaction-log-decoder) and we read theirs.

`__transaction_state` (compacted; one record per transactional id, the latest wins; a null
value is a tombstone written when the id expires). Key and value start with an int16 version
(transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json):

    TransactionLogKey (version 0)
        int16  version             0
        STRING transactional_id    int16 length + UTF-8
    TransactionLogValue version 0 (what Kafka writes while transaction.version is 0)
        int16  version             0
        int64  producer_id
        int16  producer_epoch
        int32  transaction_timeout_ms
        int8   transaction_status  0 Empty 1 Ongoing 2 PrepareCommit 3 PrepareAbort
                                   4 CompleteCommit 5 CompleteAbort 6 Dead 7 PrepareEpochFence
        ARRAY  transaction_partitions (int32 count, -1 = null: written null in state Empty) of
               STRING topic, ARRAY int32 partition_ids
        int64  transaction_last_update_timestamp_ms
        int64  transaction_start_timestamp_ms   (-1 when no transaction is running)
    TransactionLogValue version 1 (what Kafka writes once transaction.version is 1 or 2: flexible,
    compact strings/arrays, length + 1 as an unsigned varint, 0 = null; each partitions entry and
    the value end with a tagged-field section) adds tagged fields, each written only when not
    its default, in tag order (uvarint tag, uvarint size, the bytes):
        tag 0 previous_producer_id int64 (default -1), tag 1 next_producer_id int64 (default -1),
        tag 2 client_transaction_version int16 (default 0).

End-transaction marker: a control batch (attributes: transactional + control; producer id and
epoch of the transaction; base sequence -1; uncompressed) holding one record:

    key    int16 version 0, int16 type (0 ABORT, 1 COMMIT)        (ControlRecordType)
    value  int16 version 0, int32 coordinator_epoch               (EndTransactionMarker)

Both are written once or more per transaction, so they are built here by hand
(`state_batch`, `marker_batch`: one record, uncompressed, the header packed in one call), byte for
byte what `records.build_batch` makes of the same record (tests compare the two).

Invariants: `decode(encode(x)) == x`; truncated or trailing bytes raise TxnRecordError.
"""
from __future__ import annotations

import struct
from typing import Any

import crc32c as _crc32c

from kompakt.protocol import records as R
from kompakt.protocol.codec import write_uvarint
from kompakt.protocol.group_records import GroupRecordError, _Reader, partition_for

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
MAX_VALUE_VERSION = 1

# TransactionState ids (Kafka's TransactionState.fromId)
STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
               "CompleteAbort", "Dead", "PrepareEpochFence")

ABORT = 0
COMMIT = 1
CONTROL_KEY = struct.Struct(">hh")
MARKER_VALUE = struct.Struct(">hi")
_I8 = struct.Struct(">b")
# TransactionLogValue v0 up to its partitions array, and after it
_VALUE_HEAD = struct.Struct(">hqhib")
_VALUE_TAIL = struct.Struct(">qq")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ONE_RECORD_HEAD = struct.Struct(R.HEADER_FORMAT)
assert _ONE_RECORD_HEAD.size == R.BATCH_OVERHEAD

__all__ = ["TRANSACTION_STATE_TOPIC", "TxnRecordError", "partition_for", "encode_key", "decode_key",
           "encode_value", "decode_value", "state_batch", "marker_batch", "decode_marker", "STATE_NAMES",
           "ABORT", "COMMIT"]


class TxnRecordError(GroupRecordError):
    """Bytes that are not a valid transaction-state key/value or end-transaction marker."""


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _short_string(transactional_id)


def _short_string(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise TxnRecordError(f"string of {len(data)} bytes exceeds 32767")
    return _I16.pack(len(data)) + data


def decode_key(data: bytes) -> dict[str, Any]:
    """{"version", "transactional_id"}; an unknown key version gives transactional_id None
    (Kafka's UnknownKey: skipped on load)."""
    r = _Reader(data)
    version = r.i16()
    if version != KEY_VERSION:
        return {"version": version, "transactional_id": None}
    tid = r.string()
    r.end()
    return {"version": version, "transactional_id": tid}


def encode_value(*, producer_id: int, producer_epoch: int, timeout_ms: int, state: int,
                 partitions: dict[str, list[int]] | None, last_update_ms: int,
                 start_ms: int, version: int = VALUE_VERSION, previous_producer_id: int = -1,
                 next_producer_id: int = -1, client_transaction_version: int = 0) -> bytes:
    """Version 0 (the tagged fields are not in it) or 1. `partitions` (topic -> partition
    ids) must be None or empty in state Empty."""
    if state == 0 and partitions:
        raise TxnRecordError(f"a transaction in state Empty has no partitions, got {partitions}")
    if state == 0:
        partitions = None
    if version == 1:
        return _encode_value_v1(producer_id, producer_epoch, timeout_ms, state, partitions, last_update_ms,
                                start_ms, previous_producer_id, next_producer_id, client_transaction_version)
    if version != 0:
        raise TxnRecordError(f"Unknown version {version} for the transaction log message value")
    parts = [_VALUE_HEAD.pack(0, producer_id, producer_epoch, timeout_ms, state)]
    if partitions is None:
        parts.append(_I32.pack(-1))
    else:
        parts.append(_I32.pack(len(partitions)))
        for topic, ids in partitions.items():
            parts.append(_short_string(topic))
            parts.append(struct.pack(f">i{len(ids)}i", len(ids), *ids))
    parts.append(_VALUE_TAIL.pack(last_update_ms, start_ms))
    return b"".join(parts)


def _encode_value_v1(producer_id, producer_epoch, timeout_ms, state, partitions, last_update_ms, start_ms,
                     previous_producer_id, next_producer_id, client_transaction_version) -> bytes:
    # packed by hand like v0 (three of these per transaction): compact lengths are length + 1
    out = bytearray(_VALUE_HEAD.pack(1, producer_id, producer_epoch, timeout_ms, state))
    if partitions is None:
        out.append(0)                                   # null array
    else:
        write_uvarint(out, len(partitions) + 1)
        for topic, ids in partitions.items():
            data = topic.encode("utf-8")
            if len(data) > 0x7FFF:
                raise TxnRecordError(f"string of {len(data)} bytes exceeds 32767")
            write_uvarint(out, len(data) + 1)
            out += data
            write_uvarint(out, len(ids) + 1)
            out += struct.pack(f">{len(ids)}i", *ids)
            out.append(0)                               # the entry's tagged fields: none
    out += _VALUE_TAIL.pack(last_update_ms, start_ms)
    tagged = []
    if previous_producer_id != -1:
        tagged.append(b"\x00\x08" + _I64.pack(previous_producer_id))
    if next_producer_id != -1:
        tagged.append(b"\x01\x08" + _I64.pack(next_producer_id))
    if client_transaction_version != 0:
        tagged.append(b"\x02\x02" + _I16.pack(client_transaction_version))
    out.append(len(tagged))
    for field in tagged:
        out += field
    return bytes(out)


def decode_value(data: bytes | None) -> dict[str, Any] | None:
    """None for a tombstone; versions 0 and 1."""
    if data is None:
        return None
    try:
        return _decode_value(data)
    except GroupRecordError as exc:
        raise TxnRecordError(str(exc)) from None


def _decode_value(data: bytes) -> dict[str, Any]:
    r = _Reader(data)
    version = r.i16()
    if version < 0 or version > MAX_VALUE_VERSION:
        raise TxnRecordError(f"Unknown version {version} from the transaction log message value")
    r.flexible = version >= 1
    out: dict[str, Any] = {"version": version, "producer_id": r.i64(), "previous_producer_id": -1,
                           "next_producer_id": -1, "client_transaction_version": 0}
    out["producer_epoch"] = r.i16()
    out["timeout_ms"] = r.i32()
    state = _I8.unpack(r._take(1))[0]
    if not 0 <= state < len(STATE_NAMES):
        raise TxnRecordError(f"Unknown transaction state id {state} from the transaction status message")
    out["state"] = state
    n = r._length(wide=True)
    partitions: dict[str, list[int]] = {}
    for _ in range(max(n, 0)):
        topic = r.string()
        ids = [r.i32() for _ in range(r.array_len())]
        r.tagged_fields()
        partitions.setdefault(topic, []).extend(ids)
    out["partitions"] = partitions
    out["last_update_ms"] = r.i64()
    out["start_ms"] = r.i64()
    if r.flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            raw = bytes(r._take(size))
            if tag == 0 and size == 8:
                out["previous_producer_id"] = struct.unpack(">q", raw)[0]
            elif tag == 1 and size == 8:
                out["next_producer_id"] = struct.unpack(">q", raw)[0]
            elif tag == 2 and size == 2:
                out["client_transaction_version"] = struct.unpack(">h", raw)[0]
    r.end()
    return out


# ---------------------------------------------------------------------------------------------
# End-transaction markers
# ---------------------------------------------------------------------------------------------

def marker_batch(producer_id: int, producer_epoch: int, control_type: int, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """A COMMIT/ABORT control batch as Kafka's MemoryRecords.withEndTransactionMarker builds it
    (base offset 0: the log assigns it)."""
    if control_type not in (ABORT, COMMIT):
        raise ValueError(f"Invalid control record type for end transaction marker {control_type}")
    return _one_record_batch(CONTROL_KEY.pack(0, control_type), MARKER_VALUE.pack(0, coordinator_epoch),
                             timestamp_ms, producer_id, producer_epoch,
                             R.TRANSACTIONAL_MASK | R.CONTROL_MASK)


def state_batch(transactional_id: str, value: bytes | None, timestamp_ms: int) -> bytes:
    """The `__transaction_state` batch of one record (key of `transactional_id`, `value` from
    encode_value, None = tombstone), as Kafka's TransactionStateManager writes it: no producer
    id, CreateTime `timestamp_ms`."""
    return _one_record_batch(encode_key(transactional_id), value, timestamp_ms, -1, -1, 0)


def _varint(n: int) -> bytes:
    """Zigzag varint of a length (-1 for null)."""
    return R.encode_varint(n)


def _one_record_batch(key: bytes, value: bytes | None, timestamp_ms: int, producer_id: int,
                      producer_epoch: int, attributes: int) -> bytes:
    """A v2 batch of one uncompressed record (deltas 0, no headers), base sequence -1."""
    body = b"".join((b"\x00\x00\x00", _varint(len(key)), key,        # attributes, deltas 0, 0
                     b"\x01" if value is None else _varint(len(value)), value or b"", b"\x00"))
    record = _varint(len(body)) + body
    total = R.BATCH_OVERHEAD + len(record)
    buf = bytearray(total)
    _ONE_RECORD_HEAD.pack_into(buf, 0, 0, total - R.LOG_OVERHEAD, 0, R.CURRENT_MAGIC, 0, attributes, 0,
                               timestamp_ms, timestamp_ms, producer_id, producer_epoch, -1, 1)
    buf[R.RECORDS_POS:] = record
    struct.pack_into(">I", buf, R.CRC_POS, _crc32c.crc32c(memoryview(buf)[R.ATTRIBUTES_POS:]))
    return bytes(buf)


def decode_marker(buf, pos: int, header: R.BatchHeader) -> tuple[int, int] | None:
    """(type, coordinator epoch) of a control batch holding an end-transaction marker; None for
    an empty control batch (a marker the cleaner emptied) or another control record type."""
    if header.records_count <= 0:
        return None
    if header.compression == R.COMPRESSION_NONE:
        key, value = _first_record(buf, pos + R.RECORDS_POS, pos + header.size)
    else:
        recs = R.decode_records(buf, pos, header)
        key, value = (recs[0].key, recs[0].value) if recs else (None, None)
    if key is None or len(key) < CONTROL_KEY.size:
        return None
    _, ctype = CONTROL_KEY.unpack_from(key)
    if ctype not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < MARKER_VALUE.size:
        raise TxnRecordError(f"Invalid value size found for end transaction marker at offset "
                             f"{header.base_offset}")
    return ctype, MARKER_VALUE.unpack_from(value)[1]


def _first_record(buf, pos: int, end: int) -> tuple[bytes | None, bytes | None]:
    """(key, value) of the uncompressed record at `pos` (every marker is checked on append:
    this skips decode_records' general path). Lengths running past `end` raise TxnRecordError."""
    try:
        dv = R.decode_varint
        _, p = dv(buf, pos)                 # record length
        _, p = dv(buf, p + 1)               # attributes, timestamp delta
        _, p = dv(buf, p)                   # offset delta
        klen, p = dv(buf, p)
        key = bytes(buf[p:p + klen]) if klen >= 0 else None
        p += max(klen, 0)
        vlen, p = dv(buf, p)
        value = bytes(buf[p:p + vlen]) if vlen >= 0 else None
        p += max(vlen, 0)
    except IndexError:
        p = end + 1
    if p > end:
        raise TxnRecordError(f"control record at {pos} runs past the end of its batch")
    return key, value
