"""AlterReplicaLogDirs (API key 34), versions 1-2: move partitions between this node's log dirs.

Behaviour (Kafka's KafkaApis.handleAlterReplicaLogDirsRequest + ReplicaManager.alterReplicaLogDirs
on one node): each partition named under a dir's path is moved there while it keeps serving
producers and consumers: a `-future` copy in the destination dir catches up, then a crash-safe swap
(kompakt/storage/alter_log_dirs.py; the steps and their recovery rules are there and in
docs/storage.md). The answer comes as soon as the move has started; DescribeLogDirs shows the
future replica (is_future_key true) and its offset lag until the swap. Per partition, in Kafka's
order of checks:
* a topic name too long for `<topic>-<n>.<32 hex>-future` (255 bytes): INVALID_TOPIC_EXCEPTION;
* a path that is not one of `log.dirs` as an absolute path: LOG_DIR_NOT_FOUND;
* a configured dir that is offline: KAFKA_STORAGE_ERROR;
* a partition this node does not have: UNKNOWN_TOPIC_OR_PARTITION; one whose dir is offline (or
  any log dir offline, when a new future log would be needed): KAFKA_STORAGE_ERROR;
* the dir the partition is in already: NONE, nothing moves (a move in progress elsewhere is
  cancelled, as Kafka's futureReplicaDirChanged); the dir it is moving to already: NONE;
* otherwise NONE and the move starts (a move in progress to another dir is cancelled first).
A partition named twice takes the last dir named, answered once (Kafka builds a map).
Authorization: ALTER on the CLUSTER, else every partition CLUSTER_AUTHORIZATION_FAILED.

Version notes: v0 was removed in Kafka 4.0 (v1 is the same; quota throttling comes before the
answer since v1); v2 is flexible. kafka-python's admin `alter_replica_log_dirs` and Kafka's
kafka-reassign-partitions.sh (with log dirs in the reassignment JSON) send it.
"""
from __future__ import annotations

import asyncio
import logging

from kafka.protocol.admin import AlterReplicaLogDirsResponse

from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition

API_KEY = 34
MIN_VERSION = 1
MAX_VERSION = 2

log = logging.getLogger(__name__)

_Topic = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
_Partition = _Topic.AlterReplicaLogDirPartitionResult


def _refused(request, code: ErrorCode) -> AlterReplicaLogDirsResponse:
    """Every partition of the request with `code`, one result per dir and topic (Kafka's
    AlterReplicaLogDirsRequest.getErrorResponse)."""
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        _Topic(topic_name=t.name, partitions=[_Partition(partition_index=p, error_code=int(code))
                                              for p in t.partitions])
        for d in request.dirs for t in d.topics])


def alter(log_manager, wanted: dict[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
    """Start every move (blocking: creates dirs and files); the code each partition answers."""
    out = {}
    for tp, path in wanted.items():
        try:
            log_manager.alter_replica_log_dir(tp, path)
            out[tp] = ErrorCode.NONE
        except KafkaError as exc:
            log.warning("Unable to alter log dirs for %s-%d: %s", tp.topic, tp.partition, exc)
            out[tp] = ErrorCode(int(exc.code))
        except OSError as exc:
            log.error("Error while changing replica dir for partition %s-%d: %s", tp.topic, tp.partition, exc)
            out[tp] = ErrorCode.KAFKA_STORAGE_ERROR
    return out


async def handle(ctx, request) -> AlterReplicaLogDirsResponse:
    if not ctx.authorize_cluster(Op.ALTER):
        return _refused(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: dict[TopicPartition, str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted.pop(TopicPartition(t.name, p), None)   # the last dir named wins
                wanted[TopicPartition(t.name, p)] = d.path
    codes = await asyncio.to_thread(alter, ctx.log_manager, wanted)
    by_topic: dict[str, list] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(_Partition(partition_index=tp.partition, error_code=int(code)))
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        _Topic(topic_name=name, partitions=parts) for name, parts in by_topic.items()])
