"""SaslHandshake (key 17), versions 0-1.

Behaviour: on a SASL listener, before authentication (or to start a KIP-368 re-authentication
with the same mechanism), picks the mechanism; the answer lists the listener's enabled
mechanisms (`sasl.enabled.mechanisms`, those Kompakt has: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
A mechanism not enabled: UNSUPPORTED_SASL_MECHANISM, then the connection closes after
`connection.failed.authentication.delay.ms` (Kafka's behaviour). On a listener without SASL, or
once authenticated with re-authentication off, or less than a second after the last
re-authentication began: ILLEGAL_SASL_STATE, connection kept (Kafka's KafkaApis answer). Re-authentication with another enabled mechanism is answered NONE and fails at
the SaslAuthenticate that follows (Kafka's REAUTH_BAD_MECHANISM).

Version notes: after v0 the client sends the SASL tokens bare (size-prefixed, no request header)
and reads the answers so (network/connection.py hands them to the SASL state machine); v1 uses
SaslAuthenticate. librdkafka requires v0 in the advertised range and then sends v1.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.sasl import SaslHandshakeResponse

from kompakt.broker.security.sasl_server import FAILED
from kompakt.protocol.errors import ErrorCode

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx, request):
    sasl = ctx.session.sasl
    if sasl is None:
        return SaslHandshakeResponse(version=ctx.api_version, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    code = sasl.handshake(request.mechanism, ctx.api_version)
    if sasl.state == FAILED:                 # answered after the delay, then closed (Kafka)
        await asyncio.sleep(sasl.config.failure_delay_ms / 1000.0)
        ctx.session.close()
    return SaslHandshakeResponse(version=ctx.api_version, error_code=code, mechanisms=list(sasl.config.mechanisms))
