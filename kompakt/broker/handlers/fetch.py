"""Fetch (key 1), versions 4-18.

Behaviour: for each requested partition, in request order, read whole record batches from
`fetch_offset` with `Log.read` (bytes sliced from the segment files) and pass them to the
response untouched (codec.encode_fetch_response builds the response around them).

Limits: a partition gets at most `partition_max_bytes`, the response at most `max_bytes`
(request field, v3+) and `fetch.max.bytes`... except that until some partition has returned data,
a read may return one whole batch larger than the limits (Kafka's at-least-one-batch rule, so a
batch bigger than max.partition.fetch.bytes never wedges a consumer). Once data went out, later
partitions get nothing that would exceed `max_bytes`.

Isolation: read_uncommitted reads up to the high watermark; read_committed up to the last stable
offset and answers an empty aborted-transactions list (no transaction coordinator here, so
there are never aborted transactions).

Long poll: with fewer than `min_bytes` bytes available and no partition error, the fetch waits
up to `max_wait_ms` on fetch_wait.FetchWaiters, woken by appends to any of its partitions, then
reads again.

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID from v13),
OFFSET_OUT_OF_RANGE when fetch_offset is below the log start offset or above the log end offset
(the consumer then applies auto.offset.reset).

Fetch sessions (KIP-227): not kept. Every response has session_id 0, which tells the client "no
session": it keeps sending full fetch requests. A request naming a session id we never gave out
gets FETCH_SESSION_ID_NOT_FOUND.

Version notes: v4 isolation level + last stable offset; v5 log start offset; v7 sessions;
v9 current leader epoch (accepted, not checked: our epoch is always 0); v11 rack id and preferred
read replica (-1); v12 flexible; v13 topic ids; v15-18 replica state / directory id / high
watermark tagged fields (for followers; ignored).
"""
from __future__ import annotations

import asyncio
import logging

from kompakt.protocol import codec
from kompakt.protocol.codec import FetchPartitionResult, FetchTopicResult
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18

READ_COMMITTED = 1
INT32_MAX = 2**31 - 1

log = logging.getLogger(__name__)


def _resolve(ctx, request, version):
    """[(name, topic_id, [(partition, fetch_offset, partition_max_bytes)])] in request order."""
    lm = ctx.log_manager
    by_id = None
    out = []
    for t in request.topics:
        if version >= 13:
            if by_id is None:
                by_id = {m.topic_id: m.name for m in lm.topics.values()}
            name = by_id.get(t.topic_id)
        else:
            name = t.topic
        out.append((name, t.topic_id if version >= 13 else None,
                    [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in t.partitions]))
    return out


def _read_all(ctx, wanted, version, max_bytes, read_committed):
    """One pass over the partitions: (topic results, total bytes, whether any partition failed)."""
    lm = ctx.log_manager
    remaining = max_bytes
    min_one = True
    total = 0
    errors = False
    topics = []
    aborted = [] if read_committed else None
    for name, topic_id, partitions in wanted:
        results = []
        for index, offset, part_max in partitions:
            log_obj = lm.get_log(TopicPartition(name, index)) if name is not None else None
            if log_obj is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(FetchPartitionResult(index, int(code), -1, -1, -1, None, -1, None))
                errors = True
                continue
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
                                        min_one=min_one)
                    records = data.records if data is not None else b""
                except KafkaError as exc:
                    code = exc.code
                except OSError as exc:
                    log.error("fetch from %s-%d failed on disk: %s", name, index, exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            if code:
                errors = True
                records = None
            elif records:
                n = len(records)
                total += n
                remaining -= n
                min_one = False
            results.append(FetchPartitionResult(index, int(code), hw, lso, start, aborted, -1, records))
        topics.append(FetchTopicResult(name, topic_id, results))
    return topics, total, errors


async def handle(ctx, request):
    version = ctx.api_version
    if version >= 7 and request.session_id != 0:
        return codec.encode_fetch_response(ctx.correlation_id, version, [],
                                           error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    max_bytes = request.max_bytes if request.max_bytes > 0 else INT32_MAX
    fetch_max = ctx.config.get("fetch.max.bytes")
    if fetch_max:
        max_bytes = min(max_bytes, fetch_max)
    read_committed = request.isolation_level == READ_COMMITTED
    wanted = _resolve(ctx, request, version)
    topics, total, errors = _read_all(ctx, wanted, version, max_bytes, read_committed)
    wait_ms = request.max_wait_ms
    if total < request.min_bytes and wait_ms > 0 and not errors and wanted:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        tps = [TopicPartition(name, index) for name, _, parts in wanted for index, _, _ in parts]
        waiters = ctx.broker.fetch_waiters
        while total < request.min_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0 or not await waiters.wait(tps, remaining):
                break
            topics, total, errors = _read_all(ctx, wanted, version, max_bytes, read_committed)
            if errors:
                break
    _record_metrics(ctx.metrics, topics)
    return codec.encode_fetch_response(ctx.correlation_id, version, topics, session_id=0)


def _record_metrics(metrics, topics) -> None:
    if metrics is None:
        return
    for topic in topics:
        for p in topic.partitions:
            if p.error_code:
                metrics.record_error("Fetch", p.error_code)
            elif p.records:
                metrics.record_fetch(topic.name, len(p.records))
