"""CreateDelegationToken (API key 38), versions 1-3 (Kafka 4.0 removed v0): answered as Kafka 4.0
with delegation tokens disabled, its default (handlers/_tokens.py has the rules).

The answer names the owner (the request's owner principal from v3, else the requester) and, from
v3, the requester; no token is issued (token id "", empty HMAC).
"""
from __future__ import annotations

from kompakt.broker.handlers._tokens import ERROR_TIMESTAMP, principal_parts, token_requests_allowed
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode

API_KEY = 38
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx, request):
    requester = ctx.principal
    owner = requester
    if ctx.api_version >= 3 and request.owner_principal_name:
        owner = f"{request.owner_principal_type}:{request.owner_principal_name}"
    stamp = 0                                   # the controller's answer leaves them at 0
    if not token_requests_allowed(ctx):
        code, stamp = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, ERROR_TIMESTAMP
    elif owner != requester and not ctx.authorize(Op.CREATE_TOKENS, Res.USER, owner):
        code, stamp = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, ERROR_TIMESTAMP
    else:
        code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    owner_type, owner_name = principal_parts(owner)
    requester_type, requester_name = principal_parts(requester)
    return registry.API[API_KEY].response(
        error_code=int(code), principal_type=owner_type, principal_name=owner_name,
        token_requester_principal_type=requester_type, token_requester_principal_name=requester_name,
        issue_timestamp_ms=stamp, expiry_timestamp_ms=stamp, max_timestamp_ms=stamp, token_id="", hmac=b"",
        throttle_time_ms=0)
