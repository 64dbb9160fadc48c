"""LogValidator's per-record checks: compiled (kompakt/native/records.c) or this pure-Python reference.

Role: the per-record half of validating a produced batch, for the batches whose records must be
read (compacted topics need a key on every record; CreateTime topics with a finite
message.timestamp.before.max.ms check every timestamp). `check(data, pos, count, ...)` walks the
records in data[pos:] without copying them and answers a `Check` (status, index, detail,
nonsequential); `error_for(...)` turns a failed check into the KafkaError the produce response
carries: as Kafka's LogValidator, every rejected record is listed (`record_errors`, found by
`all_record_errors`, the pure-Python walk, on the error path only) under Kafka's summary message. Both implementations give the same `Check` for every input (tests/storage/
test_record_check.py compares them over every codec, random and corrupt batches); `_LIB` selects
(None: Python), tests set it.

Record layout and rules: see the header comment of kompakt/native/records.c (Kafka's
DefaultRecord: var32 = at most 5 bytes kept to 32 bits, var64 = at most 10 bytes kept to 64 bits;
a record's fields end exactly at its declared size; no byte after `count` records; the first
structural fault wins over any record error; within a record, key before timestamp).
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

from kompakt import native
from kompakt.protocol.errors import InvalidRecordError, InvalidTimestampError

_LIB = native.LIB

OK, CORRUPT, KEYLESS, TIMESTAMP = 0, 1, 2, 3
# corrupt reasons (records.c's R_*), index = the record at fault
PAST_END, VARINT_TOO_LONG, BAD_SIZE, NEG_HEADER_COUNT, NEG_HEADER_KEY, SIZE_MISMATCH, TRAILING = range(1, 8)
REASONS = {
    PAST_END: "a field runs past the end of the record",
    VARINT_TOO_LONG: "a varint is longer than Kafka allows (5 bytes, 10 for the timestamp delta)",
    BAD_SIZE: "its size is negative or runs past the end of the batch",
    NEG_HEADER_COUNT: "its header count is negative",
    NEG_HEADER_KEY: "a header key size is negative",
    SIZE_MISMATCH: "its fields do not end where its size says",
    TRAILING: "bytes are left after the last record",
}
F_REQUIRE_KEY, F_CHECK_TIMESTAMPS, F_LOG_APPEND_TIME = 1, 2, 4
_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


class Check(NamedTuple):
    status: int        # OK, CORRUPT, KEYLESS or TIMESTAMP
    index: int         # the record at fault (count for bytes left over)
    detail: int        # CORRUPT: a REASONS key; TIMESTAMP: the record's timestamp delta; else 0
    nonsequential: bool  # offset deltas are not 0, 1, ..., count - 1 (the batch must be rewritten)


def check(data, pos: int, count: int, *, require_key: bool, check_timestamps: bool,
          log_append_time: bool = False, base_ts: int = 0, fixed_ts: int = -1, now: int = 0,
          before: int = 0, after: int = 0) -> Check:
    """Check the `count` records in data[pos:] (see the module docstring)."""
    flags = ((F_REQUIRE_KEY if require_key else 0) | (F_CHECK_TIMESTAMPS if check_timestamps else 0)
             | (F_LOG_APPEND_TIME if log_append_time else 0))
    if _LIB is None:
        return _py_check(data, pos, count, flags, base_ts, fixed_ts, now, before, after)
    io = (ctypes.c_int64 * 4)()
    rc = _LIB.km_check_records(_pointer(data), len(data), pos, count, flags, base_ts, fixed_ts, now,
                               before, after, io)
    return Check(rc, io[0], io[1], bool(io[2]))


def structure(data, pos: int, count: int) -> Check | None:
    """`check` with no rule but the records' structure, the common produce case (an uncompressed
    batch on a delete topic), with less call overhead: None when the records are sound and their
    offset deltas are 0..count-1, else the Check."""
    if _LIB is None:
        c = _py_check(data, pos, count, 0, 0, -1, 0, 0, 0)
    else:
        io = (ctypes.c_int64 * 4)()
        rc = _LIB.km_check_records(_pointer(data), len(data), pos, count, 0, 0, -1, 0, 0, 0, io)
        if rc == OK and not io[2]:
            return None
        c = Check(rc, io[0], io[1], bool(io[2]))
    return None if c.status == OK and not c.nonsequential else c


_c_char = ctypes.c_char
_byref = ctypes.byref


def _pointer(data):
    """Something ctypes passes as the address of data's bytes, without copying them: bytes as
    they are; a writable buffer (bytearray, the produce handler's view into its frame) as a
    reference to a c_char over its first byte, which holds the buffer for the call (0.5-0.7 us a
    call less than an array over the whole buffer: no array type looked up per length, measured
    in bench/RESULTS.md); a read-only view copied once."""
    if isinstance(data, bytes):
        return data
    try:
        return _byref(_c_char.from_buffer(data)) if len(data) else (_c_char * 0).from_buffer(data)
    except TypeError:
        return bytes(data)


def error_for(c: Check, *, tp: str, count: int, base_ts: int, fixed_ts: int, log_append_time: bool,
              first_offset: int, now: int, before: int, after: int, errors: list | None = None):
    """The KafkaError a failed Check raises. Records whose structure does not add up (sizes,
    varints, a count that leaves bytes over or runs out): INVALID_RECORD, as Kafka's batch iterator
    and DefaultRecord.readFrom throw InvalidRecordException for them (CORRUPT_MESSAGE would be
    retried by clients until their delivery timeout; it stays for a bad CRC). Record errors
    (`errors`: every (index, status, timestamp delta) of the batch, all_record_errors; default:
    the Check's one) raise Kafka's RecordValidationException: INVALID_TIMESTAMP when one is a
    timestamp, else INVALID_RECORD, with `record_errors` [(index in the batch, message)]."""
    if c.status == CORRUPT:
        where = (f"{count} records are followed by more bytes" if c.detail == TRAILING
                 else f"record {c.index} of {count}: {REASONS.get(c.detail, 'malformed')}")
        return InvalidRecordError(f"Record batch in the append to {tp} is malformed: {where}")
    found = errors or [(c.index, c.status, c.detail)]
    listed = []
    for index, status, td in found:
        if status == KEYLESS:
            listed.append((index, f"Compacted topic cannot accept message without key in topic partition {tp}"))
        else:
            ts = fixed_ts if log_append_time else base_ts + td
            listed.append((index, timestamp_message(ts, first_offset + index, now, before, after)))
    return rejected(listed, any(status == TIMESTAMP for _, status, _ in found))


def rejected(listed: list, timestamps: bool):
    """Kafka's LogValidator.processRecordErrors: the error for a batch whose records `listed`
    [(index in the batch, message)] were rejected, carrying them as `record_errors`."""
    if timestamps:
        exc = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    else:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in listed[:3])
        exc = InvalidRecordError(f"One or more records have been rejected due to {len(listed)} record errors "
                                 f"in total, and only showing the first three errors at most: [{shown}]")
    exc.record_errors = listed
    return exc


def timestamp_message(ts: int, offset: int, now: int, before: int, after: int) -> str:
    return (f"Timestamp {ts} of message with offset {offset} is out of range. The "
            f"timestamp should be within [{now - before}, {now + after}]")


def all_record_errors(data, pos: int, count: int, *, require_key: bool, check_timestamps: bool,
                      log_append_time: bool = False, base_ts: int = 0, fixed_ts: int = -1, now: int = 0,
                      before: int = 0, after: int = 0) -> list:
    """Every record error of the batch, [(index, KEYLESS or TIMESTAMP, timestamp delta)] (Kafka lists
    them all); the pure-Python walk, for the error path of a batch `check` refused."""
    flags = ((F_REQUIRE_KEY if require_key else 0) | (F_CHECK_TIMESTAMPS if check_timestamps else 0)
             | (F_LOG_APPEND_TIME if log_append_time else 0))
    found: list = []
    _py_check(data, pos, count, flags, base_ts, fixed_ts, now, before, after, found)
    return found


# ---------------------------------------------------------------------------------------------
# the reference

class _Corrupt(Exception):
    def __init__(self, reason: int):
        self.reason = reason


def _var(d, p: int, end: int, nbytes: int, mask: int) -> tuple[int, int]:
    v = 0
    for i in range(nbytes):
        if p >= end:
            raise _Corrupt(PAST_END)
        b = d[p]
        p += 1
        v |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            v &= mask
            return (v >> 1) ^ -(v & 1), p
    raise _Corrupt(VARINT_TOO_LONG)


def _skip(q: int, rec_end: int, n: int) -> int:
    if n < 0:
        return q
    if n > rec_end - q:
        raise _Corrupt(PAST_END)
    return q + n


def _py_check(d, p, count, flags, base_ts, fixed_ts, now, before, after, collect=None) -> Check:
    end = len(d)
    first_err = OK
    err_index = err_td = 0
    nonseq = False
    i = 0
    try:
        if p < 0 or p > end:
            raise _Corrupt(PAST_END)
        while i < count:
            ln, p = _var(d, p, end, 5, _M32)
            if ln < 0 or ln > end - p:
                raise _Corrupt(BAD_SIZE)
            rec_end = p + ln
            if p >= rec_end:
                raise _Corrupt(PAST_END)
            q = p + 1
            td, q = _var(d, q, rec_end, 10, _M64)
            od, q = _var(d, q, rec_end, 5, _M32)
            kl, q = _var(d, q, rec_end, 5, _M32)
            q = _skip(q, rec_end, kl)
            vl, q = _var(d, q, rec_end, 5, _M32)
            q = _skip(q, rec_end, vl)
            hc, q = _var(d, q, rec_end, 5, _M32)
            if hc < 0:
                raise _Corrupt(NEG_HEADER_COUNT)
            for _ in range(hc):
                hkl, q = _var(d, q, rec_end, 5, _M32)
                if hkl < 0:
                    raise _Corrupt(NEG_HEADER_KEY)
                q = _skip(q, rec_end, hkl)
                hvl, q = _var(d, q, rec_end, 5, _M32)
                q = _skip(q, rec_end, hvl)
            if q != rec_end:
                raise _Corrupt(SIZE_MISMATCH)
            if od != i:
                nonseq = True
            if first_err == OK or collect is not None:
                err = OK
                if flags & F_REQUIRE_KEY and kl < 0:
                    err = KEYLESS
                elif flags & F_CHECK_TIMESTAMPS:
                    ts = fixed_ts if flags & F_LOG_APPEND_TIME else base_ts + td
                    if ts != -1 and (now - ts > before or ts - now > after):
                        err = TIMESTAMP
                if err != OK:
                    if first_err == OK:
                        first_err, err_index, err_td = err, i, td
                    if collect is not None:
                        collect.append((i, err, td))
            p = rec_end
            i += 1
        if p != end:
            raise _Corrupt(TRAILING)
    except _Corrupt as exc:
        return Check(CORRUPT, i, exc.reason, nonseq)
    return Check(first_err, err_index, err_td if first_err == TIMESTAMP else 0, nonseq)
