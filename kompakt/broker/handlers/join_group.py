"""JoinGroup (API key 11), versions 2-9 (Kafka 4.0's range, the release Kompakt advertises;
v0-1 were removed in Kafka 4.0, KIP-896).

Behaviour (Kafka's classic group protocol, coordinator.py has the details): a member with no
member id gets one - from v4 first answered MEMBER_ID_REQUIRED with the id to rejoin with
(KIP-394), except static members (group.instance.id, v5+), which are admitted at once and replace
a previous member with the same instance id (the old one is fenced: FENCED_INSTANCE_ID). The
answer is parked until the join phase ends: everyone rejoined, or rebalance.timeout.ms, or - for
a group coming from Empty - group.initial.rebalance.delay.ms. Then every member gets the new
generation, the protocol chosen by vote and the leader id; the leader also gets every member's
metadata. Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT (outside
group.min/max.session.timeout.ms), UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL,
GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE.

Version notes: v0 has no rebalance timeout (the session timeout is used); v4 MEMBER_ID_REQUIRED;
v5 group_instance_id; v6+ flexible; v7 protocol_type in the answer; v8 reason; v9
skip_assignment (a static leader rejoining a Stable group learns the members but keeps the
current assignment).

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import JoinGroupResponse

from kompakt.broker.groups.coordinator import JoinRequest
from kompakt.broker.groups.member import client_host
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 11
MIN_VERSION = 2
MAX_VERSION = 9

Member = JoinGroupResponse.JoinGroupResponseMember


async def handle(ctx, request):
    version = ctx.api_version
    if not ctx.authorize(Op.READ, Res.GROUP, request.group_id):   # Kafka: GROUP_AUTHORIZATION_FAILED
        return JoinGroupResponse(version=version, throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                 generation_id=-1, protocol_type=None, protocol_name=None if version >= 7 else "",
                                 leader="", skip_assignment=False, member_id=request.member_id or "", members=[])
    result = await ctx.groups.join_group(JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if version >= 5 else None,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else -1,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx.peer),
        api_version=version, describable=ctx.topic_describe_check()))
    return JoinGroupResponse(
        version=version, throttle_time_ms=0, error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Before v7 the protocol name is not nullable: "" stands for none.
        protocol_name=result.protocol_name if (result.protocol_name is not None or version >= 7) else "",
        leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[Member(member_id=mid, group_instance_id=iid, metadata=meta)
                 for mid, iid, meta in result.members])
