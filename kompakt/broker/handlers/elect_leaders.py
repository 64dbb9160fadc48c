"""ElectLeaders (API key 43), versions 0-2: answered as a single node would.

Behaviour (Kafka's ReplicationControlManager.electLeaders, KRaft): one broker is the only
replica, the preferred replica and the leader of every partition, so no election is ever needed:
* each named partition that exists answers ELECTION_NOT_NEEDED ("Leader election not needed for
  topic partition."), for PREFERRED (0) and UNCLEAN (1) elections alike (the preferred replica
  leads; a leader exists);
* an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION "No such topic as <t>", an unknown
  partition of a known topic "No such partition as <t>-<p>";
* `topic_partitions` null means every partition: Kafka then leaves out the partitions that
  needed no election, so the answer is each topic with an empty result list;
* an election type other than 0 or 1 fails the request: INVALID_REQUEST (top level from v1, per
  partition in v0, which has no top-level error).
Nothing changes anywhere; `timeout_ms` has nothing to wait for.
Authorization: CLUSTER ALTER; without it every named partition and (v1+) the top level answer
CLUSTER_AUTHORIZATION_FAILED (Kafka's ElectLeadersRequest.getErrorResponse).

Version notes: v0 preferred elections only (no election_type, no top-level error code); v1
election_type and top-level error_code; v2 flexible.
"""
from __future__ import annotations

from kafka.protocol.admin.topics import ElectLeadersResponse

from kompakt.broker.handlers._common import missing_part
from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."

Result = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = Result.PartitionResult


def _fail_all(request, v: int, code: int, message: str | None) -> ElectLeadersResponse:
    results = [Result(topic=t.topic, partition_result=[
        PartitionResult(partition_id=p, error_code=code, error_message=message) for p in t.partitions])
        for t in request.topic_partitions or ()]
    top = {"error_code": code} if v >= 1 else {}
    return ElectLeadersResponse(throttle_time_ms=0, replica_election_results=results, **top)


def _elect(lm, topic: str, partition: int) -> tuple[int, str]:
    """(error code, message) of electing a leader for one partition on a single node."""
    missing = missing_part(lm, topic, partition)
    if missing == "topic":
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if missing == "partition":
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED_MESSAGE


async def handle(ctx, request) -> ElectLeadersResponse:
    v = ctx.api_version
    election_type = request.election_type if v >= 1 else PREFERRED
    lm = ctx.log_manager
    if not ctx.authorize_cluster(Op.ALTER):
        return _fail_all(request, v, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if election_type not in (PREFERRED, UNCLEAN):
        if v >= 1:
            return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                        replica_election_results=[])
        return _fail_all(request, v, ErrorCode.INVALID_REQUEST,
                         f"Unknown election type {election_type}: expected 0 (PREFERRED) or 1 (UNCLEAN)")
    if request.topic_partitions is None:
        # every partition needs no election, and those are left out of an "all partitions" answer
        results = [Result(topic=name, partition_result=[]) for name in sorted(lm.topics)]
    else:
        results = []
        for t in request.topic_partitions:
            rows = []
            for p in t.partitions:
                code, message = _elect(lm, t.topic, p)
                rows.append(PartitionResult(partition_id=p, error_code=code, error_message=message))
            results.append(Result(topic=t.topic, partition_result=rows))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=results)
