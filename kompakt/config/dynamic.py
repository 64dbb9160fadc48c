"""Dynamic broker configs: Kafka's DynamicBrokerConfig for one node.

Role: the broker keys that IncrementalAlterConfigs / AlterConfigs may change at run time, at two
levels, each a layer over server.properties (BrokerConfig.set_dynamic):

    precedence   level                          resource name      ConfigSource
    1            per-broker                     "<node.id>"        DYNAMIC_BROKER_CONFIG (2)
    2            cluster-wide default           ""                 DYNAMIC_DEFAULT_BROKER_CONFIG (3)
    3            server.properties / overrides  -                  STATIC_BROKER_CONFIG (4)
    4            Kafka's default                -                  DEFAULT_CONFIG (5)

Which keys are dynamic is Kafka's list (DynamicBrokerConfig.AllDynamicConfigs):
* the broker default of every topic config, by its first synonym (ServerTopicConfigSynonyms:
  log.segment.bytes, log.roll.ms, log.retention.ms, log.retention.bytes, log.cleanup.policy,
  message.max.bytes, compression.type, log.cleaner.min.cleanable.ratio, ...; not
  log.retention.hours/minutes or log.roll.hours, which Kafka refuses dynamically);
* the cleaner's (LogCleaner.ReconfigurableConfigs): log.cleaner.threads, dedupe.buffer.size,
  io.buffer.size, io.buffer.load.factor, io.max.bytes.per.second, backoff.ms;
* num.recovery.threads.per.data.dir, producer.id.expiration.ms, the connection limits, and keys
  a single node accepts and ignores (num.io.threads, metric.reporters, replication throttles...).
A key Kompakt knows that is not dynamic is refused ("Cannot update these configs dynamically"),
so are Kafka's cluster keys (process.roles, controller.*); any other name is a custom config,
stored and shown as Kafka stores it (customPropsAllowed) and otherwise ignored.

Checks, as Kafka's (ConfigAdminManager.validateBrokerConfigChange, all answered INVALID_REQUEST
with the message): values parse to the key's type and range; listener/SSL keys only per broker;
then every registered reconfigurable's `validate(candidate config)` (e.g. log.cleaner.threads
within half and double of the current count).

Applying (`update`): 1. validate, 2. swap the layers into the live BrokerConfig (every
`cfg[key]` reader sees them at once), 3. call `apply(config)` of each reconfigurable whose keys
changed, in registration order (LogConfig defaults re-derived for topics without overrides,
cleaner threads restarted with the new sizes and throttle), 4. persist both layers (the store:
temp file, fsync, rename, fsync dir). The change is acknowledged after step 4. Nothing is saved
before the change has been applied: if an apply (or a validate) fails unexpectedly, or the save
fails, the old layers are swapped back, the reconfigurables already called (the failed one too:
it may have applied part) are called again with the old config, and DynamicConfigError says
what failed; the client gets an error for the resource and the next start loads the old layers.
A crash between steps 2 and 4 loses an unacknowledged change, never a saved one.

Invariant: the live BrokerConfig's dynamic layers are always the persisted ones (after `update`
returns or raises), and hold only values that parse.
"""
from __future__ import annotations

import asyncio
import copy
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kompakt.config.broker_config import BROKER_KEYS, BrokerConfig, ConfigError, IGNORED_PREFIXES, is_sensitive, loggable

log = logging.getLogger(__name__)

# Kafka's per-topic-default keys that are dynamic: the first synonym of each topic config.
LOG_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms",
    "message.max.bytes", "log.index.interval.bytes", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "log.preallocate", "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.message.downconversion.enable",
    "log.local.retention.ms", "log.local.retention.bytes",
})
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms", "kompakt.cleaner.guarantee.check.ratio",
})
OTHER_KEYS = frozenset({
    # DynamicThreadPool, DynamicProducerStateManagerConfig, SocketServer, metric reporters,
    # replication quotas (QuotaConfig.brokerQuotaConfigs)
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads",
    "num.network.threads", "producer.id.expiration.ms", "transaction.partition.verification.enable",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "max.connection.creation.rate", "metric.reporters", "leader.replication.throttled.rate",
    "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
})
DYNAMIC_KEYS = LOG_KEYS | CLEANER_KEYS | OTHER_KEYS
# Kafka's cluster-level listener keys may be set at both levels; other listener configs only per broker.
CLUSTER_LEVEL_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})

PER_BROKER = "per-broker"
CLUSTER_DEFAULT = "cluster-default"


class DynamicConfigError(ConfigError):
    """A dynamic change Kafka refuses; the handler answers INVALID_REQUEST with this message."""


def is_dynamic(name: str) -> bool:
    return name in DYNAMIC_KEYS or name.startswith("listener.name.")


def _sorted_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


@dataclass
class Reconfigurable:
    """A component that follows some dynamic keys (Kafka's BrokerReconfigurable)."""
    name: str
    keys: frozenset
    validate: Callable[[BrokerConfig], None] | None = None   # raise ConfigError to refuse
    apply: Callable[[BrokerConfig], Any] | None = None       # may return an awaitable
    extra: dict = field(default_factory=dict)


class DynamicBrokerConfig:
    """The two dynamic layers of one broker: kept in `config`, persisted through `store`
    (an object with `load() -> {"default": {...}, "broker": {...}} | None` and `save(layers)`)."""

    def __init__(self, config: BrokerConfig, store=None):
        self.config = config
        self.store = store
        self.reconfigurables: list[Reconfigurable] = []
        self._lock: asyncio.Lock | None = None      # one update at a time (created on the loop)

    # -- start-up --------------------------------------------------------------------------------
    def load(self) -> None:
        """Apply the persisted layers; a stored value that no longer parses is dropped with an
        ERROR line (Kafka's removeInvalidConfigs), never a failed start."""
        stored = self.store.load() if self.store is not None else None
        if not stored:
            return
        layers = []
        for level in ("default", "broker"):
            good = {}
            for key, value in (stored.get(level) or {}).items():
                try:
                    if key in BROKER_KEYS:
                        BROKER_KEYS[key].parse(value)
                    good[str(key)] = str(value)
                except ConfigError as exc:
                    log.error("dynamic %s config %s=%s is invalid and is ignored: %s",
                              "broker" if level == "broker" else "default cluster", key,
                              "[hidden]" if is_sensitive(key) else value, exc)
            layers.append(good)
        self.config.set_dynamic(*layers)
        if layers[0] or layers[1]:
            log.info("dynamic broker configs: cluster default %s, per broker %s", loggable(layers[0]) or "{}",
                     loggable(layers[1]) or "{}")

    def register(self, reconfigurable: Reconfigurable) -> None:
        self.reconfigurables.append(reconfigurable)

    # -- the alter path --------------------------------------------------------------------------
    def layer(self, level: str) -> dict[str, str]:
        return dict(self.config.dynamic_broker if level == PER_BROKER else self.config.dynamic_default)

    def candidate(self, level: str, new_layer: Mapping[str, str]) -> BrokerConfig:
        """Validate `new_layer` as the whole new content of `level`; the BrokerConfig it would give.

        Raises DynamicConfigError with Kafka's message."""
        old = self.layer(level)
        changed = {k for k in set(old) | set(new_layer) if old.get(k) != new_layer.get(k)}
        refused = [k for k in changed if not self._may_change(k)]
        if refused:
            raise DynamicConfigError(f"Cannot update these configs dynamically: {_sorted_set(refused)}; set them "
                                     f"in server.properties (or kompakt serve --override key=value) and restart")
        bare_ssl = [k for k in changed if k.startswith("ssl.")]
        if bare_ssl:
            raise DynamicConfigError("These security configs can be dynamically updated only per-listener "
                                     f"using the listener prefix: {_sorted_set(bare_ssl)}")
        if level == CLUSTER_DEFAULT:
            per_broker = [k for k in changed if k.startswith("listener.name.")
                          and k.rsplit(".", 1)[-1] not in CLUSTER_LEVEL_LISTENER_KEYS]
            if per_broker:
                raise DynamicConfigError("Cannot update these configs at default cluster level, broker id "
                                         f"must be specified: {_sorted_set(per_broker)}")
        layers = {PER_BROKER: self.layer(PER_BROKER), CLUSTER_DEFAULT: self.layer(CLUSTER_DEFAULT)}
        layers[level] = {str(k): str(v) for k, v in new_layer.items()}
        candidate = copy.copy(self.config)
        try:
            candidate.set_dynamic(layers[CLUSTER_DEFAULT], layers[PER_BROKER])
        except ConfigError as exc:
            raise DynamicConfigError(str(exc)) from None
        touched = self._changed_keys(candidate)
        for r in self.reconfigurables:
            if r.validate is not None and r.keys & touched:
                try:
                    r.validate(candidate)
                except ConfigError as exc:
                    raise DynamicConfigError(f"Invalid dynamic configuration: {exc}") from None
                except Exception as exc:  # noqa: BLE001 - a check that breaks refuses the change, never the connection
                    log.exception("dynamic broker config: the check of %s failed", r.name)
                    raise DynamicConfigError(f"Invalid dynamic configuration: the check of {r.name} failed: "
                                             f"{type(exc).__name__}: {exc}") from None
        return candidate

    async def update(self, level: str, new_layer: Mapping[str, str]) -> set[str]:
        """Validate, persist and apply `new_layer` as `level`'s content (steps in the module
        docstring); returns the keys whose effective value changed. Updates run one at a time
        (the save is awaited between reading the layers and swapping them in), and the save,
        which fsyncs, runs in a worker thread, off the event loop."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await self._update(level, new_layer)

    async def _update(self, level: str, new_layer: Mapping[str, str]) -> set[str]:
        candidate = self.candidate(level, new_layer)                      # step 1
        touched = self._changed_keys(candidate)
        old = (dict(self.config.dynamic_default), dict(self.config.dynamic_broker))
        self.config.set_dynamic(candidate.dynamic_default, candidate.dynamic_broker)   # step 2
        called: list[Reconfigurable] = []
        try:
            for r in self.reconfigurables:                                # step 3
                if r.apply is not None and r.keys & touched:
                    called.append(r)
                    await self._apply(r)
        except Exception as exc:  # noqa: BLE001 - answered for the resource, rolled back
            log.exception("dynamic broker config (%s): applying %s failed; rolling back", level, called[-1].name)
            await self._roll_back(old, called)
            raise DynamicConfigError(f"Invalid dynamic configuration: {called[-1].name} could not apply the "
                                     f"change ({type(exc).__name__}: {exc}); nothing was changed") from None
        if self.store is not None:
            layers = {"default": candidate.dynamic_default, "broker": candidate.dynamic_broker}
            try:
                await asyncio.to_thread(self.store.save, layers)          # step 4
            except Exception as exc:  # noqa: BLE001 - a disk error: answered, rolled back
                log.error("dynamic broker config (%s) could not be saved (%s: %s); rolling back", level,
                          type(exc).__name__, exc)
                await self._roll_back(old, called)
                raise DynamicConfigError(f"The dynamic configuration could not be saved ({type(exc).__name__}: "
                                         f"{exc}); nothing was changed") from None
        log.info("dynamic broker config (%s) is now %s; changed: %s", level, loggable(new_layer) or "{}",
                 ", ".join(sorted(touched)) or "nothing")
        return touched

    async def _apply(self, r: Reconfigurable) -> None:
        result = r.apply(self.config)
        if inspect.isawaitable(result):
            await result

    async def _roll_back(self, old: tuple[dict, dict], called: list[Reconfigurable]) -> None:
        """Swap the old layers back and call again, with them, each reconfigurable already called;
        a failure here is logged (the next start, from the saved layers, is the remedy)."""
        self.config.set_dynamic(*old)
        for r in called:
            try:
                await self._apply(r)
            except Exception:  # noqa: BLE001 - keep restoring the others
                log.exception("dynamic broker config: %s could not restore the previous configuration", r.name)

    # -- helpers ---------------------------------------------------------------------------------
    def _may_change(self, key: str) -> bool:
        if is_dynamic(key) or key.startswith("ssl."):   # bare ssl.* gets Kafka's own refusal below
            return True
        if key in BROKER_KEYS:
            return False                       # a static key Kompakt knows
        return not key.startswith(IGNORED_PREFIXES)

    def _changed_keys(self, candidate: BrokerConfig) -> set[str]:
        """Keys whose effective value or raw dynamic setting differs between now and `candidate`."""
        keys = (set(self.config.dynamic_default) | set(self.config.dynamic_broker)
                | set(candidate.dynamic_default) | set(candidate.dynamic_broker))
        out = set()
        for key in keys:
            if key in BROKER_KEYS:
                if self.config[key] != candidate[key]:
                    out.add(key)
            elif (self.config.dynamic_broker.get(key), self.config.dynamic_default.get(key)) != (
                    candidate.dynamic_broker.get(key), candidate.dynamic_default.get(key)):
                out.add(key)
        return out
