"""Fetch (key 1), versions 4-17 (Kafka 4.0's range, the release Kompakt advertises).

Behaviour: for each requested partition, in request order, read whole record batches from
`fetch_offset` with `Log.read` (bytes sliced from the segment files) and pass them to the
response untouched (codec.encode_fetch_response builds the response around them).

Limits: a partition gets at most `partition_max_bytes`, the response at most the smaller of the
request's `max_bytes` and the broker's `fetch.max.bytes`, except that until some partition has
returned data a read may return one whole batch larger than the limits (Kafka's at-least-one-batch
rule, so a batch bigger than max.partition.fetch.bytes never wedges a consumer). Once data went
out, later partitions get nothing that would exceed the response limit.

Isolation: read_uncommitted reads up to the high watermark and answers a null aborted-transactions
list; read_committed reads up to the last stable offset and answers the aborted transactions that
overlap the bytes returned (Log.aborted_transactions over [fetch offset, the offset after the last
batch returned), from the segments' `.txnindex`): the consumer drops those producers' batches in
those ranges, and never sees control batches as records.

Zero copy: on a connection that can send file ranges (`ctx.zero_copy`) a large read comes back
from the log as a storage FileRecords, a range of the segment file, and travels in the answer in
place of the bytes (the codec asks only its length); a plaintext connection sends it with
sendfile (broker/network/direct_send.py), a TLS one reads it when it encrypts it, on a worker
thread (broker/network/tls_transport.py). Reads of less than segment.FILE_RECORDS_MIN get bytes
as before. Records are never rewritten on the way out (no
down-conversion: Fetch v4+ carries v2 batches as stored), so nothing else needs the bytes.

Threads: when every partition reads from its active segment, above what was on disk when the log
was loaded (consumers at or near the tail: bytes this process wrote, page cache, microseconds) the
pass runs on the event loop; when any starts in an older segment, or in the part of the active
segment that predates this process (a consumer catching up, or the first reads after a restart,
whose bytes may have to come from disk) the whole pass runs in one worker thread, so a cold pread does not stall every other connection (one thread hop per pass, not per
partition). Partitions are read one after another, in request order, either way.

Long poll: with fewer than `min_bytes` bytes available and no error reading a log, the fetch
waits up to `max_wait_ms` on fetch/wait.FetchWaiters, woken by appends to any of its partitions,
then reads again; before it parks it tells the connection its effects are applied
(`ctx.effects_applied()`; not when the client is over its fetch quota, whose next request waits
for the throttled answer as on Kafka), so the connection's next request starts meanwhile (a client such as
librdkafka sends its produce requests on the connection its fetches park on). Appends are counted from before each read, so one landing during a read in a
worker thread re-reads at once rather than being slept through. Unauthorized or unknown
topics/partitions do not cut it short (Kafka answers those beside the long poll of the others),
unless nothing else is readable; a partition that becomes unknown while parked (its topic deleted,
which wakes the fetch) answers at once, as Kafka's DelayedFetch does.

Authorization: each topic needs READ (else its partitions TOPIC_AUTHORIZATION_FAILED, Kafka's
handleFetchRequest); no authorizer, no check.

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID from v13), INCONSISTENT_TOPIC_ID
(v13+: the topic id a session holds is no longer the partition's: deleted and recreated), KAFKA_STORAGE_ERROR
(high watermark, LSO, log start -1) when its log dir is offline, OFFSET_OUT_OF_RANGE when fetch_offset is below the log start offset or above the log end offset
(the consumer then applies auto.offset.reset).

Fetch sessions (KIP-227, v7+): a full fetch with epoch 0 opens a session (broker/fetch/session.py has
the table); incremental requests then carry only added/changed/forgotten partitions and get back
only partitions with news (records, an error, or a moved high watermark / LSO / log start).
`max.incremental.fetch.session.cache.slots=0` answers every fetch sessionless (session id 0).
Unknown session: FETCH_SESSION_ID_NOT_FOUND; wrong epoch: INVALID_FETCH_SESSION_EPOCH; a session
opened by names (v7-12) used by ids (v13+) or the reverse: FETCH_SESSION_TOPIC_ID_ERROR. An
incremental request moves its session to the next epoch on arrival, before any long poll, so a
duplicate sent while it is parked gets INVALID_FETCH_SESSION_EPOCH (as does the parked one if a
request of the new epoch overtook it). An incremental request that forgets the session's last
partition closes it and is answered sessionless (session id 0).

Quota (consumer_byte_rate, broker/quotas; skipped entirely when no such quota is set): the
response's max_bytes is capped at what the client's quota allows in one window; the size of the
answer is recorded against it, and when that takes the client over, the answer is empty with
throttle_time_ms set (the bytes are taken back; a session keeps its partitions and state, moving
to its next epoch; no new session is opened) and the connection reads nothing for that long
(Kafka's KafkaApis.handleFetchRequest).

Version notes: v4 isolation level + last stable offset; v5 log start offset; v7 sessions;
v9 current leader epoch (accepted, not checked: our epoch is always 0); v11 rack id and preferred
read replica (-1); v12 flexible; v13 topic ids; v15-17 replica state / directory id tagged fields
(for followers; ignored). v18 (Kafka 4.1, a follower's high watermark) is not served while
Kompakt advertises Kafka 4.0.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import OrderedDict

from kompakt.broker.fetch.session import (FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID,
                                          SessionPartition, next_epoch)
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol import codec
from kompakt.protocol.codec import FetchPartitionResult, FetchTopicResult
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.protocol.records import BATCH_OVERHEAD, LOG_OVERHEAD
from kompakt.storage import TopicPartition
from kompakt.storage.file_records import FileRecords

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17

READ_COMMITTED = 1
INT32_MAX = 2**31 - 1

log = logging.getLogger(__name__)


def _resolve(ctx, request_topics, version):
    """[(name, topic_id, [(partition, fetch_offset, partition_max_bytes)])] in request order."""
    lm = ctx.log_manager
    by_id = None
    out = []
    for t in request_topics:
        if version >= 13:
            if by_id is None:
                by_id = {m.topic_id: m.name for m in lm.topics.values()}
            name = by_id.get(t.topic_id)
        else:
            name = t.topic
        out.append((name, t.topic_id if version >= 13 else None,
                    [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in t.partitions]))
    return out


def _reads_cold(ctx, wanted) -> bool:
    """Whether some partition's read starts below its active segment or below the log end offset
    it was loaded with (bytes maybe not in the page cache)."""
    lm = ctx.log_manager
    for name, _, partitions in wanted:
        if name is None:
            continue
        for index, offset, _ in partitions:
            log_obj = lm.get_log(TopicPartition(name, index))
            if log_obj is not None and (offset < log_obj.active_segment.base_offset
                                        or offset < log_obj.loaded_end_offset):
                return True
    return False


async def _read_all(ctx, wanted, version, max_bytes, read_committed):
    """`_read_pass` on the loop, or in a worker thread when it may read from disk (see above)."""
    if _reads_cold(ctx, wanted):
        return await asyncio.to_thread(_read_pass, ctx, wanted, version, max_bytes, read_committed)
    return _read_pass(ctx, wanted, version, max_bytes, read_committed)


def _read_pass(ctx, wanted, version, max_bytes, read_committed):
    """One pass over the partitions: (topic results, total bytes, whether to answer without a long
    poll: reading some log failed, or no partition is readable at all; how many were readable).

    Unauthorized and unknown topics/partitions are answered beside the others and do not cut their
    long poll short (Kafka's handleFetchRequest answers those itself and long-polls the rest)."""
    lm = ctx.log_manager
    remaining = max_bytes
    min_one = True
    total = 0
    errors = False
    readable = 0
    topics = []
    checked = ctx.authorizer is not None
    zero_copy = ctx.zero_copy
    for name, topic_id, partitions in wanted:
        results = []
        if checked and name is not None and not ctx.authorize(Op.READ, Res.TOPIC, name):
            topics.append(FetchTopicResult(name, topic_id, [
                FetchPartitionResult(index, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), -1, -1, -1, None, -1, b"")
                for index, _, _ in partitions]))
            continue
        for index, offset, part_max in partitions:
            log_obj = lm.get_log(TopicPartition(name, index)) if name is not None else None
            if log_obj is None or log_obj.offline:
                if log_obj is not None or (name is not None and lm.is_offline((name, index))):
                    # its log dir failed (or was offline at start-up): no offsets from memory either
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    errors = True
                elif version >= 13 and name is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                # empty, never null, records: librdkafka refuses a null MessageSet ("invalid
                # MessageSetSize -1") and would never see the error (Kafka sends MemoryRecords.EMPTY)
                results.append(FetchPartitionResult(index, int(code), -1, -1, -1, None, -1, b""))
                continue
            if topic_id is not None and log_obj.topic_id is not None and log_obj.topic_id != topic_id:
                # a session (or a long poll) holding a topic deleted and recreated under the same
                # name: never the new topic's records under the old id (ReplicaManager.readFromLocalLog)
                results.append(FetchPartitionResult(index, int(ErrorCode.INCONSISTENT_TOPIC_ID), -1, -1, -1,
                                                    None, -1, b""))
                errors = True
                continue
            readable += 1
            hw = log_obj.high_watermark
            lso = log_obj.last_stable_offset
            start = log_obj.log_start_offset
            limit = min(part_max, remaining) if remaining > 0 else 0
            records = b""
            code = 0
            if offset < start or offset > log_obj.log_end_offset:
                code = ErrorCode.OFFSET_OUT_OF_RANGE
            elif (limit > 0 or min_one) and offset < (lso if read_committed else hw):
                try:
                    data = log_obj.read(offset, max(limit, 0), max_offset=lso if read_committed else hw,
                                        min_one=min_one, as_file=zero_copy)
                    records = data.records if data is not None else b""
                except KafkaError as exc:
                    code = exc.code
                except OSError as exc:
                    log.error("fetch from %s-%d failed on disk: %s", name, index, exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            if code:
                errors = True
                records = b""  # not None: see above (OFFSET_OUT_OF_RANGE must reach librdkafka)
            elif records:
                n = len(records)
                total += n
                remaining -= n
                min_one = False
            aborted = None
            if read_committed:
                aborted = _aborted(log_obj, offset, records) if records else []
            results.append(FetchPartitionResult(index, int(code), hw, lso, start, aborted, -1, records))
        topics.append(FetchTopicResult(name, topic_id, results))
    return topics, total, errors or not readable, readable


def _aborted(log_obj, offset: int, records) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions overlapping the returned batches."""
    upper = (records.last_offset() if type(records) is FileRecords else _last_offset(records)) + 1
    return [(t.producer_id, t.first_offset) for t in log_obj.aborted_transactions(offset, upper)]


_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")          # lastOffsetDelta, at byte 23 of a batch


def _last_offset(records) -> int:
    """Last offset of the last batch in `records` (whole batches: walks the length fields only)."""
    p, n, last = 0, len(records), -1
    while n - p >= BATCH_OVERHEAD:
        base, length = _BASE_AND_LENGTH.unpack_from(records, p)
        last = base + _LAST_DELTA.unpack_from(records, p + 23)[0]
        p += length + LOG_OVERHEAD
    return last


async def handle(ctx, request):
    version = ctx.api_version
    sessions = ctx.broker.fetch_sessions
    session_id, epoch = (request.session_id, request.session_epoch) if version >= 7 else (0, FINAL_EPOCH)
    session = None
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):            # a full fetch (see broker/fetch/session.py)
        if session_id != INVALID_SESSION_ID:
            sessions.remove(session_id)
        wanted = _resolve(ctx, request.topics, version)
    else:                                                # an incremental fetch
        session = sessions.get(session_id)
        if session is None:
            code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        elif epoch != session.epoch:
            code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
        elif session.uses_topic_ids != (version >= 13):     # its keys are names, the request's ids, or back
            code = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        else:
            code = 0
        if code:
            return codec.encode_fetch_response(ctx.correlation_id, version, [], error_code=code, session_id=0)
        _update_session(ctx, session, request, version)
        if not session.partitions:
            # nothing left in it: closed, and this request answered sessionless, session id 0
            # (FetchManager.newContext)
            sessions.remove(session.id)
            session = None
            wanted = _resolve(ctx, request.topics, version)
        else:
            # the next epoch now, before any long poll (Kafka's FetchManager.newContext): a duplicate
            # of this request arriving while it is parked is then refused, not served a second time
            session.epoch = next_epoch(session.epoch)
            expected_epoch = session.epoch
            wanted = _session_wanted(session)

    quota = ctx.broker.quotas.fetch
    topics = await _fetch(ctx, request, version, wanted, quota)
    if session is not None and session.epoch != expected_epoch:
        # the session moved on while this fetch was parked (Kafka's IncrementalFetchContext)
        return codec.encode_fetch_response(ctx.correlation_id, version, [],
                                           error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=session.id)
    if quota.enabled:
        throttle_ms = _record_quota(ctx, quota, session, wanted, topics, version)
        if throttle_ms:
            # Kafka's getThrottledResponse: nothing served (the next fetch gets it), a session
            # keeps its partitions (already at its next epoch), no new session is created
            return codec.encode_fetch_response(ctx.correlation_id, version, [], throttle_time_ms=throttle_ms,
                                               session_id=session.id if session is not None else INVALID_SESSION_ID)

    if session is not None:
        topics = _news_only(session, wanted, topics, version)
        answer_id = session.id
    elif epoch == INITIAL_EPOCH:
        session = sessions.create(_session_partitions(wanted, topics, version), uses_topic_ids=version >= 13)
        answer_id = session.id if session is not None else INVALID_SESSION_ID
    else:
        answer_id = INVALID_SESSION_ID
    _record_metrics(ctx.metrics, topics)
    return codec.encode_fetch_response(ctx.correlation_id, version, topics, session_id=answer_id)


async def _fetch(ctx, request, version, wanted, quota):
    """Read every wanted partition; long-poll for appends while below min_bytes and error-free."""
    max_bytes = request.max_bytes if request.max_bytes > 0 else INT32_MAX
    fetch_max = ctx.config.get("fetch.max.bytes")
    if fetch_max:
        max_bytes = min(max_bytes, fetch_max)
    if quota.enabled:
        # Kafka: no more than the quota allows in one window, so one answer is never throttled for sure
        cap = quota.max_value_in_window(ctx.principal, ctx.client_id)
        if cap is not None:
            max_bytes = max(1, min(max_bytes, cap))
    # never wait for more than the fetch may return (Kafka's fetchMinBytes = min(minBytes, fetchMaxBytes))
    min_bytes = min(request.min_bytes, max_bytes)
    read_committed = request.isolation_level == READ_COMMITTED
    wait_ms = request.max_wait_ms
    may_park = min_bytes > 0 and wait_ms > 0 and wanted
    if may_park:
        # appends counted from before the read: one landing while a read runs in a worker thread
        # then re-reads at once instead of parking past it (broker/fetch/wait.py)
        waiters = ctx.broker.fetch_waiters
        tps = [TopicPartition(name, index) for name, _, parts in wanted for index, _, _ in parts]
        mark = waiters.appends(tps)
    topics, total, errors, readable = await _read_all(ctx, wanted, version, max_bytes, read_committed)
    if total < min_bytes and may_park and not errors:
        # the session's epoch moved and nothing else of this fetch changes anything: the
        # connection's next request may start while this one is parked (network/connection.py),
        # unless the client is over its consumer_byte_rate now: then, as on Kafka, the next
        # request waits for this answer and the throttle it carries
        if not (quota.enabled and quota.throttle_time(ctx.principal, ctx.client_id, int(time.monotonic() * 1000))):
            ctx.effects_applied()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        while total < min_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0 or not await waiters.wait(tps, remaining, ctx.parked, mark) or waiters.closed:
                break
            mark = waiters.appends(tps)
            topics, total, errors, now_readable = await _read_all(ctx, wanted, version, max_bytes,
                                                                  read_committed)
            if errors or now_readable < readable:
                # a partition went away while parked (its topic deleted): answer now, as Kafka's
                # DelayedFetch completes on UNKNOWN_TOPIC_OR_PARTITION
                break
    return topics


def _record_quota(ctx, quota, session, wanted, topics, version) -> int:
    """Record the size of the answer we would send against the client's consumer_byte_rate; the
    throttle time (0: send it). A throttled answer is empty, so its bytes are taken back (Kafka's
    unrecordQuotaSensor)."""
    if session is not None:
        sent = [FetchTopicResult(r.name, r.topic_id,
                                 [a for (index, _, _), a in zip(partitions, r.partitions)
                                  if session.partitions[_key(version, name, topic_id, index)].has_news(a)])
                for (name, topic_id, partitions), r in zip(wanted, topics)]
        sent = [t for t in sent if t.partitions]
    else:
        sent = topics
    size = sum(len(chunk) for chunk in codec.encode_fetch_response(ctx.correlation_id, version, sent))
    now_ms = int(time.monotonic() * 1000)
    throttle_ms = quota.record(ctx.principal, ctx.client_id, size, now_ms)
    if throttle_ms:
        quota.unrecord(ctx.principal, ctx.client_id, size, now_ms)
        ctx.throttle_ms = throttle_ms
        if ctx.metrics is not None:
            ctx.metrics.record_quota_throttle("fetch", throttle_ms)
    return throttle_ms


# -- sessions ----------------------------------------------------------------------------------

def _key(version, name, topic_id, index):
    return (topic_id if version >= 13 else name, index)


def _session_partitions(wanted, topics, version) -> "OrderedDict[tuple, SessionPartition]":
    """The partitions of a full fetch as a new session's state, remembering what we answered."""
    parts: OrderedDict = OrderedDict()
    for (name, topic_id, partitions), result in zip(wanted, topics):
        for (index, offset, max_bytes), answered in zip(partitions, result.partitions):
            sp = SessionPartition(name, topic_id, index, offset, max_bytes)
            sp.remember(answered)
            parts[_key(version, name, topic_id, index)] = sp
    return parts


def _update_session(ctx, session, request, version) -> None:
    """Apply an incremental request: added/changed partitions, then forgotten ones."""
    for name, topic_id, partitions in _resolve(ctx, request.topics, version):
        for index, offset, max_bytes in partitions:
            key = _key(version, name, topic_id, index)
            sp = session.partitions.get(key)
            if sp is None:
                session.partitions[key] = SessionPartition(name, topic_id, index, offset, max_bytes)
            else:
                sp.fetch_offset, sp.max_bytes = offset, max_bytes
    for forgotten in request.forgotten_topics_data or ():
        ident = forgotten.topic_id if version >= 13 else forgotten.topic
        for index in forgotten.partitions:
            session.partitions.pop((ident, index), None)


def _session_wanted(session):
    """The session's partitions grouped by topic, in session order, in _resolve's shape."""
    grouped: OrderedDict = OrderedDict()
    for sp in session.partitions.values():
        entry = grouped.get((sp.name, sp.topic_id))
        if entry is None:
            entry = grouped[(sp.name, sp.topic_id)] = (sp.name, sp.topic_id, [])
        entry[2].append((sp.index, sp.fetch_offset, sp.max_bytes))
    return list(grouped.values())


def _news_only(session, wanted, topics, version):
    """Keep only the partitions whose answer differs from what the session last told the client.

    Partitions that returned records move to the end of the session, so that when max_bytes cuts
    a response short the others go first next time (Kafka's fairness rule for sessions)."""
    out = []
    served = []
    for (name, topic_id, partitions), result in zip(wanted, topics):
        kept = []
        for (index, _, _), answered in zip(partitions, result.partitions):
            key = _key(version, name, topic_id, index)
            if session.partitions[key].changed(answered):
                kept.append(answered)
                if answered.records:
                    served.append(key)
        if kept:
            out.append(FetchTopicResult(result.name, result.topic_id, kept))
    for key in served:
        session.partitions.move_to_end(key)
    return out


def _record_metrics(metrics, topics) -> None:
    if metrics is None:
        return
    for topic in topics:
        for p in topic.partitions:
            if p.error_code:
                metrics.record_error("Fetch", p.error_code)
            elif p.records:
                metrics.record_fetch(topic.name, len(p.records))
