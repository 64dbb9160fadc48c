"""DescribeCluster (API key 60), versions 0-2.

Behaviour (Kafka's AuthHelper.computeDescribeClusterResponse on a broker):
* One broker, this node, at its advertised host and port, never fenced; it is also the controller
  (controller_id = node.id) and the cluster id is the one in meta.properties.
* endpoint_type (v1+): 1 (BROKER) is served; 2 (CONTROLLER) gets MISMATCHED_ENDPOINT_TYPE and any
  other value UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST in v0), with Kafka's messages.
* include_cluster_authorized_operations: with no authorizer every cluster operation is allowed,
  so the bit set is Kafka's supported cluster operations; otherwise the schema default (INT_MIN).

Version notes: flexible from v0; v1 adds endpoint_type; v2 include_fenced_brokers / is_fenced.

Authorization: authorized operations (when asked) only for a principal with DESCRIBE on the
cluster (else the empty set), as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin.cluster import DescribeClusterResponse

from kompakt.protocol.errors import ErrorCode
from kompakt.broker.security.acl import CLUSTER_NAME, Op, Res

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}

# AclOperation codes that AclEntry.supportedOperations(CLUSTER) lists: CREATE, ALTER, DESCRIBE,
# CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
CLUSTER_OPERATIONS = frozenset({5, 7, 8, 9, 10, 11, 12})


def advertised(ctx) -> tuple[str, int]:
    host, port = ctx.broker.advertised_for(ctx.listener)
    return str(host), int(port)


async def handle(ctx, request) -> DescribeClusterResponse:
    version = ctx.api_version
    endpoint = request.endpoint_type if version >= 1 else ENDPOINT_BROKER
    if endpoint != ENDPOINT_BROKER:
        if endpoint not in ENDPOINT_NAMES:
            code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            message = f"Unsupported endpoint type {endpoint}"
        else:
            code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
            message = (f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                       f"of type {ENDPOINT_NAMES[endpoint]}")
        return DescribeClusterResponse(throttle_time_ms=0, error_code=int(code), error_message=message,
                                       endpoint_type=endpoint, cluster_id="", controller_id=-1, brokers=[],
                                       authorized_operations=None)
    broker = ctx.broker
    host, port = advertised(ctx)
    node = DescribeClusterResponse.DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port,
                                                         rack=ctx.config["broker.rack"], is_fenced=False)
    operations = None
    if request.include_cluster_authorized_operations:      # Kafka: the set only for a describer, else 0
        operations = (ctx.authorized_operations(Res.CLUSTER, CLUSTER_NAME)
                      if ctx.authorize_cluster(Op.DESCRIBE) else set())
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   endpoint_type=ENDPOINT_BROKER, cluster_id=broker.cluster_id,
                                   controller_id=broker.node_id, brokers=[node],
                                   authorized_operations=operations)
