"""AddOffsetsToTxn (API key 25), versions 0-4.

Behaviour: before TxnOffsetCommit (send_offsets_to_transaction), a transactional producer adds the
group's `__consumer_offsets` partition (Kafka's partitionFor(group)) to its transaction, so that
the coordinator writes a marker there too; the group's offsets become visible when it commits.
`__consumer_offsets` is created first if needed (in a thread). Codes as AddPartitionsToTxn's
coordinator codes, plus TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no WRITE on the transactional id)
and GROUP_AUTHORIZATION_FAILED (no READ on the group), checked in that order.

Version notes: v2 PRODUCER_FENCED (answered INVALID_PRODUCER_EPOCH below v2); v3 flexible; v4
TRANSACTION_ABORTABLE (Kafka 4.0's last). A client of transaction version 2 (KIP-890 part 2)
sends no AddOffsetsToTxn: its TxnOffsetCommit v5 adds the group's partition. Kafka treats an add
from here as transaction version 0 whatever the client, and so does the coordinator.

Codec: kompakt/protocol/txn_codec.py (hand-written: one per transaction that commits offsets).
"""
from __future__ import annotations

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol import txn_codec
from kompakt.protocol.errors import ErrorCode, KafkaError

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4

OFFSETS_TOPIC = "__consumer_offsets"

decode = txn_codec.decode_add_offsets_to_txn


async def handle(ctx, request):
    v = ctx.api_version
    tid = request.transactional_id
    if not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(Op.READ, Res.GROUP, request.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        try:
            await ctx.groups.topic.ensure_async()
            partition = ctx.groups.topic.partition_for(request.group_id)
            code = ctx.broker.txn.add_partitions(tid, request.producer_id, request.producer_epoch,
                                                 [(OFFSETS_TOPIC, partition)])
        except KafkaError:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code == ErrorCode.PRODUCER_FENCED and v < 2:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
    if code and ctx.metrics is not None:
        ctx.metrics.record_error("AddOffsetsToTxn", code)
    return txn_codec.encode_add_offsets_to_txn_response(ctx.correlation_id, v, int(code))
