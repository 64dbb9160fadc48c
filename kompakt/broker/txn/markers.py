"""Writing a transaction's COMMIT/ABORT markers into its partitions (what WriteTxnMarkers does in Kafka).

Role: on one node the coordinator appends the control batches itself. For each partition of the
transaction, one end-transaction marker (txn_records.marker_batch: the producer id and epoch of
the transaction, coordinator epoch 0) is appended with origin "coordinator" (epoch checked, no
sequence), which completes the producer's transaction in that partition's log (its LSO moves; an
abort is written to `.txnindex`) and wakes read_committed long polls. A marker written to a
`__consumer_offsets` partition also tells the group coordinator to make the producer's pending
transactional offsets visible (commit) or drop them (abort) (Kafka's onTransactionCompleted).

Outcomes per partition (Kafka's TransactionMarkerRequestCompletionHandler):
  * written                                  -> done
  * partition gone (topic deleted)           -> done: nothing left to mark (a partition whose log
                                                dir is offline is not gone: KAFKA_STORAGE_ERROR)
  * INVALID_PRODUCER_EPOCH /
    TRANSACTION_COORDINATOR_FENCED           -> done: a newer epoch already ended it there
  * anything else (storage errors, an offline
    log dir, NOT_LEADER_OR_FOLLOWER: a
    __consumer_offsets partition still
    loading)                                 -> left for a retry; the transaction stays Prepare*
                                                (Kafka queues a partition without a leader and
                                                retries; only a deleted topic's are skipped)

Crash points (kompakt/storage/faults.py, tests only): `txn_marker_written` after each marker (arm
`txn_marker_written:2` to die between the second and third).
"""
from __future__ import annotations

import logging

from kompakt.protocol import txn_records as tr
from kompakt.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError
from kompakt.storage import TopicPartition
from kompakt.storage.faults import crash_point

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0          # one node: the coordinator never moves
OFFSETS_TOPIC = "__consumer_offsets"
_DONE_CODES = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def write_markers(broker, meta, commit: bool, now_ms: int) -> set:
    """Append the markers of `meta`'s transaction; returns the partitions still to be marked."""
    lm = broker.log_manager
    left = set()
    for topic, partition in sorted(meta.partitions):
        tp = TopicPartition(topic, partition)
        if lm.get_log(tp) is None and not lm.is_offline(tp):
            log.info("transaction %s: partition %s-%d is gone; no marker needed", meta.transactional_id,
                     topic, partition)
            continue
        try:
            append_marker(broker, tp, meta.producer_id, meta.producer_epoch, commit, COORDINATOR_EPOCH, now_ms)
        except KafkaError as exc:
            if exc.code in _DONE_CODES:
                log.info("transaction %s: marker for %s-%d not needed (%s)", meta.transactional_id,
                         topic, partition, ErrorCode(exc.code).name)
                continue
            # (a __consumer_offsets partition still loading is expected after a start, and an
            # offline log dir was reported once when it went: no warning every second)
            quiet = exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER or lm.is_offline(tp)
            log.log(logging.DEBUG if quiet else logging.WARNING,
                    "transaction %s: writing the %s marker to %s-%d failed (%s); will retry",
                    meta.transactional_id, "COMMIT" if commit else "ABORT", topic, partition, exc)
            left.add((topic, partition))
            continue
        except OSError as exc:
            log.warning("transaction %s: marker for %s-%d failed on disk (%s); will retry",
                        meta.transactional_id, topic, partition, exc)
            left.add((topic, partition))
            continue
        crash_point("txn_marker_written")
    return left


def append_marker(broker, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool,
                  coordinator_epoch: int, now_ms: int) -> None:
    """One COMMIT/ABORT marker into `tp` (raises the append's KafkaError / OSError); in a
    `__consumer_offsets` partition the producer's pending transactional offsets there are then
    made visible or dropped (Kafka's onTransactionCompleted), and while the group coordinator is
    still loading that topic nothing is written: NotLeaderOrFollowerError, retried (Kafka's
    answer to its transaction coordinator then). WriteTxnMarkers uses it too."""
    groups = getattr(broker, "groups", None) if tp.topic == OFFSETS_TOPIC else None
    if getattr(groups, "loading", False):
        # the load reads the log in a thread, then installs the pending offsets: a marker landing
        # in between would complete nothing (Kafka: COORDINATOR_LOAD_IN_PROGRESS, which
        # WriteTxnMarkers answers NOT_LEADER_OR_FOLLOWER so that the coordinator retries)
        raise NotLeaderOrFollowerError(f"{tp.topic}-{tp.partition} is loading: marker not written yet")
    batch = tr.marker_batch(producer_id, producer_epoch, tr.COMMIT if commit else tr.ABORT,
                            coordinator_epoch, now_ms)
    broker.log_manager.append_as_leader(tp, batch, origin="coordinator")
    txn_offsets = getattr(groups, "txn_offsets", None)
    if txn_offsets is not None:
        txn_offsets.complete(producer_id, tp.partition, commit)
