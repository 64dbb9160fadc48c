"""SaslAuthenticate (key 36), versions 0-2.

Behaviour: carries one step of the SASL exchange the handshake chose (security/sasl_server.py).
When the exchange completes the connection's principal becomes `User:<name>`. Bad credentials or
a malformed SASL message: SASL_AUTHENTICATION_FAILED with Kafka's message, answered after
`connection.failed.authentication.delay.ms`, then the connection closes. Out of sequence (no
handshake): ILLEGAL_SASL_STATE, then close; after a successful authentication, or on a listener
without SASL: ILLEGAL_SASL_STATE "SaslAuthenticate request received after successful
authentication", connection kept (Kafka's KafkaApis answer).

Version notes: v1 adds session_lifetime_ms (KIP-368): `connections.max.reauth.ms` when set, so the
client re-authenticates on the same connection before the broker stops serving it; 0 = no
expiry. v2 is flexible.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.sasl import SaslAuthenticateResponse

from kompakt.broker.security.sasl_mechanisms import AuthenticationFailed
from kompakt.broker.security.sasl_server import FAILED, IllegalSaslState
from kompakt.protocol.errors import ErrorCode

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


def _response(ctx, code, message=None, data=b"", lifetime=0):
    return SaslAuthenticateResponse(version=ctx.api_version, error_code=code, error_message=message,
                                    auth_bytes=data, session_lifetime_ms=lifetime)


async def handle(ctx, request):
    session = ctx.session
    sasl = session.sasl
    if sasl is None:
        return _response(ctx, ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate on a listener without SASL")
    try:
        data = sasl.authenticate(request.auth_bytes or b"")
    except IllegalSaslState as exc:
        if sasl.state == FAILED:             # out of sequence; after success Kafka answers and keeps it
            session.close()
        return _response(ctx, ErrorCode.ILLEGAL_SASL_STATE, str(exc))
    except AuthenticationFailed as exc:
        await asyncio.sleep(sasl.config.failure_delay_ms / 1000.0)
        session.close()
        code = ErrorCode.SASL_AUTHENTICATION_FAILED
        message = (str(exc) if sasl.mechanism == "PLAIN" else
                   f"Authentication failed during authentication due to invalid credentials with SASL "
                   f"mechanism {sasl.mechanism}")
        return _response(ctx, code, message)
    principal = sasl.principal
    if principal is not None:
        session.principal = principal
        return _response(ctx, ErrorCode.NONE, None, data, sasl.session_lifetime_ms)
    return _response(ctx, ErrorCode.NONE, None, data)
