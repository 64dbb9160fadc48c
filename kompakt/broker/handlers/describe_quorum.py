"""DescribeQuorum (API key 55), versions 0-2: this node as a single-node KRaft quorum.

Behaviour (Kafka's KafkaRaftClient.handleDescribeQuorumRequest on the active controller, which a
broker forwards DescribeQuorum to): the request must name exactly one topic, `__cluster_metadata`,
with exactly one partition, 0; anything else answers UNKNOWN_TOPIC_OR_PARTITION (with Kafka's
message from v2) for every partition it names, top-level error 0. Otherwise this node is the
leader and the only voter, with no observers (a combined broker and controller fetches nothing
from itself), `kafka-metadata-quorum.sh describe --status` shows one voter leading, lag 0.

The metadata log: Kompakt keeps none (topic metadata lives in kompakt-topics.json, see
storage/topic_store.py), so these numbers are derived, and documented so tools read them right:
* leader epoch 1: one election, this node's, as a `--standalone` formatted quorum has;
* high watermark = the voter's log end offset = 1 + the topic-metadata changes this node has
  saved since it started (LogManager.metadata_changes: topic created or deleted, partitions
  added, topic configs changed): it moves when metadata changes, as a metadata log's end does;
  1 stands for the bootstrap record a formatted log starts with. It starts again at 1 with the
  process (the numbers describe this node's run, not a persisted log);
* lastFetchTimestamp / lastCaughtUpTimestamp (v1+): now, as Kafka reports them for the leader;
* replica directory id (v2): the directory.id of the first log dir (Kafka's metadata.log.dir
  default), since a standalone (dynamic, kraft.version 1) quorum knows its voters' directories;
* nodes (v2): this node with the listeners it advertises (name, host, port), the endpoints a
  `--bootstrap-controller` client reaches it on.

Authorization: DESCRIBE on the cluster (Kafka's ControllerApis.handleDescribeQuorum), else the
top-level error CLUSTER_AUTHORIZATION_FAILED with Kafka's message and no topics.

Version notes: flexible from v0; v1 adds the replica timestamps; v2 the error messages, the
replica directory id and the nodes.
"""
from __future__ import annotations

import time
import uuid

from kafka.protocol.admin.cluster import DescribeQuorumResponse

from kompakt.broker.handlers._common import CLUSTER_METADATA_TOPIC
from kompakt.broker.security.acl import Op
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode
from kompakt.storage.loader import topic_id_to_string
from kompakt.storage.topic_store import uuid_from_str

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2

LEADER_EPOCH = 1
BOOTSTRAP_RECORDS = 1
METADATA_PARTITION = 0

# Kafka's Errors.message() of the codes answered here
UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."

_Topic = DescribeQuorumResponse.TopicData
_Partition = _Topic.PartitionData
_Replica = _Partition.ReplicaState
_Node = DescribeQuorumResponse.Node
_Listener = _Node.Listener


def metadata_end_offset(log_manager) -> int:
    """The end offset (and high watermark) of the metadata log this node answers for."""
    return BOOTSTRAP_RECORDS + getattr(log_manager, "metadata_changes", 0)


def _asks_for_the_metadata_partition(request) -> bool:
    """Kafka's RaftUtil.hasValidTopicPartition: one topic, __cluster_metadata, one partition, 0."""
    topics = request.topics or []
    return (len(topics) == 1 and topics[0].topic_name == CLUSTER_METADATA_TOPIC
            and len(topics[0].partitions or []) == 1
            and topics[0].partitions[0].partition_index == METADATA_PARTITION)


def _response(**fields) -> DescribeQuorumResponse:
    fields.setdefault("error_code", 0)
    fields.setdefault("error_message", None)
    fields.setdefault("topics", [])
    fields.setdefault("nodes", [])
    return DescribeQuorumResponse(**fields)


def _directory_id(log_manager) -> uuid.UUID:
    """The first log dir's directory.id (Kafka's ReplicaKey.NO_DIRECTORY_ID, zero, if unknown)."""
    dirs = log_manager.log_dirs
    text = log_manager.directory_ids.get(dirs[0]) if dirs else None
    return uuid_from_str(text) if text else uuid.UUID(int=0)


def voter_directory_id(ctx) -> uuid.UUID:
    """This node's directory id as the quorum's voter (zero if unknown)."""
    return _directory_id(ctx.log_manager)


def replica_key_text(node_id: int, directory_id: uuid.UUID) -> str:
    """A voter as Kafka's ReplicaKey.toString prints it in error messages."""
    directory = "Optional.empty" if directory_id.int == 0 else f"Optional[{topic_id_to_string(directory_id)}]"
    return f"ReplicaKey(id={node_id}, directoryId={directory})"


def voters_text(ctx) -> str:
    """The voter set (this node) as Kafka prints VoterSet.voterKeys() in error messages."""
    return f"[{replica_key_text(ctx.broker.node_id, voter_directory_id(ctx))}]"


def voter_change_refused(ctx, request) -> tuple[int, str] | None:
    """What AddRaftVoter / RemoveRaftVoter check first (ControllerApis: ALTER on the cluster; then
    KafkaRaftClient.hasValidClusterId, null accepted): (error code, message), or None."""
    if not ctx.authorize_cluster(Op.ALTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE
    cluster_id = request.cluster_id
    if cluster_id is not None and cluster_id != ctx.broker.cluster_id:
        return (ErrorCode.INCONSISTENT_CLUSTER_ID,
                f'The given id "{cluster_id}" doesn\'t match the cluster id "{ctx.broker.cluster_id}"')
    return None


def voter_change_answer(api_key: int, code: int, message: str | None = None):
    """An AddRaftVoter / RemoveRaftVoter response (the two have the same fields)."""
    return registry.API[api_key].response(throttle_time_ms=0, error_code=int(code), error_message=message)


def _listeners(broker) -> list:
    out = []
    for sec in broker.listeners:
        host, port = broker.advertised_for(sec.name)
        out.append(_Listener(name=sec.name, host=str(host), port=int(port)))
    return out


async def handle(ctx, request) -> DescribeQuorumResponse:
    if not ctx.authorize_cluster(Op.DESCRIBE):
        return _response(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                         error_message=CLUSTER_AUTHORIZATION_MESSAGE)
    if not _asks_for_the_metadata_partition(request):
        return _response(topics=[
            _Topic(topic_name=t.topic_name, partitions=[
                _Partition(partition_index=p.partition_index, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                           error_message=UNKNOWN_PARTITION_MESSAGE, leader_id=0, leader_epoch=0,
                           high_watermark=0, current_voters=[], observers=[])
                for p in t.partitions or []])
            for t in request.topics or []])
    broker = ctx.broker
    lm = ctx.log_manager
    end = metadata_end_offset(lm)
    now_ms = int(time.time() * 1000)
    voter = _Replica(replica_id=broker.node_id, replica_directory_id=_directory_id(lm), log_end_offset=end,
                     last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)
    partition = _Partition(partition_index=METADATA_PARTITION, error_code=0, error_message=None,
                           leader_id=broker.node_id, leader_epoch=LEADER_EPOCH, high_watermark=end,
                           current_voters=[voter], observers=[])
    return _response(topics=[_Topic(topic_name=CLUSTER_METADATA_TOPIC, partitions=[partition])],
                     nodes=[_Node(node_id=broker.node_id, listeners=_listeners(broker))])
