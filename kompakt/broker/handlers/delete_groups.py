"""DeleteGroups (API key 42), versions 0-2.

Behaviour: deletes groups that have no members: one batch appended to `__consumer_offsets` with
a tombstone for every committed offset and for the group metadata; the cleaner then removes
them after delete.retention.ms. Per-group errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (a state
other than Empty; members that were given an id and have not joined yet do not count, as in
Kafka: their rejoin answers UNKNOWN_MEMBER_ID), INVALID_GROUP_ID (empty id), COORDINATOR_NOT_AVAILABLE (append failed).

Version notes: v2+ flexible.

Authorization: DELETE on each group (else GROUP_AUTHORIZATION_FAILED for it).
"""
from __future__ import annotations

from kafka.protocol.admin.groups import DeleteGroupsResponse
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx, request):
    names = list(request.groups_names)
    allowed = ctx.authorized(Op.DELETE, Res.GROUP, names)       # Kafka: GROUP_AUTHORIZATION_FAILED per group
    codes = ctx.groups.delete_groups(allowed) if allowed else {}
    codes.update({g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in names if g not in set(allowed)})
    return DeleteGroupsResponse(version=ctx.api_version, throttle_time_ms=0,
                                results=[Result(group_id=g, error_code=codes[g]) for g in names])
