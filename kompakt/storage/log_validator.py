"""Kafka's LogValidator for magic v2: check a produced batch and assign its offsets.

Role: the produce path's gate. `validate_and_assign` takes the bytes a client sent for one
partition, checks them the way Kafka's UnifiedLog.analyzeAndValidateRecords + LogValidator do,
assigns offsets starting at the log end offset and returns the bytes to append.

Rules, each with the error that goes to the wire:
- exactly one batch, complete (INVALID_RECORD when none, truncated or more than one, as Kafka's
  ProduceRequest.validateRecords; a declared size below 14 bytes: CORRUPT_MESSAGE);
- magic 2 only (client appends: INVALID_RECORD, Kafka's ProduceRequest.validateRecords; others
  UNSUPPORTED_FOR_MESSAGE_FORMAT);
- batch size <= max.message.bytes (MESSAGE_TOO_LARGE); whole append <= segment size
  (RECORD_LIST_TOO_LARGE); both again after recompression;
- CRC-32C valid (CORRUPT_MESSAGE);
- for client appends: baseOffset 0, recordsCount > 0 and == lastOffsetDelta + 1, no control batch,
  a producer id needs a sequence (INVALID_RECORD);
- compacted topics: every record has a key (INVALID_RECORD);
- message.timestamp.type=CreateTime: each record's timestamp within
  [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] (INVALID_TIMESTAMP);
- LogAppendTime: maxTimestamp := now and the timestamp-type bit set (CRC recomputed);
- CreateTime: a maxTimestamp below the batch's baseTimestamp (left unset by the client) := the
  records' largest timestamp (CRC recomputed), as Kafka's LogValidator writes it from the records;
- compression.type other than `producer` and different from the batch's codec: records re-encoded
  with the topic codec at its compression.<codec>.level (as Kafka's buildRecordsAndAssignOffsets).

Parse nothing we need not parse: an uncompressed batch's records are always walked over the
request's bytes (`record_check.structure`: their structure and count, as Kafka's batch iterator
checks them); the per-record rules run for compacted topics, recompression, or a finite
`message.timestamp.before.max.ms` (a lower bound cannot be checked from the header: records may be
older than baseTimestamp). The upper bound is checked against the header's maxTimestamp when the
rules do not run. So a keep-codec compressed batch on a delete topic costs header + CRC only (its
records' structure and count are not checked: that would cost a decompression).
Reading them means `record_check` (compiled, in place over the request's bytes; a compressed batch
is decompressed by one codec call first): every rule above that concerns single records, no Record
objects. A recompression whose records keep their offset deltas 0..n-1 re-encodes the payload
whole (the checked payload compressed in the topic codec under the client's header, codec bits,
LogAppendTime stamp and CRC changed: one codec call each way, no per-record work); records are
decoded into objects only when the batch is rebuilt otherwise (inner offsets other than 0..n-1, or
a CreateTime maxTimestamp to be taken from the records).

Two halves, so the costly one can run off the event loop (storage/validation_pool.py): `prepare`
makes every check and any rebuild from the bytes, the topic config and the clock alone (never the
log's state, never changing the bytes); `assign` then patches the offsets at the log end under
the log's lock. `validate_and_assign` is the two in a row.

Offsets are assigned by patching baseOffset (not under the CRC) and partitionLeaderEpoch (not under
the CRC): in place when the bytes come as a writable memoryview (the produce handler passes views
into a request frame it owns until the answer: no copy of the batch at all), else in a private copy.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from kompakt.protocol import records as R
from kompakt.storage import record_check
from kompakt.protocol.errors import (CorruptMessageError, InvalidRecordError, InvalidTimestampError,
                                     MessageTooLargeError, RecordListTooLargeError,
                                     UnsupportedForMessageFormatError)

LONG_MAX = 2**63 - 1
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(slots=True)
class ValidationResult:
    buffer: bytearray | memoryview   # the bytes to append (one batch, offsets assigned)
    header: R.BatchHeader      # header of that batch after assignment
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int       # -1 unless message.timestamp.type=LogAppendTime
    records_count: int
    recompressed: bool


_PRODUCER = (None, "", "producer")


def target_codec(compression_type: str, source_codec: int) -> int:
    """The codec a batch is stored with: the producer's for `producer`, else the topic's."""
    if compression_type in _PRODUCER:     # the default, without a lower() per append
        return source_codec
    name = compression_type.lower()
    if name == "producer":
        return source_codec
    return R.CODEC_BY_NAME[name]


def needs_codec(records, config) -> bool:
    """Whether validating `records` under `config` runs a codec (decompression to read the
    records, or recompression): the costly validations, which the validation pool may take. Reads
    the first batch's attributes only; anything malformed answers False (the checks refuse it)."""
    if len(records) <= R.ATTRIBUTES_POS + 1:
        return False
    codec = records[R.ATTRIBUTES_POS + 1] & R.COMPRESSION_MASK
    if target_codec(config.compression_type, codec) != codec:
        return True
    return codec != R.COMPRESSION_NONE and (
        config.compact or (config.message_timestamp_type != LOG_APPEND_TIME
                           and config.message_timestamp_before_max_ms < LONG_MAX))


def _level(config, codec: int) -> int | None:
    """compression.gzip.level / compression.lz4.level / compression.zstd.level (KIP-390)."""
    if codec == R.COMPRESSION_GZIP:
        level = getattr(config, "compression_gzip_level", -1)
        return None if level == -1 else level   # -1: the codec's default
    if codec == 3:
        return getattr(config, "compression_lz4_level", None)
    if codec == R.COMPRESSION_ZSTD:
        return getattr(config, "compression_zstd_level", None)
    return None


def _writable_view(records) -> bool:
    return isinstance(records, memoryview) and not records.readonly and records.contiguous


def _check_records(records, hdr, config, check_ts: bool, now_ms: int, before: int, after: int,
                   first: int, tp: str) -> tuple[bool, object]:
    """The per-record rules (record_check: compiled or pure Python), over the request's own bytes
    when uncompressed, else over the payload decompressed by one codec call. Answers (whether the
    offset deltas are not 0..n-1, so the batch must be rewritten; the records' payload: the
    decompressed bytes, or None when uncompressed); raises the rule's KafkaError."""
    if hdr.compression == R.COMPRESSION_NONE:
        data, pos = records, R.RECORDS_POS
    else:
        try:
            data, pos = R.decompress(hdr.compression, memoryview(records)[R.RECORDS_POS:hdr.size]), 0
        except R.CorruptRecordError as exc:
            raise CorruptMessageError(f"Record batch in the append to {tp} is corrupt: {exc}") from None
    lat = hdr.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
    rules = dict(require_key=config.compact and not hdr.is_control, check_timestamps=check_ts,
                 log_append_time=lat, base_ts=hdr.base_timestamp, fixed_ts=hdr.max_timestamp, now=now_ms,
                 before=before, after=after)
    c = record_check.check(data, pos, hdr.records_count, **rules)
    if c.status != record_check.OK:
        errors = None
        if c.status != record_check.CORRUPT:   # Kafka lists every rejected record, not the first
            errors = record_check.all_record_errors(data, pos, hdr.records_count, **rules)
        raise record_check.error_for(c, tp=tp, count=hdr.records_count, base_ts=hdr.base_timestamp,
                                     fixed_ts=hdr.max_timestamp, log_append_time=lat, first_offset=first,
                                     now=now_ms, before=before, after=after, errors=errors)
    return c.nonsequential, (data if pos == 0 else None)


_INT32 = struct.Struct(">i")
_LEGACY_RECORD_OVERHEAD_V0 = 14     # the smallest batch any magic can declare (Kafka's RECORD_OVERHEAD_V0)


def _no_batch(tp: str) -> InvalidRecordError:
    # made only when raised: an exception and its message built for every append cost ~0.5 us
    return InvalidRecordError(f"Produce requests must have at least one record batch per partition "
                              f"(append to {tp})")


def _check_produce_records(records, n: int, tp: str) -> None:
    """Kafka's ProduceRequest.validateRecords (v3+), run before LogValidator: the bytes must hold a
    complete first batch (its batch iterator yields none from a truncated one: INVALID_RECORD;
    a declared size below any magic's overhead is CORRUPT_MESSAGE) of magic 2 (else
    INVALID_RECORD, not UNSUPPORTED_FOR_MESSAGE_FORMAT: KafkaApis answers the request check's
    InvalidRecordException)."""
    if n < R.LOG_OVERHEAD:
        raise _no_batch(tp)
    declared = _INT32.unpack_from(records, R.BATCH_LENGTH_POS)[0]
    if declared < _LEGACY_RECORD_OVERHEAD_V0:
        raise CorruptMessageError(f"Record size {declared} is less than the minimum record overhead "
                                  f"({_LEGACY_RECORD_OVERHEAD_V0}) in the append to {tp}")
    if n <= R.MAGIC_POS or declared + R.LOG_OVERHEAD > n:
        raise _no_batch(tp)
    magic = records[R.MAGIC_POS]
    if magic != R.CURRENT_MAGIC:
        raise InvalidRecordError(f"Produce requests are only allowed to contain record batches with "
                                 f"magic version 2, found magic {magic} in the append to {tp}")


def _records_max_timestamp(records, hdr, tp: str) -> int:
    """The largest record timestamp of a CreateTime batch (-1 when none has one), as Kafka's
    LogValidator computes the maxTimestamp it writes (decodes the records: a rare path)."""
    try:
        recs = R.decode_records(records, 0, hdr)
    except (R.CorruptRecordError, ValueError, EOFError) as exc:
        raise CorruptMessageError(f"Record batch in the append to {tp} is corrupt: {exc}") from None
    base = hdr.base_timestamp
    return max([R.NO_TIMESTAMP] + [base + r.timestamp_delta for r in recs])


@dataclass(slots=True)
class Prepared:
    """A batch checked (and rebuilt when it must be) before its offsets are known: `prepare`'s
    answer, which `assign` finishes under the log's lock. It depends on the bytes, the topic config
    and the clock only, never on the log, so it can be made on any thread (storage/validation_pool.py)."""
    config: object                 # the topic config it was checked against (changed since: prepare again)
    header: R.BatchHeader          # the client's header
    rebuilt: bytearray | None      # the batch as rebuilt (recompressed, or inner offsets renumbered), base offset 0
    fixed_max: int | None          # CreateTime maxTimestamp to write (the client's is below baseTimestamp)
    log_append: bool               # message.timestamp.type=LogAppendTime
    now_ms: int


def validate_and_assign(records, *, next_offset: int, config, now_ms: int, leader_epoch: int = 0,
                        origin: str = "client", topic_partition: str = "") -> ValidationResult:
    """Validate one produced batch and assign offsets from `next_offset` (see module docstring)."""
    prepared = prepare(records, config=config, now_ms=now_ms, origin=origin, topic_partition=topic_partition,
                       next_offset=next_offset)
    return assign(prepared, records, next_offset=next_offset, leader_epoch=leader_epoch)


def prepare(records, *, config, now_ms: int, origin: str = "client", topic_partition: str = "",
            next_offset: int = 0) -> Prepared:
    """Every check of the module docstring and the rebuild, without touching `records` (so a
    failed or repeated append finds them as they came). `next_offset` only names offsets in error
    messages (off the log's lock: the log end offset when the work was handed over)."""
    tp = topic_partition or "partition"
    n = len(records)
    if n == 0:
        raise _no_batch(tp)
    if origin == "client":
        _check_produce_records(records, n, tp)
    if n < R.BATCH_OVERHEAD:
        raise CorruptMessageError(f"Record batch of {n} bytes in the append to {tp} is shorter than "
                                  f"the {R.BATCH_OVERHEAD}-byte batch header")
    hdr = R.read_header(records, 0)
    magic = hdr.magic
    if magic != R.CURRENT_MAGIC:
        raise UnsupportedForMessageFormatError(
            f"Produce requests are only allowed to contain record batches with magic version 2, "
            f"found magic {magic} in the append to {tp}")
    size = hdr.batch_length + R.LOG_OVERHEAD
    if size < R.BATCH_OVERHEAD or size > n:
        raise CorruptMessageError(f"Record batch in the append to {tp} declares {size} bytes but "
                                  f"{n} were sent")
    if size < n:
        raise InvalidRecordError(f"Compressed outer record has more than one batch (append to {tp})")
    max_message_bytes = config.max_message_bytes
    if size > max_message_bytes:
        raise MessageTooLargeError(
            f"The record batch size in the append to {tp} is {size} bytes which exceeds the maximum "
            f"configured value of {max_message_bytes}.")
    if size > config.segment_bytes:
        raise RecordListTooLargeError(
            f"Message batch size is {size} bytes in append to partition {tp} which exceeds the "
            f"maximum configured segment size of {config.segment_bytes}.")
    if not R.valid_crc(records, 0, hdr):
        raise CorruptMessageError(f"Record batch in the append to {tp} is corrupt (CRC mismatch, "
                                  f"stored crc = {hdr.crc})")
    client = origin == "client"
    if client:
        if hdr.base_offset != 0:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to {tp} "
                                     f"should be 0, but it is {hdr.base_offset}")
        if hdr.last_offset_delta < 0:
            raise InvalidRecordError(f"Batch has an invalid offset range: [{hdr.base_offset}, "
                                     f"{hdr.last_offset}] in topic partition {tp}")
        if hdr.records_count <= 0:
            raise InvalidRecordError(f"Invalid reported count for record batch: {hdr.records_count} "
                                     f"in topic partition {tp}")
        if hdr.records_count != hdr.last_offset_delta + 1:
            raise InvalidRecordError(f"Inconsistent batch offset range [{hdr.base_offset}, "
                                     f"{hdr.last_offset}] and count of records {hdr.records_count} "
                                     f"in topic partition {tp}")
        if hdr.is_control:
            raise InvalidRecordError(f"Clients are not allowed to write control records in topic "
                                     f"partition {tp}")
        if hdr.producer_id >= 0 and hdr.base_sequence < 0:
            raise InvalidRecordError(f"Invalid sequence number {hdr.base_sequence} in record batch "
                                     f"with producerId {hdr.producer_id} in topic partition {tp}")

    log_append = config.message_timestamp_type == LOG_APPEND_TIME
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    target = target_codec(config.compression_type, hdr.compression)
    recompress = target != hdr.compression and not (hdr.is_control and hdr.compression == 0)
    check_ts = not log_append and client
    parse = config.compact or recompress or (check_ts and before < LONG_MAX)

    if client and log_append and hdr.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME:
        raise InvalidTimestampError(f"Invalid timestamp type in the append to {tp}. Producer should "
                                    f"not set timestamp type to LogAppendTime.")

    first = next_offset
    recs = None
    rebuilt = None
    if parse:
        renumber, payload = _check_records(records, hdr, config, check_ts, now_ms, before, after, first, tp)
        if recompress and not renumber:
            rebuilt = _transcode(records, hdr, payload, target, log_append, now_ms, config)
        if renumber:
            recompress = True  # Kafka rewrites batches whose inner offsets are not 0..n-1
        if recompress and rebuilt is None:
            try:
                recs = R.decode_records(records, 0, hdr)
            except (R.CorruptRecordError, ValueError, EOFError) as exc:
                raise CorruptMessageError(f"Record batch in the append to {tp} is corrupt: {exc}") from None
    else:
        if hdr.compression == R.COMPRESSION_NONE:
            # an uncompressed batch's records are always walked (compiled: ~1 us for 10 records,
            # ~10 us for 1000): Kafka's LogValidator reads every record, so a batch whose
            # recordsCount lies (records left over, or missing) is refused, never appended
            # claiming offsets it does not hold
            c = record_check.structure(records, R.RECORDS_POS, hdr.records_count)
            if c is not None and c.status != record_check.OK:
                raise record_check.error_for(c, tp=tp, count=hdr.records_count, base_ts=hdr.base_timestamp,
                                             fixed_ts=hdr.max_timestamp, log_append_time=False,
                                             first_offset=first, now=now_ms, before=before, after=after)
            if c is not None:          # inner offsets other than 0..n-1: rewritten, as below
                recompress = True
                recs = R.decode_records(records, 0, hdr)
    # Kafka writes a CreateTime batch's maxTimestamp from its records (setMaxTimestamp in place);
    # we trust the client's unless it cannot be right: below the first record's timestamp (Sarama
    # before 1.45 left it unset). Kept, such a batch would miss the time index and give its
    # segment a bogus largest timestamp (time-based retention, ListOffsets by time).
    fixed_max = None
    if (client and not log_append and not recompress and not hdr.is_control
            and hdr.timestamp_type == R.TIMESTAMP_CREATE_TIME and hdr.max_timestamp < hdr.base_timestamp):
        fixed_max = _records_max_timestamp(records, hdr, tp)
    header_max = hdr.max_timestamp if fixed_max is None else fixed_max
    if (not parse and check_ts and header_max != R.NO_TIMESTAMP and header_max - now_ms > after):
        # only message.timestamp.after.max.ms can fail: the batch's max timestamp says whether
        # any record does; if so, walk the records to list each one, as Kafka does
        _check_records(records, hdr, config, check_ts, now_ms, before, after, first, tp)
        # no record is out of range, yet the header says one is: the header is what gets indexed
        raise InvalidTimestampError(record_check.timestamp_message(
            header_max, first + hdr.last_offset_delta, now_ms, before, after))

    if recs is not None:
        rebuilt = bytearray(R.build_batch(
            [r._replace(offset_delta=i) for i, r in enumerate(recs)], base_offset=0,
            compression=target, base_timestamp=hdr.base_timestamp,
            timestamp_type=R.TIMESTAMP_LOG_APPEND_TIME if log_append else hdr.timestamp_type,
            producer_id=hdr.producer_id, producer_epoch=hdr.producer_epoch,
            base_sequence=hdr.base_sequence, is_transactional=hdr.is_transactional,
            is_control=hdr.is_control, partition_leader_epoch=0,
            max_timestamp=now_ms if log_append else None,
            compression_level=_level(config, target)))
    if rebuilt is not None:
        if len(rebuilt) > max_message_bytes:
            raise MessageTooLargeError(
                f"The record batch size in the append to {tp} is {len(rebuilt)} bytes after "
                f"recompression which exceeds the maximum configured value of {max_message_bytes}.")
        if len(rebuilt) > config.segment_bytes:        # UnifiedLog.append checks the validated records
            raise RecordListTooLargeError(
                f"Message batch size is {len(rebuilt)} bytes in append to partition {tp} which exceeds "
                f"the maximum configured segment size of {config.segment_bytes}.")
    return Prepared(config, hdr, rebuilt, fixed_max, log_append, now_ms)


def _transcode(records, hdr, payload, target: int, log_append: bool, now_ms: int, config) -> bytearray | None:
    """The batch with its records payload re-encoded in the `target` codec, records untouched
    (their offset deltas are 0..n-1, checked): one decompression (done by the check) and one
    compression, no per-record work, the codecs' C code (which releases the GIL). The header is
    the client's but for the codec, the LogAppendTime stamp and the CRC. None when maxTimestamp
    must come from the records (a CreateTime batch whose maxTimestamp is below its baseTimestamp):
    the caller decodes and rebuilds."""
    if not log_append and hdr.max_timestamp < hdr.base_timestamp:
        return None
    if payload is None:                          # uncompressed: the request's own bytes
        payload = memoryview(records)[R.RECORDS_POS:hdr.size]
    body = R.compress(target, payload, _level(config, target)) if target != R.COMPRESSION_NONE else payload
    attributes = (hdr.attributes & ~(R.COMPRESSION_MASK | R.DELETE_HORIZON_MASK)) | target
    max_ts = hdr.max_timestamp
    if log_append:
        attributes |= R.TIMESTAMP_TYPE_MASK
        max_ts = now_ms
    total = R.BATCH_OVERHEAD + len(body)
    buf = bytearray(total)
    R.pack_header(buf, 0, base_offset=0, batch_length=total - R.LOG_OVERHEAD, partition_leader_epoch=0,
                  attributes=attributes, last_offset_delta=hdr.last_offset_delta,
                  base_timestamp=hdr.base_timestamp, max_timestamp=max_ts, producer_id=hdr.producer_id,
                  producer_epoch=hdr.producer_epoch, base_sequence=hdr.base_sequence,
                  records_count=hdr.records_count)
    buf[R.RECORDS_POS:] = body
    R.rewrite_crc(buf, 0, total)
    return buf


def assign(prepared: Prepared, records, *, next_offset: int, leader_epoch: int = 0) -> ValidationResult:
    """Finish a prepared batch at `next_offset` (the log's end, under its lock): patch baseOffset
    and partitionLeaderEpoch (not under the CRC) and, for LogAppendTime or a fixed maxTimestamp,
    the timestamp (CRC recomputed), in the request's bytes when they are a writable view (the
    produce handler's: a frame it owns until the answer), else in a copy; the rebuilt batch when
    there is one. Runs again from the same bytes if an append must be retried (a roll elsewhere)."""
    p = prepared
    first = next_offset
    if p.rebuilt is not None:
        buf = p.rebuilt
        R.patch_base_offset(buf, 0, first)
        R.patch_partition_leader_epoch(buf, 0, leader_epoch)
    else:
        buf = records if _writable_view(records) else bytearray(records)
        R.patch_base_offset(buf, 0, first)
        R.patch_partition_leader_epoch(buf, 0, leader_epoch)
        if p.log_append:
            R.patch_max_timestamp_log_append(buf, 0, p.now_ms)
        elif p.fixed_max is not None:
            R.patch_max_timestamp(buf, 0, p.fixed_max)
    hdr = R.read_header(buf, 0)  # the header as appended (4x cheaper than NamedTuple._replace)
    last = hdr.last_offset
    max_ts = p.now_ms if p.log_append else hdr.max_timestamp
    return ValidationResult(buf, hdr, first, last, max_ts, last,
                            p.now_ms if p.log_append else -1, hdr.records_count, p.rebuilt is not None)
