"""KIP-890 part 1 for Produce: a transactional batch reaches a partition only if it is in the transaction.

Role: Kafka's ReplicaManager.handleProduceAppend + AddPartitionsToTxnManager on one node. Before a
producer's first transactional write to a partition (no transaction of its epoch open there; an
epoch older than the partition's is INVALID_PRODUCER_EPOCH at once, Kafka 4), the
partition's log hands out a verification guard and the transaction coordinator is asked whether
the partition was added to the producer's transaction; the append then presents the guard, which
a marker written meanwhile would have made stale (Log.start_verification). With
transaction.partition.verification.enable=false the coordinator is not asked (the guard is still
used, so the log's rule holds).

Request-level checks first (KafkaApis.handleProduceRequest): transactional batches need a
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition; WRITE on it is
checked by produce.py when the request has transactional records, `has_transactional_records`)
and must share one producer id and epoch (else INVALID_PRODUCER_ID_MAPPING, Kafka's
ReplicaManager.appendRecords).

The coordinator's answers as Produce gives them (Kafka's translation for clients):
    TRANSACTION_ABORTABLE            INVALID_TXN_STATE before Produce v11 ("Partition was not added
                                     to the transaction"), as is from v11
    PRODUCER_FENCED                  INVALID_PRODUCER_EPOCH
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_* / NOT_COORDINATOR  NOT_ENOUGH_REPLICAS (retriable without a metadata refresh)
    anything else                    as is (INVALID_PRODUCER_ID_MAPPING, ...)
"""
from __future__ import annotations

import struct

from kompakt.protocol.errors import ErrorCode, KafkaError

_ATTRS_LOW = 22                  # low byte of the batch attributes
_PRODUCER = struct.Struct(">qh")  # producerId, producerEpoch at byte 43
TRANSACTIONAL = 0x10
CONTROL = 0x20
FIRST_GENERIC_ERROR_VERSION = 11
_RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
              ErrorCode.NOT_COORDINATOR)


def transactional_producer(records) -> tuple[int, int] | None:
    """(producer id, epoch) when `records` starts with a transactional data batch."""
    if records is None or len(records) < 61 or not records[_ATTRS_LOW] & TRANSACTIONAL \
            or records[_ATTRS_LOW] & CONTROL:
        return None
    pid, epoch = _PRODUCER.unpack_from(records, 43)
    return (pid, epoch) if pid >= 0 else None


def has_transactional_records(request) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: some partition's first batch is transactional
    (only then does Produce check WRITE on the request's transactional id)."""
    return any(r is not None and len(r) > _ATTRS_LOW and r[_ATTRS_LOW] & TRANSACTIONAL
               for t in request.topics for _, r in t.partitions)


def request_error(request) -> ErrorCode | None:
    """A whole-request refusal for the transactional batches of a produce request, or None."""
    pids = {p for t in request.topics for _, r in t.partitions if (p := transactional_producer(r)) is not None}
    if not pids:
        return None
    if request.transactional_id is None:        # (WRITE on a given id: produce.handle checks it)
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if len(pids) > 1:                           # two producer ids, or two epochs of one
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    return None


def verify(ctx, log_obj, transactional_id: str, producer: tuple[int, int], version: int):
    """(guard, None) to append with, or (None, (code, message)) to answer instead."""
    pid, epoch = producer
    try:
        guard = log_obj.start_verification(pid, epoch)
    except KafkaError as exc:                    # an epoch older than the partition's
        return None, (ErrorCode(exc.code), str(exc))
    if guard is None or not ctx.config["transaction.partition.verification.enable"]:
        return guard, None
    tp = (log_obj.tp[0], log_obj.tp[1])
    code = ctx.broker.txn.verify(transactional_id, pid, epoch, [tp])[tp]
    if code == ErrorCode.NONE:
        return guard, None
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < FIRST_GENERIC_ERROR_VERSION:
        return None, (ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")
    if code == ErrorCode.PRODUCER_FENCED:
        return None, (ErrorCode.INVALID_PRODUCER_EPOCH, None)
    if code in _RETRIABLE:
        return None, (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                                                      f"transaction. Underlying error: {ErrorCode(code).name}")
    return None, (code, None)
