"""Listeners: `listeners`, `advertised.listeners`, `listener.security.protocol.map`, and
per-listener configuration (Kafka's `listener.name.<listener>.<key>` overrides).

    listeners=PLAINTEXT://:9092,SASL_SSL://:9093,INTERNAL://127.0.0.1:9094
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL
    listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=...   (lower-case listener name)

`Listener.get(key)` answers `listener.name.<name>.<key>` if set, else the broker-wide `key`; for
the keystore/truststore keys (SSL_RECONFIGURABLE) a per-broker dynamic setting of the prefixed
key comes first (certificate rotation, security/tls_reload.py);
`Listener.get_for_mechanism(mechanism, key)` looks up `listener.name.<name>.<mechanism>.<key>`
first (`...plain.sasl.jaas.config`, `...scram-sha-512.connections.max.reauth.ms`), then `get(key)`.

A listener name missing from the map is an error when the map is set explicitly (Kafka's "No
security protocol defined for listener"); with Kafka's default map in force, an unmapped name
is served as PLAINTEXT with a warning (older Kompakt configs name listeners INTERNAL/EXTERNAL).
Listeners named in `controller.listener.names` (KRaft's CONTROLLER) are not bound.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from kompakt.config.broker_config import BROKER_KEYS, ConfigError

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: the per-listener keys a dynamic (per-broker) setting
# changes at run time (security/tls_reload.py); their dynamic value wins over server.properties.
SSL_RECONFIGURABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})


def parse_listener(spec: str) -> tuple[str, str, int]:
    """`NAME://host:port` -> (name, host, port); an empty host means every interface."""
    if "://" not in spec:
        raise ConfigError(f"Invalid listener {spec!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
    name, rest = spec.split("://", 1)
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Invalid listener {spec!r}: expected NAME://host:port")
    if int(port) > 65535:   # the socket layer would take it modulo 65536 (70000 -> 4464)
        raise ConfigError(f"Invalid listener {spec!r}: port {port} is out of range (0-65535)")
    host = host.strip("[]")
    return name.strip().upper(), host, int(port)


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (x.strip() for x in (text or "").split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in PROTOCOLS:
            raise ConfigError(f"Invalid value {item!r} in listener.security.protocol.map: expected "
                              f"NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}")
        out[name.strip().upper()] = proto
    return out


@dataclass
class Listener:
    name: str
    host: str
    port: int
    protocol: str
    config: object            # the BrokerConfig
    dynamic_tls: bool = True  # False: SSL_RECONFIGURABLE keys as server.properties has them

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def _prefixed(self, key: str) -> str | None:
        full = f"listener.name.{self.name.lower()}.{key}"
        if key in SSL_RECONFIGURABLE and self.dynamic_tls:
            dynamic = getattr(self.config, "dynamic_broker", {}).get(full)
            if dynamic is not None:
                return dynamic
        return self.config.listener_props.get(full)

    def get(self, key: str):
        return self._value(key, self._prefixed(key))

    def get_for_mechanism(self, mechanism: str, key: str):
        """`listener.name.<name>.<mechanism>.<key>`, else `get(key)` (Kafka's per-mechanism SASL
        keys: sasl.jaas.config, connections.max.reauth.ms)."""
        raw = self._prefixed(f"{mechanism.lower()}.{key}")
        return self.get(key) if raw is None else self._value(key, raw)

    def _value(self, key: str, raw: str | None):
        if raw is None:
            return self.config[key]
        spec = BROKER_KEYS.get(key)
        return spec.parse(raw) if spec is not None else raw


def configured_listeners(config) -> list[Listener]:
    proto_map = parse_protocol_map(config["listener.security.protocol.map"])
    explicit = config.is_set("listener.security.protocol.map")
    # Kafka's shipped KRaft server.properties lists CONTROLLER://:9093 among its listeners; it
    # carries controller RPCs, never client traffic, and a single node has no quorum to serve
    controller = {n.strip().upper() for n in config["controller.listener.names"] or ()}
    out: list[Listener] = []
    for spec in config["listeners"]:
        name, host, port = parse_listener(spec)
        if name in controller:
            log.info("listener %s (controller.listener.names) is not bound: a single node has no KRaft "
                     "controller quorum", name)
            continue
        protocol = proto_map.get(name)
        if protocol is None:
            if explicit:
                raise ConfigError(f"No security protocol defined for listener {name}: add {name}:<PROTOCOL> to "
                                  f"listener.security.protocol.map")
            log.warning("listener %s is not in listener.security.protocol.map: served as PLAINTEXT", name)
            protocol = "PLAINTEXT"
        if any(existing.name == name for existing in out):
            raise ConfigError(f"Each listener must have a different name; {name} appears twice in listeners")
        out.append(Listener(name, host, port, protocol, config))
    if not out:
        raise ConfigError("listeners has no listener for Kafka clients: "
                          + ("every entry is in controller.listener.names" if config["listeners"] else
                             "it is empty (give at least one, e.g. PLAINTEXT://127.0.0.1:9092)"))
    return out
