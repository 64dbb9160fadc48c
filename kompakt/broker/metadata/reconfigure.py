"""What follows dynamic broker configs: the components the broker registers with
config/dynamic.DynamicBrokerConfig (Kafka's BrokerReconfigurable list), each with the keys it
follows, its extra checks and how it applies a change:

  component         keys                                   check (refused: INVALID_REQUEST)           apply
  log defaults      the topic-default keys (log.*,         the new defaults form a valid LogConfig    LogManager.reconfigure_defaults
                    message.max.bytes, compression.*),                                                (in a thread): every log's
                    producer.id.expiration.ms                                                         LogConfig re-derived
  log cleaner       log.cleaner.threads, dedupe.buffer.    threads >= 1, >= half and <= double the    LogCleaner.reconfigure: threads
                    size, io.buffer.*, io.max.bytes.per.   current count (Kafka's rule); the offset   restarted with the new sizes,
                    second, backoff.ms, message.max.bytes  map of each thread holds a key             throttle and backoff
  recovery threads  num.recovery.threads.per.data.dir      Kafka's DynamicThreadPool rule             read where used (shutdown, start)
  listener TLS      listener.name.<l>.ssl.keystore.*/      the new SSLContext builds; same subject    new handshakes use the new
                    ssl.truststore.*, ssl.key.password     DN and SANs (ssl.allow.dn/san.changes)     context (security/tls_reload.py)

`register_reconfigurables` registers the first three; other rooms add theirs with
`broker.dynamic_config.register(Reconfigurable(...))`: listener TLS (security/tls_reload.register,
which the Broker calls right after, so the order above holds), connection limits; keys with no
registered component are stored and described, and change nothing.
"""
from __future__ import annotations

import asyncio

from kompakt.config.broker_config import ConfigError
from kompakt.config.dynamic import CLEANER_KEYS, LOG_KEYS, Reconfigurable
from kompakt.config.topic_config import LogConfig
from kompakt.protocol.errors import KafkaError


def register_reconfigurables(broker) -> None:
    dyn = broker.dynamic_config
    dyn.register(Reconfigurable(
        "log defaults", LOG_KEYS | {"producer.id.expiration.ms"}, validate=_check_log_defaults,
        apply=lambda cfg: asyncio.to_thread(broker.log_manager.reconfigure_defaults)))
    dyn.register(Reconfigurable(
        "log cleaner", CLEANER_KEYS, validate=lambda cfg: _check_cleaner(broker.config, cfg),
        apply=lambda cfg: broker.cleaner.reconfigure(cfg) if broker.cleaner is not None else None))
    dyn.register(Reconfigurable(
        "recovery threads", frozenset({"num.recovery.threads.per.data.dir"}),
        validate=lambda cfg: _check_thread_count(broker.config, cfg, "num.recovery.threads.per.data.dir")))


def _check_log_defaults(candidate) -> None:
    try:
        LogConfig.from_overrides({}, candidate)
    except KafkaError as exc:
        raise ConfigError(str(exc)) from None


def _check_cleaner(current, candidate) -> None:
    """Kafka's LogCleaner.validateReconfiguration, plus our offset-map size check."""
    threads, now = candidate["log.cleaner.threads"], current["log.cleaner.threads"]
    if threads < 1:
        raise ConfigError("Log cleaner threads should be at least 1")
    if threads < now // 2:
        raise ConfigError(f"Log cleaner threads cannot be reduced to less than half the current value {now}")
    if threads > now * 2:
        raise ConfigError(f"Log cleaner threads cannot be increased to more than double the current value {now}")
    from kompakt.cleaner.log_cleaner import check_offset_map
    try:
        check_offset_map(threads, candidate["log.cleaner.dedupe.buffer.size"],
                         candidate["log.cleaner.io.buffer.load.factor"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_thread_count(current, candidate, key: str) -> None:
    """Kafka's DynamicThreadPool.validateReconfiguration."""
    new, old = candidate[key], current[key]
    if new == old:
        return
    what = f"Dynamic thread count update validation failed for {key}={new}"
    if new <= 0:
        raise ConfigError(f"{what}, value should be at least 1")
    if new < old // 2:
        raise ConfigError(f"{what}, value should be at least half the current value {old}")
    if new > old * 2:
        raise ConfigError(f"{what}, value should not be greater than double the current value {old}")
