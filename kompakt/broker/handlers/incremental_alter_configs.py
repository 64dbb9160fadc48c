"""IncrementalAlterConfigs (API key 44), versions 0-1.

Behaviour (Kafka's ConfigAdminManager + ConfigurationControlManager.incrementalAlterConfigResource):
* Request checks as AlterConfigs: a resource twice -> INVALID_REQUEST for each copy; a key twice in
  a resource -> INVALID_REQUEST "Error due to duplicate config keys"; a null value for SET, APPEND
  or SUBTRACT -> INVALID_REQUEST; an operation other than 0-3 -> INVALID_REQUEST.
* TOPIC, starting from the topic's current overrides, each key in turn:
    SET (0)       key = value
    DELETE (1)    remove the override (back to the broker/Kafka default)
    APPEND (2)    list keys only: add each comma-separated item not yet present to the current
                  value (the override, else the effective default)
    SUBTRACT (3)  list keys only: remove each item
  APPEND/SUBTRACT on a non-list (or unknown) key: INVALID_CONFIG "Can't APPEND to key <key> because
  its type is not LIST." (Kafka's controller). The resulting set is validated as a whole
  (INVALID_CONFIG with the message), then persisted and applied to the live logs before we answer. Unknown topic:
  UNKNOWN_TOPIC_OR_PARTITION; the name "" INVALID_REQUEST (Kafka: no default topic resource).
* BROKER: name "" (cluster-wide default) or our node id (this broker): the operations apply to
  that layer of dynamic broker configs (config/dynamic.py; APPEND/SUBTRACT on list keys, starting
  from the layer's value or the key's default; on another key INVALID_REQUEST "Config value append
  is not allowed for config key: <key>"), validated, persisted and applied live; refusals as in
  alter_configs (INVALID_REQUEST with Kafka's message).
* GROUP (32): SET / DELETE of the KIP-848 group configs (consumer.session.timeout.ms,
  consumer.heartbeat.interval.ms; groups/group_configs.py), starting from the group's current
  overrides; the result validated as a whole against the broker's group.consumer.min/max.*
  bounds (INVALID_CONFIG with Kafka's message; APPEND/SUBTRACT INVALID_CONFIG: no list keys),
  persisted, and used from each member's next heartbeat.
* BROKER_LOGGER (name = node.id): SET a logger's level (TRACE, DEBUG, INFO, WARN, ERROR, FATAL,
  OFF, or Python's names), DELETE resets it to inherit from its parent; APPEND/SUBTRACT are
  INVALID_REQUEST. Only `root` and `kompakt.*` loggers; others, and a logger the broker does not
  have ("Logger X does not exist!", as Kafka), -> INVALID_CONFIG.
* validate_only: every check, nothing changed.

Version notes: v1 flexible; otherwise identical.
"""
from __future__ import annotations

import logging

from kafka.protocol.admin.configs import IncrementalAlterConfigsResponse

from kompakt.broker.handlers._common import ResultError
from kompakt.broker.groups.group_configs import GROUP_KEYS
from kompakt.broker.handlers.alter_configs import (alter_broker, alter_group, alter_resources, altered_topic_meta,
                                                   apply_topic_configs, check_keys, check_node_id)
from kompakt.broker.handlers.describe_configs import (BROKER, BROKER_LOGGER, GROUP, LOGGER_PREFIX,
                                                      RESOURCE_TYPE_NAMES, TOPIC)
from kompakt.config import topic_config
from kompakt.config.broker_config import BROKER_KEYS
from kompakt.protocol.errors import ErrorCode

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger(__name__)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# Kafka's log4j level names -> Python levels.
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
          "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}


def _parts(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def apply_ops(current: dict[str, str], ops, list_value) -> dict[str, str]:
    """Apply SET/DELETE/APPEND/SUBTRACT, in the order listed, to a copy of `current` (a topic's
    overrides or a dynamic broker layer). `list_value(name, result)` is the comma-separated value
    APPEND/SUBTRACT start from; it raises ResultError for a key that is not a list."""
    result = dict(current)
    for op in ops:
        name, value = op.name, op.value
        if op.config_operation == SET:
            result[name] = value
        elif op.config_operation == DELETE:
            result.pop(name, None)
        else:
            items = _parts(list_value(name, result, "append" if op.config_operation == APPEND else "subtract"))
            for item in _parts(value):
                if op.config_operation == APPEND and item not in items:
                    items.append(item)
                elif op.config_operation == SUBTRACT and item in items:
                    items.remove(item)
            result[name] = ",".join(items)
    return result


def new_topic_configs(overrides: dict[str, str], ops, cfg) -> dict[str, str]:
    """A topic's overrides after `ops`; a list key starts from its override, else its default."""
    def list_value(name, result, verb):
        key = topic_config.TOPIC_KEYS.get(name)
        if key is None or key.type != "list":   # Kafka's controller: unknown keys are not LIST either
            raise ResultError(ErrorCode.INVALID_CONFIG,
                              f"Can't {verb.upper()} to key {name} because its type is not LIST.")
        if name in result:
            return result[name]
        return topic_config.format_value(key, topic_config.default_value(key, cfg))
    return apply_ops(overrides, ops, list_value)


def new_broker_configs(current: dict[str, str], ops) -> dict[str, str]:
    """A dynamic broker layer after `ops` (Kafka's prepareIncrementalConfigs: a list key starts
    from the layer's value, else the key's default; another key is INVALID_REQUEST)."""
    def list_value(name, result, verb):
        spec = BROKER_KEYS.get(name)
        if spec is None or spec.type != "list":
            raise ResultError(ErrorCode.INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {name}")
        return result[name] if name in result else ",".join(spec.default or [])
    return apply_ops(current, ops, list_value)


def new_group_configs(current: dict[str, str], ops) -> dict[str, str]:
    """A group's overrides after `ops`: every group key is an int, so APPEND/SUBTRACT are refused."""
    def list_value(name, result, verb):
        if name not in GROUP_KEYS:
            raise ResultError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        raise ResultError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
    return apply_ops(current, ops, list_value)


def _check_ops(configs) -> None:
    for c in configs:
        if c.config_operation not in OP_NAMES:
            raise ResultError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
    check_keys(configs, lambda c: c.config_operation != DELETE)


def _alter_loggers(ctx, name: str, ops, validate_only: bool) -> None:
    check_node_id(name, ctx.config.node_id)
    changes = []
    for op in ops:
        if op.config_operation in (APPEND, SUBTRACT):
            raise ResultError(ErrorCode.INVALID_REQUEST,
                              f"{OP_NAMES[op.config_operation]} operation is not allowed for the "
                              f"BROKER_LOGGER resource")
        logger = op.name or ""
        if logger != "root" and logger != LOGGER_PREFIX and not logger.startswith(LOGGER_PREFIX + "."):
            raise ResultError(ErrorCode.INVALID_CONFIG,
                              f"Logger {logger} is not a broker logger (root or {LOGGER_PREFIX}.*)")
        if logger != "root" and logger not in logging.root.manager.loggerDict:
            # Kafka's validateLogLevelConfigs: a misspelt name is refused, never created
            raise ResultError(ErrorCode.INVALID_CONFIG, f"Logger {logger} does not exist!")
        if op.config_operation == DELETE:
            if logger == "root":
                raise ResultError(ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed")
            changes.append((logger, logging.NOTSET))
            continue
        level = LEVELS.get(str(op.value).strip().upper())
        if level is None:
            raise ResultError(ErrorCode.INVALID_CONFIG,
                              f"Cannot set the log level of {logger} to {op.value} as it is not a supported "
                              f"log level. Valid log4j levels are {', '.join(k for k in LEVELS if k not in ('WARNING', 'CRITICAL'))}")
        changes.append((logger, level))
    if validate_only:
        return
    for logger, level in changes:
        (logging.getLogger() if logger == "root" else logging.getLogger(logger)).setLevel(level)
        log.info("logger %s level set to %s by client %s", logger, logging.getLevelName(level), ctx.client_id)


async def _alter_one(ctx, resource, validate_only: bool) -> None:
    rtype, name = resource.resource_type, resource.resource_name
    _check_ops(resource.configs)
    if rtype == TOPIC:
        meta = altered_topic_meta(ctx.log_manager, name)
        new = new_topic_configs(dict(meta.configs), resource.configs, ctx.config)
        await apply_topic_configs(ctx, name, new, validate_only)
    elif rtype == BROKER:
        await alter_broker(ctx, name, lambda current: new_broker_configs(current, resource.configs),
                           validate_only)
    elif rtype == GROUP:
        await alter_group(ctx, name, lambda current: new_group_configs(current, resource.configs),
                          validate_only)
    elif rtype == BROKER_LOGGER:
        _alter_loggers(ctx, name, resource.configs, validate_only)
    else:
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          f"Unsupported resource type: {RESOURCE_TYPE_NAMES.get(rtype, rtype)}")


async def handle(ctx, request) -> IncrementalAlterConfigsResponse:
    results = await alter_resources(ctx, request, IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
                                    _alter_one)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
