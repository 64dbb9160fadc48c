"""AddPartitionsToTxn (API key 24), versions 0-5.

Behaviour: a transactional producer names the partitions it is about to write to; the transaction
coordinator (kompakt/broker/txn) adds them to the transaction (state Ongoing, written to
`__transaction_state`) before the producer's first write to them. Per transaction, as Kafka's
KafkaApis does: without WRITE on the transactional id every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a topic without WRITE (or an internal topic, which only
AddOffsetsToTxn may add) answers TOPIC_AUTHORIZATION_FAILED,
an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION, and then every other partition
OPERATION_NOT_ATTEMPTED (nothing is added); otherwise every partition gets the coordinator's
code: NONE, INVALID_PRODUCER_ID_MAPPING (unknown id or producer id), PRODUCER_FENCED (another
epoch), CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written),
COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR (its record could not be written).

Versions: v0-3 come from clients (one transaction; `v3_and_below_*` fields, answer in
`results_by_topic_v3_and_below`); PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH below v2
(older clients do not know it); v3 flexible. v4+ batch several transactions
(`transactions` -> `results_by_transaction`), need CLUSTER_ACTION on the cluster (Kafka sends them
broker to broker; the top-level error is CLUSTER_AUTHORIZATION_FAILED otherwise) and may be
`verify_only` (KIP-890: report, per partition, whether it is in the transaction:
TRANSACTION_ABORTABLE when not); v5 lets the answer carry TRANSACTION_ABORTABLE. A v4+ add
(not verify_only) is what Kafka's broker sends for a client of transaction version 2 (Produce v12,
TxnOffsetCommit v5), so the coordinator records client transaction version 2 for it; Kompakt's own
Produce and TxnOffsetCommit add in-process (broker/txn/verification.py), without this request.

Codec: v0-3 (one per transaction, from every client) by hand in kompakt/protocol/txn_codec.py,
v4+ by kafka-python's generic codec.
"""
from __future__ import annotations

from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse

from kompakt.broker.handlers._common import is_internal
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol import codec, txn_codec
from kompakt.protocol.errors import ErrorCode
from kompakt.storage import TopicPartition

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_BATCHED_VERSION = 4

Result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult


def decode(header, frame):
    if header.api_version < FIRST_BATCHED_VERSION:
        return txn_codec.decode_add_partitions_v3_and_below(header, frame)
    return codec.decode_request(header, frame)


def _by_topic(codes: dict) -> dict[str, list]:
    by_topic: dict[str, list] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append((partition, int(code)))
    return by_topic


def _topic_results(codes: dict) -> list:
    return [TopicResult(name=t, results_by_partition=[PartitionResult(partition_index=p, partition_error_code=c)
                                                      for p, c in parts])
            for t, parts in _by_topic(codes).items()]


def _one(ctx, tid: str, pid: int, epoch: int, topics, verify_only: bool, client: bool) -> dict:
    """{(topic, partition): code} for one transaction (Kafka's per-transaction checks)."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if client and not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    lm = ctx.log_manager
    failed, ok = {}, []
    for topic, partition in wanted:
        if client and (is_internal(topic) or not ctx.authorize(Op.WRITE, Res.TOPIC, topic)):
            failed[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif lm.get_log(TopicPartition(topic, partition)) is None and not lm.is_offline((topic, partition)):
            failed[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            ok.append((topic, partition))
    if failed:
        return {**failed, **{tp: ErrorCode.OPERATION_NOT_ATTEMPTED for tp in ok}}
    coordinator = ctx.broker.txn
    if verify_only:
        return coordinator.verify(tid, pid, epoch, ok)
    # v4+ come from brokers adding a partition for a client of transaction version 2 (Kafka's
    # transactionVersionForAddPartitionsToTxn: v4+ TV2, else TV0)
    code = coordinator.add_partitions(tid, pid, epoch, ok, client_tv=0 if client else 2)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return {tp: code for tp in ok}


async def handle(ctx, request):
    v = ctx.api_version
    if v < FIRST_BATCHED_VERSION:
        codes = _one(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                     request.v3_and_below_producer_epoch, request.v3_and_below_topics, False, True)
        return txn_codec.encode_add_partitions_response_v3_and_below(ctx.correlation_id, v,
                                                                     list(_by_topic(codes).items()))
    if not ctx.authorize_cluster(Op.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(version=v, throttle_time_ms=0,
                                          error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                          results_by_transaction=[])
    results = []
    for txn in request.transactions:
        if txn.transactional_id is None:
            return AddPartitionsToTxnResponse(version=v, throttle_time_ms=0,
                                              error_code=ErrorCode.INVALID_REQUEST, results_by_transaction=[])
        codes = _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                     txn.verify_only, False)
        results.append(Result(transactional_id=txn.transactional_id, topic_results=_topic_results(codes)))
    return AddPartitionsToTxnResponse(version=v, throttle_time_ms=0, error_code=0, results_by_transaction=results)
