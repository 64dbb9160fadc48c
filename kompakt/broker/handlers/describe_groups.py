"""DescribeGroups (API key 15), versions 0-6.

Behaviour: per group: state (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead),
protocol type, and - only when Stable - the selected protocol and each member's metadata and
assignment (Kafka hides them mid-rebalance); members always carry member id, group instance id,
client id and client host. An unknown group is described as Dead with no error before v6, and
GROUP_ID_NOT_FOUND with a message from v6 (KIP-1043); so is a consumer-protocol (KIP-848) group,
as Kafka describes only classic groups here (ConsumerGroupDescribe describes the others). Authorized operations are not computed
(ACLs are not implemented): the field keeps its schema default, Kafka's "not requested"
sentinel INT32_MIN (kafka-python models the field as a bitfield, so we never set it).

Version notes: v1 throttle time; v3 include_authorized_operations / authorized_operations;
v4 group_instance_id; v5+ flexible; v6 error_message.

Authorization: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it); v3+
`include_authorized_operations` fills the group's authorized operations.
"""
from __future__ import annotations

from kafka.protocol.admin.groups import DescribeGroupsResponse

from kompakt.protocol.errors import ErrorCode
from kompakt.broker.security.acl import Op, Res

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

Described = DescribeGroupsResponse.DescribedGroup
DescribedMember = Described.DescribedGroupMember


async def handle(ctx, request):
    v = ctx.api_version
    out = []
    asks_ops = v >= 3 and bool(request.include_authorized_operations)
    for group_id in request.groups:
        code = (ErrorCode.GROUP_AUTHORIZATION_FAILED if not ctx.authorize(Op.DESCRIBE, Res.GROUP, group_id)  # per group
                else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if ctx.groups.loading else 0)
        if code:
            out.append(Described(error_code=code, error_message=None,
                                 group_id=group_id, group_state="", protocol_type="", protocol_data="",
                                 members=[], authorized_operations=None))
            continue
        d = ctx.groups.describe_group(group_id)
        if d is None:
            code = ErrorCode.GROUP_ID_NOT_FOUND if v >= 6 else ErrorCode.NONE
            out.append(Described(error_code=code,
                                 error_message=ctx.groups.not_classic_message(group_id) if v >= 6 else None,
                                 group_id=group_id, group_state="Dead", protocol_type="",
                                 protocol_data="", members=[]))
            continue
        out.append(Described(
            error_code=0, error_message=None, group_id=group_id, group_state=d.state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[DescribedMember(member_id=mid, group_instance_id=iid, client_id=cid,
                                     client_host=host, member_metadata=meta, member_assignment=asg)
                     for mid, iid, cid, host, meta, asg in d.members],
            authorized_operations=ctx.authorized_operations(Res.GROUP, group_id) if asks_ops else None))
    return DescribeGroupsResponse(version=v, throttle_time_ms=0, groups=out)
