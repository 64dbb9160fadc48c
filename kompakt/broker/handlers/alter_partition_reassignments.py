"""AlterPartitionReassignments (API key 45), version 0 (Kafka 4.0's range, the release Kompakt
advertises): answered as a single node would.

Behaviour (Kafka's ReplicationControlManager.alterPartitionReassignment, KRaft), per partition:
* unknown topic: UNKNOWN_TOPIC_OR_PARTITION "Unable to find a topic named <t>."; unknown
  partition: "Unable to find partition <t>:<p>.";
* replicas null (cancel): no reassignment is ever in progress here, so
  NO_REASSIGNMENT_IN_PROGRESS (message null: Kafka leaves out a message equal to the code's own);
* replicas given: Kafka's validateManualPartitionAssignment: an empty list, a broker id that is
  not registered (any id but ours) or an id named twice is INVALID_REPLICA_ASSIGNMENT with
  Kafka's message. What remains is `[node.id]`, the current assignment: success, nothing moves.
Top-level error_code 0 and error_message null. `timeout_ms` has nothing to wait for.
Authorization: CLUSTER ALTER; without it the top level and every partition answer
CLUSTER_AUTHORIZATION_FAILED (Kafka's getErrorResponse).

Version notes: v0 flexible; v1 (KIP-860, Kafka 4.1; not served while Kompakt advertises 4.0, the code stays) adds allow_replication_factor_change, echoed in the
answer (a single node cannot change a replication factor anyway: every other id is unknown).
"""
from __future__ import annotations

from kafka.protocol.admin.topics import AlterPartitionReassignmentsResponse

from kompakt.broker.handlers._common import missing_part
from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0

TopicResult = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResult = TopicResult.ReassignablePartitionResponse


def _reassign(lm, node_id: int, topic: str, partition: int, replicas) -> tuple[int, str | None]:
    missing = missing_part(lm, topic, partition)
    if missing == "topic":
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if missing == "partition":
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
    if not replicas:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != node_id:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                    f"broker {broker_id}, but no such broker is registered.")
        if broker_id == previous:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                    f"the broker {previous} more than once.")
        previous = broker_id
    return ErrorCode.NONE, None


async def handle(ctx, request) -> AlterPartitionReassignmentsResponse:
    lm, node_id = ctx.log_manager, ctx.config.node_id
    allowed = ctx.authorize_cluster(Op.ALTER)
    top = 0 if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    responses = []
    for t in request.topics:
        rows = []
        for p in t.partitions:
            code, message = (_reassign(lm, node_id, t.name, p.partition_index, p.replicas) if allowed
                             else (top, None))
            rows.append(PartitionResult(partition_index=p.partition_index, error_code=code,
                                        error_message=message))
        responses.append(TopicResult(name=t.name, partitions=rows))
    extra = {"allow_replication_factor_change": request.allow_replication_factor_change} \
        if ctx.api_version >= 1 else {}
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=top, error_message=None,
                                               responses=responses, **extra)
