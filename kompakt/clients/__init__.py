"""Kompakt's own Kafka clients: command-line tools that speak the Kafka protocol to any broker.

Role: the `kompakt topic` and `kompakt group` commands (topic_cmd, group_cmd), in the spirit of
kafka-topics.sh and kafka-consumer-groups.sh, built on `cluster` (a small synchronous client:
bootstrap, ApiVersions negotiation, routing to the controller, a group's coordinator or a
partition's leader) and the same request/response codecs as the broker (kompakt.protocol).

Invariant: nothing here imports kompakt.broker or kompakt.storage: these tools talk to a broker
only over TCP, so they work against Kompakt and Apache Kafka alike.
"""
