"""OffsetFetch (API key 9), versions 1-9 (Kafka 4.0's range, the release Kompakt advertises;
v0 was removed in Kafka 4.0, KIP-896).

Behaviour: the committed offset, leader epoch and metadata of the requested partitions of a
group; a partition without a commit (or an unknown group) answers offset -1, epoch -1, metadata
"" and no error, as Kafka does. `topics` null (v2+) means every partition the group committed.
Offsets committed inside a transaction (TxnOffsetCommit) are not shown until it commits;
`require_stable` (v7+) fails the partitions that have such pending commits with
UNSTABLE_OFFSET_COMMIT (offset -1), so a consumer does not start from an older position while a
transaction is about to move it (groups/txn_offsets.py).

Version notes: v0 read ZooKeeper in old Kafka - here the same as v1; v2 top-level error_code and
null topics; v3 throttle time; v5 committed_leader_epoch; v6+ flexible; v7 require_stable;
v8 several groups per request (`groups` in, `groups` out); v9 member id/epoch (KIP-848
consumer groups only: a member id or epoch that does not match answers the group
UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH; ignored for classic groups); v10 (KIP-848, Kafka 4.2; not served while Kompakt advertises 4.0, the code stays) names
topics by id: requested ids are resolved against the live topics (an unknown id answers
UNKNOWN_TOPIC_ID for each requested partition, as Kafka does), and an "all topics" answer names
each committed topic by its current id (offsets of a topic that no longer exists have no id and
are left out; DeleteTopics removes them anyway).

Authorization (Kafka's handleOffsetFetchRequest): the group needs DESCRIBE (else
GROUP_AUTHORIZATION_FAILED: the group's error from v8, the top-level error in v2-7, each
partition's in v0-1); each named topic needs DESCRIBE (else its partitions
TOPIC_AUTHORIZATION_FAILED); an all-topics answer leaves out topics the principal may not describe.
"""
from __future__ import annotations

from kafka.protocol.consumer.group import OffsetFetchResponse

from kompakt.broker.handlers._common import topic_names_by_id
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.broker.security.acl import Op, Res

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9
FIRST_TOPIC_ID_VERSION = 10

OldTopic = OffsetFetchResponse.OffsetFetchResponseTopic
OldPartition = OldTopic.OffsetFetchResponsePartition
Group = OffsetFetchResponse.OffsetFetchResponseGroup
GroupTopic = Group.OffsetFetchResponseTopics
GroupPartition = GroupTopic.OffsetFetchResponsePartitions


def _fetch(ctx, group_id, topics):
    """[(topic, [(partition, offset, epoch, metadata, error)])] in request order (or sorted when all)."""
    denied = set()
    if ctx.authorizer is not None and topics is not None:
        denied = {t.name for t in topics if not ctx.authorize(Op.DESCRIBE, Res.TOPIC, t.name)}
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes
                                          if t.name not in denied]
    found = ctx.groups.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list] = {}
    for (topic, partition), om in (found.items() if wanted is None else
                                   ((tp, found[tp]) for tp in wanted)):
        row = (partition, -1, -1, "", 0) if om is None else (partition, om.offset, om.leader_epoch, om.metadata, 0)
        by_topic.setdefault(topic, []).append(row)
    if wanted is None:
        return sorted((t, sorted(rows)) for t, rows in by_topic.items()
                      if ctx.authorize(Op.DESCRIBE, Res.TOPIC, t))
    for t in topics or ():
        if t.name in denied:
            by_topic.setdefault(t.name, []).extend(
                (p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes)
    return [(t, by_topic[t]) for t in dict.fromkeys(t.name for t in topics) if t in by_topic]


def _stable(ctx, group_id, topic, rows, require_stable: bool) -> list:
    """Rows as 5-tuples; with require_stable, partitions with pending transactional commits
    answer UNSTABLE_OFFSET_COMMIT."""
    txn = ctx.groups.txn_offsets if require_stable else None
    out = []
    for row in rows:
        code = row[4] if len(row) > 4 else 0
        if txn is not None and not code and txn.has_pending(group_id, (topic, row[0])):
            out.append((row[0], -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
        else:
            out.append((*row[:4], code))
    return out


def _row(partition, om, code=0):
    if om is None:
        return (partition, -1, -1, "", code)
    return (partition, om.offset, om.leader_epoch, om.metadata, code)


def _fetch_by_id(ctx, group_id, topics) -> list:
    """v10: [(topic id, [(partition, offset, epoch, metadata, error)])]; ids in, ids out."""
    if topics is None:
        ids = {meta.name: meta.topic_id for meta in ctx.log_manager.topics.values()}
        return [(ids[name], parts) for name, parts in _fetch(ctx, group_id, None) if name in ids]
    names = topic_names_by_id(ctx.log_manager)
    wanted = [(names[t.topic_id], p) for t in topics if t.topic_id in names for p in t.partition_indexes]
    found = ctx.groups.fetch_offsets(group_id, wanted)
    out = []
    for t in topics:
        name = names.get(t.topic_id)
        if name is None:
            out.append((t.topic_id, [_row(p, None, ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]))
        elif not ctx.authorize(Op.DESCRIBE, Res.TOPIC, name):
            out.append((t.topic_id, [_row(p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                     for p in t.partition_indexes]))
        else:
            out.append((t.topic_id, [_row(p, found[(name, p)]) for p in t.partition_indexes]))
    return out


def _group_error(ctx, group_id) -> int:
    """GROUP_AUTHORIZATION_FAILED, COORDINATOR_LOAD_IN_PROGRESS (__consumer_offsets still loading)
    or 0."""
    if not ctx.authorize(Op.DESCRIBE, Res.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if ctx.groups.loading else 0


def _member_error(ctx, g, v) -> int:
    """v9+: a consumer-protocol group checks the member id and epoch sent (Kafka's
    validateOffsetFetch): UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH for the group; 0 otherwise."""
    if v < 9:
        return 0
    try:
        ctx.groups.validate_consumer_offset_fetch(g.group_id, g.member_id, g.member_epoch)
    except KafkaError as exc:
        return exc.code
    return 0


def _groups(ctx, request, v, stable) -> list:
    """v8+: one answer per requested group; v10 names topics by id, v8-9 by name."""
    by_id = v >= FIRST_TOPIC_ID_VERSION
    groups = []
    for g in request.groups:
        code = _group_error(ctx, g.group_id) or _member_error(ctx, g, v)
        if code:
            groups.append(Group(group_id=g.group_id, error_code=code, topics=[]))
            continue
        if by_id:
            names = topic_names_by_id(ctx.log_manager)
            rows = [({"topic_id": topic_id}, names.get(topic_id), parts)
                    for topic_id, parts in _fetch_by_id(ctx, g.group_id, g.topics)]
        else:
            rows = [({"name": t}, t, parts) for t, parts in _fetch(ctx, g.group_id, g.topics)]
        groups.append(Group(group_id=g.group_id, error_code=0, topics=[
            GroupTopic(**key, partitions=[
                GroupPartition(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                               metadata=m, error_code=code)
                for p, o, e, m, code in _stable(ctx, g.group_id, name, parts, stable)])
            for key, name, parts in rows]))
    return groups


async def handle(ctx, request):
    v = ctx.api_version
    stable = v >= 7 and bool(request.require_stable)
    if v >= 8:
        return OffsetFetchResponse(version=v, throttle_time_ms=0, groups=_groups(ctx, request, v, stable))
    topics = request.topics if v >= 2 else (request.topics or [])
    denied = _group_error(ctx, request.group_id)
    if denied:
        # v2+: the top-level error; v0-1 have none, so each requested partition carries it
        return OffsetFetchResponse(version=v, throttle_time_ms=0, error_code=denied, topics=[] if v >= 2 else [
            OldTopic(name=t.name, partitions=[
                OldPartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                             error_code=denied) for p in t.partition_indexes]) for t in topics])
    rows = _fetch(ctx, request.group_id, topics)
    return OffsetFetchResponse(version=v, throttle_time_ms=0, error_code=0, topics=[
        OldTopic(name=t, partitions=[
            OldPartition(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                         metadata=m, error_code=code)
            for p, o, e, m, code in _stable(ctx, request.group_id, t, parts, stable)])
        for t, parts in rows])
