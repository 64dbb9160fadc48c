"""RenewDelegationToken (API key 39), versions 1-2 (Kafka 4.0 removed v0): answered as Kafka 4.0 with
delegation tokens disabled, its default (handlers/_tokens.py has the rules): no token exists to
renew and nothing changes.
"""
from __future__ import annotations

from kompakt.broker.handlers._tokens import ERROR_TIMESTAMP, token_requests_allowed
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode

API_KEY = 39
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx, request):
    if not token_requests_allowed(ctx):
        code, expiry = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, ERROR_TIMESTAMP
    else:
        code, expiry = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, 0     # the controller's answer
    return registry.API[API_KEY].response(error_code=int(code), expiry_timestamp_ms=expiry, throttle_time_ms=0)
