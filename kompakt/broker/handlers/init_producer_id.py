"""InitProducerId (API key 22), versions 0-5: producer ids for idempotent and transactional producers.

Behaviour:
* No transactional id (idempotent producer, the default of kafka-python 3.x, the Java client
  and librdkafka with enable.idempotence): a producer id from `broker/txn/producer_ids.py`, never
  reused across restarts, epoch 0.
* producer_id and producer_epoch (v3+, KIP-360): both -1 asks for a new id; both set asks for an
  epoch bump: the (id, epoch) this broker last handed out keeps its id with epoch + 1 (fencing
  the producer's own older in-flight batches); a stale epoch, an id from before a restart or an
  exhausted epoch gets a fresh id with epoch 0 (broker/txn/producer_ids.py). One set and the other -1:
  INVALID_REQUEST.
* A transactional id: the transaction coordinator (kompakt/broker/txn) answers: a producer id and
  an epoch bumped on every call (fencing older instances; an Ongoing transaction is aborted
  first and CONCURRENT_TRANSACTIONS answered, the client retries), INVALID_TRANSACTION_TIMEOUT for
  a timeout outside (0, transaction.max.timeout.ms], PRODUCER_FENCED for a stale (id, epoch) on
  v3+, CONCURRENT_TRANSACTIONS while markers are being written, INVALID_REQUEST for an empty id,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED without WRITE on the transactional id. PRODUCER_FENCED is
  answered INVALID_PRODUCER_EPOCH below v4 (older clients do not know the code).
* transaction_timeout_ms is ignored for idempotent producers (as Kafka does).
* The id block file cannot be read or written: COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka
  answers while it has no id block) and an error log line naming the file.

Version notes: v1 = v0; v2+ flexible; v3 adds producer_id/producer_epoch; v4 lets the client
understand PRODUCER_FENCED and v5 TRANSACTION_ABORTABLE;
v6 (KIP-939 2PC, unstable in Kafka) is not served.

Authorization: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without
one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

import asyncio
import logging

from kafka.protocol.producer.transaction import InitProducerIdResponse

from kompakt.broker.txn.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdFileError, get_manager
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

log = logging.getLogger(__name__)


def _answer(code: ErrorCode = ErrorCode.NONE, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = NO_PRODUCER_EPOCH) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=int(code), producer_id=producer_id,
                                  producer_epoch=producer_epoch)


async def handle(ctx, request) -> InitProducerIdResponse:
    # Kafka's handleInitProducerIdRequest: WRITE on the transactional id, or for an idempotent
    # producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic
    if request.transactional_id is not None:
        if not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
            return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (ctx.authorize_cluster(Op.IDEMPOTENT_WRITE) or ctx.authorize_any(Op.WRITE, Res.TOPIC)):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    pid, epoch = (request.producer_id, request.producer_epoch) if ctx.api_version >= 3 else (-1, -1)
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        log.info("InitProducerId from %r with producer_id=%d and producer_epoch=%d: both or neither "
                 "must be -1", ctx.client_id, pid, epoch)
        return _answer(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is not None:
        return await _transactional(ctx, request, None if pid == NO_PRODUCER_ID else (pid, epoch))
    try:
        manager = get_manager(ctx.broker)
        if manager.needs_reservation():
            # The next id starts a block: its reservation fsyncs a file, so keep it off the loop.
            new_pid, new_epoch = await asyncio.to_thread(manager.init_producer, pid, epoch)
        else:
            new_pid, new_epoch = manager.init_producer(pid, epoch)
    except (OSError, ProducerIdFileError) as exc:
        # Retriable for the client (Kafka answers this while it cannot get an id block); the
        # operator sees why.
        log.error("cannot allocate a producer id: %s", exc)
        return _answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    if pid != NO_PRODUCER_ID:
        log.info("producer %d epoch %d of client %r -> producer %d epoch %d",
                 pid, epoch, ctx.client_id, new_pid, new_epoch)
    return _answer(producer_id=new_pid, producer_epoch=new_epoch)


async def _transactional(ctx, request, expected) -> InitProducerIdResponse:
    tid = request.transactional_id
    code, new_pid, new_epoch = await ctx.broker.txn.init_producer_id(
        tid, request.transaction_timeout_ms, expected)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return _answer(code, new_pid, new_epoch)
