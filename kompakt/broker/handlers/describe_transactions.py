"""DescribeTransactions (API key 65), version 0.

Behaviour: for each requested transactional id, its state as the coordinator knows it: state name
(Kafka's: Empty, Ongoing, PrepareCommit, ...), timeout, start time of the running transaction (-1
if none), producer id and epoch, and the partitions of the transaction by topic. Per id:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on it, TRANSACTIONAL_ID_NOT_FOUND for an
id the coordinator does not know (or that expired), INVALID_REQUEST for an empty id. Topics the
principal may not DESCRIBE are left out of the answer (Kafka does the same). An error row has
every other field at 0 / "" / no topics (Kafka's TransactionCoordinator.handleDescribeTransactions).
"""
from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeTransactionsResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

State = DescribeTransactionsResponse.TransactionState
TopicData = State.TopicData


def _state(ctx, tid: str) -> State:
    if not ctx.authorize(Op.DESCRIBE, Res.TRANSACTIONAL_ID, tid):
        return _error(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    code, meta = ctx.broker.txn.describe(tid)
    if meta is None:
        return _error(tid, code)
    topics = [TopicData(topic=topic, partitions=parts) for topic, parts in meta.partitions_by_topic().items()
              if ctx.authorize(Op.DESCRIBE, Res.TOPIC, topic)]
    return State(error_code=0, transactional_id=tid, transaction_state=meta.state.kafka_name,
                 transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
                 producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, topics=topics)


def _error(tid: str, code: ErrorCode) -> State:
    # the schema's defaults (no "default" in DescribeTransactionsResponse.json: 0 and ""), as Kafka
    # sets only the id and the error code on an error row
    return State(error_code=int(code), transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                 transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])


async def handle(ctx, request):
    return DescribeTransactionsResponse(version=ctx.api_version, throttle_time_ms=0,
                                        transaction_states=[_state(ctx, tid) for tid in request.transactional_ids])
