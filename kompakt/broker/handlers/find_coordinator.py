"""FindCoordinator (API key 10), versions 0-6.

Authorization: a GROUP key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), a
TRANSACTION key DESCRIBE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), a
SHARE key (v6) CLUSTER_ACTION on the cluster (else the whole request fails: every key answers
CLUSTER_AUTHORIZATION_FAILED "Cluster authorization failed.", Kafka's authorizeClusterOperation
throwing into FindCoordinatorRequest.getErrorResponse).

Behaviour: this single broker coordinates every consumer group, so a GROUP key (key_type 0)
always resolves to us (node id and advertised host/port) - and, as Kafka does on the first lookup,
`__consumer_offsets` is created if it does not exist yet (in a thread: the event loop goes on). A
TRANSACTION key (1, a transactional id) resolves to us as well, after `__transaction_state` is
created the same way. SHARE (2) keys (the share-group state coordinator, which brokers look up)
are INVALID_REQUEST: before v6 as in Kafka, from v6 because no share coordinator runs (Kafka 4
with share groups off: BrokerServer.createShareCoordinator gives None, getCoordinator answers
INVALID_REQUEST). A key whose internal-topic partition is in an offline log dir is
COORDINATOR_NOT_AVAILABLE (no leader: Kafka's getCoordinator); any other key
type INVALID_REQUEST "Unknown coordinator type received: N" (Kafka's CoordinatorType.forId). Like Kafka, an empty
group id is answered like any other key (JoinGroup rejects it later with INVALID_GROUP_ID).

Version notes: v0 has only the key (a group); v1 adds key_type, throttle time and error message;
v3+ flexible; v4+ batches keys (`coordinator_keys` -> `coordinators`, one result per key; the
top-level fields are gone).
"""
from __future__ import annotations

import logging

from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode, KafkaError

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2
FIRST_SHARE_VERSION = 6
KNOWN_KEY_TYPES = (0, 1, 2)   # GROUP, TRANSACTION, SHARE
log = logging.getLogger(__name__)


async def _lookup(ctx, key: str, key_type: int) -> tuple[int, str | None]:
    if key_type not in KNOWN_KEY_TYPES:   # Kafka's CoordinatorType.forId refuses the request
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type received: {key_type}"
    if key_type == KEY_TYPE_GROUP and not ctx.authorize(Op.DESCRIBE, Res.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if key_type == KEY_TYPE_TRANSACTION:
        if not ctx.authorize(Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        topic = ctx.broker.txn.topic
    elif key_type == KEY_TYPE_SHARE:
        # (CLUSTER_ACTION was checked for the whole request) no share coordinator: Kafka's answer
        return ErrorCode.INVALID_REQUEST, None
    else:
        topic = ctx.groups.topic
    try:
        await topic.ensure_async()
    except KafkaError as exc:
        log.warning("cannot create the coordinator's internal topic: %s", exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)
    partition = topic.partition_for(key)
    if ctx.log_manager.is_offline((topic.name, partition)):
        # the key's partition has no leader (its log dir failed): Kafka's getCoordinator answer
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic.name}-{partition} is in an offline log directory"
    return ErrorCode.NONE, None


async def handle(ctx, request):
    broker = ctx.broker
    host, port = broker.advertised_for(ctx.listener)
    node = broker.node_id
    version = ctx.api_version
    if version >= 4:
        key_type = request.key_type
        if (key_type == KEY_TYPE_SHARE and version >= FIRST_SHARE_VERSION
                and not ctx.authorize_cluster(Op.CLUSTER_ACTION)):
            return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=[
                FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                    error_message="Cluster authorization failed.")
                for key in request.coordinator_keys])
        results = []
        for key in request.coordinator_keys:
            code, message = await _lookup(ctx, key, key_type)
            ok = code == ErrorCode.NONE
            results.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1,
                error_code=code, error_message=message))
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=results)
    key_type = request.key_type if version >= 1 else KEY_TYPE_GROUP
    code, message = await _lookup(ctx, request.key, key_type)
    ok = code == ErrorCode.NONE
    return FindCoordinatorResponse(version=version, throttle_time_ms=0, error_code=code,
                                   error_message=message, node_id=node if ok else -1,
                                   host=host if ok else "", port=port if ok else -1)
