"""ListClientMetricsResources (API key 74), version 0, as Kafka 4.0 names and serves it.

Behaviour (Kafka 4.0's KafkaApis.handleListClientMetricsResources): the names of the
CLIENT_METRICS config resources (KIP-714 subscriptions, set with kafka-client-metrics.sh /
IncrementalAlterConfigs on resource type 16). Kompakt has no client-metrics plugin and keeps no
such resources (DescribeConfigs and the alter APIs refuse resource type 16), so the list is
always empty. Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED
and no resources.

Version notes: flexible from v0; Kafka 4.1 renamed the API ListConfigResources and added v1
(resource types, KIP-1142), which Kompakt does not advertise (it advertises Kafka 4.0).
"""
from __future__ import annotations

from kafka.protocol.admin.configs import ListConfigResourcesResponse

from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 74
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request) -> ListConfigResourcesResponse:
    if not ctx.authorize_cluster(Op.DESCRIBE_CONFIGS):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                           config_resources=[])
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=[])
