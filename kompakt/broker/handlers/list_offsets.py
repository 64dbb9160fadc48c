"""ListOffsets (key 2), versions 1-10 (Kafka 4.0's range, the release Kompakt advertises).

Behaviour, per partition, by the requested timestamp:
  -2 EARLIEST / -4 EARLIEST_LOCAL  the log start offset, timestamp -1
  -1 LATEST                       the high watermark (read_uncommitted) or the last stable offset
                                  (read_committed), timestamp -1
  -3 MAX_TIMESTAMP (v7+)          the offset and timestamp of the record with the largest timestamp
                                  (Log.max_timestamp_offset), offset -1 when the log is empty
  -5 LATEST_TIERED (v9+)          -1: there is no tiered storage
  >= 0                            the first offset whose timestamp is >= the given one
                                  (Log.offset_for_timestamp), offset -1 / timestamp -1 when none
With read_committed (isolation_level 1) a lookup by time or MAX_TIMESTAMP that lands at or past
the last stable offset answers -1 (Kafka's lastFetchableOffset rule: nothing unstable is named).
Leader epoch: 0 for every answer (one broker, never re-elected).

Threads: a request with a lookup by time (timestamp >= 0: time index, then a scan of segment
bytes that may be on disk only) or by MAX_TIMESTAMP (reads and decodes the batch holding it) is
answered from one worker thread; the others (log start, high watermark: in memory) on the loop.

Authorization: each topic needs DESCRIBE (else TOPIC_AUTHORIZATION_FAILED for its partitions).

Errors: UNKNOWN_TOPIC_OR_PARTITION; KAFKA_STORAGE_ERROR for a partition whose log dir is offline
(not the offsets it had in memory: Kafka's getPartitionOrException); a timestamp below -5 is INVALID_REQUEST (v1+ clients never send
one); KafkaErrors from storage by their code.

Version notes: Kafka 4 dropped v0 (old_style_offsets); v2 isolation level and throttle time;
v4 current/returned leader epoch; v6 flexible; v7 MAX_TIMESTAMP; v8 EARLIEST_LOCAL; v9
LATEST_TIERED; v10 timeout_ms (nothing here waits); v11 (Kafka 4.2: not served while Kompakt
advertises 4.0; the code stays) EARLIEST_PENDING_UPLOAD (-6: -1, as -5).
"""
from __future__ import annotations

import asyncio
import logging

from kafka.protocol.consumer.offsets import ListOffsetsResponse

from kompakt.broker.handlers._common import log_or_error
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode, InvalidRequestError, KafkaError
from kompakt.storage import TopicPartition

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5, -6
READ_COMMITTED = 1

log = logging.getLogger(__name__)

_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Partition = _Topic.ListOffsetsPartitionResponse


def _offset_and_timestamp(found) -> tuple[int, int]:
    """Storage answers (offset, timestamp), an object with .offset/.timestamp, or None."""
    if found is None:
        return -1, -1
    if isinstance(found, tuple):
        return found[0], found[1]
    return found.offset, found.timestamp


def lookup(log_obj, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """(offset, timestamp) answering `timestamp` for one partition; raises KafkaError."""
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log_obj.log_start_offset, -1
    if timestamp == LATEST:
        return (log_obj.last_stable_offset if read_committed else log_obj.high_watermark), -1
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        offset, ts = _offset_and_timestamp(log_obj.max_timestamp_offset())
    elif timestamp < 0:
        raise InvalidRequestError(f"ListOffsets timestamp {timestamp} is neither a time nor one of -1..-6")
    else:
        offset, ts = _offset_and_timestamp(log_obj.offset_for_timestamp(timestamp))
    # Kafka's Partition.fetchOffsetForTimestamp: an offset a consumer could not fetch yet (at or
    # past the LSO, read_committed, or the high watermark, read_uncommitted) is not found
    if offset >= (log_obj.last_stable_offset if read_committed else log_obj.high_watermark):
        return -1, -1
    return offset, ts


async def handle(ctx, request):
    version = ctx.api_version
    read_committed = version >= 2 and request.isolation_level == READ_COMMITTED
    if any(p.timestamp >= 0 or p.timestamp == MAX_TIMESTAMP for t in request.topics for p in t.partitions):
        topics = await asyncio.to_thread(_answer, ctx, request, read_committed)
    else:
        topics = _answer(ctx, request, read_committed)
    return ListOffsetsResponse(version=version, throttle_time_ms=0, topics=topics)


def _answer(ctx, request, read_committed: bool) -> list:
    lm = ctx.log_manager
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.authorize(Op.DESCRIBE, Res.TOPIC, t.name)
        for p in t.partitions:
            if not allowed:
                parts.append(_Partition(partition_index=p.partition_index,
                                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                        timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            log_obj, missing = log_or_error(lm, TopicPartition(t.name, p.partition_index))
            if log_obj is None:
                parts.append(_Partition(partition_index=p.partition_index, error_code=int(missing),
                                        timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            try:
                offset, ts = lookup(log_obj, p.timestamp, read_committed)
                code = 0
            except KafkaError as exc:
                offset, ts, code = -1, -1, exc.code
            parts.append(_Partition(partition_index=p.partition_index, error_code=int(code),
                                    timestamp=ts, offset=offset, leader_epoch=0 if offset >= 0 else -1))
        topics.append(_Topic(name=t.name, partitions=parts))
    return topics
