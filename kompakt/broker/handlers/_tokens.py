"""What the four delegation-token APIs (38-41) share: Kafka 4.0's answers with tokens disabled.

Kafka serves delegation tokens (KIP-48) only when `delegation.token.secret.key` is set; by
default it is not, and Kompakt has no such setting (no token store, no token authentication), so
it answers as a default Kafka 4.0 cluster does (KafkaApis.handle*TokenRequest, ControllerApis,
DelegationTokenControlManager):
1. `allowTokenRequests` false - a PLAINTEXT listener, one-way SSL (the principal is ANONYMOUS),
   or a token-authenticated session (never here) - : DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, with
   the timestamps -1 (DelegationTokenManager.ErrorTimestamp);
2. CreateDelegationToken for another owner without CREATE_TOKENS on that User:
   DELEGATION_TOKEN_AUTHORIZATION_FAILED (timestamps -1);
3. else DELEGATION_TOKEN_AUTH_DISABLED (the controller's answer: timestamps left at 0; Describe
   answers it on the broker, with no tokens).
Nothing is created or changed.
"""
from __future__ import annotations

from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode

ERROR_TIMESTAMP = -1          # Kafka's DelegationTokenManager.ErrorTimestamp


def token_requests_allowed(ctx) -> bool:
    """Kafka's KafkaApis.allowTokenRequests: not over PLAINTEXT, not one-way SSL."""
    session = ctx.session
    if session.protocol == "PLAINTEXT":
        return False
    if session.protocol == "SSL" and session.principal == "User:ANONYMOUS":
        return False
    return True


def principal_parts(principal: str) -> tuple[str, str]:
    """`User:alice` -> ("User", "alice") (KafkaPrincipal's type and name)."""
    kind, _, name = principal.partition(":")
    return kind, name


def renew_or_expire_answer(ctx, api_key: int):
    """RenewDelegationToken's or ExpireDelegationToken's answer (the two have the same fields)."""
    if not token_requests_allowed(ctx):
        code, expiry = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, ERROR_TIMESTAMP
    else:
        code, expiry = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, 0     # the controller's answer
    return registry.API[api_key].response(error_code=int(code), expiry_timestamp_ms=expiry, throttle_time_ms=0)
