"""CreateAcls (key 30), versions 1-3.

Behaviour (Kafka's AclApis.handleCreateAcls + AclControlManager.validateNewAcl): one result per
creation, in order. Without an authorizer every result is SECURITY_DISABLED; without ALTER on the
cluster CLUSTER_AUTHORIZATION_FAILED. A creation Kafka refuses (resource type ANY/UNKNOWN, pattern
type other than LITERAL/PREFIXED, operation ANY/UNKNOWN, permission other than ALLOW/DENY, an
empty name, a CLUSTER resource not named kafka-cluster, a principal without `Type:`) gets
INVALID_REQUEST with Kafka's message; the valid ones are added (an existing identical ACL is not
duplicated) and persisted before the answer (security/acl_store.py).
"""
from __future__ import annotations

import asyncio

from kafka.protocol.admin.acl import CreateAclsResponse

from kompakt.broker.security.acl import AclBinding, Op, validate_binding
from kompakt.broker.handlers._common import acl_api_refusal
from kompakt.protocol.errors import ErrorCode

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3

_Result = CreateAclsResponse.AclCreationResult


def _all(ctx, request, code, message):
    return CreateAclsResponse(version=ctx.api_version, throttle_time_ms=0,
                              results=[_Result(error_code=code, error_message=message) for _ in request.creations])


async def handle(ctx, request):
    refused = acl_api_refusal(ctx, Op.ALTER)
    if refused is not None:
        return _all(ctx, request, *refused)
    authorizer = ctx.authorizer
    results, valid = [], []
    for c in request.creations:
        b = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                       c.operation, c.permission_type)
        problem = validate_binding(b)
        results.append(_Result(error_code=ErrorCode.INVALID_REQUEST if problem else 0, error_message=problem))
        if problem is None:
            valid.append(b)
    if valid:
        try:
            await asyncio.to_thread(authorizer.create, valid)
        except OSError as exc:
            results = [r if r.error_code else _Result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                                      error_message=f"cannot store ACLs: {exc}") for r in results]
    return CreateAclsResponse(version=ctx.api_version, throttle_time_ms=0, results=results)
