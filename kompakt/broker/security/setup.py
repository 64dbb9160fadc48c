"""Building the security pieces from a BrokerConfig (the only place that reads their keys).

`build_listeners(config) -> [ListenerSecurity]`: each listener with its protocol, TLS context,
SASL settings and principal mapping; every TLS/SASL misconfiguration raises ConfigError here,
at start, with the key to fix.

`build_authorizer(config) -> Authorizer | None`: `authorizer.class.name` empty -> None (every
check allows, at no cost); one of Kafka's authorizer class names -> our StandardAuthorizer with
`super.users`, `allow.everyone.if.no.acl.found` and the ACLs stored in the first log dir; any
other class name -> ConfigError (a custom Java authorizer cannot run here, and silently running
without ACLs would be worse).
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter

from kompakt.broker.security.acl_store import AclStore
from kompakt.broker.security.authorizer import AUTHORIZER_CLASS_NAMES, Authorizer, parse_super_users
from kompakt.broker.security.listeners import Listener, configured_listeners
from kompakt.broker.security.principal import BadCertificate, NoMatchingRule, PrincipalMapper, subject_dn
from kompakt.broker.security.sasl_server import SaslConfig, SaslServer
from kompakt.broker.security.session import Session
from kompakt.broker.security.tls import keystore_identity, server_context
from kompakt.broker.security.tls_reload import tls_values
from kompakt.config.broker_config import ConfigError

log = logging.getLogger(__name__)


def build_authorizer(config) -> Authorizer | None:
    name = (config["authorizer.class.name"] or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"Invalid value {name} for configuration authorizer.class.name: Kompakt provides "
                          f"Kafka's StandardAuthorizer; use org.apache.kafka.metadata.authorizer.StandardAuthorizer "
                          f"(or leave it empty for no authorization)")
    store = AclStore(config.log_dirs[0])
    az = Authorizer(super_users=parse_super_users(config["super.users"]),
                    allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"], store=store)
    log.info("authorizer on: %d ACLs from %s, super users %s, allow.everyone.if.no.acl.found=%s",
             len(az.bindings), store.path, sorted(az.super_users) or "none", az.allow_if_no_acl)
    return az


class ListenerSecurity:
    """One listener's security, built at start: its TLS context (SSL, SASL_SSL), SASL settings
    (SASL_*), and the principal mapper; `open_session` makes each connection's Session."""

    handshake_timeout_s = 10.0

    def __init__(self, listener: Listener):
        self.listener = listener
        self.name = listener.name
        self.stats: Counter = Counter()   # (mechanism or "TLS", "success" | "failure") -> count (broker/observability/live.py)
        # ("decrypt" | "encrypt", "event_loop" | "worker") -> bytes of application data through the
        # TLS layer (network/tls_transport.py counts, broker/observability/live.py exports)
        self.tls_bytes: Counter = Counter()
        # ssl_context: the one built at start (None: no TLS); live_context: the one each new
        # connection's handshake uses (network/tls_transport.py), replaced by a dynamic keystore
        # change (tls_reload.py)
        self.ssl_context = self._first_context(listener) if listener.tls else None
        self._live_context = self.ssl_context
        self.mapper = PrincipalMapper(listener.get("ssl.principal.mapping.rules")) if listener.tls else None
        self.sasl = SaslConfig(listener, None, self.stats) if listener.sasl else None

    def _first_context(self, listener: Listener):
        """The TLS context at start. A keystore/truststore set dynamically that no longer loads
        (its file was removed) is logged as an ERROR and server.properties' is served instead,
        never a failed start (as invalid stored dynamic configs are; setting it again applies it)."""
        try:
            return self._tls_context(listener)
        except ConfigError as exc:
            static = dataclasses.replace(listener, dynamic_tls=False)
            if tls_values(static) == tls_values(listener):
                raise
            log.error("listener %s: the keystore/truststore set dynamically cannot be loaded (%s); serving the one "
                      "of server.properties until it is set again", self.name, exc)
            return self._tls_context(static)

    def _tls_context(self, listener: Listener):
        ctx = server_context(listener.get, listener.name, self.stats)
        self.tls_identity = keystore_identity(listener.get)
        self.tls_values = tls_values(listener)
        return ctx

    @property
    def live_context(self):
        """The context a new connection's handshake uses (network/tls_transport.py wraps each
        connection's TLS object in it): the first one, or the last a keystore rotation made."""
        return self._live_context

    def use_context(self, context, identity, values) -> None:
        """New handshakes use `context` from now on; established connections keep theirs."""
        self._live_context, self.tls_identity, self.tls_values = context, identity, values
        log.info("listener %s: TLS keystore/truststore reloaded; new connections present %s", self.name,
                 identity[0] or "the new certificate")

    def bind_scram_store(self, store) -> None:
        if self.sasl is not None:
            self.sasl.scram_store = store

    def open_session(self, transport, client_host: str, peer: str, close) -> Session | None:
        """The connection's Session; None when it must be closed (a client certificate that no
        `ssl.principal.mapping.rules` rule maps: Kafka fails that authentication)."""
        session = Session(client_host, self.name, self.listener.protocol)
        session.close = close
        if self.sasl is not None:
            session.sasl = SaslServer(self.sasl, peer)
        if self.ssl_context is not None:
            self.stats[("TLS", "success")] += 1          # connection_made comes after the handshake
        if self.sasl is None and self.ssl_context is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:                                   # verified by the handshake (CERT_REQUIRED/OPTIONAL)
                try:
                    session.principal = "User:" + self.mapper.name_for(subject_dn(der))
                except (NoMatchingRule, BadCertificate) as exc:
                    log.warning("closing connection from %s on listener %s: %s", peer, self.name, exc)
                    return None
        return session


def build_listeners(config) -> list[ListenerSecurity]:
    return [ListenerSecurity(listener) for listener in configured_listeners(config)]
