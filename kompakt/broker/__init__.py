"""The broker: Kafka's wire protocol served over asyncio, each part in a room of its own.

Data flow (DESIGN.md): protocol -> broker -> storage <- cleaner, the pipeline beside. A request
comes in through network/ (connection, dispatch, context, limits), is answered by its API's module
in handlers/, which works through the rooms:

    server.py            the Broker: builds every room, starts and stops them in order
    serve_cmd.py         `kompakt serve` (and `python -m kompakt.broker`): runs one Broker
    network/             sockets, frames, request order, handler dispatch, connection limits
    handlers/            one module per Kafka API, the wire face of the rooms below
    fetch/               incremental fetch sessions and long-poll waits
    groups/              consumer groups, committed offsets, group-safe tombstones
    txn/                 the transaction coordinator and producer ids
    coordinator_common/  what the group and transaction coordinators share (internal topics)
    security/            listeners, TLS, SASL, principals, ACLs
    quotas/              client quotas
    features/            feature levels (KIP-584)
    metadata/            state files and dynamic configs: what Kafka keeps in its metadata log
    observability/       metrics, event-loop lag, process logging
    admin/               the admin HTTP API and `kompakt admin`

Invariants (tests/test_layers.py holds them): nothing below the broker (protocol, config, storage,
cleaner, pipeline, clients) imports it; only network/dispatch.py imports the handlers; only what
runs the Broker imports server.py; this root holds no loose module; no import cycle.
"""
