"""DeleteAcls (key 31), versions 1-3.

Behaviour (Kafka's AclApis.handleDeleteAcls): one result per filter, in order, listing the ACLs it
removed. Without an authorizer SECURITY_DISABLED, without ALTER on the cluster
CLUSTER_AUTHORIZATION_FAILED, a filter with an UNKNOWN element INVALID_REQUEST (for that filter).
Filters match as in DescribeAcls (security/acl.py); every matched ACL is removed, and the new set
is persisted before the answer.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.admin.acl import DeleteAclsResponse

from kompakt.broker.security.acl import AclFilter, Op, filter_problem
from kompakt.broker.handlers._common import acl_api_refusal
from kompakt.protocol.errors import ErrorCode

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3

_Result = DeleteAclsResponse.DeleteAclsFilterResult
_Match = _Result.DeleteAclsMatchingAcl


def _all(ctx, request, code, message):
    return DeleteAclsResponse(version=ctx.api_version, throttle_time_ms=0, filter_results=[
        _Result(error_code=code, error_message=message, matching_acls=[]) for _ in request.filters])


async def handle(ctx, request):
    refused = acl_api_refusal(ctx, Op.ALTER)
    if refused is not None:
        return _all(ctx, request, *refused)
    authorizer = ctx.authorizer
    filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                         f.host_filter, f.operation, f.permission_type) for f in request.filters]
    problems = [filter_problem(f) for f in filters]
    valid = [f for f, p in zip(filters, problems) if p is None]
    try:
        removed = iter(await asyncio.to_thread(authorizer.delete, valid) if valid else [])
    except OSError as exc:
        return _all(ctx, request, ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store ACLs: {exc}")
    results = []
    for problem in problems:
        if problem:
            results.append(_Result(error_code=ErrorCode.INVALID_REQUEST, error_message=problem, matching_acls=[]))
            continue
        results.append(_Result(error_code=0, error_message=None, matching_acls=[
            _Match(error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
                   pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                   permission_type=b.permission) for b in next(removed)]))
    return DeleteAclsResponse(version=ctx.api_version, throttle_time_ms=0, filter_results=results)
