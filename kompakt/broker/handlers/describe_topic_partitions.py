"""DescribeTopicPartitions (API key 75), version 0: paginated topic metadata (KIP-966).

Behaviour (Kafka's DescribeTopicPartitionsRequestHandler + KRaftMetadataCache):
* topics empty = every topic; otherwise the named ones. Only names >= the cursor's topic are
  considered, sorted by name; a cursor naming a topic missing from a non-empty list, or with a
  negative partition, is INVALID_REQUEST (answered on every requested topic).
* Partitions are returned from the cursor's partition (for the cursor's topic) or 0, at most
  min(response_partition_limit, 2000) and at least 1 in total; when the limit cuts a topic, or
  is used up before the next topic, next_cursor names where to continue.
* Unknown requested topics: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for illegal
  names) with a zero topic id; with an empty request list they simply do not exist.
* Every partition: leader and only replica/ISR member is this node, leader epoch as Metadata (0),
  ELR lists empty (never null: the schema allows null, but Kafka's KRaftMetadataCache always
  sends the partition registration's arrays, and the Java Admin streams over them: a null throws
  NullPointerException in describeTopics); one whose log dir is offline has no leader (-1), an empty ISR and this node in
  offline_replicas, as Metadata answers. topic_authorized_operations: every topic operation (no authorizer).

Version notes: v0 only, flexible.

Authorization: DESCRIBE on each topic: hidden from an all-topics answer, else
TOPIC_AUTHORIZATION_FAILED; topic_authorized_operations from the authorizer when there is one.
"""
from __future__ import annotations

import uuid

from kafka.protocol.admin.topics import DescribeTopicPartitionsResponse

from kompakt.broker.handlers._common import invalid_topic_reason, is_internal
from kompakt.broker.handlers.offset_for_leader_epoch import LEADER_EPOCH
from kompakt.protocol.errors import ErrorCode
from kompakt.broker.security.acl import Op, Res

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITION_LIMIT = 2000   # Kafka's max.request.partition.size.limit default
ZERO_UUID = uuid.UUID(int=0)
# AclOperation codes of AclEntry.supportedOperations(TOPIC): READ, WRITE, CREATE, DELETE, ALTER,
# DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, as a 32-bit field.
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = Topic.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor


def _topic(name, code: ErrorCode, topic_id=ZERO_UUID, partitions=(), ops=TOPIC_AUTHORIZED_OPERATIONS) -> Topic:
    return Topic(error_code=int(code), name=name, topic_id=topic_id, is_internal=is_internal(name or ""),
                 partitions=list(partitions), topic_authorized_operations=ops)


def _partition(index: int, node: int, offline: bool) -> Partition:
    if offline:   # as Metadata says (handlers/metadata.py): no leader, this node's replica offline
        return Partition(error_code=0, partition_index=index, leader_id=-1, leader_epoch=LEADER_EPOCH,
                         replica_nodes=[node], isr_nodes=[], eligible_leader_replicas=[],
                         last_known_elr=[], offline_replicas=[node])
    return Partition(error_code=0, partition_index=index, leader_id=node, leader_epoch=LEADER_EPOCH,
                     replica_nodes=[node], isr_nodes=[node], eligible_leader_replicas=[],
                     last_known_elr=[], offline_replicas=[])


async def handle(ctx, request) -> DescribeTopicPartitionsResponse:
    lm = ctx.log_manager
    topics_meta = lm.topics
    node = ctx.broker.node_id
    cursor = request.cursor
    cursor_topic = (cursor.topic_name or "") if cursor is not None else ""
    fetch_all = not request.topics
    # a null name (malformed) is treated as "", an illegal name: INVALID_TOPIC_EXCEPTION below
    requested = sorted(topics_meta) if fetch_all else sorted({t.name or "" for t in request.topics})
    names = [n for n in requested if n >= cursor_topic]

    invalid = None
    if cursor is not None and not fetch_all and cursor_topic not in names:
        invalid = ("DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                   f"{cursor_topic}")
    elif cursor is not None and cursor.partition_index < 0:
        invalid = f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor.partition_index}"
    if invalid is not None:
        return DescribeTopicPartitionsResponse(
            throttle_time_ms=0, next_cursor=None,
            topics=[_topic(t.name, ErrorCode.INVALID_REQUEST) for t in request.topics])

    checked = ctx.authorizer is not None
    remaining = max(min(MAX_PARTITION_LIMIT, request.response_partition_limit), 1)
    results, next_cursor = [], None
    for name in names:
        if remaining == 0:
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        if checked and not ctx.authorize(Op.DESCRIBE, Res.TOPIC, name):   # Kafka: hidden or refused
            if not fetch_all:
                results.append(_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        meta = topics_meta.get(name)
        if meta is None:
            if not fetch_all:
                reason = invalid_topic_reason(name)
                code = ErrorCode.INVALID_TOPIC_EXCEPTION if reason else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(_topic(name, code))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(meta.partitions, start + remaining)
        ops = (sum(1 << op for op in ctx.authorized_operations(Res.TOPIC, name)) if checked
               else TOPIC_AUTHORIZED_OPERATIONS)
        results.append(_topic(name, ErrorCode.NONE, meta.topic_id,
                              (_partition(i, node, lm.is_offline((name, i))) for i in range(start, upper)), ops))
        if upper < meta.partitions:
            next_cursor = Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= max(upper - start, 0)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=results, next_cursor=next_cursor)
