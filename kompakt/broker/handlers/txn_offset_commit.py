"""TxnOffsetCommit (API key 28), versions 0-5.

Behaviour: a transactional producer commits a consumer group's offsets inside its transaction
(send_offsets_to_transaction, after AddOffsetsToTxn). The group coordinator appends them to the
group's `__consumer_offsets` partition as a transactional batch with the producer's id and epoch
and holds them pending (groups/txn_offsets.py): OffsetFetch shows them only once the transaction
commits (its marker), never after an abort; OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for them meanwhile.

Errors, whole request (every partition gets the code), in Kafka's order:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no WRITE on the transactional id), GROUP_AUTHORIZATION_FAILED
(no READ on the group), then per topic TOPIC_AUTHORIZATION_FAILED (no READ) and
UNKNOWN_TOPIC_OR_PARTITION (unknown topic or partition; those partitions only), then the group's
checks (INVALID_GROUP_ID, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
COORDINATOR_NOT_AVAILABLE), KIP-890 verification (the group's partition must have been added
with AddOffsetsToTxn: TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE before;
INVALID_PRODUCER_EPOCH for a fenced producer; INVALID_PRODUCER_ID_MAPPING; CONCURRENT_TRANSACTIONS
while the previous transaction's markers are being written), the append's storage
errors (COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR); per partition OFFSET_METADATA_TOO_LARGE.
COORDINATOR_LOAD_IN_PROGRESS is answered COORDINATOR_NOT_AVAILABLE below v2 (Kafka, KAFKA-7296).

Version notes: v2 committed_leader_epoch; v3 flexible, member id / generation / group instance id
(KIP-447); v4 TRANSACTION_ABORTABLE; v5 transaction version 2 (KIP-890 part 2): the client sends
no AddOffsetsToTxn, the group's `__consumer_offsets` partition joins the transaction here (Kafka's
addPartition), INVALID_PRODUCER_EPOCH for a fenced producer, CONCURRENT_TRANSACTIONS while the
producer's previous transaction is still being completed (groups/txn_offsets.py).
"""
from __future__ import annotations

from kafka.protocol.producer.transaction import TxnOffsetCommitResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5

Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
Partition = Topic.TxnOffsetCommitResponsePartition


def _response(v: int, order: list, codes: dict) -> TxnOffsetCommitResponse:
    by_topic: dict[str, list] = {}
    for topic, partition in order:
        code = codes.get((topic, partition), ErrorCode.NONE)
        if v < 2 and code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        by_topic.setdefault(topic, []).append(Partition(partition_index=partition, error_code=int(code)))
    return TxnOffsetCommitResponse(version=v, throttle_time_ms=0,
                                   topics=[Topic(name=t, partitions=p) for t, p in by_topic.items()])


async def handle(ctx, request):
    v = ctx.api_version
    order = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return _response(v, order, {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in order})
    if not ctx.authorize(Op.READ, Res.GROUP, request.group_id):
        return _response(v, order, {tp: ErrorCode.GROUP_AUTHORIZATION_FAILED for tp in order})
    codes: dict = {}
    parts = []
    lm = ctx.log_manager
    for t in request.topics:
        allowed = ctx.authorize(Op.READ, Res.TOPIC, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not allowed:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif lm.get_log(TopicPartition(*tp)) is None and not lm.is_offline(tp):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                parts.append((t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata))
    if parts:
        try:
            await ctx.groups.topic.ensure_async()
        except KafkaError:                    # __consumer_offsets cannot be created
            codes.update({(t, p): ErrorCode.COORDINATOR_NOT_AVAILABLE for t, p, *_ in parts})
            return _response(v, order, codes)
        codes.update(ctx.groups.txn_offsets.commit(
            request.transactional_id, request.group_id, request.producer_id, request.producer_epoch,
            request.generation_id if v >= 3 else -1, (request.member_id or "") if v >= 3 else "",
            request.group_instance_id if v >= 3 else None, parts, v))
    return _response(v, order, codes)
