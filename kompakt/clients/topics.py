"""Topic operations over the Kafka protocol, as plain data: create, list, describe, alter, delete.

Role: what `kompakt topic` does, without the printing: each function takes a `Cluster`, sends the
requests Kafka's Admin client would (CreateTopics, Metadata, DescribeConfigs, ListOffsets,
IncrementalAlterConfigs, CreatePartitions, DeleteTopics) and returns dicts and lists ready for a
table or `--json`. Every per-topic error code becomes a BrokerError naming the topic.

Config sources are Kafka's DescribeConfigsResponse `ConfigSource` values; `describe` keeps the
configs whose value does not come from Kafka's defaults (DEFAULT_CONFIG), i.e. the topic's own
overrides and what the broker's configuration sets for every topic, each with its source.
"""
from __future__ import annotations

from kompakt.clients.cluster import BrokerError, Cluster, CommandError, check
from kompakt.clients.offsets import EARLIEST, LATEST, list_offsets

TOPIC_RESOURCE = 2   # ConfigResource.Type.TOPIC
CONFIG_SOURCES = {   # DescribeConfigsResponse.json: ConfigSource
    -1: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}
DEFAULT_CONFIG = 5
OP_SET, OP_DELETE = 0, 1   # IncrementalAlterConfigsRequest.json: config_operation


def parse_configs(pairs: list[str]) -> dict[str, str]:
    """`key=value` strings (the value may contain '=') into a dict; a pair without '=' is refused."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"bad --config {pair!r}: expected key=value", 2)
        out[key.strip()] = value
    return out


def create(cluster: Cluster, name: str, partitions: int = -1, replication_factor: int = -1,
           configs: dict[str, str] | None = None, if_not_exists: bool = False,
           validate_only: bool = False) -> dict:
    """CreateTopics; -1 partitions / replication factor take the broker's num.partitions /
    default.replication.factor. Returns what the broker created (v5+ answers say)."""
    answer = cluster.controller().call(
        19, timeout_ms=int(cluster.timeout * 1000), validate_only=validate_only,
        topics=[{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                 "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}])
    (result,) = answer.topics
    if result.error_code == 36 and if_not_exists:   # TOPIC_ALREADY_EXISTS
        return {"topic": name, "created": False}
    check(result.error_code, result.error_message, f"cannot create topic '{name}'")
    out = {"topic": name, "created": not validate_only}
    if answer.API_VERSION >= 5:
        out["partitions"] = result.num_partitions
        out["replication_factor"] = result.replication_factor
        if answer.API_VERSION >= 7 and result.topic_id is not None:
            out["topic_id"] = str(result.topic_id)
    return out


def list_topics(cluster: Cluster, include_internal: bool = True) -> list[dict]:
    """Every topic: name, partition count, replication factor, internal flag, cleanup.policy."""
    answer = cluster.metadata(None)
    topics = sorted((t for t in answer.topics if include_internal or not t.is_internal), key=lambda t: t.name)
    policies = {}
    if topics:
        described = cluster.bootstrap.call(
            32, include_synonyms=False, include_documentation=False,
            resources=[{"resource_type": TOPIC_RESOURCE, "resource_name": t.name,
                        "configuration_keys": ["cleanup.policy"]} for t in topics])
        for r in described.results:
            if not r.error_code:
                policies[r.resource_name] = next((c.value for c in r.configs if c.name == "cleanup.policy"), None)
    return [{"topic": t.name, "partitions": len(t.partitions),
             "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
             "internal": bool(t.is_internal), "cleanup_policy": policies.get(t.name)} for t in topics]


def describe(cluster: Cluster, names: list[str] | None = None, all_configs: bool = False,
             offsets: bool = True) -> list[dict]:
    """Topics in detail: id, partitions (leader, replicas, ISR, log start and end offsets) and
    configs (only those not at Kafka's default unless `all_configs`)."""
    answer = cluster.metadata(names or None)
    topics = []
    for t in sorted(answer.topics, key=lambda t: t.name):
        check(t.error_code, None, f"topic '{t.name}'")
        topics.append(t)
    if not topics:
        return []
    described = cluster.bootstrap.call(
        32, include_synonyms=False, include_documentation=False,
        resources=[{"resource_type": TOPIC_RESOURCE, "resource_name": t.name, "configuration_keys": None}
                   for t in topics])
    configs = {}
    for r in described.results:
        check(r.error_code, r.error_message, f"configs of topic '{r.resource_name}'")
        configs[r.resource_name] = [
            {"name": c.name, "value": None if c.is_sensitive else c.value,
             "source": CONFIG_SOURCES.get(c.config_source, str(c.config_source)),
             "read_only": bool(c.read_only), "sensitive": bool(c.is_sensitive)}
            for c in sorted(r.configs, key=lambda c: c.name)
            if all_configs or c.config_source != DEFAULT_CONFIG]
    bounds = {}
    if offsets:
        tps = [(t.name, p.partition_index) for t in topics for p in t.partitions]
        starts = list_offsets(cluster, {tp: EARLIEST for tp in tps}, missing_ok=True)
        ends = list_offsets(cluster, {tp: LATEST for tp in tps}, missing_ok=True)
        bounds = {tp: (starts[tp], ends[tp]) for tp in tps}
    out = []
    for t in topics:
        partitions = []
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            row = {"partition": p.partition_index, "leader": p.leader_id, "leader_epoch": p.leader_epoch,
                   "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)}
            if offsets:
                row["log_start_offset"], row["log_end_offset"] = bounds[(t.name, p.partition_index)]
            partitions.append(row)
        out.append({"topic": t.name, "topic_id": str(t.topic_id) if t.topic_id is not None else None,
                    "internal": bool(t.is_internal), "partition_count": len(partitions),
                    "replication_factor": max((len(p["replicas"]) for p in partitions), default=0),
                    "configs": configs.get(t.name, []), "partitions": partitions})
    return out


def alter(cluster: Cluster, name: str, set_configs: dict[str, str] | None = None,
          delete_configs: list[str] | None = None, partitions: int | None = None,
          validate_only: bool = False) -> dict:
    """IncrementalAlterConfigs (set and delete topic overrides) then CreatePartitions (grow to
    `partitions`). Kafka validates both: an unknown key or bad value is INVALID_CONFIG, fewer
    partitions than now INVALID_PARTITIONS."""
    set_configs, delete_configs = set_configs or {}, delete_configs or []
    if not (set_configs or delete_configs or partitions is not None):
        raise CommandError("nothing to alter: give --config key=value, --delete-config key or --partitions N", 2)
    done: dict = {"topic": name}
    if set_configs or delete_configs:
        changes = ([{"name": k, "config_operation": OP_SET, "value": v} for k, v in set_configs.items()]
                   + [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete_configs])
        answer = cluster.bootstrap.call(44, validate_only=validate_only, resources=[
            {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": changes}])
        (result,) = answer.responses
        check(result.error_code, result.error_message, f"cannot alter the configs of topic '{name}'")
        done["set"] = set_configs
        done["deleted"] = delete_configs
    if partitions is not None:
        answer = cluster.controller().call(
            37, timeout_ms=int(cluster.timeout * 1000), validate_only=validate_only,
            topics=[{"name": name, "count": partitions, "assignments": None}])
        (result,) = answer.results
        check(result.error_code, result.error_message, f"cannot change the partitions of topic '{name}'")
        done["partitions"] = partitions
    return done


def delete(cluster: Cluster, names: list[str], if_exists: bool = False) -> tuple[list[str], list[BrokerError]]:
    """DeleteTopics of every name in one request: (names deleted, one BrokerError per topic that
    was not). With `if_exists` an unknown topic is neither."""
    answer = cluster.controller().call(
        20, timeout_ms=int(cluster.timeout * 1000), topic_names=names,
        topics=[{"name": n, "topic_id": None} for n in names])
    deleted, errors = [], []
    for r in answer.responses:
        if r.error_code == 3 and if_exists:   # UNKNOWN_TOPIC_OR_PARTITION
            continue
        if r.error_code:
            errors.append(BrokerError(r.error_code, getattr(r, "error_message", None), f"cannot delete topic '{r.name}'"))
        else:
            deleted.append(r.name)
    return deleted, errors
