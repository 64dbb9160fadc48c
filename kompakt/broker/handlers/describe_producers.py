"""DescribeProducers (API key 61), version 0.

Behaviour: for each requested partition, the producers its log remembers (producer state, the
same entries the `.snapshot` files hold): producer id and epoch, last sequence, last timestamp,
coordinator epoch, and the first offset of its open transaction (-1 when none). Per partition:
TOPIC_AUTHORIZATION_FAILED without READ on the topic, UNKNOWN_TOPIC_OR_PARTITION for a partition
this broker does not have, KAFKA_STORAGE_ERROR for one whose log dir is offline (Kafka's
ReplicaManager.activeProducerState).
"""
from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeProducersResponse

from kompakt.broker.handlers._common import log_or_error
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode
from kompakt.storage import TopicPartition

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse = TopicResponse.PartitionResponse
ProducerState = PartitionResponse.ProducerState


def _partition(ctx, topic: str, index: int, allowed: bool) -> PartitionResponse:
    if not allowed:
        return PartitionResponse(partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                 error_message=None, active_producers=[])
    lg, missing = log_or_error(ctx.log_manager, TopicPartition(topic, index))
    if lg is None:
        message = (f"This server does not host this topic-partition: {topic}-{index}"
                   if missing == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                   else f"Partition {topic}-{index} is in an offline log directory")
        return PartitionResponse(partition_index=index, error_code=missing, error_message=message,
                                 active_producers=[])
    with lg.lock:
        entries = sorted(lg.producer_state.producers.values(), key=lambda e: e.producer_id)
        producers = [ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                                   last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                                   coordinator_epoch=e.coordinator_epoch,
                                   current_txn_start_offset=e.current_txn_first_offset)
                     for e in entries]
    return PartitionResponse(partition_index=index, error_code=0, error_message=None, active_producers=producers)


async def handle(ctx, request):
    topics = []
    for t in request.topics:
        allowed = ctx.authorize(Op.READ, Res.TOPIC, t.name)
        topics.append(TopicResponse(name=t.name, partitions=[_partition(ctx, t.name, i, allowed)
                                                             for i in t.partition_indexes]))
    return DescribeProducersResponse(version=ctx.api_version, throttle_time_ms=0, topics=topics)
