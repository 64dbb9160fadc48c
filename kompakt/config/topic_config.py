"""Topic-level log configuration: Kafka's keys, defaults, validation and DescribeConfigs view.

Role: `TOPIC_KEYS` lists every topic-level key Kafka 4 defines for logs (LogConfig.java's CONFIG), each
with Kafka's type, default, valid range and broker synonyms (ServerTopicConfigSynonyms: the broker
keys that supply the default when the topic sets nothing, highest priority first, with a unit factor,
e.g. retention.ms <- log.retention.ms | log.retention.minutes*60000 | log.retention.hours*3600000).
`LogConfig.from_overrides(overrides, broker)` resolves one topic's effective configuration:
    topic override  >  first synonym set on the broker  >  Kafka's default of the key.
`validate_topic_configs` refuses unknown names and bad values with `InvalidConfigError` whose message
names the key, the value and what is allowed; `validate_new_topic_configs` adds the rules for what a
client sets now (list items, tiered storage) that stored configs are not held to; `describe` answers
DescribeConfigs (value, source, synonyms) for one topic.

Tiny segments. Kafka 4 raised the minimum of `segment.bytes` (and `log.segment.bytes`) to 1 MiB and
added the *internal* topic key `internal.segment.bytes` (no minimum, "for testing only"); when set it
replaces segment.bytes as the roll size (LogConfig.segmentSize()). We follow that rule exactly: a
client-supplied `segment.bytes` below 1048576 is refused, `internal.segment.bytes` is accepted and
wins. The broker-level `log.segment.bytes` is validated by broker_config (whose table allows small
values so tests and the cleaner can run on small segments); a broker value below 1 MiB is used as is.
`LogConfig.segment_bytes` is therefore always the *effective* roll size.

Keys a single node accepts without acting on (replication, remote storage, throttles) are in the
table with `accepted_only=True`: they validate and describe like Kafka, and change nothing.

Invariant: every attribute of a LogConfig is parsed to its key's type and inside its range.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kompakt.config.broker_config import INT_MAX, LONG_MAX
from kompakt.protocol.errors import InvalidConfigError

INT_MIN = -(2**31)
LONG_MIN = -(2**63)
MIB = 1024 * 1024

# DescribeConfigs ConfigSource values (DescribeConfigsResponse.ConfigSource).
SOURCE_UNKNOWN = 0
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
SOURCE_NAMES = {
    SOURCE_UNKNOWN: "UNKNOWN", SOURCE_DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    SOURCE_DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    SOURCE_STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG", SOURCE_DEFAULT_CONFIG: "DEFAULT_CONFIG",
}

# DescribeConfigs (v3+) ConfigType values.
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                "class": 8, "password": 9}

HOURS = 3_600_000
MINUTES = 60_000


@dataclass(frozen=True)
class TopicKey:
    """One topic-level key: Kafka's type, default, range and broker synonyms `(broker_key, factor)`."""
    name: str
    type: str  # int | long | double | bool | string | list
    default: Any
    synonyms: tuple[tuple[str, int], ...] = ()
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    allowed: tuple[Any, ...] = ()  # extra single values allowed outside [min, max] (gzip level -1)
    internal: bool = False  # Kafka's defineInternal: accepted, hidden from DescribeConfigs
    accepted_only: bool = False  # validated and described, no effect on a single node
    validator: Any = None  # value -> None, or why the value is refused (keys with rules of their own)

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def broker_synonym(self) -> str | None:
        return self.synonyms[0][0] if self.synonyms else None

    def parse(self, raw: Any) -> Any:
        """Parse one raw value; raises InvalidConfigError naming key, value and the allowed range."""
        if raw is None:
            raise _invalid(self.name, raw, "a non-null value",
                           f"Null value not supported for topic config {self.name}")
        text = str(raw).strip() if not isinstance(raw, (list, tuple)) else None
        try:
            if self.type in ("int", "long"):
                if not text.isascii() or "_" in text:  # int() takes both; Java's parseLong neither
                    raise ValueError
                value: Any = int(text)
                lo, hi = (INT_MIN, INT_MAX) if self.type == "int" else (LONG_MIN, LONG_MAX)
                if not lo <= value <= hi:
                    raise ValueError
            elif self.type == "double":
                value = float(text)
            elif self.type == "bool":
                if isinstance(raw, bool):
                    value = raw
                elif text.lower() in ("true", "false"):
                    value = text.lower() == "true"
                else:
                    raise ValueError
            elif self.type == "list":
                items = raw if text is None else text.split(",")
                value = [str(x).strip() for x in items if str(x).strip()]
            else:
                value = text
        except (TypeError, ValueError):
            raise self._refuse(raw, f"Expected value to be a {self._type_word()} number"
                               if self.type in ("int", "long", "double") else
                               f"Expected value to be {self.allowed_text()}") from None
        self._check(raw, value)
        return value

    def _type_word(self) -> str:
        return {"int": "32-bit integer", "long": "64-bit integer", "double": "double"}.get(self.type, self.type)

    def _refuse(self, raw: Any, why: str) -> InvalidConfigError:
        return _invalid(self.name, raw, self.allowed_text(),
                        f"Invalid value {raw} for configuration {self.name}: {why} "
                        f"(allowed: {self.allowed_text()})")

    def _check(self, raw: Any, value: Any) -> None:
        why = self.validator(value) if self.validator is not None else None
        if why:
            raise self._refuse(raw, why)
        if self.choices is not None:
            for item in (value if isinstance(value, list) else [value]):
                if item not in self.choices:
                    raise self._refuse(raw, f"{item!r} is not one of {', '.join(self.choices)}")
            return
        if self.type not in ("int", "long", "double") or value in self.allowed:
            return
        if self.min is not None and value < self.min:
            raise self._refuse(raw, f"Value must be at least {_fmt_num(self.min)}")
        if self.max is not None and value > self.max:
            raise self._refuse(raw, f"Value must be no more than {_fmt_num(self.max)}")

    def allowed_text(self) -> str:
        if self.validator is not None and self.validator.__doc__:
            return self.validator.__doc__
        if self.choices:
            return ("a comma-separated list of " if self.type == "list" else "one of ") + ", ".join(self.choices)
        if self.type == "bool":
            return "true or false"
        parts = []
        if self.min is not None and self.max is not None:
            parts.append(f"[{_fmt_num(self.min)},...,{_fmt_num(self.max)}]")
        elif self.min is not None:
            parts.append(f"[{_fmt_num(self.min)},...]")
        elif self.max is not None:
            parts.append(f"[...,{_fmt_num(self.max)}]")
        else:
            parts.append(f"any {self.type}")
        if self.allowed:
            parts.append("or " + ", ".join(str(a) for a in self.allowed))
        return " ".join(parts)


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _invalid(key: str, value: Any, allowed: str, message: str) -> InvalidConfigError:
    exc = InvalidConfigError(message)
    exc.key, exc.value, exc.allowed = key, value, allowed
    return exc


def _group_list(groups: list) -> str | None:
    """a comma-separated list of consumer group ids, or * alone (every group with committed offsets on the topic)"""
    if "*" in groups and len(groups) > 1:
        return "* stands for every group with committed offsets on the topic and cannot be combined with group ids"
    if len(set(groups)) != len(groups):
        return "a group id is listed twice"
    return None


def _throttled_replicas(name: str):
    """Kafka's ThrottledReplicaListValidator for `name`: '*' alone, or partition:broker pairs."""
    def check(items: list) -> str | None:
        if items == ["*"] or all(re.fullmatch(r"[0-9]+:[0-9]+", item)
                                 and all(int(n) <= INT_MAX for n in item.split(":")) for item in items):
            return None
        return (f"{name} must be the literal '*' or a list of replicas in the following format: "
                f"[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    check.__doc__ = "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    return check


def _t(name, type_, default, synonyms=(), doc="", **kw) -> TopicKey:
    return TopicKey(name, type_, default, tuple((s, 1) if isinstance(s, str) else s for s in synonyms), doc, **kw)


TOPIC_KEYS: dict[str, TopicKey] = {k.name: k for k in [
    _t("cleanup.policy", "list", ["delete"], ["log.cleanup.policy"],
       "delete, compact, or both (comma-separated); empty means neither.", choices=("compact", "delete")),
    _t("compression.type", "string", "producer", ["compression.type"],
       "Final compression of the topic's batches; 'producer' keeps the producer's codec.",
       choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _t("compression.gzip.level", "int", -1, ["compression.gzip.level"], "gzip level when recompressing.",
       min=1, max=9, allowed=(-1,)),
    _t("compression.lz4.level", "int", 9, ["compression.lz4.level"], "lz4 level when recompressing.", min=1, max=17),
    _t("compression.zstd.level", "int", 3, ["compression.zstd.level"], "zstd level when recompressing.",
       min=-131072, max=22),
    _t("delete.retention.ms", "long", 86_400_000, ["log.cleaner.delete.retention.ms"],
       "How long tombstones and transaction markers survive in a compacted log.", min=0),
    _t("file.delete.delay.ms", "long", 60_000, ["log.segment.delete.delay.ms"],
       "Delay between renaming a segment .deleted and unlinking it.", min=0),
    _t("flush.messages", "long", LONG_MAX, ["log.flush.interval.messages"],
       "fsync after this many messages.", min=1),
    _t("flush.ms", "long", LONG_MAX, ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
       "fsync when the log has been dirty this long.", min=0),
    _t("follower.replication.throttled.replicas", "list", [], [],
       "Accepted; a single node has no followers.", accepted_only=True,
       validator=_throttled_replicas("follower.replication.throttled.replicas")),
    _t("index.interval.bytes", "int", 4096, ["log.index.interval.bytes"],
       "Bytes of log between offset-index entries.", min=0),
    _t("internal.segment.bytes", "int", None, [],
       "Kafka 4 internal key: segment size with no minimum (testing only); overrides segment.bytes.",
       internal=True),
    _t("kompakt.tombstone.retention.groups", "list", [], [],
       "Kompakt: consumer groups (or * for every group with committed offsets on the topic) that must have "
       "committed past a tombstone or transaction marker before the cleaner removes it, on top of "
       "delete.retention.ms. Empty: Kafka's rule.", validator=_group_list),
    _t("kompakt.tombstone.retention.max.ms", "long", 604_800_000, [],
       "Kompakt: a group of kompakt.tombstone.retention.groups that has not committed offsets on the topic "
       "for this long stops holding tombstones back.", min=1),
    _t("leader.replication.throttled.replicas", "list", [], [],
       "Accepted; a single node has no followers.", accepted_only=True,
       validator=_throttled_replicas("leader.replication.throttled.replicas")),
    _t("local.retention.bytes", "long", -2, ["log.local.retention.bytes"],
       "Accepted; tiered storage is not supported (-2: same as retention.bytes).", min=-2, accepted_only=True),
    _t("local.retention.ms", "long", -2, ["log.local.retention.ms"],
       "Accepted; tiered storage is not supported (-2: same as retention.ms).", min=-2, accepted_only=True),
    _t("max.compaction.lag.ms", "long", LONG_MAX, ["log.cleaner.max.compaction.lag.ms"],
       "Longest a record may stay uncompacted.", min=1),
    _t("max.message.bytes", "int", 1_048_588, ["message.max.bytes"],
       "Largest record batch the topic accepts.", min=0),
    _t("message.downconversion.enable", "bool", True, [],
       "Accepted for old tooling (removed in Kafka 4); only magic v2 exists.", accepted_only=True),
    _t("message.timestamp.after.max.ms", "long", 3_600_000, ["log.message.timestamp.after.max.ms"],
       "How far in the future a CreateTime timestamp may be.", min=0),
    _t("message.timestamp.before.max.ms", "long", LONG_MAX, ["log.message.timestamp.before.max.ms"],
       "How far in the past a CreateTime timestamp may be.", min=0),
    _t("message.timestamp.type", "string", "CreateTime", ["log.message.timestamp.type"],
       "CreateTime or LogAppendTime.", choices=("CreateTime", "LogAppendTime")),
    _t("min.cleanable.dirty.ratio", "double", 0.5, ["log.cleaner.min.cleanable.ratio"],
       "Dirty fraction above which the cleaner compacts the log.", min=0.0, max=1.0),
    _t("min.compaction.lag.ms", "long", 0, ["log.cleaner.min.compaction.lag.ms"],
       "Youngest a record may be and still be compacted.", min=0),
    _t("min.insync.replicas", "int", 1, ["min.insync.replicas"],
       "Accepted; a single node is its own ISR.", min=1, accepted_only=True),
    _t("preallocate", "bool", False, ["log.preallocate"], "Preallocate segment files."),
    _t("remote.log.copy.disable", "bool", False, [], "Accepted; tiered storage is not supported.",
       accepted_only=True),
    _t("remote.log.delete.on.disable", "bool", False, [], "Accepted; tiered storage is not supported.",
       accepted_only=True),
    _t("remote.log.copy.lag.ms", "long", 0, [], "Accepted; tiered storage is not supported.", min=-1,
       accepted_only=True),
    _t("remote.log.copy.lag.bytes", "long", 0, [], "Accepted; tiered storage is not supported.", min=-1,
       accepted_only=True),
    _t("remote.storage.enable", "bool", False, [], "Only false: tiered storage is not supported (true is "
       "refused as by Kafka with remote.log.storage.system.enable off).",
       accepted_only=True),
    _t("retention.bytes", "long", -1, ["log.retention.bytes"],
       "Largest the log may grow before old segments are deleted (-1: unlimited)."),
    _t("retention.ms", "long", 604_800_000,
       ["log.retention.ms", ("log.retention.minutes", MINUTES), ("log.retention.hours", HOURS)],
       "Age (largest timestamp) after which a segment is deleted (-1: unlimited).", min=-1),
    _t("segment.bytes", "int", 1_073_741_824, ["log.segment.bytes"], "Segment roll size.", min=MIB),
    _t("segment.index.bytes", "int", 10_485_760, ["log.index.size.max.bytes"],
       "Offset/time index size; a full index rolls the segment.", min=4),
    _t("segment.jitter.ms", "long", 0, ["log.roll.jitter.ms", ("log.roll.jitter.hours", HOURS)],
       "Random jitter subtracted from segment.ms.", min=0),
    _t("segment.ms", "long", 604_800_000, ["log.roll.ms", ("log.roll.hours", HOURS)],
       "Roll a segment after this long even if not full.", min=1),
    _t("unclean.leader.election.enable", "bool", False, ["unclean.leader.election.enable"],
       "Accepted; a single node has no election.", accepted_only=True),
]}


def _broker_value(key: TopicKey, broker) -> tuple[Any, str, int] | None:
    """The first broker synonym set on the broker: (value converted to the topic unit, name, raw value)."""
    if broker is None:
        return None
    for name, factor in key.synonyms:
        if broker.is_set(name):
            raw = broker[name]
            if raw is None:
                continue
            return (raw * factor if factor != 1 and raw >= 0 else raw), name, raw
    return None


def default_value(key: TopicKey, broker=None) -> Any:
    """The key's value for a topic that does not override it."""
    found = _broker_value(key, broker)
    return found[0] if found is not None else key.default


class LogConfig:
    """Effective configuration of one topic's logs. Attributes are keys with '.' -> '_'.

    Extras: `cleanup_policy` is a frozenset; `compact` / `delete` booleans; `segment_bytes` is the
    effective roll size (internal.segment.bytes when set); `overrides` the topic's own raw strings.
    """

    def __init__(self, values: Mapping[str, Any], overrides: Mapping[str, str] | None = None):
        self.overrides: dict[str, str] = dict(overrides or {})
        self.values: dict[str, Any] = dict(values)
        for name, value in self.values.items():
            setattr(self, TOPIC_KEYS[name].attr, value)
        self.cleanup_policy = frozenset(p.lower() for p in self.values["cleanup.policy"])
        self.compact = "compact" in self.cleanup_policy
        self.delete = "delete" in self.cleanup_policy
        self.segment_bytes_config = self.values["segment.bytes"]
        if self.values.get("internal.segment.bytes") is not None:
            self.segment_bytes = self.values["internal.segment.bytes"]

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str] | None = None, broker=None, *,
                       check_defaults: bool = True) -> "LogConfig":
        """Resolve a topic's overrides over the broker's log.* defaults (validating the overrides).

        `check_defaults` also refuses a conflict between an override and a broker default (min >
        max compaction lag), as Kafka does when configs are set; resolving a stored topic passes
        False, as Kafka's LogConfig never checks then: a broker default changed later must not
        make a topic unloadable."""
        overrides = {k: v for k, v in (overrides or {}).items()}
        parsed = validate_topic_configs(overrides)
        values = {name: default_value(key, broker) for name, key in TOPIC_KEYS.items()}
        values.update(parsed)
        if check_defaults:
            _check_combination(values)
        return cls(values, {k: str(v) for k, v in overrides.items()})

    @classmethod
    def from_stored(cls, overrides: Mapping[str, str] | None = None, broker=None, *,
                    on_dropped=None) -> "LogConfig":
        """Resolve overrides that were stored earlier (the topic store, read by the broker and by
        the offline tools), leniently, as Kafka's LogConfig does when it loads a log: each key is
        parsed alone and no combination is checked (min.compaction.lag.ms above max is kept, as
        stored); a list stored with an item twice (accepted before that check existed) keeps each
        item once; a key or value that no longer parses is dropped and passed to
        `on_dropped(key, value, error)`. Never raises for stored content: a rule added later must
        not make a topic unloadable."""
        values = {name: default_value(key, broker) for name, key in TOPIC_KEYS.items()}
        kept: dict[str, str] = {}
        for name, raw in (overrides or {}).items():
            key = TOPIC_KEYS.get(name)
            try:
                if key is None:
                    raise _invalid(name, raw, "a topic config name", f"Unknown topic config name: {name}")
                if key.type == "list" and isinstance(raw, str) and "," in raw:
                    raw = ",".join(dict.fromkeys(item.strip() for item in raw.split(",")))
                values[name] = key.parse(raw)
                kept[name] = str(raw)
            except InvalidConfigError as exc:
                if on_dropped is not None:
                    on_dropped(name, raw, exc)
        return cls(values, kept)

    @classmethod
    def default(cls) -> "LogConfig":
        return cls.from_overrides({}, None)

    def with_overrides(self, overrides: Mapping[str, str], broker=None) -> "LogConfig":
        return LogConfig.from_overrides(overrides, broker)

    # Derived values, as LogConfig.java computes them.
    def max_segment_ms(self) -> int:
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        if self.segment_jitter_ms == 0:
            return 0
        return (rng or random).randrange(2**31) % min(self.segment_jitter_ms, self.segment_ms)

    def init_file_size(self) -> int:
        return self.segment_bytes if self.preallocate else 0

    @property
    def max_message_size(self) -> int:
        return self.max_message_bytes

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.values.items()) if k in self.overrides)
        return f"LogConfig(overrides: {shown or 'none'})"


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and values of topic overrides; returns them parsed. Raises InvalidConfigError."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise _invalid(name, raw, "a topic config name", f"Unknown topic config name: {name}")
        parsed[name] = key.parse(raw)
    _check_combination(parsed)
    return parsed


TIERED_STORAGE_OFF = ("Tiered Storage functionality is disabled in the broker. "
                      "Topic cannot be configured with remote log storage.")


def validate_new_topic_configs(configs: Mapping[str, Any], broker=None) -> dict[str, Any]:
    """`validate_topic_configs` plus what a client may not newly set (CreateTopics and the alter
    APIs; stored configs are loaded with the lenient rules, so an upgrade never drops one):
    * Kafka 4.2+ ConfigDef.ValidList (KIP-1161): a list key with fixed choices (cleanup.policy)
      may be empty, but not name an item twice nor hold an empty item;
    * Kafka's validateRemoteStorageOnlyIfSystemEnabled: remote.storage.enable=true needs
      remote.log.storage.system.enable, and we have no tiered storage;
    * with `broker`, the combination checks over the broker's log defaults (Kafka's
      LogConfig.validate takes extractLogConfigMap), so validate_only answers as the change would."""
    parsed = validate_topic_configs(configs)
    for name, raw in configs.items():
        key = TOPIC_KEYS[name]
        if key.type == "list" and key.choices is not None and isinstance(raw, str) and raw.strip():
            items = [item.strip() for item in raw.strip().split(",")]
            if len(set(items)) != len(items):
                raise _invalid(name, raw, key.allowed_text(), f"Configuration '{name}' values must not be duplicated.")
            if "" in items:
                raise _invalid(name, raw, key.allowed_text(), f"Configuration '{name}' values must not be empty.")
    if parsed.get("remote.storage.enable"):
        raise _invalid("remote.storage.enable", True, "false", TIERED_STORAGE_OFF)
    if broker is not None:
        LogConfig.from_overrides(configs, broker)
    return parsed


def _check_combination(values: Mapping[str, Any]) -> None:
    lo, hi = values.get("min.compaction.lag.ms"), values.get("max.compaction.lag.ms")
    if lo is not None and hi is not None and lo > hi:
        raise _invalid("min.compaction.lag.ms", lo, f"at most max.compaction.lag.ms ({hi})",
                       f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                       f"max.compaction.lag.ms ({hi})")


def format_value(key: TopicKey, value: Any) -> str | None:
    """A value as Kafka renders it in DescribeConfigs."""
    if value is None:
        return None
    if key.type == "list":
        return ",".join(value)
    if key.type == "bool":
        return "true" if value else "false"
    if key.type == "double":
        return repr(float(value))
    return str(value)


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One DescribeConfigs row for a topic."""
    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: int
    documentation: str

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT_CONFIG

    @property
    def source_name(self) -> str:
        return SOURCE_NAMES[self.source]


def describe(overrides: Mapping[str, str] | None, broker=None,
             keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs rows for a topic: value, source and synonyms (topic, broker, default order).

    `keys` limits the rows (unknown names are skipped, as Kafka does); internal keys appear only
    when the topic overrides them.
    """
    overrides = dict(overrides or {})
    names = sorted(TOPIC_KEYS) if keys is None else [k for k in keys if k in TOPIC_KEYS]
    rows = []
    for name in names:
        key = TOPIC_KEYS[name]
        if key.internal and name not in overrides:
            continue
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, _stored_value(key, overrides[name]), SOURCE_DYNAMIC_TOPIC_CONFIG))
        if broker is not None:
            # Kafka's order: layer by layer (dynamic per-broker, dynamic default, static), each
            # layer in synonym order
            found = sorted((source, i, syn, value) for i, (syn, _factor) in enumerate(key.synonyms)
                           for source, value in _layers(broker, syn) if value is not None)
            synonyms += [ConfigSynonym(syn, _fmt_broker(_broker_spec(syn), value), source)
                         for source, _i, syn, value in found]
        for syn, _factor in key.synonyms:
            # Kafka lists the broker default of every synonym that has one (log.retention.hours=168).
            spec = _broker_spec(syn)
            if spec is not None and spec.default is not None:
                synonyms.append(ConfigSynonym(syn, _fmt_broker(spec, spec.default), SOURCE_DEFAULT_CONFIG))
        if name in overrides:
            value, source = _stored_value(key, overrides[name]), SOURCE_DYNAMIC_TOPIC_CONFIG
        else:
            found = _broker_value(key, broker)
            if found is not None:
                layers = _layers(broker, found[1])
                value = format_value(key, found[0])
                source = layers[0][0] if layers else SOURCE_STATIC_BROKER_CONFIG
            else:
                value, source = format_value(key, key.default), SOURCE_DEFAULT_CONFIG
        rows.append(ConfigEntry(name, value, source, False, False, tuple(synonyms),
                                CONFIG_TYPES.get(key.type, 0), key.doc))
    return rows


def _stored_value(key: TopicKey, raw: Any) -> str | None:
    """An override as DescribeConfigs shows it; one stored by an older version that today's rules
    refuse is shown as stored (the log runs without it, logged at load) rather than failing the
    whole answer."""
    try:
        return format_value(key, key.parse(raw))
    except InvalidConfigError:
        return None if raw is None else str(raw)


def _layers(broker, name: str) -> list[tuple[int, Any]]:
    """(source, value) of each layer that sets broker key `name` (BrokerConfig.layers)."""
    layers = getattr(broker, "layers", None)
    if layers is not None:
        return layers(name)
    return [(SOURCE_STATIC_BROKER_CONFIG, broker[name])] if broker.is_set(name) else []


def _broker_spec(name: str):
    from kompakt.config.broker_config import BROKER_KEYS
    return BROKER_KEYS.get(name)


def _fmt_broker(spec, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)
