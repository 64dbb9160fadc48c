"""ListPartitionReassignments (API key 46), version 0: nothing is ever being reassigned.

Behaviour (Kafka's ReplicationControlManager.listPartitionReassignments): the answer lists only
partitions with a reassignment in progress, for the named topics or (topics null) for all; a
single node never has one (AlterPartitionReassignments can only confirm the current replica), so
the answer is always an empty topic list with error_code 0. Unknown topics are skipped, as Kafka
skips them. Authorization: CLUSTER DESCRIBE, else CLUSTER_AUTHORIZATION_FAILED at the top level.

Version notes: v0 only, flexible.
"""
from __future__ import annotations

from kafka.protocol.admin.topics import ListPartitionReassignmentsResponse

from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request) -> ListPartitionReassignmentsResponse:
    code = 0 if ctx.authorize_cluster(Op.DESCRIBE) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=code, error_message=None, topics=[])
