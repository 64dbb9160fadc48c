"""Metadata (key 3), versions 0-13.

Behaviour: one broker, which is the controller and the leader (and only replica and ISR member)
of every partition, advertised at the `advertised.listeners` entry of the listener the request
came in on (else that listener's bound address). Topics are
listed from LogManager.topics with their topic ids. Unknown topics are created on the spot with
`num.partitions` when `auto.create.topics.enable` is true and the request allows it
(v4+ AllowAutoTopicCreation); names Kafka would refuse get INVALID_TOPIC_EXCEPTION, unknown names
otherwise UNKNOWN_TOPIC_OR_PARTITION. Internal topics (`__consumer_offsets`) are never
auto-created here and are flagged is_internal; nor is `__cluster_metadata`, which Kafka's
CreateTopics (the path of its auto-creation) refuses. A partition whose log dir is offline (an I/O
error, storage.LogManager.handle_io_error) has no leader: LEADER_NOT_AVAILABLE, leader -1, this
node in offline_replicas (v5+).

Authorization (Kafka's handleTopicMetadataRequest): topics the principal may not DESCRIBE are
left out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (without
saying whether they exist); auto-creating a named topic needs CREATE on the cluster or on the
topic, else TOPIC_AUTHORIZATION_FAILED. `authorized_operations` (topic: v8+, cluster: v8-10) are
filled when the request asks for them; the cluster's only for a principal with DESCRIBE on the
cluster (0 otherwise, as Kafka and DescribeCluster).

Version notes:
- v0: an empty topic list means every topic; v1+: null means every topic, empty means none.
- v1 adds rack (`broker.rack`, null when unset), controller_id and is_internal; v2 cluster_id; v3 throttle_time_ms; v5 offline
  replicas; v7 leader epoch; v8-10 authorized operations (we answer -2147483648, "not asked");
  v9 flexible; v10 topic ids (request topics may name a topic by id only); v13 top-level error.
"""
from __future__ import annotations

import logging

from kafka.protocol.metadata.metadata import MetadataResponse

from kompakt.broker.handlers._common import CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS, invalid_topic_reason, run_storage
from kompakt.broker.security.acl import CLUSTER_NAME, Op, Res
from kompakt.protocol.errors import ErrorCode, KafkaError, TopicAlreadyExistsError

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

log = logging.getLogger(__name__)

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition

# authorized operations: kafka-python models the int32 as a bit set; None encodes -2147483648 ("not asked")


def _partition(lm, node: int, topic: str, index: int):
    if lm.is_offline((topic, index)):
        # its log dir failed: no leader (Kafka elects none when the only replica is offline)
        return _Partition(error_code=int(ErrorCode.LEADER_NOT_AVAILABLE), partition_index=index, leader_id=-1,
                          leader_epoch=0, replica_nodes=[node], isr_nodes=[], offline_replicas=[node])
    return _Partition(error_code=0, partition_index=index, leader_id=node, leader_epoch=0,
                      replica_nodes=[node], isr_nodes=[node], offline_replicas=[])


def _topic_response(ctx, meta, error_code=0, with_ops=False):
    node = ctx.broker.node_id
    lm = ctx.log_manager
    partitions = [_partition(lm, node, meta.name, i) for i in range(meta.partitions)]
    return _Topic(error_code=error_code, name=meta.name, topic_id=meta.topic_id,
                  is_internal=meta.name in INTERNAL_TOPICS, partitions=partitions,
                  authorized_operations=ctx.authorized_operations(Res.TOPIC, meta.name) if with_ops else None)


def _error_topic(code, name=None, topic_id=None):
    return _Topic(error_code=int(code), name=name, topic_id=topic_id, is_internal=False, partitions=[],
                  authorized_operations=None)


def _cluster_operations(ctx, request, version: int):
    """v8-10 when asked: the cluster's operations for a principal with DESCRIBE on it, else the
    empty set (Kafka answers 0 rather than tell a non-describer its cluster rights); None (the
    schema's default, -2147483648) when not asked."""
    if not (8 <= version <= 10 and request.include_cluster_authorized_operations):
        return None
    return ctx.authorized_operations(Res.CLUSTER, CLUSTER_NAME) if ctx.authorize_cluster(Op.DESCRIBE) else set()


async def _auto_create(ctx, name: str):
    """Create `name` with the broker defaults; returns (TopicMeta | None, error code).

    In a worker thread: create_topic makes directories and segment files and fsyncs them and the
    topic store (milliseconds to tens of them on a real disk), which on the loop would stall every
    other connection. Responses stay in order: the connection writes them in request order."""
    lm = ctx.log_manager
    try:
        meta = await run_storage(lm.create_topic, name, ctx.config["num.partitions"], {})
        log.info("auto-created topic %s with %d partitions (requested by %s)", name, meta.partitions,
                 ctx.client_id)
        return meta, 0
    except TopicAlreadyExistsError:
        return lm.topics.get(name), 0
    except KafkaError as exc:
        return None, exc.code


async def handle(ctx, request):
    version = ctx.api_version
    lm = ctx.log_manager
    topics = lm.topics
    requested = request.topics
    if version == 0 and not requested:
        requested = None
    allow_create = ctx.config["auto.create.topics.enable"] and (version < 4 or request.allow_auto_topic_creation)
    ops = version >= 8 and bool(request.include_topic_authorized_operations)
    checked = ctx.authorizer is not None

    out = []
    if requested is None:
        out = [_topic_response(ctx, meta, with_ops=ops) for _, meta in sorted(topics.items())
               if not checked or ctx.authorize(Op.DESCRIBE, Res.TOPIC, meta.name)]
    else:
        by_id = None
        for req_topic in requested:
            name = req_topic.name
            topic_id = req_topic.topic_id if version >= 10 else None
            if name is None:
                if topic_id is None:
                    out.append(_error_topic(ErrorCode.INVALID_REQUEST))
                    continue
                if by_id is None:
                    by_id = {m.topic_id: m for m in topics.values()}
                meta = by_id.get(topic_id)
                if meta is not None and checked and not ctx.authorize(Op.DESCRIBE, Res.TOPIC, meta.name):
                    out.append(_error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id))
                    continue
                out.append(_topic_response(ctx, meta, with_ops=ops) if meta is not None
                           else _error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
                continue
            if checked and not ctx.authorize(Op.DESCRIBE, Res.TOPIC, name):
                out.append(_error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            meta = topics.get(name)
            if meta is not None:
                out.append(_topic_response(ctx, meta, with_ops=ops))
                continue
            if invalid_topic_reason(name) is not None:
                out.append(_error_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, name))
                continue
            if not allow_create or name in INTERNAL_TOPICS or name == CLUSTER_METADATA_TOPIC:
                out.append(_error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
                continue
            if checked and not (ctx.authorize_cluster(Op.CREATE) or ctx.authorize(Op.CREATE, Res.TOPIC, name)):
                out.append(_error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            meta, code = await _auto_create(ctx, name)
            out.append(_topic_response(ctx, meta, with_ops=ops) if meta is not None else _error_topic(code, name))
            topics = lm.topics

    host, port = ctx.broker.advertised_for(ctx.listener)
    return MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[_Broker(node_id=ctx.broker.node_id, host=host, port=port, rack=ctx.config["broker.rack"])],
        cluster_id=ctx.broker.cluster_id,
        controller_id=ctx.broker.node_id,
        topics=out,
        authorized_operations=_cluster_operations(ctx, request, version),
        error_code=0,
    )
