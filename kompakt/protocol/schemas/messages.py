"""kafka-python `ApiMessage` classes over this package's JSON schemas (see __init__.py)."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

_HERE = __package__


class GetTelemetrySubscriptionsRequest(ApiMessage, load_json=_HERE):
    pass


class GetTelemetrySubscriptionsResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class UnregisterBrokerRequest(ApiMessage, load_json=_HERE):
    pass


class UnregisterBrokerResponse(ApiMessage, load_json=_HERE):
    pass


class AddRaftVoterRequest(ApiMessage, load_json=_HERE):
    pass


class AddRaftVoterResponse(ApiMessage, load_json=_HERE):
    pass


class RemoveRaftVoterRequest(ApiMessage, load_json=_HERE):
    pass


class RemoveRaftVoterResponse(ApiMessage, load_json=_HERE):
    pass


class CreateDelegationTokenRequest(ApiMessage, load_json=_HERE):
    pass


class CreateDelegationTokenResponse(ApiMessage, load_json=_HERE):
    pass


class RenewDelegationTokenRequest(ApiMessage, load_json=_HERE):
    pass


class RenewDelegationTokenResponse(ApiMessage, load_json=_HERE):
    pass


class ExpireDelegationTokenRequest(ApiMessage, load_json=_HERE):
    pass


class ExpireDelegationTokenResponse(ApiMessage, load_json=_HERE):
    pass


class DescribeDelegationTokenRequest(ApiMessage, load_json=_HERE):
    pass


class DescribeDelegationTokenResponse(ApiMessage, load_json=_HERE):
    pass
