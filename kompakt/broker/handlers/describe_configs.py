"""DescribeConfigs (API key 32), versions 1-4.

Behaviour (Kafka's ConfigHelper.describeConfigs):
* TOPIC (2): an illegal name -> INVALID_TOPIC_EXCEPTION; unknown -> UNKNOWN_TOPIC_OR_PARTITION;
  else every topic key (Kafka's LogConfig set, internal keys only when overridden) with its
  effective value and source: DYNAMIC_TOPIC_CONFIG (the topic's override), STATIC_BROKER_CONFIG
  (a `log.*` synonym set in server.properties) or DEFAULT_CONFIG. Synonyms, when asked, list the
  override, the broker keys set, then the broker defaults (`log.retention.hours=168`), as Kafka does.
* BROKER (4): name == node.id -> every broker key we know (and custom keys set dynamically) with
  its effective value and source: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
  STATIC_BROKER_CONFIG or DEFAULT_CONFIG (config/dynamic.py); read_only unless Kafka lets the key
  change at run time; synonyms (Kafka's ConfigHelper.configSynonyms) layer by layer over the other
  spellings of the same setting (log.retention.ms / .minutes / .hours). Name "" -> the cluster-wide
  dynamic defaults only (source DYNAMIC_DEFAULT_BROKER_CONFIG). A name that is not an integer or
  not our id -> INVALID_REQUEST with Kafka's message.
* BROKER_LOGGER (8): the broker's Python loggers (`kompakt.*`) with their levels by log4j's
  names as Kafka answers them (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF), source
  DYNAMIC_BROKER_LOGGER_CONFIG; IncrementalAlterConfigs can change them.
* GROUP (32), KIP-848's dynamic group configs (groups/group_configs.py): every group key
  (consumer.session.timeout.ms, consumer.heartbeat.interval.ms) with the group's override, source
  GROUP_CONFIG (8), else the broker's group.consumer.* value, source DEFAULT_CONFIG - Kafka's
  ConfigHelper.createGroupConfigEntry; a synonym list of that one entry; any group name, existing
  or not. An empty name -> INVALID_REQUEST "Group name must not be empty".
* Other types (CLIENT_METRICS): INVALID_REQUEST "Unsupported resource type".
* `configuration_keys` null or empty: all keys; otherwise only those (unknown names are skipped).
* Sensitive keys answer value null, is_sensitive true (Kafka's maybeSensitive): password-typed keys,
  also behind a `listener.name.<l>.` prefix, and custom keys, whose type cannot be known.

Version notes: v0 (below Kafka 4's floor) had is_default; v1 adds config_source and synonyms;
v3 adds config_type and documentation (when include_documentation); v4 flexible.

Authorization: DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), the cluster for
BROKER/BROKER_LOGGER (CLUSTER_AUTHORIZATION_FAILED), the group for GROUP (_common.check_config_access).
"""
from __future__ import annotations

import logging

from kafka.protocol.admin.configs import DescribeConfigsResponse

from kompakt.broker.handlers._common import ResultError, check_config_access, invalid_topic_reason
from kompakt.config import topic_config
from kompakt.config.broker_config import BROKER_KEYS, is_sensitive
from kompakt.config.dynamic import is_dynamic
from kompakt.protocol.errors import ErrorCode

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

log = logging.getLogger(__name__)

# ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
RESOURCE_TYPE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER",
                       CLIENT_METRICS: "CLIENT_METRICS", GROUP: "GROUP"}
SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG = 6
SOURCE_GROUP_CONFIG = 8
LOGGER_PREFIX = "kompakt"

Result = DescribeConfigsResponse.DescribeConfigsResult
Row = Result.DescribeConfigsResourceResult
Synonym = Row.DescribeConfigsSynonym


def check_broker_name(name: str | None, node_id: int, *, allow_empty: bool = True) -> bool:
    """True for our node id, False for "" (cluster default); raises ResultError otherwise."""
    if name is None or name == "":
        if allow_empty:
            return False
        raise ResultError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    try:
        broker_id = int(name)
    except ValueError:
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        expected = f"{node_id} or empty string" if allow_empty else str(node_id)
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          f"Unexpected broker id, expected {expected}, but received {name}")
    return True


def topic_meta(lm, name: str):
    """The topic's metadata, or ResultError as Kafka answers for bad and unknown names."""
    reason = invalid_topic_reason(name)
    if reason:
        raise ResultError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    meta = lm.topics.get(name)
    if meta is None:
        raise ResultError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return meta


def format_broker_value(spec, value) -> str | None:
    if value is None or spec.type == "password":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _broker_synonym_group(name: str) -> list[str]:
    """Other broker keys that set the same thing, highest priority first (from TOPIC_KEYS' synonyms)."""
    for key in topic_config.TOPIC_KEYS.values():
        group = [syn for syn, _factor in key.synonyms]
        if name in group:
            return group
    return [name]


def _topic_rows(meta, cfg, keys, synonyms: bool, docs: bool) -> list[Row]:
    rows = []
    for entry in topic_config.describe(meta.configs, cfg, keys):
        rows.append(Row(
            name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
            is_default=entry.source == topic_config.SOURCE_DEFAULT_CONFIG, is_sensitive=entry.is_sensitive,
            synonyms=[Synonym(name=s.name, value=s.value, source=s.source) for s in entry.synonyms]
            if synonyms else [],
            config_type=entry.config_type, documentation=entry.documentation if docs else None))
    return rows


def _broker_synonyms(cfg, name: str, per_broker: bool = True) -> list[Synonym]:
    """Kafka's ConfigHelper.configSynonyms: layer by layer (dynamic per-broker, dynamic default,
    static, Kafka's default), each in synonym order, starting at `name`'s own first entry; the
    cluster-default view (`per_broker` False) keeps only DYNAMIC_DEFAULT_BROKER_CONFIG entries."""
    group = _broker_synonym_group(name)
    found = sorted((source, i, syn, value) for i, syn in enumerate(group)
                   for source, value in _layers(cfg, syn))
    found += [(topic_config.SOURCE_DEFAULT_CONFIG, i, syn, BROKER_KEYS[syn].default)
              for i, syn in enumerate(group) if syn in BROKER_KEYS and BROKER_KEYS[syn].default is not None]
    out = [Synonym(name=syn, value=_format(syn, value), source=source) for source, _i, syn, value in found]
    while out and out[0].name != name:   # drop the other spellings' entries before this one's
        out.pop(0)
    if not per_broker:
        out = [syn for syn in out if syn.source == topic_config.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG]
    return out


def _layers(cfg, name: str) -> list[tuple[int, object]]:
    """(source, value) of each layer setting `name`: parsed for our keys, raw for custom ones."""
    if name in BROKER_KEYS:
        return cfg.layers(name)
    out = []
    if name in cfg.dynamic_broker:
        out.append((topic_config.SOURCE_DYNAMIC_BROKER_CONFIG, cfg.dynamic_broker[name]))
    if name in cfg.dynamic_default:
        out.append((topic_config.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, cfg.dynamic_default[name]))
    return out


def _format(name: str, value) -> str | None:
    spec = BROKER_KEYS.get(name)
    return format_broker_value(spec, value) if spec is not None else (None if value is None else str(value))


def _broker_row(cfg, name: str, value, synonyms: bool, docs: bool, per_broker: bool) -> Row:
    spec = BROKER_KEYS.get(name)
    sensitive = is_sensitive(name)          # Kafka: passwords, and custom keys whose type it cannot know
    all_synonyms = _broker_synonyms(cfg, name, per_broker)
    source = all_synonyms[0].source if all_synonyms else topic_config.SOURCE_DEFAULT_CONFIG
    if sensitive:
        all_synonyms = [Synonym(name=x.name, value=None, source=x.source) for x in all_synonyms]
    return Row(name=name, value=None if sensitive else _format(name, value), read_only=not is_dynamic(name),
               config_source=source, is_default=source == topic_config.SOURCE_DEFAULT_CONFIG,
               is_sensitive=sensitive, synonyms=all_synonyms if synonyms else [],
               config_type=topic_config.CONFIG_TYPES.get(spec.type, 0) if spec is not None
               else topic_config.CONFIG_TYPES["string"],
               documentation=(spec.doc if spec is not None else None) if docs else None)


def _broker_rows(cfg, keys, synonyms: bool, docs: bool) -> list[Row]:
    """This broker (resource name = node.id): every key, effective value and where it comes from,
    plus custom keys set dynamically (Kafka lists a broker's originals too)."""
    custom = (set(cfg.dynamic_broker) | set(cfg.dynamic_default)) - set(BROKER_KEYS)
    every = sorted(set(BROKER_KEYS) | custom)
    names = every if keys is None else [k for k in keys if k in BROKER_KEYS or k in custom]
    return [_broker_row(cfg, name, cfg[name] if name in BROKER_KEYS else
                        cfg.dynamic_broker.get(name, cfg.dynamic_default.get(name)), synonyms, docs, True)
            for name in names]


def _cluster_default_rows(cfg, keys, synonyms: bool, docs: bool) -> list[Row]:
    """The cluster-wide dynamic defaults (resource name ""): only what is set at that level."""
    layer = cfg.dynamic_default
    names = sorted(layer) if keys is None else [k for k in keys if k in layer]
    return [_broker_row(cfg, name, layer[name], synonyms, docs, False) for name in names]


# Python's levels -> the log4j names Kafka answers (and IncrementalAlterConfigs takes back):
# TRACE is our level 5, OFF one step above CRITICAL (incremental_alter_configs.LEVELS).
LOG4J_NAMES = {5: "TRACE", logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN",
               logging.ERROR: "ERROR", logging.CRITICAL: "FATAL", logging.CRITICAL + 10: "OFF"}


def log4j_level(level: int) -> str:
    """The log4j name of a Python level; a level between two names takes the lower one (it logs
    at least what that name logs)."""
    return LOG4J_NAMES[max((k for k in LOG4J_NAMES if k <= level), default=5)]


def broker_loggers() -> dict[str, str]:
    """Logger name -> effective level (log4j name) for the broker's own loggers (and root)."""
    names = sorted(n for n in logging.root.manager.loggerDict
                   if n == LOGGER_PREFIX or n.startswith(LOGGER_PREFIX + "."))
    out = {"root": log4j_level(logging.root.getEffectiveLevel())}
    for name in names:
        out[name] = log4j_level(logging.getLogger(name).getEffectiveLevel())
    return out


def _logger_rows(keys, docs: bool) -> list[Row]:
    loggers = broker_loggers()
    names = list(loggers) if keys is None else [k for k in keys if k in loggers]
    return [Row(name=n, value=loggers[n], read_only=False, config_source=SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG,
                is_default=False, is_sensitive=False, synonyms=[], config_type=topic_config.CONFIG_TYPES["string"],
                documentation=None) for n in names]


def describe_resource(ctx, resource, synonyms: bool, docs: bool) -> list[Row]:
    keys = list(resource.configuration_keys) if resource.configuration_keys else None
    rtype, name = resource.resource_type, resource.resource_name
    if rtype == TOPIC:
        meta = topic_meta(ctx.log_manager, name)
        return _topic_rows(meta, ctx.config, keys, synonyms, docs)
    if rtype == BROKER:
        if not check_broker_name(name, ctx.config.node_id):
            return _cluster_default_rows(ctx.config, keys, synonyms, docs)
        return _broker_rows(ctx.config, keys, synonyms, docs)
    if rtype == BROKER_LOGGER:
        check_broker_name(name, ctx.config.node_id, allow_empty=False)
        return _logger_rows(keys, docs)
    if rtype == GROUP:
        return _group_rows(ctx.groups.group_configs, name, keys, synonyms, docs)
    raise ResultError(ErrorCode.INVALID_REQUEST,
                      f"Unsupported resource type: {RESOURCE_TYPE_NAMES.get(rtype, rtype)}")


def _group_rows(group_configs, name: str, keys, synonyms: bool, docs: bool) -> list[Row]:
    if not name:
        raise ResultError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    rows = []
    for key, value, overridden in group_configs.describe(name):
        if keys is not None and key.name not in keys:
            continue
        source = SOURCE_GROUP_CONFIG if overridden else topic_config.SOURCE_DEFAULT_CONFIG
        rows.append(Row(name=key.name, value=str(value), read_only=False, config_source=source,
                        is_default=not overridden, is_sensitive=False,
                        synonyms=[Synonym(name=key.name, value=str(value), source=source)] if synonyms else [],
                        config_type=topic_config.CONFIG_TYPES["int"], documentation=key.doc if docs else None))
    return rows


async def handle(ctx, request) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        result = Result(error_code=0, error_message=None, resource_type=resource.resource_type,
                        resource_name=resource.resource_name, configs=[])
        try:
            check_config_access(ctx, resource.resource_type, resource.resource_name, alter=False)
            result.configs = describe_resource(ctx, resource, bool(request.include_synonyms),
                                               bool(request.include_documentation))
        except ResultError as exc:
            result.error_code, result.error_message = int(exc.code), exc.message
        results.append(result)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
