"""LeaveGroup (API key 13), versions 0-5.

Behaviour: removes members at once (no waiting for the session timeout) and starts a rebalance
of the rest (or completes a running join phase that was only waiting for them). From v3 a request
names several members (batch leave, used by admin `removeMembersFromConsumerGroup`), each by
member id and/or group instance id; a static member may be named by its instance id alone.
Per-member errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID. Top-level: UNKNOWN_MEMBER_ID (unknown
group), COORDINATOR_NOT_AVAILABLE.

Version notes: v0-2 one member_id, and its error is the top-level error; v3 members array;
v4 flexible; v5 reason per member (logged by Kafka, ignored here).

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import LeaveGroupResponse
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5

MemberResponse = LeaveGroupResponse.MemberResponse


async def handle(ctx, request):
    version = ctx.api_version
    if not ctx.authorize(Op.READ, Res.GROUP, request.group_id):   # Kafka: GROUP_AUTHORIZATION_FAILED
        return LeaveGroupResponse(version=version, throttle_time_ms=0,
                                  error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if version < 3:
        _top, codes = ctx.groups.leave_group(request.group_id, [(request.member_id, None)])
        return LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=codes[0] if codes else _top)
    members = [(m.member_id or "", m.group_instance_id) for m in request.members]
    top, codes = ctx.groups.leave_group(request.group_id, members)
    return LeaveGroupResponse(
        version=version, throttle_time_ms=0, error_code=top,
        members=[MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
                 for (mid, iid), code in zip(members, codes)] if top == 0 else [])
