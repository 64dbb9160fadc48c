"""The broker's APIs: one module per Kafka API, listed here, and the version table built from them.

Each module defines `API_KEY`, `MIN_VERSION`, `MAX_VERSION` and `async def handle(ctx, request)`.
`HANDLERS` (api key -> module) is the only source of the ranges ApiVersions advertises: an API
is served exactly when its module is listed here and imports, and advertised unless the module
says `ADVERTISED = False` (GetTelemetrySubscriptions: Kafka's own rule, see version_ranges).

Modules are owned by different engineers (docs/contracts.md); a listed module that does not exist
yet is skipped with a debug log line, so the broker runs while the others land.
What is not implemented (KRaft/replication APIs, share groups, client telemetry pushes) is
simply not listed, and clients are told so by ApiVersions.
"""
from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger(__name__)

MODULES = (
    # protocol-server
    "api_versions", "metadata", "produce", "fetch", "list_offsets",
    # admin-apis
    "create_topics", "delete_topics", "create_partitions", "describe_configs", "alter_configs",
    "incremental_alter_configs", "delete_records", "describe_cluster", "describe_topic_partitions",
    "offset_for_leader_epoch", "init_producer_id",
    # groups
    "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit",
    "offset_fetch", "describe_groups", "list_groups", "delete_groups", "offset_delete",
    "consumer_group_heartbeat", "consumer_group_describe",
    # transactions (txn)
    "add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "txn_offset_commit", "write_txn_markers",
    "describe_producers", "describe_transactions", "list_transactions",
    # cluster operations a single node answers (apis)
    "elect_leaders", "alter_partition_reassignments", "list_partition_reassignments",
    "get_telemetry_subscriptions", "describe_quorum", "add_raft_voter", "remove_raft_voter",
    "unregister_broker", "list_client_metrics_resources", "update_features",
    # delegation tokens, as Kafka with them disabled (its default)
    "create_delegation_token", "renew_delegation_token", "expire_delegation_token", "describe_delegation_token",
    # client quotas (apis)
    "describe_client_quotas", "alter_client_quotas",
    # security
    "sasl_handshake", "sasl_authenticate", "describe_acls", "create_acls", "delete_acls",
    "describe_user_scram_credentials", "alter_user_scram_credentials",
    # faults (log dirs)
    "describe_log_dirs", "alter_replica_log_dirs",
)


def load_handlers(names=MODULES) -> dict[int, ModuleType]:
    """Import every listed handler module that exists; api key -> module."""
    handlers: dict[int, ModuleType] = {}
    for name in names:
        qualified = f"{__name__}.{name}"
        try:
            module = importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name != qualified:
                raise
            log.debug("handler module %s not present; API not served", name)
            continue
        for attr in ("API_KEY", "MIN_VERSION", "MAX_VERSION", "handle"):
            if not hasattr(module, attr):
                raise TypeError(f"handler module {qualified} lacks {attr}")
        if module.API_KEY in handlers:
            raise TypeError(f"API key {module.API_KEY} handled by both {handlers[module.API_KEY].__name__} "
                            f"and {qualified}")
        handlers[module.API_KEY] = module
    return handlers


def version_ranges(handlers: dict[int, ModuleType]) -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for ApiVersions, ordered by key. A module with
    `ADVERTISED = False` is served but left out, as Kafka leaves out the client-telemetry APIs
    when no metrics plugin is configured (clients then never call them)."""
    return [(key, m.MIN_VERSION, m.MAX_VERSION) for key, m in sorted(handlers.items())
            if getattr(m, "ADVERTISED", True)]
