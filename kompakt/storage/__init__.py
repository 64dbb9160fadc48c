"""Partition storage in Apache Kafka's on-disk layout.

The seam the broker uses (see docs/contracts.md): `TopicPartition`, `Log` (one partition),
`LogSegment`, and the LogManager (storage-manager's module) that owns every Log.
Modules: offset_index / time_index (sparse indexes), segment (one .log + indexes), log_validator
(Kafka's LogValidator), producer_state (idempotence, .snapshot), leader_epoch
(leader-epoch-checkpoint), loader (LogLoader: repair and recovery), log (the partition log).
"""
from collections import namedtuple

TopicPartition = namedtuple("TopicPartition", "topic partition")

from kompakt.storage.log import AppendInfo, FetchData, Log  # noqa: E402
from kompakt.storage.segment import LogSegment  # noqa: E402

__all__ = ["TopicPartition", "Log", "LogSegment", "AppendInfo", "FetchData"]
