"""CreateTopics (API key 19), versions 2-7.

Behaviour (Kafka's ControllerApis.createTopics + ReplicationControlManager.createTopics):
* Every topic in the request gets one result, in request order. Checks, first failure wins:
  - a name given twice: one result, INVALID_REQUEST "Duplicate topic name." (as Kafka);
  - `__cluster_metadata`: INVALID_REQUEST (Kafka reserves it);
  - an illegal name (empty, '.', '..', longer than 249, a char outside [a-zA-Z0-9._-]):
    INVALID_TOPIC_EXCEPTION with Kafka's message; a name equal to an existing one after '.'->'_'
    (metric-name collision): INVALID_TOPIC_EXCEPTION;
  - the topic exists: TOPIC_ALREADY_EXISTS "Topic 'x' already exists.";
  - a config with a null value, an unknown name or a bad value: INVALID_CONFIG with the message
    (also a cleanup.policy item twice or empty, as Kafka 4.2+, and remote.storage.enable=true: no
    tiered storage here, Kafka's message when it is off: topic_config.validate_new_topic_configs);
  - manual assignments: num_partitions and replication_factor must be -1, partitions 0..n-1,
    every replica list exactly [this node] (INVALID_REQUEST / INVALID_REPLICA_ASSIGNMENT);
  - replication_factor 0 or < -1: INVALID_REPLICATION_FACTOR; > 1: INVALID_REPLICATION_FACTOR
    (one broker); num_partitions 0 or < -1: INVALID_PARTITIONS; -1 means `num.partitions` /
    `default.replication.factor`;
  - more than 10000 new partitions in one request: POLICY_VIOLATION (Kafka's per-operation
    record bound, MAX_RECORDS_PER_USER_OP).
* validate_only runs every check and creates nothing (the v7 topic id is then the zero uuid;
  Kafka sends a random one that never exists).
* Success: topic id (v7+), and in v5+ num_partitions, replication_factor (1) and the topic's full
  effective configuration with sources (no synonyms), as Kafka returns them.

Version notes: v0-1 are below Kafka 4's floor; v5+ flexible (compact strings, tagged fields);
v7 adds topic_id. timeout_ms is not needed: creation is local and finishes before we answer.

Authorization: CREATE on the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED, before
any other check but duplicates). The v5+ partition count, replication factor and configs of a
created topic need DESCRIBE_CONFIGS on it (ALTER_CONFIGS implies it; CREATE on the cluster does
not): without it they are -1, -1, none, and `topic_config_error_code` is
TOPIC_AUTHORIZATION_FAILED (Kafka's ReplicationControlManager.createTopic).
"""
from __future__ import annotations

import logging
from collections import Counter

from kafka.protocol.admin.topics import CreateTopicsResponse

from kompakt.broker.handlers._common import (CLUSTER_METADATA_TOPIC, MAX_PARTITIONS_PER_REQUEST, ResultError,
                                             error_code_of, invalid_topic_reason, run_storage)
from kompakt.config import topic_config
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.broker.security.acl import Op, Res

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

log = logging.getLogger(__name__)

Result = CreateTopicsResponse.CreatableTopicResult
ConfigRow = Result.CreatableTopicConfigs


def check_collision(name: str, existing) -> None:
    """Topics whose names differ only by '.' vs '_' would share metric names: Kafka refuses them."""
    if "." not in name and "_" not in name:
        return
    unified = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == unified:
            raise ResultError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"Topic '{name}' collides with existing topic: {other}")


def _partitions_and_rf(topic, cfg, node_id: int) -> int:
    """Validate the shape of the request for one topic; returns its partition count."""
    if topic.assignments:
        if topic.replication_factor != -1:
            raise ResultError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                              "but replication factor was not set to -1.")
        if topic.num_partitions != -1:
            raise ResultError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                              "but numPartitions was not set to -1.")
        seen = set()
        for assignment in topic.assignments:
            index = assignment.partition_index
            if index in seen:
                raise ResultError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"Found multiple manual partition assignments for partition {index}")
            seen.add(index)
            if list(assignment.broker_ids) != [node_id]:
                raise ResultError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes broker(s) "
                                  f"{list(assignment.broker_ids)}, but this single-node cluster has "
                                  f"only broker {node_id} and one replica per partition.")
        if seen != set(range(len(seen))):
            raise ResultError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              "partitions should be a consecutive 0-based integer sequence")
        return len(seen)
    rf = topic.replication_factor
    if rf < -1 or rf == 0:
        raise ResultError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise ResultError(ErrorCode.INVALID_PARTITIONS,
                          "Number of partitions was set to an invalid non-positive value.")
    rf = cfg["default.replication.factor"] if rf == -1 else rf
    if rf > 1:
        raise ResultError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"Unable to replicate the partition {rf} time(s): The target replication factor "
                          f"of {rf} cannot be reached because only 1 broker(s) are registered.")
    return cfg["num.partitions"] if topic.num_partitions == -1 else topic.num_partitions


def _configs(topic, cfg) -> dict[str, str]:
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise ResultError(ErrorCode.INVALID_CONFIG,
                          "Null value not supported for topic configs: " + ",".join(nulls))
    configs = {c.name: c.value for c in topic.configs}
    try:
        topic_config.validate_new_topic_configs(configs, cfg)
    except KafkaError as exc:
        raise ResultError(error_code_of(exc), str(exc)) from None
    return configs


def _success(name: str, topic_id, partitions: int, configs: dict[str, str], cfg, version: int,
             describable: bool) -> Result:
    result = Result(name=name, topic_id=topic_id, error_code=0, error_message=None)
    if version >= 5 and not describable:      # created, but its configs are not this principal's to see
        result.num_partitions = -1
        result.replication_factor = -1
        result.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        result.configs = []
    elif version >= 5:
        result.num_partitions = partitions
        result.replication_factor = 1
        result.topic_config_error_code = 0
        result.configs = [
            ConfigRow(name=row.name, value=row.value, read_only=row.read_only,
                      config_source=row.source, is_sensitive=row.is_sensitive)
            for row in topic_config.describe(configs, cfg)
        ]
    return result


def _failure(name: str, code: ErrorCode, message: str | None) -> Result:
    return Result(name=name, topic_id=None, error_code=int(code), error_message=message,
                  num_partitions=-1, replication_factor=-1, configs=[])


def _validate(topic, lm, cfg) -> tuple[dict[str, str], int]:
    """Kafka's checks for one topic, in Kafka's order; returns (configs, partition count)."""
    name = topic.name
    if name == CLUSTER_METADATA_TOPIC:
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
    reason = invalid_topic_reason(name)
    if reason:
        raise ResultError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    existing = lm.topics
    if name in existing:
        raise ResultError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    check_collision(name, existing)
    return _configs(topic, cfg), _partitions_and_rf(topic, cfg, cfg.node_id)


async def handle(ctx, request) -> CreateTopicsResponse:
    lm, cfg, version = ctx.log_manager, ctx.config, ctx.api_version
    counts = Counter(topic.name for topic in request.topics)
    results, reported_duplicates = [], set()
    budget = MAX_PARTITIONS_PER_REQUEST
    may_create_any = ctx.authorize_cluster(Op.CREATE)    # Kafka: CREATE on the cluster or on each topic
    for topic in request.topics:
        name = topic.name
        try:
            if counts[name] > 1:
                if name in reported_duplicates:
                    continue
                reported_duplicates.add(name)
                raise ResultError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            if not (may_create_any or ctx.authorize(Op.CREATE, Res.TOPIC, name)):
                raise ResultError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            configs, partitions = _validate(topic, lm, cfg)
            if partitions > budget:
                raise ResultError(ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
            budget -= partitions
            describable = ctx.authorize(Op.DESCRIBE_CONFIGS, Res.TOPIC, name)
            if request.validate_only:
                results.append(_success(name, None, partitions, configs, cfg, version, describable))
                continue
            meta = await run_storage(lm.create_topic, name, partitions, configs)
            log.info("created topic %s (%d partitions, configs %s) for client %s",
                     name, partitions, configs or "default", ctx.client_id)
            results.append(_success(name, meta.topic_id, partitions, configs, cfg, version, describable))
        except ResultError as exc:
            results.append(_failure(name, exc.code, exc.message))
        except KafkaError as exc:
            results.append(_failure(name, error_code_of(exc), str(exc)))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
