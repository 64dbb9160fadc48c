"""CreatePartitions (API key 37), versions 0-3.

Behaviour (Kafka's ControllerApis.createPartitions + ReplicationControlManager.createPartitions):
* A topic named twice: INVALID_REQUEST "Duplicate topic name." (once per name).
* Unknown topic: UNKNOWN_TOPIC_OR_PARTITION.
* count == current: INVALID_PARTITIONS "Topic already has N partition(s)."; count < current:
  INVALID_PARTITIONS "The topic T currently has N partition(s); C would not be an increase."
* assignments (optional): exactly count - current lists, each [this node], else
  INVALID_REPLICA_ASSIGNMENT.
* More than 10000 new partitions in one request: POLICY_VIOLATION (Kafka's per-operation bound).
* Internal topics (`__consumer_offsets`): INVALID_REQUEST. Kafka allows growing them, but the group
  coordinator maps each group to a partition by hash modulo the partition count, so growing it
  would move groups away from their committed offsets.
* validate_only: every check, nothing created. Otherwise the log manager adds the partitions
  (new dirs, persisted topic metadata) before we answer.

Version notes: v2+ flexible; v0-3 otherwise identical.

Authorization: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED, before existence).
"""
from __future__ import annotations

import logging

from kafka.protocol.admin.topics import CreatePartitionsResponse

from kompakt.broker.handlers._common import (MAX_PARTITIONS_PER_REQUEST, ResultError, error_code_of,
                                             is_internal, run_storage)
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.broker.security.acl import Op, Res

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3

log = logging.getLogger(__name__)

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def _check(topic, current: int, node_id: int) -> int:
    """Validate one topic's request against its current partition count; returns partitions added."""
    if topic.count == current:
        raise ResultError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        raise ResultError(ErrorCode.INVALID_PARTITIONS,
                          f"The topic {topic.name} currently has {current} partition(s); "
                          f"{topic.count} would not be an increase.")
    added = topic.count - current
    if topic.assignments is not None:
        if len(topic.assignments) != added:
            raise ResultError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"Attempted to add {added} additional partition(s), but only "
                              f"{len(topic.assignments)} assignment(s) were specified.")
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [node_id]:
                raise ResultError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes broker(s) "
                                  f"{list(assignment.broker_ids)}, but this single-node cluster has "
                                  f"only broker {node_id} and one replica per partition.")
    return added


async def handle(ctx, request) -> CreatePartitionsResponse:
    lm = ctx.log_manager
    node_id = ctx.config.node_id
    names = [t.name for t in request.topics]
    results, reported_duplicates = [], set()
    budget = MAX_PARTITIONS_PER_REQUEST
    for topic in request.topics:
        name = topic.name
        if names.count(name) > 1:
            if name not in reported_duplicates:
                reported_duplicates.add(name)
                results.append(Result(name=name, error_code=int(ErrorCode.INVALID_REQUEST),
                                      error_message="Duplicate topic name."))
            continue
        try:
            if not ctx.authorize(Op.ALTER, Res.TOPIC, name):    # Kafka: ALTER on each topic, before existence
                raise ResultError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            meta = lm.topics.get(name)
            if meta is None:
                raise ResultError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "This server does not host this topic-partition.")
            if is_internal(name):
                raise ResultError(ErrorCode.INVALID_REQUEST,
                                  f"Kompakt does not add partitions to the internal topic {name}: the group "
                                  f"coordinator maps groups to its partitions by hash.")
            current = meta.partitions
            added = _check(topic, current, node_id)
            if added > budget:
                raise ResultError(ErrorCode.POLICY_VIOLATION,
                                  "Unable to perform excessively large batch operation.")
            budget -= added
            if not request.validate_only:
                await run_storage(lm.create_partitions, name, topic.count)
                log.info("topic %s now has %d partitions (was %d) for client %s",
                         name, topic.count, current, ctx.client_id)
            results.append(Result(name=name, error_code=0, error_message=None))
        except ResultError as exc:
            results.append(Result(name=name, error_code=int(exc.code), error_message=exc.message))
        except KafkaError as exc:
            results.append(Result(name=name, error_code=int(error_code_of(exc)), error_message=str(exc)))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
