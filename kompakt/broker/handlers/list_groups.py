"""ListGroups (API key 16), versions 0-5.

Behaviour: every live group this coordinator knows (all of them, on one broker) with its protocol
type ("consumer", or "" for a group that only stores offsets), state (v4+) and type (v5+:
"classic", or "consumer" for KIP-848 groups, whose states are Empty, Assigning, Reconciling and
Stable). `states_filter` (v4+) keeps groups whose state matches case-insensitively;
`types_filter` (v5+) keeps groups of the named types ("classic", "consumer").
While __consumer_offsets is still loading at start-up: COORDINATOR_LOAD_IN_PROGRESS, no groups.

Version notes: v1 throttle time; v3+ flexible; v4 states filter and group_state; v5 types
filter and group_type.

Authorization: DESCRIBE on the cluster lists every group, else only the groups the principal
may DESCRIBE.
"""
from __future__ import annotations

from kafka.protocol.admin.groups import ListGroupsResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

Listed = ListGroupsResponse.ListedGroup


async def handle(ctx, request):
    v = ctx.api_version
    if ctx.groups.loading:                        # __consumer_offsets still loading (retriable)
        return ListGroupsResponse(version=v, throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                  groups=[])
    rows = ctx.groups.list_groups(request.states_filter if v >= 4 else None,
                                  request.types_filter if v >= 5 else None)
    if not ctx.authorize_cluster(Op.DESCRIBE):    # Kafka: else only the groups it may describe
        rows = ctx.authorized(Op.DESCRIBE, Res.GROUP, rows, key=lambda row: row[0])
    return ListGroupsResponse(version=v, throttle_time_ms=0, error_code=0, groups=[
        Listed(group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype)
        for gid, ptype, state, gtype in rows])
