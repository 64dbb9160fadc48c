"""DescribeUserScramCredentials (key 50), version 0.

Behaviour (Kafka's ControllerApis / ScramControlManager.describeScramCredentials): needs DESCRIBE
on the cluster (else a top-level CLUSTER_AUTHORIZATION_FAILED). Null or empty `users` lists every
user with SCRAM credentials; a named user without any: RESOURCE_NOT_FOUND "Attempt to describe a
user credential that does not exist"; a user named twice: DUPLICATE_RESOURCE for it. Each result
lists (mechanism, iterations), never salts or keys.
"""
from __future__ import annotations

from collections import Counter

from kafka.protocol.admin.users import DescribeUserScramCredentialsResponse

from kompakt.broker.security.acl import Op
from kompakt.broker.security.scram_store import CODE_OF
from kompakt.protocol.errors import ErrorCode

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0

_Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Result.CredentialInfo


def _response(ctx, code=0, message=None, results=()):
    return DescribeUserScramCredentialsResponse(version=ctx.api_version, throttle_time_ms=0, error_code=code,
                                                error_message=message, results=list(results))


async def handle(ctx, request):
    if not ctx.authorize_cluster(Op.DESCRIBE):
        return _response(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    store = ctx.broker.scram_store
    names = [u.name for u in request.users] if request.users else sorted(store.users)
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        creds = store.users.get(name)
        if counts[name] > 1:
            results.append(_Result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                                   error_message="Cannot describe SCRAM credentials for the same user twice in a "
                                                 "single request"))
        elif not creds:
            results.append(_Result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                                   error_message="Attempt to describe a user credential that does not exist"))
        else:
            results.append(_Result(user=name, error_code=0, error_message=None, credential_infos=[
                _Info(mechanism=CODE_OF[m], iterations=c.iterations) for m, c in sorted(creds.items())]))
    return _response(ctx, results=results)
