"""Partition offsets by time: ListOffsets sent to each partition's leader.

Role: `list_offsets(cluster, {(topic, partition): timestamp})` answers `{(topic, partition):
offset}` for Kafka's special timestamps (LATEST -1: the log end offset, i.e. the high watermark;
EARLIEST -2: the log start offset) and for real timestamps in ms (the first offset whose timestamp
is at or after it; -1 when there is none, which callers read as "the end"). Isolation is
read_uncommitted, as Kafka's Admin client's default and kafka-consumer-groups.sh's lag.

Invariant: every requested partition is in the answer or a BrokerError names the partition.
"""
from __future__ import annotations

from collections import defaultdict

from kompakt.clients.cluster import Cluster, CommandError, check

LATEST = -1
EARLIEST = -2
UNKNOWN_TOPIC_OR_PARTITION = 3


def list_offsets(cluster: Cluster, wanted: dict[tuple[str, int], int],
                 missing_ok: bool = False) -> dict[tuple[str, int], int | None]:
    """With `missing_ok`, a partition whose topic or partition no longer exists, or that has no
    leader (offline), answers None (shown as "-") instead of failing the command."""
    if not wanted:
        return {}
    topics = sorted({t for t, _ in wanted})
    leaders = {}
    for topic in cluster.metadata(topics).topics:
        if not (missing_ok and topic.error_code == UNKNOWN_TOPIC_OR_PARTITION):
            check(topic.error_code, None, f"topic '{topic.name}'")
        for p in topic.partitions:
            leaders[(topic.name, p.partition_index)] = p.leader_id
    by_leader: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    out: dict[tuple[str, int], int | None] = {}
    for (topic, partition), timestamp in wanted.items():
        if (topic, partition) not in leaders or (missing_ok and leaders[(topic, partition)] < 0):
            if missing_ok:
                out[(topic, partition)] = None
                continue
            raise CommandError(f"topic '{topic}' has no partition {partition}")
        by_leader[leaders[(topic, partition)]][topic].append(
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp,
             "max_num_offsets": 1})
    for leader, per_topic in by_leader.items():
        if leader < 0:
            raise CommandError(f"no leader for partitions of {sorted(per_topic)} (LEADER_NOT_AVAILABLE)")
        answer = cluster.node(leader).call(
            2, replica_id=-1, isolation_level=0, timeout_ms=int(cluster.timeout * 1000),
            topics=[{"name": t, "partitions": ps} for t, ps in per_topic.items()])
        for topic in answer.topics:
            for p in topic.partitions:
                check(p.error_code, None, f"ListOffsets of {topic.name}-{p.partition_index}")
                out[(topic.name, p.partition_index)] = p.offset
    return out
