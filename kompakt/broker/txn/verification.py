"""KIP-890 for Produce: a transactional batch reaches a partition only if it is in the transaction.

Role: Kafka's ReplicaManager.handleProduceAppend + AddPartitionsToTxnManager on one node. Before a
producer's first transactional write to a partition (no transaction of its epoch open there; an
epoch older than the partition's is INVALID_PRODUCER_EPOCH at once, Kafka 4), the
partition's log hands out a verification guard and the transaction coordinator is asked whether
the partition was added to the producer's transaction; the append then presents the guard, which
a marker written meanwhile would have made stale (Log.start_verification). With
transaction.partition.verification.enable=false the coordinator is not asked (the guard is still
used, so the log's rule holds).

Transaction version 2 (KIP-890 part 2; Produce v12, Kafka's `addPartition` operation): the client
sends no AddPartitionsToTxn, so instead of asking, the broker adds the partition to the
producer's transaction itself (coordinator.add_partitions with client transaction version 2, what
Kafka's broker sends its coordinator as AddPartitionsToTxn v4+ without verify_only), whatever
transaction.partition.verification.enable says. That `__transaction_state` record is synced
before the answer leaves, whatever the acks (the dispatcher waits for every coordinator write a
request made, storage/group_commit.pending_acks): a power cut must not keep acknowledged records
while losing the transaction they belong to (the coordinator would never mark them, and the
producer's next transaction there would take them in).

Request-level checks first (KafkaApis.handleProduceRequest): transactional batches need a
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition; WRITE on it is
checked by produce.py when the request has transactional records, `has_transactional_records`)
and must share one producer id and epoch (else INVALID_PRODUCER_ID_MAPPING, Kafka's
ReplicaManager.appendRecords).

The coordinator's answers as Produce gives them (Kafka's translation for clients):
    TRANSACTION_ABORTABLE            INVALID_TXN_STATE before Produce v11 ("Partition was not added
                                     to the transaction"), as is from v11
    PRODUCER_FENCED                  INVALID_PRODUCER_EPOCH
    CONCURRENT_TRANSACTIONS          NOT_ENOUGH_REPLICAS, as is for Produce v12 (Kafka does not
                                     convert it for transaction version 2: it is retriable there)
    COORDINATOR_* / NOT_COORDINATOR  NOT_ENOUGH_REPLICAS (retriable without a metadata refresh)
    anything else                    as is (INVALID_PRODUCER_ID_MAPPING, ...)
Kafka 4.0's broker retries an add answered CONCURRENT_TRANSACTIONS for up to 100 ms first (a
TV2 client may produce while its previous transaction's markers are still being written there),
and keeps a TV2 verification guard across a marker of the guard's epoch (UnifiedLog.updateProducers'
isV2NextTransactionStarted: the previous transaction's marker, at the bumped epoch, may land after
the next transaction's add). Here the previous EndTxn is answered only once its markers are
written, and an add is refused while they are not (CONCURRENT_TRANSACTIONS, retriable), so a
client following the protocol meets neither case; a fenced or timed-out transaction being aborted
still answers CONCURRENT_TRANSACTIONS until its markers are in.
"""
from __future__ import annotations

import struct

from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.protocol.records import (ATTRIBUTES_POS, BATCH_OVERHEAD, CONTROL_MASK as CONTROL, PRODUCER_ID_POS,
                                      TRANSACTIONAL_MASK as TRANSACTIONAL)

_ATTRS_LOW = ATTRIBUTES_POS + 1  # low byte of the batch attributes (an int16, big-endian)
_PRODUCER = struct.Struct(">qh")  # producerId, producerEpoch, at PRODUCER_ID_POS
FIRST_GENERIC_ERROR_VERSION = 11
FIRST_TV2_VERSION = 12           # Produce v12: the client uses transaction version 2
_RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
              ErrorCode.NOT_COORDINATOR)


def transactional_producer(records) -> tuple[int, int] | None:
    """(producer id, epoch) when `records` starts with a transactional data batch."""
    if records is None or len(records) < BATCH_OVERHEAD or not records[_ATTRS_LOW] & TRANSACTIONAL \
            or records[_ATTRS_LOW] & CONTROL:
        return None
    pid, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID_POS)
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
    """(guard, None) to append with, or (None, (code, message)) to answer instead. From Produce
    v12 the partition is added to the transaction rather than checked."""
    pid, epoch = producer
    try:
        guard = log_obj.start_verification(pid, epoch)
    except KafkaError as exc:                    # an epoch older than the partition's
        return None, (ErrorCode(exc.code), str(exc))
    tv2 = version >= FIRST_TV2_VERSION
    if guard is None or not (tv2 or ctx.config["transaction.partition.verification.enable"]):
        return guard, None
    tp = (log_obj.tp[0], log_obj.tp[1])
    if tv2:
        code = ctx.broker.txn.add_partitions(transactional_id, pid, epoch, [tp], client_tv=2)
    else:
        code = ctx.broker.txn.verify(transactional_id, pid, epoch, [tp])[tp]
    if code == ErrorCode.NONE:
        return guard, None
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < FIRST_GENERIC_ERROR_VERSION:
        return None, (ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")
    if code == ErrorCode.PRODUCER_FENCED:
        return None, (ErrorCode.INVALID_PRODUCER_EPOCH, None)
    if code in _RETRIABLE and not (tv2 and code == ErrorCode.CONCURRENT_TRANSACTIONS):
        return None, (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                                                      f"transaction. Underlying error: {ErrorCode(code).name}")
    return None, (code, None)

