"""OffsetDelete (API key 47), version 0.

Behaviour (KIP-496): deletes committed offsets of some partitions of a group by appending
tombstones. Allowed for an Empty group; for a group with members only for topics no member is
subscribed to (consumer protocol; subscriptions that cannot be read count as every topic, as
Kafka's ClassicGroup.isSubscribedToTopic), others failing with GROUP_SUBSCRIBED_TO_TOPIC. An unknown
topic or a partition the topic lacks answers UNKNOWN_TOPIC_OR_PARTITION, decided here before the
coordinator (Kafka's KafkaApis.handleOffsetDeleteRequest). Top-level
errors: INVALID_GROUP_ID (empty id), GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members of another protocol type
than consumer), COORDINATOR_NOT_AVAILABLE (append failed).

Authorization: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic
(else TOPIC_AUTHORIZATION_FAILED for its partitions).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import OffsetDeleteResponse
from kompakt.broker.handlers._common import missing_part
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0

Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
Partition = Topic.OffsetDeleteResponsePartition


async def handle(ctx, request):
    if not ctx.authorize(Op.DELETE, Res.GROUP, request.group_id):
        return OffsetDeleteResponse(version=0, throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                    topics=[])
    denied = set() if ctx.authorizer is None else {
        t.name for t in request.topics if not ctx.authorize(Op.READ, Res.TOPIC, t.name)}
    unknown = {(t.name, p.partition_index) for t in request.topics if t.name not in denied
               for p in t.partitions if missing_part(ctx.log_manager, t.name, p.partition_index)}
    tps = [(t.name, p.partition_index) for t in request.topics for p in t.partitions
           if t.name not in denied and (t.name, p.partition_index) not in unknown]
    top, codes = ctx.groups.delete_offsets(request.group_id, tps)
    codes = {**codes, **{(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                         for t in request.topics if t.name in denied for p in t.partitions},
             **{tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in unknown}}
    topics = [] if top else [
        Topic(name=t.name, partitions=[Partition(partition_index=p.partition_index,
                                                 error_code=codes.get((t.name, p.partition_index), 0))
                                       for p in t.partitions])
        for t in request.topics]
    return OffsetDeleteResponse(version=0, throttle_time_ms=0, error_code=top, topics=topics)
