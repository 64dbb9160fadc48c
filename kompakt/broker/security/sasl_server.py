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
  AUTHENTICATED   SaslHandshake, another enabled mechanism    REAUTH_BAD_MECHANISM (answered NONE)
  REAUTHENTICATE  SaslAuthenticate ... complete, same user    AUTHENTICATED (new session expiry)
  REAUTHENTICATE  ... another user or bad credentials         FAILED
  REAUTH_BAD_MECHANISM  SaslAuthenticate                      FAILED (SASL_AUTHENTICATION_FAILED)
  any other pair                                              the connection is closed (Kafka:
                                                              IllegalSaslStateException)
Not transitions (answered ILLEGAL_SASL_STATE, state kept, connection open, as Kafka's KafkaApis
answers them once a connection is authenticated): SaslHandshake when re-authentication is off
(`connections.max.reauth.ms` 0) or less than a second after the last re-authentication started
(Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS), SaslAuthenticate outside an exchange.

`admits(api_key)` (Kafka's SaslServerAuthenticator and SocketServer): HANDSHAKE admits ApiVersions
and SaslHandshake; AUTHENTICATE, REAUTHENTICATE and REAUTH_BAD_MECHANISM only SaslAuthenticate;
AUTHENTICATED everything until the KIP-368 session expires, then only the SaslHandshake that
starts a re-authentication; FAILED nothing. A refused request closes the connection. With
re-authentication on, SaslAuthenticate v1+ tells the client its session lifetime
(`connections.max.reauth.ms`, also per mechanism: `listener.name.<l>.<mechanism>.connections.max.reauth.ms`)
so it re-authenticates on the same connection in time.

The connection is closed after a SASL answer exactly when the state is FAILED.
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
MIN_REAUTH_INTERVAL_S = 1.0      # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS

HANDSHAKE, AUTHENTICATE, AUTHENTICATED, REAUTHENTICATE, REAUTH_BAD_MECHANISM, FAILED = (
    "HANDSHAKE", "AUTHENTICATE", "AUTHENTICATED", "REAUTHENTICATE", "REAUTH_BAD_MECHANISM", "FAILED")
# what each state lets through the connection's gate (AUTHENTICATED: see admits)
ADMITTED = {HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}), AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
            REAUTHENTICATE: frozenset({SASL_AUTHENTICATE}), REAUTH_BAD_MECHANISM: frozenset({SASL_AUTHENTICATE}),
            FAILED: frozenset()}

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


# (state, event) -> next state; a pair not here raises IllegalSaslState(current, event). Events:
# handshake (SaslHandshake with an acceptable mechanism), step (an exchange message, more to come),
# complete (the exchange succeeded), fail (bad mechanism, credentials, message or state).
TRANSITIONS = {
    (HANDSHAKE, "handshake"): AUTHENTICATE,
    (AUTHENTICATED, "handshake"): REAUTHENTICATE,
    (AUTHENTICATED, "other_mechanism"): REAUTH_BAD_MECHANISM,
    (AUTHENTICATE, "step"): AUTHENTICATE,
    (REAUTHENTICATE, "step"): REAUTHENTICATE,
    (AUTHENTICATE, "complete"): AUTHENTICATED,
    (REAUTHENTICATE, "complete"): AUTHENTICATED,
    **{(state, "fail"): FAILED
       for state in (HANDSHAKE, AUTHENTICATE, AUTHENTICATED, REAUTHENTICATE, REAUTH_BAD_MECHANISM, FAILED)},
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
        self.plain_users = (jaas_plain_users(listener.get_for_mechanism("PLAIN", "sasl.jaas.config"))
                            if "PLAIN" in self.mechanisms else {})
        if "PLAIN" in self.mechanisms and not self.plain_users:
            log.warning("listener %s: PLAIN is enabled but its JAAS line (listener.name.%s.plain.sasl.jaas.config "
                        "or sasl.jaas.config) defines no user_<name>=\"<password>\"", listener.name,
                        listener.name.lower())
        self.scram_store = scram_store
        self.reauth_ms = {m: listener.get_for_mechanism(m, "connections.max.reauth.ms") for m in self.mechanisms}
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
        self.reauth_started: float | None = None # when the last re-authentication began (clock)
        self._exchange = None
        self._refused = ""                       # REAUTH_BAD_MECHANISM: the failure SaslAuthenticate gets
        self.raw_tokens = False                  # after a v0 SaslHandshake: tokens without Kafka headers

    # -- the connection's gate -----------------------------------------------------------------
    def admits(self, api_key: int) -> bool:
        state = self.state
        if state == AUTHENTICATED:
            return self.expires_at is None or api_key == SASL_HANDSHAKE or self.clock() < self.expires_at
        return api_key in ADMITTED[state]

    def refusal(self, api_key: int) -> str:
        if self.state == AUTHENTICATED:
            return (f"SASL session of User:{self.username} expired (connections.max.reauth.ms) without "
                    f"re-authentication; API key {api_key} refused")
        when = "before SASL authentication completed" if self.state in (HANDSHAKE, AUTHENTICATE) else "during SASL"
        return (f"API key {api_key} received {when} (state {self.state}, which admits only API keys "
                f"{sorted(ADMITTED[self.state]) or 'none'}: ApiVersions 18, SaslHandshake 17, SaslAuthenticate 36)")

    # -- SaslHandshake ---------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int = 1) -> int:
        """Returns the error code for the SaslHandshake response (the state says whether to close:
        FAILED). After a v0 handshake the client sends the SASL tokens bare (4-byte size, token;
        no request header) and gets them back so."""
        state = self.state
        if state == AUTHENTICATED:
            if self.expires_at is None:
                return ErrorCode.ILLEGAL_SASL_STATE      # re-authentication is off: Kafka's KafkaApis answer
            now = self.clock()
            if self.reauth_started is not None and now - self.reauth_started < MIN_REAUTH_INTERVAL_S:
                return ErrorCode.ILLEGAL_SASL_STATE      # at most one a second: the same answer
            self.reauth_started = now
        if mechanism not in self.config.mechanisms:
            if state != AUTHENTICATED:
                self.mechanism = mechanism
            self._fail(f"unsupported SASL mechanism {mechanism!r}")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if state == AUTHENTICATED and mechanism != self.mechanism:    # KIP-368: refused at SaslAuthenticate
            self.state = transition(state, "other_mechanism")
            self._exchange = None
            self._refused = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                             f"re-authentication of mechanism '{self.mechanism}'")
            return ErrorCode.NONE
        try:
            self.state = transition(state, "handshake")
        except IllegalSaslState:
            self.state = transition(state, "fail")
            return ErrorCode.ILLEGAL_SASL_STATE
        if state != AUTHENTICATED:
            self.mechanism = mechanism
            self.raw_tokens = version == 0
        self._exchange = self._new_exchange(mechanism)
        return ErrorCode.NONE

    def _new_exchange(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainServer(self.config.plain_users)
        return ScramServer(mechanism, self.config.scram_store.lookup)

    # -- SaslAuthenticate ------------------------------------------------------------------------
    def authenticate(self, data: bytes) -> bytes:
        """One SaslAuthenticate step; raises AuthenticationFailed (state FAILED) or IllegalSaslState
        (state FAILED, except when authenticated: Kafka answers that and keeps the connection)."""
        current = self.state
        if current == AUTHENTICATED:
            raise IllegalSaslState(current, "step", "SaslAuthenticate request received after successful "
                                   "authentication")
        if current == REAUTH_BAD_MECHANISM:
            self._fail(self._refused)
            raise AuthenticationFailed(self._refused)
        if self._exchange is None:
            self.state = transition(current, "fail")
            raise IllegalSaslState(current, "step", f"Unexpected SaslAuthenticate request in state {current}")
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
        reauth = self.session_lifetime_ms
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
        """KIP-368: the mechanism's `connections.max.reauth.ms` (0: sessions do not expire)."""
        return max(int(self.config.reauth_ms.get(self.mechanism) or 0), 0)
