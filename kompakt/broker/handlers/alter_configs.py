"""AlterConfigs (API key 33), versions 0-2: the legacy, replace-everything config update.

Behaviour (Kafka's ConfigAdminManager.preprocess + ConfigurationControlManager.legacyAlterConfigs):
* A resource named twice: INVALID_REQUEST "Each resource must appear at most once." for each copy.
* A key named twice in one resource: INVALID_REQUEST "Error due to duplicate config keys"; a null
  value: INVALID_REQUEST "Null value not supported for : <key>".
* TOPIC: the given configs *replace the topic's whole override set* (keys not listed return to
  their defaults), exactly as Kafka's legacy API does (remote.storage.enable=true is INVALID_CONFIG:
  no tiered storage, as Kafka with it off). The name "" -> INVALID_REQUEST "Default topic resources
  are not allowed."; unknown topic ->
  UNKNOWN_TOPIC_OR_PARTITION; unknown key or bad value -> INVALID_CONFIG with the message. The new
  set is persisted and applied to the live logs (retention, segment size, cleanup.policy, ...)
  by the log manager before we answer.
* BROKER: name "" sets the cluster-wide default layer, our node id this broker's layer of dynamic
  broker configs (config/dynamic.py); the given configs replace the layer's whole set (keys not
  listed are removed), as Kafka's legacy API does. Keys Kafka cannot change at run time, bad
  values and refused changes (e.g. log.cleaner.threads more than doubled) answer INVALID_REQUEST
  with Kafka's message; accepted ones are persisted and applied live before we answer. Another
  broker's id or a name that is not one: INVALID_REQUEST with ConfigAdminManager's message.
* GROUP (32): the given configs replace the group's whole set of KIP-848 group configs
  (groups/group_configs.py: consumer.session.timeout.ms, consumer.heartbeat.interval.ms),
  validated against the broker's group.consumer.min/max.* bounds (INVALID_CONFIG with Kafka's
  message; an empty group name INVALID_REQUEST), persisted, and used from each member's next
  heartbeat. Kafka's controller takes GROUP in this legacy API too.
* BROKER_LOGGER: only IncrementalAlterConfigs changes loggers (as in Kafka): INVALID_REQUEST.
* validate_only: every check, nothing changed.
* Alters (this API and IncrementalAlterConfigs) run one resource at a time (`config_lock`), so
  concurrent clients never lose each other's changes.

Version notes: v2 flexible; v0-2 otherwise identical.

Authorization: ALTER_CONFIGS on the topic, the cluster (BROKER/BROKER_LOGGER) or the group
(_common.check_config_access; IncrementalAlterConfigs shares this loop).
"""
from __future__ import annotations

import asyncio
import logging
import weakref

from kafka.protocol.admin.configs import AlterConfigsResponse

from kompakt.broker.handlers._common import ResultError, check_config_access, error_code_of, run_storage
from kompakt.broker.groups.group_configs import GroupConfigError, check_group_name
from kompakt.broker.handlers.describe_configs import (BROKER, BROKER_LOGGER, GROUP, RESOURCE_TYPE_NAMES, TOPIC,
                                                      topic_meta)
from kompakt.config import topic_config
from kompakt.config.dynamic import CLUSTER_DEFAULT, PER_BROKER, DynamicConfigError
from kompakt.protocol.errors import ErrorCode, KafkaError

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)


_LOCKS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


def config_lock() -> asyncio.Lock:
    """One lock per event loop around config changes: an alter reads the topic's overrides, awaits
    the disk, then writes the new set, so two alters of one topic must not interleave (Kafka's
    controller applies config changes one at a time)."""
    loop = asyncio.get_running_loop()
    lock = _LOCKS.get(loop)
    if lock is None:
        lock = _LOCKS[loop] = asyncio.Lock()
    return lock


def duplicate_resources(resources) -> set[tuple[int, str]]:
    seen, dups = set(), set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (dups if key in seen else seen).add(key)
    return dups


def check_keys(configs, needs_value) -> None:
    """Kafka's per-resource request checks: no key twice; no null where a value is needed."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ResultError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for c in configs:
        if c.value is None and needs_value(c):
            raise ResultError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")


def check_node_id(name: str | None, node_id: int) -> None:
    """Kafka's ConfigAdminManager.validateResourceNameIsCurrentNodeId, for the alters of BROKER (a
    non-empty name) and BROKER_LOGGER resources (DescribeConfigs words it differently)."""
    try:
        named = int(name) if name is not None and name == name.strip() else None
    except ValueError:
        named = None
    if named is None:
        raise ResultError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name or ''}")
    if named != node_id:
        raise ResultError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")


async def alter_broker(ctx, name: str, build, validate_only: bool) -> None:
    """A BROKER resource: name "" is the cluster-wide default layer, our node id this broker's
    layer (config/dynamic.py). `build(current layer) -> new layer`; the new layer is validated
    as Kafka's validateBrokerConfigChange does and, unless validating only, persisted and applied
    before we answer. Refusals are INVALID_REQUEST with Kafka's message (KAFKA-13609 keeps it so)."""
    if name:
        check_node_id(name, ctx.config.node_id)
    level = PER_BROKER if name else CLUSTER_DEFAULT
    dynamic = ctx.broker.dynamic_config
    new_layer = build(dynamic.layer(level))
    try:
        if validate_only:
            dynamic.candidate(level, new_layer)
        else:
            changed = await dynamic.update(level, new_layer)
            log.info("broker configs (%s) altered by client %s: %s", level, ctx.client_id,
                     ", ".join(sorted(changed)) or "no effective change")
    except DynamicConfigError as exc:
        raise ResultError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Kafka's validateBrokerConfigChange: any failure is
        # INVALID_REQUEST with its message, for this resource, never a closed connection
        log.exception("broker configs (%s): the change failed", level)
        raise ResultError(ErrorCode.INVALID_REQUEST, f"{type(exc).__name__}: {exc}") from None


def altered_topic_meta(lm, name: str):
    """The metadata of a topic to alter: Kafka's ControllerConfigurationValidator refuses the
    "default topic" "" with INVALID_REQUEST (DescribeConfigs answers Topic.validate's error), then
    as topic_meta (illegal name, unknown topic)."""
    if name == "":
        raise ResultError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    return topic_meta(lm, name)


async def apply_topic_configs(ctx, name: str, new_configs: dict[str, str], validate_only: bool) -> None:
    """Validate a topic's complete new override set and, unless validating only, persist and apply it."""
    try:
        topic_config.validate_new_topic_configs(new_configs, ctx.config)
    except KafkaError as exc:
        raise ResultError(error_code_of(exc), str(exc)) from None
    if validate_only:
        return
    try:
        await run_storage(ctx.log_manager.alter_topic_config, name, dict(new_configs))
    except KafkaError as exc:
        raise ResultError(error_code_of(exc), str(exc)) from None
    log.info("topic %s configs are now %s (client %s)", name, new_configs or "default", ctx.client_id)


async def alter_group(ctx, name: str, build, validate_only: bool) -> None:
    """A GROUP resource (groups/group_configs.py): `build(current overrides) -> new overrides`,
    validated as a whole against the broker's group.consumer.* bounds and, unless validating
    only, persisted and used from the members' next heartbeats before we answer. Refusals are
    INVALID_CONFIG with Kafka's message (INVALID_REQUEST for an empty group name)."""
    group_configs = ctx.groups.group_configs
    try:
        check_group_name(name)
        new = build(group_configs.overrides(name))
        if validate_only:
            group_configs.validate(name, new)
        else:
            await group_configs.alter(name, new)
            log.info("group %s configs altered by client %s", name, ctx.client_id)
    except GroupConfigError as exc:
        code = ErrorCode.INVALID_REQUEST if exc.invalid_request else ErrorCode.INVALID_CONFIG
        raise ResultError(code, str(exc)) from None


async def _alter_one(ctx, resource, validate_only: bool) -> None:
    rtype, name = resource.resource_type, resource.resource_name
    check_keys(resource.configs, lambda c: True)
    if rtype == TOPIC:
        altered_topic_meta(ctx.log_manager, name)
        await apply_topic_configs(ctx, name, {c.name: c.value for c in resource.configs}, validate_only)
    elif rtype == BROKER:
        # the legacy API replaces the resource's whole dynamic set: keys not listed are removed
        await alter_broker(ctx, name, lambda _current: {c.name: c.value for c in resource.configs},
                           validate_only)
    elif rtype == GROUP:
        # the legacy API replaces the group's whole set, as for the other resources
        await alter_group(ctx, name, lambda _current: {c.name: c.value for c in resource.configs},
                          validate_only)
    elif rtype == BROKER_LOGGER:
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          "AlterConfigs does not change BROKER_LOGGER resources; use IncrementalAlterConfigs")
    else:
        raise ResultError(ErrorCode.INVALID_REQUEST,
                          f"Unsupported resource type: {RESOURCE_TYPE_NAMES.get(rtype, rtype)}")


async def alter_resources(ctx, request, result_cls, alter_one) -> list:
    """The loop both AlterConfigs APIs share: one result per resource, failures per resource."""
    dups = duplicate_resources(request.resources)
    results = []
    for resource in request.resources:
        result = result_cls(error_code=0, error_message=None, resource_type=resource.resource_type,
                            resource_name=resource.resource_name)
        try:
            if (resource.resource_type, resource.resource_name) in dups:
                raise ResultError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            check_config_access(ctx, resource.resource_type, resource.resource_name, alter=True)
            async with config_lock():
                await alter_one(ctx, resource, bool(request.validate_only))
        except ResultError as exc:
            result.error_code, result.error_message = int(exc.code), exc.message
        results.append(result)
    return results


async def handle(ctx, request) -> AlterConfigsResponse:
    results = await alter_resources(ctx, request, AlterConfigsResponse.AlterConfigsResourceResponse, _alter_one)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
