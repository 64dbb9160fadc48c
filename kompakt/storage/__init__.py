"""Partition storage in Apache Kafka's on-disk layout (see docs/contracts.md, "kompakt.storage").

`TopicPartition` is the key every layer uses for a partition; it is a plain namedtuple so it hashes
and compares like the tuple `(topic, partition)`.
"""
from collections import namedtuple

TopicPartition = namedtuple("TopicPartition", "topic partition")

__all__ = ["TopicPartition"]
