"""Topic configs as an admin client sees them, and as the broker stored them (for tests).

`topic_configs(admin, topic)` is DescribeConfigs of one topic as {name: value}.
`restart_with_stored_overrides(broker, topic, overrides)` stops a `BrokerProcess`, writes
`overrides` into the topic's stored configs the way an older version could have stored them
(bypassing today's validation: the point of the tests that use it), and starts it again.
"""
from __future__ import annotations

from confluent_kafka.admin import ConfigResource, ResourceType

from kompakt.storage.topic_store import TopicStore


def topic_configs(admin, topic: str) -> dict[str, str]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(30).items()}


def restart_with_stored_overrides(broker, topic: str, overrides: dict[str, str]) -> None:
    broker.stop()
    store = TopicStore(broker.log_dir)
    topics, deleted = store.load_strict()
    topics[topic].configs.update(overrides)
    store.save(topics, deleted)
    broker.start()
