"""Broker configuration: Kafka's `server.properties` keys, defaults and types.

Role: one table (`BROKER_KEYS`) of every broker key Kompakt understands, with Kafka's default and
type; `BrokerConfig.load()` layers, lowest first: defaults, the properties file (without one,
`EMBEDDED_PROPERTIES`: what Kafka's shipped server.properties sets), `KOMPAKT_*`
environment variables (`KOMPAKT_LOG_DIRS` -> `log.dirs`: strip the prefix, lower-case, `_` -> `.`),
then `--override key=value` pairs. Keys a single node has no use for (KRaft quorum, replication,
inter-broker, SASL...) are accepted and logged as ignored; unknown keys are logged at WARNING, never fatal.

Dynamic layers (Kafka's DynamicBrokerConfig, kept and persisted by config/dynamic.py) sit on
top: `cfg[key]` is the per-broker dynamic value, else the cluster-default dynamic value, else the
static one, else Kafka's default; `layers(key)` says which layers set it.

Invariants: every value in a BrokerConfig has been parsed to the key's type and checked against its
range; a bad value raises `ConfigError` naming the key, the value and what is allowed.
Owners of other packages add their keys to the table (group them by section).
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DOUBLE_MAX = 1.7976931348623157e308


# Kafka's ConfigSource ids of the layers a broker key can be set in (BrokerConfig.layers).
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3
SOURCE_STATIC = 4


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, value and allowed range."""


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # int | long | double | bool | string | list | password
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    case_insensitive: bool = False   # Kafka's CaseInsensitiveValidString: kept in lower case

    def parse(self, raw: Any) -> Any:
        """Parse a raw (usually string) value to this key's type, checking range and choices."""
        if raw is None:
            return None
        try:
            value = _PARSERS[self.type](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: "
                              f"expected {self.type} ({exc})") from None
        if self.case_insensitive:
            value = value.lower()
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigError(f"Invalid value {value} for configuration {self.name}: "
                              f"value must be at least {self.min:g}")
        if self.max is not None and value > self.max:
            raise ConfigError(f"Invalid value {value} for configuration {self.name}: "
                              f"value must be no more than {self.max:g}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(f"Invalid value {item} for configuration {self.name}: "
                                      f"String must be one of: {', '.join(self.choices)}")


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError("expected true or false")


def _parse_list(raw: Any) -> list[str]:
    if isinstance(raw, (list, tuple)):
        return [str(x).strip() for x in raw if str(x).strip()]
    return [x.strip() for x in str(raw).split(",") if x.strip()]


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": lambda r: int(str(r).strip()),
    "long": lambda r: int(str(r).strip()),
    "double": lambda r: float(str(r).strip()),
    "bool": _parse_bool,
    "string": lambda r: str(r).strip(),
    "password": lambda r: str(r),
    "list": _parse_list,
}


def _k(name, type_, default, doc="", **kw) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, **kw)


BROKER_KEYS: dict[str, ConfigKey] = {k.name: k for k in [
    # --- server ---
    _k("node.id", "int", 1, "This broker's id (also the controller id).", min=0),
    _k("broker.id", "int", None, "Legacy synonym of node.id.", min=-1),
    _k("cluster.id", "string", None, "Cluster id; generated and stored in meta.properties when unset."),
    _k("broker.rack", "string", None, "This broker's rack, told to clients in Metadata and DescribeCluster "
       "(client-side rack-aware assignors, KIP-881); every partition's one replica is on it."),
    _k("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], "Listeners, NAME://host:port."),
    _k("advertised.listeners", "list", None, "Listeners advertised to clients (default: listeners)."),
    _k("controller.listener.names", "list", None,
       "KRaft controller listeners (Kafka's shipped server.properties names CONTROLLER): a single node "
       "has no controller quorum, so these entries of listeners are not bound."),
    _k("log.dirs", "list", None, "Directories holding partition logs."),
    _k("log.dir", "string", "./kompakt-data", "Log directory used when log.dirs is unset."),
    _k("num.partitions", "int", 1, "Partitions of auto-created topics.", min=1),
    _k("default.replication.factor", "int", 1, "Accepted; a single node keeps one replica.", min=1),
    _k("auto.create.topics.enable", "bool", True, "Create unknown topics on Metadata requests."),
    _k("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    _k("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", min=1),
    _k("message.max.bytes", "int", 1048588, "Default max.message.bytes of topics.", min=0),
    _k("replica.fetch.max.bytes", "int", 1048576, "Accepted for compatibility.", min=0),
    # Kafka keys a single node accepts without acting on, typed here (not ignored) so that
    # DescribeConfigs shows them as Kafka does (an unknown key is described as sensitive) and the
    # topic keys they default (min.insync.replicas, ...) follow them.
    _k("min.insync.replicas", "int", 1, "Accepted; a single node is its own ISR (topic default).", min=1),
    _k("unclean.leader.election.enable", "bool", False, "Accepted; a single node has no election."),
    _k("log.local.retention.ms", "long", -2, "Accepted; tiered storage is not supported.", min=-2),
    _k("log.local.retention.bytes", "long", -2, "Accepted; tiered storage is not supported.", min=-2),
    _k("num.io.threads", "int", 8, "Accepted; requests are handled on the event loop.", min=1),
    _k("num.network.threads", "int", 3, "Accepted; one event loop serves every connection.", min=1),
    _k("num.replica.fetchers", "int", 1, "Accepted; a single node fetches from no leader."),
    _k("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX,
       "Copy rate of partitions moving between log dirs (AlterReplicaLogDirs), all moves together.", min=1),
    _k("connections.max.idle.ms", "long", 600000, "Close connections idle this long.", min=-1),
    _k("queued.max.requests", "int", 500, "In-flight requests per connection before reads pause.", min=1),
    # --- connection and request-memory limits (broker/network/limits.py) ---
    _k("max.connections", "int", 2147483647, "Open connections across listeners; more are closed at once.", min=0),
    _k("max.connections.per.ip", "int", 2147483647, "Open connections from one address; more are closed at once.",
       min=0),
    _k("max.connections.per.ip.overrides", "string", "", "Per-address limits: host:n,host:n."),
    _k("queued.max.request.bytes", "long", -1, "Bytes of requests read and not yet answered, across "
       "connections, before connections stop reading (0 or less: no limit).", min=-1),
    _k("shutdown.timeout.ms", "long", 10000, "Time graceful shutdown waits for in-flight requests.", min=0),
    # --- metrics / admin ---
    _k("metrics.port", "int", 9644, "Port of the HTTP admin API and /metrics (0 disables).", min=0, max=65535),
    _k("metrics.host", "string", "127.0.0.1", "Address the HTTP admin API binds."),
    _k("metrics.partition.labels", "bool", True, "Label per-partition metrics by partition."),
    # --- log ---
    _k("log.segment.bytes", "int", 1073741824, "Segment size.", min=14),
    _k("log.roll.ms", "long", None, "Roll a segment after this time (overrides log.roll.hours).", min=1),
    _k("log.roll.hours", "int", 168, "Roll a segment after this many hours.", min=1),
    _k("log.roll.jitter.ms", "long", None, "Jitter subtracted from roll time.", min=0),
    _k("log.roll.jitter.hours", "int", 0, "Jitter in hours.", min=0),
    _k("log.retention.ms", "long", None, "Retention time (-1 unlimited).", min=-1),
    _k("log.retention.minutes", "int", None, "Retention time in minutes.", min=-1),
    _k("log.retention.hours", "int", 168, "Retention time in hours.", min=-1),
    _k("log.retention.bytes", "long", -1, "Retention size per partition (-1 unlimited)."),
    _k("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", min=1),
    _k("log.index.size.max.bytes", "int", 10485760, "Offset/time index size.", min=4),
    _k("log.index.interval.bytes", "int", 4096, "Bytes between index entries.", min=0),
    _k("log.flush.interval.messages", "long", LONG_MAX, "Flush after this many messages.", min=1),
    _k("log.flush.interval.ms", "long", None, "Flush after this time.", min=0),
    _k("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks logs.", min=1),
    _k("log.flush.offset.checkpoint.interval.ms", "int", 60000, "Recovery-point checkpoint interval.", min=0),
    _k("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, "Log-start checkpoint interval.", min=0),
    _k("kompakt.durable.acks.enable", "bool", True,
       "Kompakt: answer acks=all produce requests and the coordinators' writes (offset commits, "
       "transactions, producer ids) only once synced to disk, sharing one sync per log dir among "
       "every request waiting (group commit), and let consumers read only synced records (the "
       "high watermark is the durable offset). false: acks=all is answered after the append, as "
       "acks=1, and a power cut can take back acknowledged records (a killed process cannot)."),
    _k("kompakt.produce.validation.threads", "int", 0,
       "Kompakt: threads that validate large produced batches whose validation runs a codec "
       "(decompression to read the records of a compacted topic, recompression into the topic's "
       "compression.type) beside the event loop, so a spare core takes that work; the append "
       "itself stays in order on the loop. 0: every batch is validated on the loop (the least CPU "
       "per byte); -1: one per CPU the broker may use beyond the first, at most 4.", min=-1),
    _k("kompakt.produce.validation.offload.bytes", "int", 65536,
       "Kompakt: the size from which such a batch is validated on those threads (smaller ones "
       "stay on the loop: a thread hop costs more than their whole validation).", min=0),
    _k("log.segment.delete.delay.ms", "long", 60000, "Delay before a .deleted file is unlinked.", min=0),
    _k("log.cleanup.policy", "list", ["delete"], "Default cleanup.policy.", choices=("delete", "compact")),
    _k("log.message.timestamp.type", "string", "CreateTime", "Default message.timestamp.type.",
       choices=("CreateTime", "LogAppendTime")),
    _k("log.message.timestamp.before.max.ms", "long", LONG_MAX, "Default message.timestamp.before.max.ms.", min=0),
    _k("log.message.timestamp.after.max.ms", "long", 3600000, "Default message.timestamp.after.max.ms.", min=0),
    _k("log.preallocate", "bool", False, "Preallocate segment files."),
    _k("compression.type", "string", "producer", "Default compression.type.",
       choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _k("compression.gzip.level", "int", -1, "Default compression.gzip.level (1-9, -1 = zlib default).",
       min=-1, max=9),
    _k("compression.lz4.level", "int", 9, "Default compression.lz4.level.", min=1, max=17),
    _k("compression.zstd.level", "int", 3, "Default compression.zstd.level.", min=-131072, max=22),
    _k("num.recovery.threads.per.data.dir", "int", 2, "Threads loading logs per dir.", min=1),
    _k("log.initial.task.delay.ms", "long", 30000, "Delay before background log tasks first run.", min=0),
    _k("log.message.format.version", "string", None, "Ignored: only magic v2 exists."),
    # --- cleaner ---
    _k("log.cleaner.enable", "bool", True, "Run the log cleaner."),
    _k("log.cleaner.threads", "int", 1, "Cleaner worker processes.", min=0),
    _k("log.cleaner.dedupe.buffer.size", "long", 134217728, "Offset map memory over all workers.", min=0),
    _k("log.cleaner.io.buffer.size", "int", 524288, "I/O buffer per worker.", min=0),
    _k("log.cleaner.io.buffer.load.factor", "double", 0.9, "Offset map load factor.", min=0.0, max=1.0),
    _k("log.cleaner.io.max.bytes.per.second", "double", DOUBLE_MAX, "Cleaner I/O throttle (all workers).", min=0.0),
    _k("log.cleaner.backoff.ms", "long", 15000, "Sleep when no log needs cleaning.", min=0),
    _k("log.cleaner.min.cleanable.ratio", "double", 0.5, "Default min.cleanable.dirty.ratio.", min=0.0, max=1.0),
    _k("log.cleaner.min.compaction.lag.ms", "long", 0, "Default min.compaction.lag.ms.", min=0),
    _k("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Default max.compaction.lag.ms.", min=1),
    _k("log.cleaner.delete.retention.ms", "long", 86400000, "Default delete.retention.ms.", min=0),
    _k("kompakt.cleaner.guarantee.check.ratio", "double", 0.005,
       "Kompakt: share of a clean's input batches whose records the guarantee check reads back before "
       "the swap (0 turns the check off; the output's offset order is always checked when on).",
       min=0.0, max=1.0),
    # --- group coordinator ---
    _k("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance of an empty group.", min=0),
    _k("group.min.session.timeout.ms", "int", 6000, "Smallest session.timeout.ms a member may ask.", min=0),
    _k("group.max.session.timeout.ms", "int", 1800000, "Largest session.timeout.ms a member may ask.", min=0),
    _k("group.max.size", "int", INT_MAX, "Members per group.", min=1),
    _k("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"],
       "Rebalance protocols the group coordinator speaks: classic (JoinGroup/SyncGroup) must be "
       "listed; without consumer, ConsumerGroupHeartbeat and ConsumerGroupDescribe answer "
       "UNSUPPORTED_VERSION as Kafka 4 does (share and streams are Kafka's names for group types "
       "Kompakt does not have: accepted, with a warning).",
       choices=("classic", "consumer", "share", "streams")),
    # consumer-protocol (KIP-848) groups
    _k("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval given to consumer-protocol members.", min=1),
    _k("group.consumer.min.heartbeat.interval.ms", "int", 5000, "Smallest group.consumer.heartbeat.interval.ms.", min=1),
    _k("group.consumer.max.heartbeat.interval.ms", "int", 15000, "Largest group.consumer.heartbeat.interval.ms.", min=1),
    _k("group.consumer.session.timeout.ms", "int", 45000, "A consumer-protocol member is fenced after this without a heartbeat.", min=1),
    _k("group.consumer.min.session.timeout.ms", "int", 45000, "Smallest group.consumer.session.timeout.ms.", min=1),
    _k("group.consumer.max.session.timeout.ms", "int", 60000, "Largest group.consumer.session.timeout.ms.", min=1),
    _k("group.consumer.max.size", "int", INT_MAX, "Members per consumer-protocol group.", min=1),
    _k("group.consumer.assignors", "list", ["uniform", "range"], "Server-side assignors (uniform, range or Kafka's class names); the first is the default."),
    _k("group.consumer.migration.policy", "string", "bidirectional",
       "Online conversion of live groups between the classic and the consumer protocol: upgrade "
       "(a consumer-protocol member joins a classic group), downgrade (its last consumer-protocol "
       "member leaves a consumer group), bidirectional or disabled; empty groups always convert.",
       choices=("bidirectional", "upgrade", "downgrade", "disabled"), case_insensitive=True),
    _k("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", min=1),
    _k("offsets.topic.segment.bytes", "int", 104857600, "segment.bytes of __consumer_offsets.", min=1),
    _k("offsets.topic.replication.factor", "int", 1, "Accepted; single replica.", min=1),
    _k("offsets.retention.minutes", "int", 10080, "Committed offsets of empty groups expire after this.", min=1),
    _k("offsets.retention.check.interval.ms", "long", 600000, "How often offsets expire.", min=1),
    _k("offsets.commit.timeout.ms", "int", 5000, "Time an offset commit may wait for its append.", min=1),
    _k("offset.metadata.max.bytes", "int", 4096, "Largest commit metadata string.", min=0),
    # --- transaction coordinator (kompakt/broker/txn) ---
    _k("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", min=1),
    _k("transaction.state.log.segment.bytes", "int", 104857600, "segment.bytes of __transaction_state.", min=1),
    _k("transaction.state.log.replication.factor", "int", 3, "Accepted; single replica.", min=1),
    _k("transaction.state.log.min.isr", "int", 2, "Accepted; single replica.", min=1),
    _k("transaction.state.log.load.buffer.size", "int", 5242880,
       "Bytes read at a time when reloading __transaction_state.", min=1),
    _k("transaction.max.timeout.ms", "int", 900000, "Largest transaction.timeout.ms a producer may ask.", min=1),
    _k("transactional.id.expiration.ms", "int", 604800000,
       "Transactional ids idle this long are forgotten (tombstoned).", min=1),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       "How often transactions past their timeout are aborted.", min=1),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
       "How often expired transactional ids are removed.", min=1),
    _k("transaction.partition.verification.enable", "bool", True,
       "KIP-890: check with the coordinator that a partition is in the transaction before a "
       "producer's first transactional write to it."),
    # --- producer state ---
    _k("producer.id.expiration.ms", "int", 86400000, "Idle producer ids expire after this.", min=1),
    _k("producer.id.expiration.check.interval.ms", "int", 600000, "How often producer ids expire.", min=1),
    _k("max.incremental.fetch.session.cache.slots", "int", 1000, "Fetch sessions kept (0 = sessionless).", min=0),
    # --- security: authorizer (kompakt/broker/security) ---
    _k("authorizer.class.name", "string", "", "Kafka's StandardAuthorizer (or AclAuthorizer) class name turns ACLs on."),
    _k("super.users", "string", "", "Principals allowed everything, semicolon separated (User:admin;User:ops)."),
    _k("allow.everyone.if.no.acl.found", "bool", False, "Allow access to resources that have no ACL at all."),
    # --- security: listeners, TLS, SASL (kompakt/broker/security); per listener also as
    # listener.name.<listener>.<key> (kept raw in BrokerConfig.listener_props) ---
    _k("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Listener name -> security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
    _k("ssl.keystore.type", "string", "JKS", "Keystore format; Kompakt reads PEM only."),
    _k("ssl.keystore.location", "string", None, "PEM file with the private key and certificate chain."),
    _k("ssl.keystore.password", "password", None, "Password of an encrypted key in ssl.keystore.location."),
    _k("ssl.keystore.certificate.chain", "password", None, "PEM certificate chain (the text itself)."),
    _k("ssl.keystore.key", "password", None, "PEM private key (the text itself)."),
    _k("ssl.key.password", "password", None, "Password of the private key."),
    _k("ssl.truststore.type", "string", "JKS", "Truststore format; Kompakt reads PEM only."),
    _k("ssl.truststore.location", "string", None, "PEM file of CA certificates trusted for client certificates."),
    _k("ssl.truststore.password", "password", None, "Accepted; a PEM truststore has no password."),
    _k("ssl.truststore.certificates", "password", None, "PEM CA certificates (the text itself)."),
    _k("ssl.client.auth", "string", "none", "Client certificates: required, requested or none.",
       choices=("required", "requested", "none")),
    _k("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.",
       choices=("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1")),
    _k("ssl.protocol", "string", "TLSv1.3", "Accepted; ssl.enabled.protocols decides."),
    _k("ssl.cipher.suites", "list", [], "TLS 1.2 cipher suites (IANA or OpenSSL names); empty = defaults."),
    _k("ssl.principal.mapping.rules", "string", "DEFAULT", "Certificate subject -> principal name rules."),
    _k("ssl.allow.dn.changes", "bool", False, "A keystore changed at run time may change its certificate's subject."),
    _k("ssl.allow.san.changes", "bool", False, "A keystore changed at run time may change its SubjectAltNames."),
    _k("ssl.endpoint.identification.algorithm", "string", "https", "Accepted; a client-side setting."),
    _k("sasl.enabled.mechanisms", "list", ["GSSAPI"], "SASL mechanisms (Kompakt: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
    _k("sasl.jaas.config", "password", None, "JAAS line for every SASL listener and mechanism (PLAIN users)."),
    _k("connections.max.reauth.ms", "long", 0, "SASL session lifetime before re-authentication (0 = none).", min=0),
    _k("connection.failed.authentication.delay.ms", "int", 100, "Delay before closing a failed authentication.", min=0),
    _k("admin.api.token", "password", None, "Token the admin HTTP API requires for state-changing calls."),
    _k("admin.api.token.file", "string", None, "File whose first line is the admin API token."),
    _k("admin.api.token.required.for.reads", "bool", False, "Require the token for every path (/metrics too)."),
    _k("admin.api.ssl.enabled", "bool", False, "Serve the admin API over TLS with the ssl.keystore.* keys."),
    # --- fetch (protocol-server) ---
    _k("fetch.max.bytes", "int", 57671680, "Largest fetch response the broker builds.", min=1024),
    # --- client quotas (broker/quotas) ---
    _k("quota.window.num", "int", 11, "Samples kept of each client's byte rate (quota enforcement).", min=1),
    _k("quota.window.size.seconds", "int", 1, "Time span of each client quota sample.", min=1),
]}

# Keys that are meaningful to a Kafka cluster but not to a single node; accepted and logged.
IGNORED_PREFIXES = (
    "process.roles", "controller.", "inter.broker.", "zookeeper.",
    "num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "replica.", "min.insync.replicas", "unclean.leader.",
    "sasl.", "ssl.", "security.", "group.coordinator.", "share.",
    "num.replica.", "leader.imbalance.", "auto.leader.rebalance.", "metadata.", "quota.",
    "log.local.", "remote.", "confluent.", "kafka.metrics.", "metric.reporters", "metrics.num.samples",
    "metrics.recording.level", "metrics.sample.window.ms", "node.metadata.",
)


def _ignored(key: str) -> bool:
    return key.startswith(IGNORED_PREFIXES)


def config_type(name: str) -> str | None:
    """The type of a broker key, also through a `listener.name.<l>.` prefix (and the
    `<mechanism>.` of `listener.name.<l>.<mechanism>.sasl.jaas.config`); None when unknown."""
    spec = BROKER_KEYS.get(name)
    if spec is not None:
        return spec.type
    if name.startswith("listener.name."):
        base = name[len("listener.name."):].partition(".")[2]
        for candidate in (base, base.partition(".")[2]):
            if candidate in BROKER_KEYS:
                return BROKER_KEYS[candidate].type
    return None


def is_sensitive(name: str) -> bool:
    """Kafka's KafkaConfig.maybeSensitive: a password, or a key whose type is unknown (a custom
    key, a listener override of one), is never shown (DescribeConfigs answers null) nor logged."""
    kind = config_type(name)
    return kind is None or kind == "password"


def loggable(values) -> dict:
    """`{key: value}` for a log line, sensitive values replaced by `[hidden]` (Kafka's loggableValue)."""
    return {k: "[hidden]" if is_sensitive(k) else v for k, v in dict(values).items()}


_PROPERTY_LINE = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)$", re.DOTALL)


def read_properties(path: str) -> dict[str, str]:
    """Parse a Java .properties file (`key=value`, `key: value` or `key value`, `#`/`!` comments,
    `\\` continuations)."""
    props: dict[str, str] = {}
    with open(path, "rb") as fh:
        data = fh.read()
    if b"\0" in data:   # an executable, an archive, a keystore given by mistake
        raise ConfigError(f"{path} is not a properties file (it holds binary data)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:   # what java.util.Properties.load(InputStream), and so Kafka, reads
        text = data.decode("latin-1")
    pending = ""
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):   # Java's line ends
        if not pending and line.lstrip().startswith(("#", "!")):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1].lstrip()
            continue
        line = (pending + line.lstrip()).strip()
        pending = ""
        if not line:
            continue
        # java.util.Properties: the key ends at the first '=', ':' or whitespace; whitespace,
        # then one '=' or ':', then whitespace separate it from the value ("key value" is valid)
        key, value = _PROPERTY_LINE.match(line).group(1, 2)
        props[key] = value.strip()
    return props


# KOMPAKT_* variables read by the command line or the project's scripts, not broker configuration
# keys: `eval "$(scripts/container-base.sh)"` (docs/operations.md) leaves KOMPAKT_BASE_IMAGE in the
# shell, and a broker started there must not warn about an unknown key "base.image".
CLI_ENV_VARS = frozenset({"KOMPAKT_CONFIG", "KOMPAKT_LOG_FORMAT", "KOMPAKT_LOG_LEVEL", "KOMPAKT_ADMIN_URL",
                          "KOMPAKT_ADMIN_TOKEN", "KOMPAKT_ADMIN_CACERT",
                          "KOMPAKT_BASE_IMAGE", "KOMPAKT_CONTAINER_CACHE",      # scripts/container-base.sh
                          "KOMPAKT_ADMIN_PASSWORD",                             # docker/compose.sasl-ssl.yml
                          "KOMPAKT_BENCH_DIR"})                                 # bench/bench_storage.py


# What `kompakt serve` runs on when no properties file is given: the values Kafka's own shipped
# config/server.properties and the apache/kafka Docker image set where they differ from Kafka's code
# defaults, so a broker started with no file behaves like the Kafka a user starts from its
# quickstart (issue 16: the first group join is not parked 3 s). A properties file replaces this
# layer entirely, exactly as Kafka falls back to its code defaults for keys a file leaves out.
EMBEDDED_PROPERTIES: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
}


class BrokerConfig:
    """Typed, validated broker configuration; `cfg[key]` gives the key's value or Kafka's default."""

    ENV_PREFIX = "KOMPAKT_"

    def __init__(self, props: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = {}     # effective: static <- dynamic default <- dynamic broker
        self._static: dict[str, Any] = {}
        self.originals: dict[str, str] = {}
        self.ignored: list[str] = []
        self.listener_props: dict[str, str] = {}   # listener.name.<l>.<key> raw (security/listeners.py)
        # Dynamic layers (config/dynamic.py keeps and persists them): raw strings and parsed values.
        self.dynamic_broker: dict[str, str] = {}
        self.dynamic_default: dict[str, str] = {}
        self._dynamic_parsed: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        for key, raw in (props or {}).items():
            self.set(key, raw)

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = (),
             environ: Mapping[str, str] | None = None) -> "BrokerConfig":
        """Defaults <- properties file (or, without one, EMBEDDED_PROPERTIES) <- KOMPAKT_*
        environment <- key=value overrides."""
        layered: dict[str, Any] = {}
        source: dict[str, str] = {}      # where each key was set, for the message of a bad value
        for key, value in (read_properties(path) if path else EMBEDDED_PROPERTIES).items():
            layered[key], source[key] = value, (path or "the embedded defaults")
        env = os.environ if environ is None else environ
        for name, value in env.items():
            if name.startswith(cls.ENV_PREFIX) and name not in CLI_ENV_VARS:
                key = name[len(cls.ENV_PREFIX):].lower().replace("_", ".")
                layered[key], source[key] = value, f"${name}"
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"Override {item!r} is not of the form key=value")
            key, value = item.split("=", 1)
            layered[key.strip()], source[key.strip()] = value.strip(), "--override"
        config = cls()
        for key, raw in layered.items():
            try:
                config.set(key, raw)
            except ConfigError as exc:   # a stale KOMPAKT_* variable is easy to forget: name the layer
                raise ConfigError(f"{exc} (set by {source[key]})") from None
        return config

    def set(self, key: str, raw: Any) -> None:
        if key.startswith("listener.name."):
            self.listener_props[key] = str(raw)
            return
        spec = BROKER_KEYS.get(key)
        if spec is None:
            self.ignored.append(key)
            # never its value: it may be a secret. An unknown key is likely a typo, so it is a
            # WARNING, as Kafka's "were supplied but are not used yet"; a cluster key is routine.
            if _ignored(key):
                log.info("ignoring configuration %s (not used by a single-node broker)", key)
            else:
                log.warning("ignoring configuration %s (unknown key: misspelt?)", key)
            return
        self._static[key] = spec.parse(raw)
        self.originals[key] = str(raw)
        self._merge()

    def set_dynamic(self, dynamic_default: Mapping[str, str], dynamic_broker: Mapping[str, str]) -> None:
        """Replace both dynamic layers (Kafka's DYNAMIC_DEFAULT_BROKER_CONFIG and
        DYNAMIC_BROKER_CONFIG); raises ConfigError for a bad value, changing nothing. Keys outside
        BROKER_KEYS are kept in the raw layers (Kafka keeps custom keys) but have no value here."""
        parsed = tuple({k: BROKER_KEYS[k].parse(v) for k, v in layer.items() if k in BROKER_KEYS}
                       for layer in (dynamic_default, dynamic_broker))
        self.dynamic_default, self.dynamic_broker = dict(dynamic_default), dict(dynamic_broker)
        self._dynamic_parsed = parsed
        self._merge()

    def _merge(self) -> None:
        # one new dict, assigned at once: readers on other threads see the old or the new set
        self._values = {**self._static, **self._dynamic_parsed[0], **self._dynamic_parsed[1]}

    def layers(self, key: str) -> list[tuple[int, Any]]:
        """Where `key` is set, highest precedence first: (Kafka's ConfigSource id, parsed value) for
        DYNAMIC_BROKER_CONFIG (2), DYNAMIC_DEFAULT_BROKER_CONFIG (3), STATIC_BROKER_CONFIG (4)."""
        out = []
        for source, layer in ((SOURCE_DYNAMIC_BROKER, self._dynamic_parsed[1]),
                              (SOURCE_DYNAMIC_DEFAULT, self._dynamic_parsed[0]), (SOURCE_STATIC, self._static)):
            if key in layer:
                out.append((source, layer[key]))
        return out

    def __getitem__(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        try:
            return BROKER_KEYS[key].default
        except KeyError:
            raise KeyError(f"no broker configuration key {key!r}") from None

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def is_set(self, key: str) -> bool:
        """Set in server.properties/overrides or dynamically (not just Kafka's default)."""
        return key in self._values

    def is_static(self, key: str) -> bool:
        return key in self._static

    # Derived values following Kafka's precedence rules (ms over minutes over hours).
    @property
    def node_id(self) -> int:
        return self["node.id"] if self.is_set("node.id") or self["broker.id"] is None else self["broker.id"]

    @property
    def log_dirs(self) -> list[str]:
        dirs = self["log.dirs"]
        return [os.path.abspath(d) for d in (dirs if dirs else [self["log.dir"]])]

    @property
    def log_retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        return self["log.retention.hours"] * 3_600_000

    @property
    def log_roll_ms(self) -> int:
        return self["log.roll.ms"] if self["log.roll.ms"] is not None else self["log.roll.hours"] * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        if self["log.roll.jitter.ms"] is not None:
            return self["log.roll.jitter.ms"]
        return self["log.roll.jitter.hours"] * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        value = self["log.flush.interval.ms"]
        return value if value is not None else self["log.flush.scheduler.interval.ms"]

    def items(self) -> Iterable[tuple[str, Any]]:
        for key in BROKER_KEYS:
            yield key, self[key]
