"""Heartbeat (API key 12), versions 0-4.

Behaviour: keeps a member's session alive (session.timeout.ms restarts) and tells it whether to
rejoin: NONE in Stable and CompletingRebalance, REBALANCE_IN_PROGRESS while a join phase runs.
Errors: UNKNOWN_MEMBER_ID (unknown group or member, or an Empty group), FENCED_INSTANCE_ID (a
newer instance took over the static member), ILLEGAL_GENERATION, COORDINATOR_NOT_AVAILABLE.

Version notes: v1 throttle time; v3 group_instance_id; v4 flexible.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import HeartbeatResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx, request):
    if not ctx.authorize(Op.READ, Res.GROUP, request.group_id):   # Kafka: GROUP_AUTHORIZATION_FAILED
        return HeartbeatResponse(version=ctx.api_version, throttle_time_ms=0,
                                 error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code = ctx.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                request.group_instance_id if ctx.api_version >= 3 else None)
    return HeartbeatResponse(version=ctx.api_version, throttle_time_ms=0, error_code=code)
