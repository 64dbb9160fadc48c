"""OffsetCommit (API key 8), versions 0-9.

Behaviour: stores a group's consumed positions in `__consumer_offsets` and answers only after
the records are appended. Who may commit (Kafka's ClassicGroup.validateOffsetCommit):
* generation -1 and no member id: the admin client or a consumer without group management - to
  an Empty group (created on the spot as a "simple" group when unknown); UNKNOWN_MEMBER_ID if
  the group has members;
* otherwise a known member (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) of the current generation
  (ILLEGAL_GENERATION; for an unknown group ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND
  from v9), not while the group awaits its assignment (REBALANCE_IN_PROGRESS).
Per partition: UNKNOWN_TOPIC_OR_PARTITION for an unknown topic, OFFSET_METADATA_TOO_LARGE when
the metadata exceeds offset.metadata.max.bytes. A commit also counts as a heartbeat.
Kept and returned by OffsetFetch: offset, leader epoch, metadata, commit time, expire time.

Version notes: v1 per-partition commit_timestamp; v2-4 retention_time_ms (-1 = broker default;
else the offset expires that long after the commit, stored as value version 1); v3 throttle
time; v6 committed_leader_epoch; v7 group_instance_id; v8+ flexible; v9 GROUP_ID_NOT_FOUND.
v10 (topic ids) is not served.
"""
from __future__ import annotations

from kafka.protocol.consumer.group import OffsetCommitResponse

from kompakt.protocol.errors import KafkaError

API_KEY = 8
MIN_VERSION = 0
MAX_VERSION = 9

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = Topic.OffsetCommitResponsePartition


async def handle(ctx, request):
    v = ctx.api_version
    parts = []
    for t in request.topics:
        for p in t.partitions:
            parts.append((t.name, p.partition_index, p.committed_offset,
                          p.committed_leader_epoch if v >= 6 else -1,
                          p.committed_metadata, p.commit_timestamp if v == 1 else -1))
    try:
        codes = ctx.groups.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch if v >= 1 else -1,
            (request.member_id or "") if v >= 1 else "",
            request.group_instance_id if v >= 7 else None,
            request.retention_time_ms if 2 <= v <= 4 else -1,
            parts, v)
        code_of = lambda tp: codes.get(tp, 0)  # noqa: E731
    except KafkaError as exc:
        whole = exc.code      # every partition fails with the request-level error
        code_of = lambda tp: whole  # noqa: E731
    return OffsetCommitResponse(version=v, throttle_time_ms=0, topics=[
        Topic(name=t.name, partitions=[
            Partition(partition_index=p.partition_index, error_code=code_of((t.name, p.partition_index)))
            for p in t.partitions])
        for t in request.topics])
