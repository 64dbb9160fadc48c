"""DescribeDelegationToken (API key 41), versions 1-3 (Kafka 4.0 removed v0): answered as Kafka
4.0 with delegation tokens disabled, its default (handlers/_tokens.py has the rules): no tokens.
"""
from __future__ import annotations

from kompakt.broker.handlers._tokens import token_requests_allowed
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode

API_KEY = 41
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx, request):
    code = (ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED if token_requests_allowed(ctx)
            else ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return registry.API[API_KEY].response(error_code=int(code), tokens=[], throttle_time_ms=0)
