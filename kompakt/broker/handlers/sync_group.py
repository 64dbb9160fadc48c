"""SyncGroup (API key 14), versions 0-5.

Behaviour: after a join phase every member sends SyncGroup; the leader's carries the assignment
of every member. The leader's request appends the group metadata (with the assignment) to
`__consumer_offsets`; only then is every parked SyncGroup answered with its member's assignment
and the group becomes Stable. Members missing from the leader's assignment get an empty one. In
a Stable group SyncGroup returns the current assignment at once. Errors: UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (a new join phase began),
INCONSISTENT_GROUP_PROTOCOL (v5+: protocol type/name differ from the group's),
COORDINATOR_NOT_AVAILABLE (the assignment could not be stored).

Version notes: v3 group_instance_id; v4+ flexible; v5 protocol_type and protocol_name in request
and answer.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import SyncGroupResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx, request):
    version = ctx.api_version
    if not ctx.authorize(Op.READ, Res.GROUP, request.group_id):   # Kafka: GROUP_AUTHORIZATION_FAILED
        return SyncGroupResponse(version=version, throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                 protocol_type=None, protocol_name=None, assignment=b"")
    result = await ctx.groups.sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        [(a.member_id, bytes(a.assignment or b"")) for a in request.assignments or ()])  # a null assignment is an empty one
    return SyncGroupResponse(version=version, throttle_time_ms=0, error_code=result.error,
                             protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                             assignment=result.assignment)
