"""Produce (key 0): advertised v0-12 (Kafka 4.0's range, the release Kompakt advertises:
docs/compatibility.md), served v3-12.

Behaviour: for each partition, hand the client's record bytes, untouched, to
`Log.append_as_leader` (Kafka's LogValidator rules and idempotent-producer sequence checks live
in storage) and answer the base offset, the log-append time (-1 for CreateTime topics) and the
log start offset. The bytes arrive as a writable memoryview into the request frame
(protocol/codec.decode_produce), so storage can patch baseOffset in place: no per-record work and
no copy here for a delete-policy topic.

Threads: appends run on the event loop (a page-cache write and an index entry: tens of
microseconds) except when the append would reach the log's `flush.messages` and so fsync inside
Log.append_as_leader, or needs a roll (segment.bytes, segment.ms, a full index: the new segment's
files and a producer snapshot are created; the loop's attempt raises RollRequired before anything
changed): those run on the log writer (storage/log_writer.py, one thread) so the loop never waits
on a disk sync or a file creation. While a log has work queued there, its later appends queue
behind it (first in, first out), so a partition's appends keep arrival order (idempotent
producers' sequences depend on it). A request hands all its partitions over (or appends them)
before it waits for any (which also keeps a partition's appends in order should requests of a
connection ever overlap: today the next starts only once this one's appends are done,
network/connection.py); then it calls `ctx.effects_applied()`.

Validation beside the loop (storage/validation_pool.py, when kompakt.produce.validation.threads
is set): a batch of at least kompakt.produce.validation.offload.bytes whose validation runs a
codec (decompression to read its records, recompression: Log.prepare) is validated on a pool
thread while the loop serves other connections; that
partition and every later one of the request wait for it and are then appended as above, in
request order, with no wait between their appends. A request without such a batch takes no
detour. The connection's next request still starts only at `ctx.effects_applied()`, after the
appends, so per-connection order, a partition's append order and durable acks are unchanged.

acks (DESIGN.md, "acknowledged means on disk"): -1 (all) is answered once the appended records
are synced (the log dir's group commit, storage/group_commit.py; the connection's next request
may start meanwhile, `ctx.effects_applied()`), unless kompakt.durable.acks.enable is off, when it
is answered after the append as 1 is; 1 is answered after the append (the leader has the records,
in the page cache); 0 gets no response at all, and an error with acks=0 closes the connection (Kafka's way
of telling a client that reads no responses); anything else is INVALID_REQUIRED_ACKS for each
partition that would be appended to (Kafka's ReplicaManager.appendRecords: partitions refused
before it, unknown or unauthorized, keep their own error).

Authorization (Kafka's KafkaApis.handleProduceRequest): a request with transactional records
needs WRITE on its transactional id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
plain records under an id are not checked against it, as Kafka); each topic needs WRITE (else its
partitions TOPIC_AUTHORIZATION_FAILED, whether or not it exists). No authorizer: no checks.

Transactions: a transactional batch needs the request's transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request; batches of two producer ids, or of two
epochs of one: INVALID_PRODUCER_ID_MAPPING), and before the producer's first write to a partition in a
transaction the coordinator must confirm the partition was added (KIP-890 part 1,
kompakt/broker/txn/verification.py: INVALID_TXN_STATE / TRANSACTION_ABORTABLE when not); from v12
(transaction version 2, KIP-890 part 2) the broker adds it instead (its `__transaction_state`
record is synced before the answer, as every coordinator write a request makes: network/dispatch.py).

Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID from v13) when there is no such
partition, KAFKA_STORAGE_ERROR when its log dir is offline, INVALID_TOPIC_EXCEPTION for internal topics (`__consumer_offsets` is written by the
group coordinator only), else the code of the KafkaError storage raised (CORRUPT_MESSAGE, INVALID_RECORD,
MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_TIMESTAMP, UNSUPPORTED_FOR_MESSAGE_FORMAT,
OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...), with its message in error_message
(v8+); records the validator rejects (no key on a compacted topic, a timestamp out of range) are
each listed in record_errors (v8+: index in the batch, reason) under Kafka's summary message.

Quota (producer_byte_rate, broker/quotas; one attribute test when no such quota is set): the
request's size is recorded after the appends; a client over its quota gets throttle_time_ms in
the answer (v1+) and its connection reads nothing for that long, acks=0 included (Kafka mutes the
channel for every version since KIP-219; older clients wait because their next request does).
A throttled request does not call `ctx.effects_applied()`: the connection's next request waits
for its answer and then the throttle, as on Kafka, rather than starting during its durable wait.

Version notes:
- v0-2 are advertised because Kafka 4 does (KAFKA-18659: librdkafka turns off compression when
  Produce is not advertised from v0) and answered UNSUPPORTED_VERSION for every partition.
- v3 transactional id + record batch v2; v5 log_start_offset; v7 zstd allowed (before:
  UNSUPPORTED_COMPRESSION_TYPE, as ProduceRequest.validateRecords); v8 record errors
  and error message; v9 flexible; v10 current-leader tagged field (not sent: we never answer
  NOT_LEADER_OR_FOLLOWER); v11 TRANSACTION_ABORTABLE; v12 transaction version 2 (the
  partition is added to the transaction implicitly); v13 (Kafka 4.1) topic ids instead of names (UNKNOWN_TOPIC_ID): the code
  for it stays, not served while Kompakt advertises Kafka 4.0.
"""
from __future__ import annotations

import functools
import logging
import struct
import time

from kompakt.broker.network.dispatch import CloseConnection
from kompakt.broker.handlers._common import INTERNAL_TOPICS
from kompakt.broker.security.acl import Op, Res
from kompakt.broker.txn import verification as txn_verification
from kompakt.config.broker_config import LONG_MAX
from kompakt.protocol import codec
from kompakt.protocol import records as R
from kompakt.protocol.records import BATCH_LENGTH_POS, LOG_OVERHEAD, RECORDS_COUNT_POS
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition
from kompakt.storage.log import ROLL_ELSEWHERE, RollRequired

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 12
FIRST_SERVED_VERSION = 3

log = logging.getLogger(__name__)

_VALID_ACKS = (-1, 0, 1)


def decode(header, frame):
    return codec.decode_produce(header, frame)


def _failed(index: int, code: int, message: str | None = None, record_errors=()):
    """A partition answer: (index, error_code, base_offset, log_append_time, log_start_offset,
    message, record_errors [(index in the batch, message)])."""
    return (index, int(code), -1, -1, -1, message, record_errors)


def _fail_all(request, code: int):
    return [(t.name, t.topic_id, [_failed(i, code) for i, _ in t.partitions]) for t in request.topics]


_INT32 = struct.Struct(">i")


def _record_count(records) -> int:
    """Records in the batches of `records` (from their headers; garbage counts as what it claims)."""
    n = pos = 0
    end = len(records)
    while pos + RECORDS_COUNT_POS + 4 <= end:
        n += max(_INT32.unpack_from(records, pos + RECORDS_COUNT_POS)[0], 0)
        pos += LOG_OVERHEAD + max(_INT32.unpack_from(records, pos + BATCH_LENGTH_POS)[0], 0)
    return n


def _zstd_batch(records) -> bool:
    """Whether `records` start with a complete magic-2 batch compressed with zstd (which Kafka's
    ProduceRequest.validateRecords refuses before v7, KIP-110; anything malformed is storage's
    to refuse)."""
    if records is None or len(records) < R.BATCH_OVERHEAD or records[R.MAGIC_POS] != R.CURRENT_MAGIC:
        return False
    if LOG_OVERHEAD + _INT32.unpack_from(records, BATCH_LENGTH_POS)[0] > len(records):
        return False
    return records[R.ATTRIBUTES_POS + 1] & R.COMPRESSION_MASK == R.COMPRESSION_ZSTD


def _would_fsync(log_obj, records) -> bool:
    """Whether the append reaches flush.messages and so fsyncs inside append_as_leader."""
    flush_messages = log_obj.config.flush_messages
    if flush_messages >= LONG_MAX or records is None:
        return False
    return log_obj.unflushed_messages + _record_count(records) >= flush_messages


def _append(lm, log_obj, records, topic: str, metrics, guard=None, waits=None, prepared=None):
    """Append one partition's bytes on the loop, or hand them to the log writer: the partition
    answer, or (handed over already) an awaitable of it. Nothing here awaits, so a request's
    partitions are all appended or queued before another request's appends run (_produce).
    `prepared`: the batch validated already on the validation pool."""
    records = records if records is not None else b""
    writer = lm.writer
    if not writer.busy(log_obj) and not _would_fsync(log_obj, records):
        try:
            info = log_obj.append_as_leader(records, verification_guard=guard, roll=ROLL_ELSEWHERE,
                                            prepared=prepared)
        except RollRequired:    # nothing changed: append again where the roll may create files
            pass
        else:
            return _appended(lm, log_obj, records, topic, metrics, info, waits)
    return writer.submit(log_obj, functools.partial(log_obj.append_as_leader, records, verification_guard=guard,
                                                    prepared=prepared))


def _appended(lm, log_obj, records, topic: str, metrics, info, waits=None):
    """Wake long-polling fetches (with durable acks: hand the log to its group commit); note
    what an acks=all answer waits for in `waits`; the partition answer."""
    tp = log_obj.tp
    lm.notify_append(tp, log_obj)
    if waits is not None:
        waits.append((log_obj, info.last_offset + 1))
    if metrics is not None:
        metrics.record_produce(topic, len(records), info.records_count)
    return (tp.partition, 0, info.first_offset, info.log_append_time, log_obj.log_start_offset, None, ())


def _append_failed(ctx, metrics, name: str, index: int, exc: Exception):
    """The partition answer of an append that raised."""
    if isinstance(exc, KafkaError):
        if metrics is not None:
            metrics.record_error("Produce", exc.code)
        log.debug("produce to %s-%d from %s failed: %s", name, index, ctx.client_id, exc)
        return _failed(index, exc.code, exc.message, exc.record_errors)
    log.error("produce to %s-%d failed on disk: %s", name, index, exc)
    return _failed(index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))


async def handle(ctx, request):
    version = ctx.api_version
    acks = request.acks
    waits = None
    if version < FIRST_SERVED_VERSION:
        responses = _fail_all(request, ErrorCode.UNSUPPORTED_VERSION)
    elif (ctx.authorizer is not None and request.transactional_id is not None
          and txn_verification.has_transactional_records(request)
          and not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id)):
        responses = _fail_all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        responses, waits = await _produce(ctx, request, version)
    throttle_ms = 0
    quota = ctx.broker.quotas.produce
    if quota.enabled:
        throttle_ms = _record_quota(ctx, quota)
    if acks == 0:
        # before the next request may start: Kafka closes the connection without reading what
        # the client sent after this request (its channel is muted while the request is handled)
        for name, topic_id, partitions in responses:
            for index, code, _, _, _, message, _ in partitions:
                if code:
                    raise CloseConnection(
                        f"acks=0 produce to {name or topic_id}-{index} failed with "
                        f"{ErrorCode(code).name}: {message or ''}")
    if not throttle_ms:
        # appended: the connection's next request may start now. A throttled one holds it
        # until this answer, then the connection mutes for throttle_ms (Kafka: nothing is read
        # from the channel until the answer is sent, then it is muted for the throttle, KIP-219)
        ctx.effects_applied()
    if waits:                                # acks=all: answered once synced
        await _durable(ctx.log_manager, responses, waits, ctx.metrics)
    if acks == 0:
        return None
    return codec.encode_produce_response(ctx.correlation_id, version, responses, throttle_ms)


def _record_quota(ctx, quota) -> int:
    """The request's bytes against the client's producer_byte_rate (after the append, as Kafka
    records them): the throttle time, also set on ctx so the connection mutes for it."""
    throttle_ms = quota.record(ctx.principal, ctx.client_id, ctx.frame_size, int(time.monotonic() * 1000))
    if throttle_ms:
        ctx.throttle_ms = throttle_ms
        if ctx.metrics is not None:
            ctx.metrics.record_quota_throttle("produce", throttle_ms)
    return throttle_ms


async def _produce(ctx, request, version: int):
    lm = ctx.log_manager
    metrics = ctx.metrics
    checked = ctx.authorizer is not None
    refused = txn_verification.request_error(request)
    if refused is not None:
        return _fail_all(request, refused), None
    acks = request.acks
    # acks=all waits for the group commit (durable acks on); acks=1 and 0 never do
    waits = [] if acks == -1 and lm.durable_acks else None
    by_id = None
    responses = []
    handed = []     # (parts, position, awaitable, ...) of the appends handed to the log writer
    pool = lm.validation
    deferred = None  # from the first batch validated on the pool on: (parts, position, ...) appended after it
    for topic in request.topics:
        name = topic.name
        if version >= 13:
            if by_id is None:
                by_id = {m.topic_id: m.name for m in lm.topics.values()}
            name = by_id.get(topic.topic_id)
        if checked and name is not None and not ctx.authorize(Op.WRITE, Res.TOPIC, name):
            responses.append((topic.name if version < 13 else None, topic.topic_id,
                              [_failed(i, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for i, _ in topic.partitions]))
            continue
        parts = []
        if name in INTERNAL_TOPICS:          # only the broker writes these (Kafka: internalTopicsAllowed)
            responses.append((topic.name if version < 13 else None, topic.topic_id,
                              [_failed(i, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                       f"Cannot append to internal topic {name}") for i, _ in topic.partitions]))
            continue
        for index, records in topic.partitions:
            log_obj = lm.get_log(TopicPartition(name, index)) if name is not None else None
            if log_obj is None and not (name is not None and lm.is_offline((name, index))):
                parts.append(_failed(index, ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 and name is None
                                     else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if version < 7 and _zstd_batch(records):
                parts.append(_failed(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                     f"Produce requests with version {version} are not allowed to use "
                                     f"ZStandard compression"))
                continue
            if acks not in _VALID_ACKS:      # ReplicaManager.appendRecords, after the checks above
                parts.append(_failed(index, ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if log_obj is None or log_obj.offline:
                parts.append(_failed(index, ErrorCode.KAFKA_STORAGE_ERROR,
                                     f"Partition {name}-{index} is in an offline log directory"))
                continue
            guard = None
            producer = txn_verification.transactional_producer(records)
            if producer is not None:
                guard, failure = txn_verification.verify(ctx, log_obj, request.transactional_id, producer, version)
                if failure is not None:
                    parts.append(_failed(index, *failure))
                    continue
            offload = pool.wants(log_obj, records)
            if offload or deferred is not None:
                # validated on the pool meanwhile; appended after it, in request order, with
                # every partition of the request that follows it
                if deferred is None:
                    deferred = []
                deferred.append((parts, len(parts), log_obj, records, name, index, guard,
                                 pool.prepare(log_obj, records) if offload else None))
                parts.append(None)
                continue
            try:
                answer = _append(lm, log_obj, records, name, metrics, guard, waits)
            except (KafkaError, OSError) as exc:
                answer = _append_failed(ctx, metrics, name, index, exc)
            if not isinstance(answer, tuple):
                handed.append((parts, len(parts), answer, log_obj, records, name, index))
            parts.append(answer)
        responses.append((topic.name if version < 13 else None, topic.topic_id, parts))
    # Only now wait for the appends handed to the log writer: had we waited partition by
    # partition, a later request on this connection could append on the loop to one of this
    # request's later partitions first (out of arrival order: idempotent sequences break).
    try:
        if deferred:
            await _append_prepared(ctx, lm, metrics, deferred, handed, waits)
        for parts, i, pending, log_obj, records, name, index in handed:
            try:
                parts[i] = _appended(lm, log_obj, records, name, metrics, await pending, waits)
            except (KafkaError, OSError) as exc:
                parts[i] = _append_failed(ctx, metrics, name, index, exc)
    finally:                # cancelled (the connection closed): the appends still run, unawaited
        for _, _, pending, *_ in handed:
            pending.cancel()
    return responses, waits


async def _append_prepared(ctx, lm, metrics, deferred, handed, waits) -> None:
    """The partitions `_produce` deferred: wait until the pool has validated every one of them,
    then append them all in request order without waiting in between (as `_produce` appends the
    rest), each with its validation done (or its error answered). Nothing was appended for them
    before: cancelled meanwhile (the connection closed), the request leaves no trace."""
    ready = []
    try:
        for item in deferred:
            pending = item[-1]
            prepared = None
            if pending is not None:
                try:
                    prepared = await pending
                except (KafkaError, OSError) as exc:
                    prepared = exc
            ready.append(prepared)
    finally:
        for item in deferred[len(ready):]:       # cancelled: leave no exception unretrieved
            pending = item[-1]
            if pending is not None and not pending.cancel() and not pending.cancelled():
                pending.exception()
    for (parts, i, log_obj, records, name, index, guard, _), prepared in zip(deferred, ready):
        if isinstance(prepared, Exception):
            parts[i] = _append_failed(ctx, metrics, name, index, prepared)
            continue
        try:
            answer = _append(lm, log_obj, records, name, metrics, guard, waits, prepared)
        except (KafkaError, OSError) as exc:
            answer = _append_failed(ctx, metrics, name, index, exc)
        if not isinstance(answer, tuple):
            handed.append((parts, i, answer, log_obj, records, name, index))
        parts[i] = answer


async def _durable(lm, responses, waits, metrics) -> None:
    """acks=all: answer once every appended partition is synced (storage/group_commit.py). The
    caller said the effects are applied first, so the connection's next request starts meanwhile
    (pipelined producers keep their requests flowing into the same rounds). A partition whose sync failed
    (its log dir is offline now) answers KAFKA_STORAGE_ERROR: the producer retries, and nothing
    it was told is on disk can be missing."""
    failed = {}
    for log_obj, offset in waits:
        try:
            await lm.wait_durable(log_obj, offset)
        except KafkaError as exc:
            failed[log_obj.tp] = exc
    if not failed:
        return
    for t, (name, topic_id, parts) in enumerate(responses):
        for i, part in enumerate(parts):
            exc = failed.get((name, part[0])) if name is not None else None
            if exc is None and name is None:
                exc = next((e for tp, e in failed.items()
                            if tp.partition == part[0] and lm.topics.get(tp.topic) is not None
                            and lm.topics[tp.topic].topic_id == topic_id), None)
            if exc is not None and part[1] == 0:
                if metrics is not None:
                    metrics.record_error("Produce", exc.code)
                parts[i] = _failed(part[0], exc.code, exc.message)
