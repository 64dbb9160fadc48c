"""WriteTxnMarkers (API key 27), version 1 (Kafka 4.0's range, the release Kompakt advertises).

Behaviour: write a COMMIT or ABORT end-transaction marker (producer id, epoch, coordinator epoch of
the request) into each named partition, as a Kafka partition leader does for its transaction
coordinator. Kompakt's own coordinator writes its markers itself (kompakt/broker/txn/markers.py);
this API is what administrators use to end a *hanging* transaction in a partition
(`kafka-transactions.sh abort`, kafka-python's `KafkaAdminClient.abort_transaction`, the Java
AdminClient's `abortTransaction`). A marker written to a `__consumer_offsets` partition also
completes the producer's pending transactional offsets there (as Kafka's onTransactionCompleted).

Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition this broker does not have,
KAFKA_STORAGE_ERROR for one whose log dir is offline, else the
append's code: INVALID_PRODUCER_EPOCH (an epoch older than the partition knows),
TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch), KAFKA_STORAGE_ERROR,
NOT_LEADER_OR_FOLLOWER for a `__consumer_offsets` partition while the group coordinator still
loads it (Kafka's translation of COORDINATOR_LOAD_IN_PROGRESS; retry). Needs ALTER on
the cluster or CLUSTER_ACTION (else every partition CLUSTER_AUTHORIZATION_FAILED).

Version notes: v0 was removed in Kafka 4; v1 flexible; v2 (Kafka 4.1; not served while Kompakt advertises 4.0, the code stays) adds the transaction version (read,
ignored: a marker is the same bytes).
"""
from __future__ import annotations

import time

from kafka.protocol.producer.transaction import WriteTxnMarkersResponse

from kompakt.broker.handlers._common import log_or_error
from kompakt.broker.security.acl import Op
from kompakt.broker.txn import markers
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1

Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = Result.WritableTxnMarkerTopicResult
PartitionResult = TopicResult.WritableTxnMarkerPartitionResult


def _write(ctx, marker, topic: str, partition: int, commit: bool) -> int:
    tp = TopicPartition(topic, partition)
    plog, missing = log_or_error(ctx.log_manager, tp)
    if plog is None:
        return missing
    try:
        markers.append_marker(ctx.broker, tp, marker.producer_id, marker.producer_epoch, commit,
                              marker.coordinator_epoch, int(time.time() * 1000))
    except KafkaError as exc:
        return exc.code
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


async def handle(ctx, request):
    allowed = ctx.authorize_cluster(Op.ALTER) or ctx.authorize_cluster(Op.CLUSTER_ACTION)
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            codes = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed
                     else _write(ctx, marker, t.name, p, bool(marker.transaction_result))
                     for p in t.partition_indexes]
            topics.append(TopicResult(name=t.name, partitions=[
                PartitionResult(partition_index=p, error_code=int(c)) for p, c in zip(t.partition_indexes, codes)]))
        results.append(Result(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(version=ctx.api_version, markers=results)
