"""The per-connection SASL state machine of a SASL_PLAINTEXT / SASL_SSL listener (Kafka's
SaslServerAuthenticator), sans-io: the connection asks `admits(api_key)` before each request,
the SaslHandshake / SaslAuthenticate handlers drive it.

  state           event                                       next
  --------------  ------------------------------------------  ----------------------------------
  HANDSHAKE       ApiVersions                                 HANDSHAKE
  HANDSHAKE       SaslHandshake, mechanism enabled            AUTHENTICATE
  HANDSHAKE       SaslHandshake, mechanism not enabled        FAILED (UNSUPPORTED_SASL_MECHANISM, close)
  AUTHENTICATE    SaslAuthenticate (or, after a v0 handshake,
                  a bare token), exchange continues           AUTHENTICATE
  AUTHENTICATE    SaslAuthenticate, exchange complete         AUTHENTICATED (principal User:<name>)
  AUTHENTICATE    SaslAuthenticate, bad credentials/message   FAILED (SASL_AUTHENTICATION_FAILED,
                                                              delay, close)
  AUTHENTICATED   any request, session not expired            AUTHENTICATED
  AUTHENTICATED   SaslHandshake, same mechanism (KIP-368)     REAUTHENTICATE
  REAUTHENTICATE  SaslAuthenticate ... complete, same user    AUTHENTICATED (new session expiry)
  REAUTHENTICATE  ... another user or bad credentials         FAILED
  any other pair                                              the connection is closed (Kafka:
                                                              IllegalSaslStateException)

`admits` lets only ApiVersions, SaslHandshake and SaslAuthenticate through before
authentication, and nothing but those two once `connections.max.reauth.ms` has expired the
session: anything else closes the connection, as Kafka does. With reauth set, SaslAuthenticate
v1+ tells the client its session lifetime so it re-authenticates on the same connection in time.
"""
from __future__ import annotations

import logging
import re
import time

from kompakt.broker.security.sasl_mechanisms import (MECHANISMS, AuthenticationFailed, PlainServer,
                                                     ScramServer)
from kompakt.protocol.errors import ErrorCode

log = logging.getLogger("kompakt.broker.security.sasl")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTH_KEYS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
REAUTH_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

HANDSHAKE, AUTHENTICATE, AUTHENTICATED, REAUTHENTICATE, FAILED = (
    "HANDSHAKE", "AUTHENTICATE", "AUTHENTICATED", "REAUTHENTICATE", "FAILED")

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


# (state, event) -> next state; a pair not here raises IllegalSaslState(current, event). Events:
# handshake (SaslHandshake with an acceptable mechanism), step (an exchange message, more to come),
# complete (the exchange succeeded), fail (bad mechanism, credentials, message or state).
TRANSITIONS = {
    (HANDSHAKE, "handshake"): AUTHENTICATE,
    (AUTHENTICATED, "handshake"): REAUTHENTICATE,
    (AUTHENTICATE, "step"): AUTHENTICATE,
    (REAUTHENTICATE, "step"): REAUTHENTICATE,
    (AUTHENTICATE, "complete"): AUTHENTICATED,
    (REAUTHENTICATE, "complete"): AUTHENTICATED,
    **{(state, "fail"): FAILED for state in (HANDSHAKE, AUTHENTICATE, AUTHENTICATED, REAUTHENTICATE, FAILED)},
}


class IllegalSaslState(Exception):
    """An event the state machine has no transition for (Kafka: IllegalSaslStateException)."""

    def __init__(self, current: str, event: str, message: str | None = None):
        super().__init__(message or f"Unexpected {event} in SASL state {current}")
        self.current, self.event = current, event


def transition(current: str, event: str) -> str:
    try:
        return TRANSITIONS[(current, event)]
    except KeyError:
        raise IllegalSaslState(current, event) from None


def jaas_plain_users(jaas: str | None) -> dict[str, str]:
    """`user_<name>="<password>"` options of a PlainLoginModule JAAS line -> {name: password}."""
    if not jaas:
        return {}
    users = {}
    for key, quoted, bare in _JAAS_OPTION.findall(jaas):
        if key.startswith("user_") and len(key) > 5:
            users[key[5:]] = quoted.replace('\\"', '"').replace("\\\\", "\\") if quoted or not bare else bare
    return users


class SaslConfig:
    """A SASL listener's settings, built once at start (listeners.Listener + the SCRAM store)."""

    def __init__(self, listener, scram_store, stats=None):
        enabled = [m.strip().upper() for m in listener.get("sasl.enabled.mechanisms")]
        unsupported = [m for m in enabled if m not in MECHANISMS]
        self.mechanisms = [m for m in enabled if m in MECHANISMS]
        if unsupported:
            log.warning("listener %s: SASL mechanisms %s are not supported and not offered", listener.name,
                        ", ".join(unsupported))
        if not self.mechanisms:
            from kompakt.config.broker_config import ConfigError
            raise ConfigError(f"listener {listener.name} ({listener.protocol}) has no usable SASL mechanism: set "
                              f"sasl.enabled.mechanisms to PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512 (Kafka's "
                              f"default GSSAPI is not supported)")
        self.plain_users = jaas_plain_users(listener.sasl_jaas("PLAIN")) if "PLAIN" in self.mechanisms else {}
        if "PLAIN" in self.mechanisms and not self.plain_users:
            log.warning("listener %s: PLAIN is enabled but its JAAS line (listener.name.%s.plain.sasl.jaas.config "
                        "or sasl.jaas.config) defines no user_<name>=\"<password>\"", listener.name,
                        listener.name.lower())
        self.scram_store = scram_store
        self.reauth_ms = listener.get("connections.max.reauth.ms")
        self.failure_delay_ms = listener.get("connection.failed.authentication.delay.ms")
        self.listener = listener.name
        self.stats = stats if stats is not None else {}     # (mechanism, result) -> count, for metrics


class SaslServer:
    def __init__(self, config: SaslConfig, peer: str = "?", clock=time.monotonic):
        self.config = config
        self.peer = peer
        self.clock = clock
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.username: str | None = None
        self.expires_at: float | None = None     # monotonic seconds, with connections.max.reauth.ms
        self._exchange = None
        self.raw_tokens = False                  # after a v0 SaslHandshake: tokens without Kafka headers

    # -- the connection's gate -----------------------------------------------------------------
    def admits(self, api_key: int) -> bool:
        state = self.state
        if state == AUTHENTICATED:
            return self.expires_at is None or api_key in REAUTH_KEYS or self.clock() < self.expires_at
        if state == REAUTHENTICATE:
            return True
        if state in (HANDSHAKE, AUTHENTICATE) and api_key in PRE_AUTH_KEYS:
            return True
        return False

    def refusal(self, api_key: int) -> str:
        if self.state == AUTHENTICATED:
            return (f"SASL session of User:{self.username} expired (connections.max.reauth.ms) without "
                    f"re-authentication; API key {api_key} refused")
        return (f"API key {api_key} received before SASL authentication completed (state {self.state}); "
                f"only ApiVersions, SaslHandshake and SaslAuthenticate are allowed")

    # -- SaslHandshake ---------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int = 1) -> int:
        """Returns the error code for the SaslHandshake response. After a v0 handshake the client
        sends the SASL tokens bare (4-byte size, token; no request header) and gets them back so."""
        reauth = self.state == AUTHENTICATED
        try:
            self.state = transition(self.state, "handshake")
        except IllegalSaslState:
            self.state = transition(self.state, "fail")
            return ErrorCode.ILLEGAL_SASL_STATE
        if reauth and mechanism != self.mechanism:        # KIP-368: the same mechanism, or nothing
            self.state = transition(self.state, "fail")
            return ErrorCode.ILLEGAL_SASL_STATE
        if not reauth:
            self.mechanism = mechanism
            if mechanism not in self.config.mechanisms:
                self._fail(f"unsupported SASL mechanism {mechanism!r}")
                return ErrorCode.UNSUPPORTED_SASL_MECHANISM
            self.raw_tokens = version == 0
        self._exchange = self._new_exchange(mechanism)
        return ErrorCode.NONE

    def _new_exchange(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainServer(self.config.plain_users)
        return ScramServer(mechanism, self.config.scram_store.lookup)

    # -- SaslAuthenticate ------------------------------------------------------------------------
    def authenticate(self, data: bytes) -> bytes:
        """One SaslAuthenticate step; raises AuthenticationFailed (state FAILED) or IllegalSaslState."""
        if self._exchange is None:
            current = self.state
            self.state = transition(current, "fail")
            raise IllegalSaslState(current, "step", "SaslAuthenticate request received after successful "
                                   "authentication" if current == AUTHENTICATED else
                                   f"Unexpected SaslAuthenticate request in state {current}")
        exchange = self._exchange
        try:
            answer = exchange.step(data)
        except AuthenticationFailed as exc:
            self._fail(str(exc))
            raise
        if not exchange.complete:
            self.state = transition(self.state, "step")
            return answer
        if self.state == REAUTHENTICATE and exchange.username != self.username:
            message = (f"Cannot change principals during re-authentication from User:{self.username} to "
                       f"User:{exchange.username}")
            self._fail(message)
            raise AuthenticationFailed(message)
        self.state = transition(self.state, "complete")
        self._count("success")
        self.username = exchange.username
        self.raw_tokens = False
        self._exchange = None
        reauth = self.config.reauth_ms
        self.expires_at = self.clock() + reauth / 1000.0 if reauth else None
        return answer

    def _count(self, result: str) -> None:
        key = (self.mechanism or "?", result)
        self.config.stats[key] = self.config.stats.get(key, 0) + 1

    def _fail(self, message: str) -> None:
        self._count("failure")
        self.state = transition(self.state, "fail")
        self._exchange = None
        log.info("authentication failed from %s on listener %s with %s: %s", self.peer, self.config.listener,
                 self.mechanism, message)

    @property
    def principal(self) -> str | None:
        return f"User:{self.username}" if self.state == AUTHENTICATED and self.username is not None else None

    @property
    def session_lifetime_ms(self) -> int:
        return int(self.config.reauth_ms or 0)
