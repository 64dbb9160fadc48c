"""OffsetForLeaderEpoch (API key 23), versions 2-4.

Consumers (KIP-320) ask it after a leader change or on startup to check that the log was not
truncated below their position: "where does epoch E end?".

Behaviour (Kafka's Partition.lastOffsetForLeaderEpoch + LeaderEpochFileCache.endOffsetFor):
* Unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION; its log dir offline: KAFKA_STORAGE_ERROR.
* current_leader_epoch (v2+): -1 skips the check; below the partition's leader epoch ->
  FENCED_LEADER_EPOCH; above -> UNKNOWN_LEADER_EPOCH. The leader epoch is the one Metadata
  reports (`LEADER_EPOCH`, 0: a single node never changes leader).
* Answer, from the partition's leader-epoch cache (`leader-epoch-checkpoint`) with the current
  epoch starting at the log end offset when the cache does not have it yet (Kafka assigns it when
  the broker becomes leader, so a leader's cache is never empty):
    requested -1                         -> (-1, -1)
    requested == latest epoch             -> (epoch, log end offset)
    requested < first epoch              -> (requested, start offset of the first epoch)
    first <= requested < latest          -> (largest epoch <= requested, start of the next epoch)
    requested > latest                   -> (-1, -1)

Version notes: v0-1 are below Kafka 4's floor; v2 adds current_leader_epoch; v3 replica_id
(consumers send -1, followers do not exist here); v4 flexible.

Authorization (Kafka's handleOffsetForLeaderEpochRequest): CLUSTER_ACTION on the cluster (the
API began inter-broker) lets every topic through; else DESCRIBE on each topic, as a consumer
checking for truncation needs (KIP-320), else TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from bisect import bisect_right

from kafka.protocol.consumer.offsets import OffsetForLeaderEpochResponse

from kompakt.broker.handlers._common import log_or_error
from kompakt.protocol.errors import ErrorCode
from kompakt.storage import TopicPartition
from kompakt.broker.security.acl import Op, Res

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

LEADER_EPOCH = 0          # what Metadata (handlers/metadata.py) reports for every partition
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset


def epoch_entries(plog) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs of the partition, including the current leader epoch."""
    cache = getattr(plog, "leader_epoch_cache", None)
    entries = list(cache.entries()) if cache is not None else []
    if not entries or entries[-1][0] < LEADER_EPOCH:
        entries.append((LEADER_EPOCH, plog.log_end_offset))
    return entries


def end_offset_for(entries: list[tuple[int, int]], requested: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's LeaderEpochFileCache.endOffsetFor over explicit entries."""
    if requested == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    epochs = [e for e, _ in entries]
    if requested == epochs[-1]:
        return requested, log_end_offset
    higher = bisect_right(epochs, requested)
    if higher >= len(epochs):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return requested, entries[0][1]
    return epochs[higher - 1], entries[higher][1]


def _partition(ctx, topic: str, p, cluster_action: bool) -> EpochEndOffset:
    def fail(code: ErrorCode) -> EpochEndOffset:
        return EpochEndOffset(error_code=int(code), partition=p.partition,
                              leader_epoch=UNDEFINED_EPOCH, end_offset=UNDEFINED_EPOCH_OFFSET)

    if not (cluster_action or ctx.authorize(Op.DESCRIBE, Res.TOPIC, topic)):
        return fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    plog, missing = log_or_error(ctx.log_manager, TopicPartition(topic, p.partition))
    if plog is None:
        return fail(missing)
    current = p.current_leader_epoch
    if current != -1 and current < LEADER_EPOCH:
        return fail(ErrorCode.FENCED_LEADER_EPOCH)
    if current > LEADER_EPOCH:
        return fail(ErrorCode.UNKNOWN_LEADER_EPOCH)
    leo = plog.log_end_offset
    epoch, offset = end_offset_for(epoch_entries(plog), p.leader_epoch, leo)
    return EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=offset)


async def handle(ctx, request) -> OffsetForLeaderEpochResponse:
    cluster_action = ctx.authorize_cluster(Op.CLUSTER_ACTION)
    topics = [TopicResult(topic=t.topic,
                          partitions=[_partition(ctx, t.topic, p, cluster_action) for p in t.partitions])
              for t in request.topics]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
