"""UnregisterBroker (API key 64), version 0: taking a broker out of the cluster's registrations.

Behaviour (Kafka's ControllerApis.handleUnregisterBroker and ReplicationControlManager.
unregisterBroker, which a broker forwards it to): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED; a broker id that is not registered: BROKER_ID_NOT_REGISTERED (Kafka
answers the code only, no message); a registered one is unregistered (fenced, its partitions
lose it) until it registers again, which a running broker does at once. The only registered
broker is this node, running: the answer is NONE and nothing changes (it is registered again
straight away, as a live Kafka broker would be).
"""
from __future__ import annotations

from kompakt.broker.security.acl import Op
from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode

API_KEY = 64
MIN_VERSION = 0
MAX_VERSION = 0


def _answer(code: int):
    return registry.API[API_KEY].response(throttle_time_ms=0, error_code=int(code), error_message=None)


async def handle(ctx, request):
    if not ctx.authorize_cluster(Op.ALTER):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.broker_id != ctx.broker.node_id:
        return _answer(ErrorCode.BROKER_ID_NOT_REGISTERED)
    return _answer(0)
