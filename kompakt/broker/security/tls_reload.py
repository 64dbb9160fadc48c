"""Certificate rotation without a restart (Kafka's SslFactory.validateReconfiguration/reconfigure
for a listener's keystore and truststore).

A per-broker dynamic `listener.name.<l>.<key>` for a key of SSL_RECONFIGURABLE (keystore and
truststore location/text/type/passwords) is checked, then applied, by the "listener TLS"
reconfigurable registered here:

* validate: the listener's new SSLContext is built from the candidate config (a missing file, a
  wrong password, a key that does not match its certificate refuse the change, nothing saved);
  the new keystore's certificate must keep the subject DN and the SubjectAltNames of the one in
  use, unless `ssl.allow.dn.changes` / `ssl.allow.san.changes` (per listener or broker-wide) is
  true.
* apply: the new context becomes the listener's live one (ListenerSecurity.use_context); each
  new connection's TLS object is made from it (network/tls_transport.py: TLS runs on our side of a
  plain TCP listener, so nothing of the listening socket changes). Existing connections keep the
  context of their handshake. Applying the previous config (the rollback) rebuilds the previous
  context; a listener whose keys did not change is left alone.

At start (ListenerSecurity) a dynamic keystore/truststore that no longer loads is logged as an
ERROR and server.properties' is served (`Listener(dynamic_tls=False)`), never a failed start.

Invariant: `sec.tls_values` are the keys the live context was built from, `sec.tls_identity`
its certificate's (subject, SANs).
"""
from __future__ import annotations

import dataclasses

from kompakt.broker.security.listeners import SSL_RECONFIGURABLE
from kompakt.broker.security.tls import keystore_identity, server_context
from kompakt.config.broker_config import ConfigError
from kompakt.config.dynamic import Reconfigurable


def tls_values(listener) -> dict:
    return {key: listener.get(key) for key in SSL_RECONFIGURABLE}


def register(broker) -> None:
    tls = [sec for sec in broker.listeners if sec.ssl_context is not None]
    if not tls:
        return
    keys = frozenset(f"listener.name.{sec.name.lower()}.{key}" for sec in tls for key in SSL_RECONFIGURABLE)
    broker.dynamic_config.register(Reconfigurable(
        "listener TLS", keys, validate=lambda cfg: validate(tls, cfg), apply=lambda cfg: apply(tls, cfg)))


def _changed(tls, config):
    for sec in tls:
        listener = dataclasses.replace(sec.listener, config=config)
        if tls_values(listener) != sec.tls_values:
            yield sec, listener


def validate(tls, candidate) -> None:
    for sec, listener in _changed(tls, candidate):
        try:
            server_context(listener.get, sec.name)
            subject, sans = keystore_identity(listener.get)
        except ConfigError as exc:
            raise ConfigError(f"listener {sec.name}: {exc}") from None
        old_subject, old_sans = sec.tls_identity
        if subject != old_subject and not listener.get("ssl.allow.dn.changes"):
            raise ConfigError(f"listener {sec.name}: Keystore DistinguishedName does not match: existing={{{old_subject}}}, "
                              f"new={{{subject}}} (set ssl.allow.dn.changes=true to allow it)")
        if sans != old_sans and not listener.get("ssl.allow.san.changes"):
            raise ConfigError(f"listener {sec.name}: Keystore SubjectAltName does not match: existing={old_sans}, "
                              f"new={sans} (set ssl.allow.san.changes=true to allow it)")


def apply(tls, config) -> None:
    for sec, listener in _changed(tls, config):
        ctx = server_context(listener.get, sec.name, sec.stats)
        sec.use_context(ctx, keystore_identity(listener.get), tls_values(listener))
