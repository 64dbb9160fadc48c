"""OffsetCommit (API key 8), versions 2-9 (Kafka 4.0's range, the release Kompakt advertises;
v0-1 were removed in Kafka 4.0, KIP-896).

Behaviour: stores a group's consumed positions in `__consumer_offsets` and answers only after
the records are appended. Who may commit (Kafka's ClassicGroup.validateOffsetCommit):
* generation -1 and no member id: the admin client or a consumer without group management - to
  an Empty group (created on the spot as a "simple" group when unknown); UNKNOWN_MEMBER_ID if
  the group has members;
* otherwise a known member (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) of the current generation
  (ILLEGAL_GENERATION; for an unknown group ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND
  from v9), not while the group awaits its assignment (REBALANCE_IN_PROGRESS).
A KIP-848 (consumer-protocol) group checks the member instead (ConsumerGroup.validateOffsetCommit):
epoch -1 only while it has no members, else the member must exist (UNKNOWN_MEMBER_ID), commit
with v9+ (UNSUPPORTED_VERSION) and send its current member epoch (STALE_MEMBER_EPOCH).
Per partition: UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or a partition the topic lacks,
decided here before the coordinator sees the request, as Kafka's KafkaApis does (so the group
checks never overwrite it, and a request naming only such partitions is answered at once
without creating a group); OFFSET_METADATA_TOO_LARGE when
the metadata is longer than offset.metadata.max.bytes in Java's String.length() (UTF-16 code
units, as Kafka counts it; not bytes). A commit also counts as a heartbeat.
Kept and returned by OffsetFetch: offset, leader epoch, metadata, commit time, expire time.

Version notes: v1 per-partition commit_timestamp; v2-4 retention_time_ms (-1 = broker default;
else the offset expires that long after the commit, stored as value version 1); v3 throttle
time; v6 committed_leader_epoch; v7 group_instance_id; v8+ flexible; v9 GROUP_ID_NOT_FOUND;
v10 (KIP-848, Kafka 4.2; not served while Kompakt advertises 4.0, the code stays) names topics by id instead of name: ids are
resolved against the live topics, an unknown id answers UNKNOWN_TOPIC_ID for each of its
partitions (Kafka's KafkaApis.handleOffsetCommitRequest), and the answer carries the ids back.

Authorization: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), then READ
on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from kafka.protocol.consumer.group import OffsetCommitResponse

from kompakt.broker.handlers._common import missing_part, topic_names_by_id
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.broker.security.acl import Op, Res

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9
FIRST_TOPIC_ID_VERSION = 10

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = Topic.OffsetCommitResponsePartition


async def handle(ctx, request):
    v = ctx.api_version
    # v10 names topics by id: resolve each to its name (None = unknown id) once, up front
    names = ([topic_names_by_id(ctx.log_manager).get(t.topic_id) for t in request.topics]
             if v >= FIRST_TOPIC_ID_VERSION else [t.name for t in request.topics])
    # Kafka's handleOffsetCommitRequest: READ on the group, then READ on each topic
    group_ok = ctx.authorize(Op.READ, Res.GROUP, request.group_id)
    denied = set() if ctx.authorizer is None else {n for n in names if n is not None and
                                                    not ctx.authorize(Op.READ, Res.TOPIC, n)}
    parts = []
    unknown = set()   # (name, partition) of a topic or partition that does not exist
    for t, name in zip(request.topics, names):
        if name is None or name in denied or not group_ok:
            continue
        for p in t.partitions:
            if missing_part(ctx.log_manager, name, p.partition_index):
                unknown.add((name, p.partition_index))
                continue
            parts.append((name, p.partition_index, p.committed_offset,
                          p.committed_leader_epoch if v >= 6 else -1,
                          p.committed_metadata, p.commit_timestamp if v == 1 else -1))
    try:
        codes = ctx.groups.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch if v >= 1 else -1,
            (request.member_id or "") if v >= 1 else "",
            request.group_instance_id if v >= 7 else None,
            request.retention_time_ms if 2 <= v <= 4 else -1,
            parts, v) if parts else {}   # nothing left to commit: Kafka answers at once
        code_of = lambda tp: codes.get(tp, 0)  # noqa: E731
    except KafkaError as exc:
        whole = exc.code      # every partition fails with the request-level error
        code_of = lambda tp: whole  # noqa: E731
    topics = []
    for t, name in zip(request.topics, names):
        partitions = [Partition(partition_index=p.partition_index,
                                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED if not group_ok
                                else ErrorCode.UNKNOWN_TOPIC_ID if name is None
                                else ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in denied
                                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                if (name, p.partition_index) in unknown
                                else code_of((name, p.partition_index)))
                      for p in t.partitions]
        topics.append(Topic(topic_id=t.topic_id, partitions=partitions) if v >= FIRST_TOPIC_ID_VERSION
                      else Topic(name=t.name, partitions=partitions))
    return OffsetCommitResponse(version=v, throttle_time_ms=0, topics=topics)
