"""DescribeAcls (key 29), versions 1-3.

Behaviour (Kafka's AclApis.handleDescribeAcls): without an authorizer SECURITY_DISABLED "No
Authorizer is configured."; needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED);
a filter with an UNKNOWN element (or pattern type UNKNOWN): INVALID_REQUEST. Otherwise every ACL
the filter matches (security/acl.py: LITERAL, PREFIXED, ANY and MATCH pattern filters; null
name/principal/host and ANY operation/permission match everything), grouped by resource pattern.

Version notes: v1 adds the pattern type (Kafka 4's floor), v2 flexible, v3 the USER resource type.
"""
from __future__ import annotations

from kafka.protocol.admin.acl import DescribeAclsResponse

from kompakt.broker.security.acl import AclFilter, Op, filter_problem
from kompakt.broker.handlers._common import acl_api_refusal
from kompakt.protocol.errors import ErrorCode

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3

_Resource = DescribeAclsResponse.DescribeAclsResource
_Acl = _Resource.AclDescription


def _response(ctx, code=0, message=None, resources=()):
    return DescribeAclsResponse(version=ctx.api_version, throttle_time_ms=0, error_code=code,
                                error_message=message, resources=list(resources))


async def handle(ctx, request):
    refused = acl_api_refusal(ctx, Op.DESCRIBE)
    if refused is not None:
        return _response(ctx, *refused)
    authorizer = ctx.authorizer
    f = AclFilter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                  request.principal_filter, request.host_filter, request.operation, request.permission_type)
    problem = filter_problem(f)
    if problem:
        return _response(ctx, ErrorCode.INVALID_REQUEST, problem)
    grouped: dict[tuple, list] = {}
    for b in authorizer.describe(f):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            _Acl(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission))
    return _response(ctx, resources=[_Resource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                                     for (t, n, p), acls in grouped.items()])
