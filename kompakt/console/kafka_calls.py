"""The console's Kafka requests, answered by this broker's own handlers, in process.

Role: what the console changes or asks about topics, configs, groups and producers goes through
the same handler a Kafka client reaches (CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs, DescribeConfigs, DescribeLogDirs, ListGroups, DescribeGroups,
ConsumerGroupDescribe, OffsetFetch, OffsetCommit, ListOffsets, DeleteGroups, DescribeProducers),
so the console applies Kafka's validation and shows Kafka's error messages word for word, and
there is no second implementation of any of it. A request object is encoded and decoded exactly
as the dispatcher does for a frame from a socket; only the socket is skipped.

Authority: the console is part of the admin listener, whose access rule is the admin API token
(auth.py), not Kafka ACLs; like `kompakt admin compact`, its requests are not checked against
the authorizer (ConsoleContext answers every authorization question with yes).

Invariant: every function returns the handler's response object (kafka-python's), or raises
CallError naming the Kafka error and message when the whole request failed.
"""
from __future__ import annotations

import itertools
from typing import Any

from kompakt.broker.network.context import RequestContext
from kompakt.broker.security.acl import SUPPORTED_OPERATIONS
from kompakt.broker.security.session import Session
from kompakt.protocol import codec, registry
from kompakt.protocol.errors import ErrorCode

CLIENT_ID = "kompakt-console"
CONSOLE_SESSION = Session(client_host="127.0.0.1", listener="console", principal="User:kompakt-console")
_correlation = itertools.count(1)

TOPIC_RESOURCE = 2                 # ConfigResource.Type.TOPIC
SET, DELETE = 0, 1                 # IncrementalAlterConfigs operations (AlterConfigOp.OpType)
EARLIEST, LATEST = -2, -1          # ListOffsets special timestamps


class CallError(Exception):
    def __init__(self, code: int, message: str | None):
        self.code = int(code)
        self.name = error_name(code)
        self.message = message or self.name
        super().__init__(f"{self.name}: {self.message}")


def error_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return str(code)


class ConsoleContext(RequestContext):
    """A RequestContext whose principal may do anything (see the module docstring)."""
    __slots__ = ()

    @property
    def authorizer(self):
        return None

    def authorize(self, op: int, resource_type: int, name: str) -> bool:
        return True

    def authorize_any(self, op: int, resource_type: int) -> bool:
        return True

    def authorized(self, op: int, resource_type: int, items, key=None) -> list:
        return list(items)

    def authorized_operations(self, resource_type: int, name: str) -> set[int]:
        return set(SUPPORTED_OPERATIONS.get(resource_type, ()))

    def topic_describe_check(self):
        return None


async def call(broker: Any, request: Any, version: int) -> Any:
    """Run one request through this broker's handler for its API; the response object."""
    request.API_VERSION = version
    request.with_header(correlation_id=next(_correlation), client_id=CLIENT_ID)
    frame = bytearray(request.encode(header=True))
    header = codec.read_request_header(frame)
    module = broker.dispatcher.handlers[header.api_key]
    decoded = (getattr(module, "decode", None) or codec.decode_request)(header, frame)
    ctx = ConsoleContext(broker, header, "console", len(frame), None, None, CONSOLE_SESSION)
    return await module.handle(ctx, decoded)


def _req(key: int):
    return registry.API[key].request


# --- topics ------------------------------------------------------------------------------------------
async def create_topic(broker: Any, name: str, partitions: int, configs: dict[str, str],
                       validate_only: bool = False) -> Any:
    """CreateTopics v7 for one topic; the topic's result (error_code 0 or Kafka's code + message)."""
    cls = _req(19)
    topic = cls.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
                               configs=[cls.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                                        for k, v in configs.items()])
    response = await call(broker, cls(topics=[topic], timeout_ms=30000, validate_only=validate_only), 7)
    return response.topics[0]


async def delete_topic(broker: Any, name: str) -> Any:
    cls = _req(20)
    response = await call(broker, cls(topics=[cls.DeleteTopicState(name=name, topic_id=None)],
                                      timeout_ms=30000), 6)
    return response.responses[0]


async def create_partitions(broker: Any, name: str, count: int) -> Any:
    cls = _req(37)
    response = await call(broker, cls(topics=[cls.CreatePartitionsTopic(name=name, count=count, assignments=None)],
                                      timeout_ms=30000, validate_only=False), 3)
    return response.results[0]


async def alter_topic_configs(broker: Any, name: str, set_: dict[str, str], delete: list[str]) -> Any:
    cls = _req(44)
    Resource = cls.AlterConfigsResource
    ops = ([Resource.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in set_.items()]
           + [Resource.AlterableConfig(name=k, config_operation=DELETE, value=None) for k in delete])
    response = await call(broker, cls(resources=[Resource(resource_type=TOPIC_RESOURCE, resource_name=name,
                                                          configs=ops)], validate_only=False), 1)
    return response.responses[0]


async def describe_topic_configs(broker: Any, name: str) -> list[dict[str, Any]]:
    """Every config of the topic with its value and source (DescribeConfigs v4)."""
    cls = _req(32)
    response = await call(broker, cls(resources=[cls.DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=name, configuration_keys=None)],
        include_synonyms=False, include_documentation=False), 4)
    result = response.results[0]
    if result.error_code:
        raise CallError(result.error_code, result.error_message)
    sources = {1: "topic", 2: "dynamic broker", 4: "static broker", 5: "default"}
    return [{"name": c.name, "value": None if c.is_sensitive else c.value,
             "source": sources.get(c.config_source, str(c.config_source)), "read_only": c.read_only,
             "default": c.config_source == 5}
            for c in sorted(result.configs, key=lambda c: c.name)]


# --- log dirs ----------------------------------------------------------------------------------------
async def describe_log_dirs(broker: Any) -> list[dict[str, Any]]:
    response = await call(broker, _req(35)(topics=None), 4)
    out = []
    for r in response.results:
        out.append({"log_dir": r.log_dir, "error": error_name(r.error_code) if r.error_code else None,
                    "total_bytes": r.total_bytes, "usable_bytes": r.usable_bytes,
                    "partitions": sum(len(t.partitions) for t in r.topics),
                    "partition_bytes": sum(p.partition_size for t in r.topics for p in t.partitions)})
    return out


# --- groups ------------------------------------------------------------------------------------------
async def list_groups(broker: Any) -> list[dict[str, Any]]:
    response = await call(broker, _req(16)(states_filter=[], types_filter=[]), 5)
    if response.error_code:
        raise CallError(response.error_code, None)
    return sorted(({"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.group_state,
                    "type": g.group_type} for g in response.groups), key=lambda g: g["group_id"])


async def describe_classic_group(broker: Any, group: str) -> Any:
    response = await call(broker, _req(15)(groups=[group], include_authorized_operations=False), 5)
    return response.groups[0]


async def describe_consumer_group(broker: Any, group: str) -> Any:
    response = await call(broker, _req(69)(group_ids=[group], include_authorized_operations=False), 0)
    return response.groups[0]


async def committed_offsets(broker: Any, group: str) -> dict[tuple[str, int], Any]:
    """{(topic, partition): committed offset} of the group (OffsetFetch v8, every topic)."""
    cls = _req(9)
    response = await call(broker, cls(groups=[cls.OffsetFetchRequestGroup(group_id=group, topics=None)],
                                      require_stable=False), 8)
    g = response.groups[0]
    if g.error_code:
        raise CallError(g.error_code, None)
    return {(t.name, p.partition_index): p.committed_offset
            for t in g.topics for p in t.partitions if p.committed_offset >= 0}


async def list_offsets(broker: Any, partitions: list[tuple[str, int]], timestamp: int,
                       read_committed: bool = False) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} for a timestamp (EARLIEST, LATEST or ms); -1 when none."""
    cls = _req(2)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    Topic = cls.ListOffsetsTopic
    request = cls(replica_id=-1, isolation_level=1 if read_committed else 0, topics=[
        Topic(name=t, partitions=[Topic.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                              timestamp=timestamp) for p in ps])
        for t, ps in by_topic.items()])
    response = await call(broker, request, 8)
    out = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code:
                raise CallError(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
            out[(t.name, p.partition_index)] = p.offset
    return out


async def commit_offsets(broker: Any, group: str, offsets: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    """OffsetCommit v9 as an admin client's alterConsumerGroupOffsets does (generation -1, no
    member): the coordinator accepts it only while the group has no active members."""
    cls = _req(8)
    Topic = cls.OffsetCommitRequestTopic
    by_topic: dict[str, list] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append(Topic.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""))
    response = await call(broker, cls(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None,
                                      topics=[Topic(name=t, partitions=ps) for t, ps in by_topic.items()]), 9)
    return [{"topic": t.name, "partition": p.partition_index, "error": error_name(p.error_code) if p.error_code else None}
            for t in response.topics for p in t.partitions]


async def delete_group(broker: Any, group: str) -> Any:
    response = await call(broker, _req(42)(groups_names=[group]), 2)
    return response.results[0]


# --- producers ---------------------------------------------------------------------------------------
async def describe_producers(broker: Any, partitions: list[tuple[str, int]]) -> list[dict[str, Any]]:
    cls = _req(61)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    response = await call(broker, cls(topics=[cls.TopicRequest(name=t, partition_indexes=ps)
                                              for t, ps in sorted(by_topic.items())]), 0)
    out = []
    for t in response.topics:
        for p in t.partitions:
            for s in p.active_producers:
                out.append({"topic": t.name, "partition": p.partition_index, "producer_id": s.producer_id,
                            "producer_epoch": s.producer_epoch, "last_sequence": s.last_sequence,
                            "last_timestamp_ms": s.last_timestamp, "coordinator_epoch": s.coordinator_epoch,
                            "current_txn_start_offset": s.current_txn_start_offset})
    return out
