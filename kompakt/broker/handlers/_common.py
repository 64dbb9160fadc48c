"""What the admin handlers share: per-result errors, storage calls off the event loop, topic names.

Role: the admin APIs (CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, the three
config APIs, DescribeTopicPartitions) answer one result per topic, partition or config resource,
and a failure of one never fails the others. `ResultError` is that one failure (a Kafka error
code and Kafka's message for it); `run_storage` runs a LogManager call in a thread and turns an
OSError into KAFKA_STORAGE_ERROR for that one result; `invalid_topic_reason` and `is_internal`
are Kafka's topic-name rules; `log_or_error` is Kafka's getPartitionOrError for the APIs that
read or write one partition's log. Not an API module: handlers/__init__.py does not list it.
"""
from __future__ import annotations

import asyncio
import logging

from kompakt.protocol.errors import ErrorCode, KafkaError, KafkaStorageErrorError

log = logging.getLogger(__name__)

LEGAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
CLUSTER_METADATA_TOPIC = "__cluster_metadata"   # KRaft's log: never a regular topic (Kafka refuses it)
MAX_PARTITIONS_PER_REQUEST = 10_000   # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP


class ResultError(Exception):
    """One topic's or resource's failure: an error code and Kafka's message for it."""

    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def error_code_of(exc: KafkaError) -> ErrorCode:
    return ErrorCode(int(exc.code))


async def run_storage(fn, *args):
    """Storage calls touch the disk (mkdir, files, fsync): keep them off the event loop (the
    LogManager serialises them under its lock). An OSError (disk full, I/O error) becomes
    KAFKA_STORAGE_ERROR for that topic or partition instead of closing the client's connection."""
    try:
        return await asyncio.to_thread(fn, *args)
    except OSError as exc:
        log.error("storage error in %s%r: %s", getattr(fn, "__name__", fn), args[:1], exc)
        raise KafkaStorageErrorError(f"Storage error: {exc}") from exc


def log_or_error(log_manager, tp) -> tuple[object | None, ErrorCode]:
    """(the partition's log, NONE), or (None, UNKNOWN_TOPIC_OR_PARTITION) for a partition this
    broker does not have, or (None, KAFKA_STORAGE_ERROR) for one whose log dir is offline (Kafka's
    ReplicaManager.getPartitionOrError: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
    DeleteRecords, DescribeProducers and WriteTxnMarkers answer it, never values from memory)."""
    plog = log_manager.get_log(tp)
    if plog is None and not log_manager.is_offline(tp):
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if plog is None or plog.offline:
        return None, ErrorCode.KAFKA_STORAGE_ERROR
    return plog, ErrorCode.NONE


def invalid_topic_reason(name: str | None) -> str | None:
    """Kafka's Topic.validate message for an illegal name, or None when the name is legal."""
    if name is None or name == "":
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return (f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
                f"length {MAX_NAME_LENGTH}")
    if not set(name) <= LEGAL_CHARS:
        return (f"Topic name is invalid: '{name}' contains one or more characters other than "
                f"ASCII alphanumerics, '.', '_' and '-'")
    return None


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def topic_names_by_id(log_manager) -> dict:
    """Topic id -> name for the live topics (the v10+/v13+ APIs that name topics by id)."""
    return {meta.topic_id: meta.name for meta in log_manager.topics.values()}


def missing_part(log_manager, topic: str | None, partition: int) -> str | None:
    """"topic" when the topic does not exist, "partition" when the topic exists but not that
    partition, None when both do (the controller APIs word their errors differently)."""
    meta = log_manager.topics.get(topic) if topic is not None else None
    if meta is None:
        return "topic"
    return None if 0 <= partition < meta.partitions else "partition"


# ConfigResource types (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs) -> the ACL
# resource whose DESCRIBE_CONFIGS / ALTER_CONFIGS Kafka checks, and the error it answers.
_CONFIG_ACL = {2: ("TOPIC", "TOPIC_AUTHORIZATION_FAILED"), 4: ("CLUSTER", "CLUSTER_AUTHORIZATION_FAILED"),
               8: ("CLUSTER", "CLUSTER_AUTHORIZATION_FAILED"), 16: ("CLUSTER", "CLUSTER_AUTHORIZATION_FAILED"),
               32: ("GROUP", "GROUP_AUTHORIZATION_FAILED")}


def check_config_access(ctx, resource_type: int, name: str, alter: bool) -> None:
    """Raise ResultError unless the principal may describe (or alter) this config resource
    (Kafka's ConfigAdminManager/AuthHelper: TOPIC on the topic, BROKER/BROKER_LOGGER/CLIENT_METRICS
    on the cluster, GROUP on the group)."""
    if ctx.authorizer is None or resource_type not in _CONFIG_ACL:
        return
    from kompakt.broker.security.acl import CLUSTER_NAME, Op, Res
    kind, error = _CONFIG_ACL[resource_type]
    op = Op.ALTER_CONFIGS if alter else Op.DESCRIBE_CONFIGS
    if not ctx.authorize(op, Res[kind], CLUSTER_NAME if kind == "CLUSTER" else name):
        raise ResultError(ErrorCode[error], "Authorization failed.")


def acl_api_refusal(ctx, op: int) -> tuple[ErrorCode, str] | None:
    """Why CreateAcls / DescribeAcls / DeleteAcls refuse the whole request (Kafka's AclApis):
    SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without `op` (ALTER,
    DESCRIBE) on the cluster; None when they may go on."""
    if ctx.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."
    if not ctx.authorize_cluster(op):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None
