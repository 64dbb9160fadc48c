"""ListPartitionReassignments (API key 46), version 0: nothing is ever being reassigned.

Behaviour (Kafka's ReplicationControlManager.listPartitionReassignments): the answer lists only
partitions with a reassignment in progress, for the named topics or (topics null) for all; a
single node never has one (AlterPartitionReassignments can only confirm the current replica), so
the answer is always an empty topic list with error_code 0. Unknown topics are skipped, as Kafka
skips them.

Version notes: v0 only, flexible.
"""
from __future__ import annotations

from kafka.protocol.admin.topics import ListPartitionReassignmentsResponse

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
