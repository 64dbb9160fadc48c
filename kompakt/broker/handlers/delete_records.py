"""DeleteRecords (API key 21), versions 0-2: raise a partition's log start offset.

Behaviour (Kafka's ReplicaManager.deleteRecordsOnLocalLog + Partition.deleteRecordsOnLeader):
* Internal topics: INVALID_TOPIC_EXCEPTION ("Cannot delete records of internal topic ...").
* Unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION; its log dir offline: KAFKA_STORAGE_ERROR
  (nothing changes, not even the log start offset in memory).
* A topic whose cleanup.policy lacks `delete` (compact-only): POLICY_VIOLATION, as Kafka — deleting
  a prefix of a compacted log would drop the latest value of keys.
* offset -1 means the high watermark; any other negative offset, or one above the high watermark:
  OFFSET_OUT_OF_RANGE.
* Otherwise the log start offset becomes max(current, offset): records below it are no longer
  served, whole segments below it are deleted by the log's retention pass. low_watermark is the
  log start offset after the call (unchanged when the offset was already below it).
* Failed partitions answer low_watermark -1.

Version notes: v2 flexible; otherwise identical. timeout_ms is unused: the change is local and
done before we answer (a single replica has nothing to wait for).

Durability (single node: the disk is the only copy): when a log start offset moved, the
log-start-offset checkpoints are written (temp, fsync, rename, dir fsync) before the answer, so a
power cut cannot bring deleted records back (Kafka writes that checkpoint only every
log.flush.start.offset.checkpoint.interval.ms and relies on its replicas).

Authorization: DELETE on the topic (else TOPIC_AUTHORIZATION_FAILED per partition).
"""
from __future__ import annotations

import logging

from kafka.protocol.admin.topics import DeleteRecordsResponse

from kompakt.broker.handlers._common import error_code_of, is_internal, log_or_error, run_storage
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition
from kompakt.broker.security.acl import Op, Res

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1   # DeleteRecordsRequest.HIGH_WATERMARK

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = TopicResult.DeleteRecordsPartitionResult


def _fail(index: int, code: ErrorCode) -> PartitionResult:
    return PartitionResult(partition_index=index, low_watermark=-1, error_code=int(code))


async def _delete(ctx, topic: str, index: int, offset: int) -> PartitionResult:
    if not ctx.authorize(Op.DELETE, Res.TOPIC, topic):   # Kafka: DELETE on the topic
        return _fail(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if is_internal(topic):
        return _fail(index, ErrorCode.INVALID_TOPIC_EXCEPTION)
    plog, missing = log_or_error(ctx.log_manager, TopicPartition(topic, index))
    if plog is None:
        return _fail(index, missing)
    if not plog.config.delete:
        log.info("refusing DeleteRecords on %s-%d: cleanup.policy=%s has no 'delete'",
                 topic, index, ",".join(sorted(plog.config.cleanup_policy)))
        return _fail(index, ErrorCode.POLICY_VIOLATION)
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > plog.high_watermark:
        return _fail(index, ErrorCode.OFFSET_OUT_OF_RANGE)
    if target > plog.log_start_offset:
        try:
            await run_storage(plog.delete_records, target)
        except KafkaError as exc:
            return _fail(index, error_code_of(exc))
        log.info("log start offset of %s-%d raised to %d by client %s", topic, index, target, ctx.client_id)
    return PartitionResult(partition_index=index, low_watermark=plog.log_start_offset, error_code=0)


async def handle(ctx, request) -> DeleteRecordsResponse:
    topics = []
    moved = False
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            plog = ctx.log_manager.get_log(TopicPartition(topic.name, p.partition_index))
            before = plog.log_start_offset if plog is not None else None
            partitions.append(await _delete(ctx, topic.name, p.partition_index, p.offset))
            moved = moved or (plog is not None and plog.log_start_offset != before)
        topics.append(TopicResult(name=topic.name, partitions=partitions))
    if moved:
        await run_storage(ctx.log_manager.checkpoint_log_start_offsets)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
