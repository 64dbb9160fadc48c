"""Configuration with Kafka's keys, defaults, types and validation, shared by every layer.

    broker_config.py   `server.properties` keys (BrokerConfig: defaults, properties file,
                       KOMPAKT_* environment, --override)
    topic_config.py    topic-level log configs (LogConfig) and their DescribeConfigs view
    dynamic.py         dynamic broker configs (Kafka's DynamicBrokerConfig for one node)

Invariant: imports only kompakt.protocol (its config error), so storage, cleaner and broker can all
read configs (tests/test_layers.py).
"""
