"""API key -> kafka-python 3.x message classes (Kafka's JSON schemas, compiled to Python).

Role: the one explicit table of every API whose bytes Kompakt can read and write, and the facts
derived from the schemas that framing and dispatch need: which versions are flexible (compact
strings, tagged fields, request header v2 / response header v1). Which versions the broker
*serves* is not decided here: each handler module declares MIN_VERSION/MAX_VERSION
(broker/handlers/__init__.py) and only those feed ApiVersions.

kafka-python compiles one decoder and one encoder per (message, version) on first use (5-10 ms
each). The broker compiles the versions known clients send ahead of use, on the loop between
requests after the listeners open (dispatch.Dispatcher.warm_in_background); `warm()` compiles
whole ranges at once (tools, tests).

Schemas kafka-python lacks (GetTelemetrySubscriptions in 3.0.12) come from our own JSON files
in `protocol/schemas/`, loaded into kafka-python's classes, so they use the same codecs.

Invariant: `API[key].request.API_KEY == key` for every entry (checked at import).
"""
from __future__ import annotations

from typing import NamedTuple

from kafka.protocol.admin import acl as _acl
from kafka.protocol.admin import client_quotas as _quotas
from kafka.protocol.admin import cluster as _cluster
from kafka.protocol.admin import configs as _configs
from kafka.protocol.admin import groups as _admin_groups
from kafka.protocol.admin import topics as _topics
from kafka.protocol.admin import transactions as _admin_txn
from kafka.protocol.admin import users as _users
from kafka.protocol.consumer import fetch as _fetch
from kafka.protocol.consumer import group as _group
from kafka.protocol.consumer import offsets as _offsets
from kafka.protocol.metadata import api_versions as _api_versions
from kafka.protocol.metadata import find_coordinator as _find_coordinator
from kafka.protocol.metadata import metadata as _metadata
from kafka.protocol.producer import produce as _produce
from kafka.protocol.producer import transaction as _txn
from kafka.protocol import sasl as _sasl

from kompakt.protocol.schemas import messages as _ours


class Api(NamedTuple):
    key: int
    name: str
    request: type
    response: type
    schema_min: int          # lowest version in the schema (Kafka 4's floor for most APIs)
    schema_max: int
    flexible_from: int | None  # first flexible version, None if the API has none


def _api(request: type, response: type) -> Api:
    lo, hi = request._valid_versions
    flex = request._flexible_versions
    return Api(request.API_KEY, request.name.removesuffix("Request"), request, response, lo, hi,
               flex[0] if flex is not None and flex[0] >= 0 else None)  # "none" parses to (-1, -1)


# The explicit table: every API kafka-python ships a schema for, by key.
_TABLE = [
    _api(_produce.ProduceRequest, _produce.ProduceResponse),                                # 0
    _api(_fetch.FetchRequest, _fetch.FetchResponse),                                        # 1
    _api(_offsets.ListOffsetsRequest, _offsets.ListOffsetsResponse),                        # 2
    _api(_metadata.MetadataRequest, _metadata.MetadataResponse),                            # 3
    _api(_group.OffsetCommitRequest, _group.OffsetCommitResponse),                          # 8
    _api(_group.OffsetFetchRequest, _group.OffsetFetchResponse),                            # 9
    _api(_find_coordinator.FindCoordinatorRequest, _find_coordinator.FindCoordinatorResponse),  # 10
    _api(_group.JoinGroupRequest, _group.JoinGroupResponse),                                # 11
    _api(_group.HeartbeatRequest, _group.HeartbeatResponse),                                # 12
    _api(_group.LeaveGroupRequest, _group.LeaveGroupResponse),                              # 13
    _api(_group.SyncGroupRequest, _group.SyncGroupResponse),                                # 14
    _api(_admin_groups.DescribeGroupsRequest, _admin_groups.DescribeGroupsResponse),        # 15
    _api(_admin_groups.ListGroupsRequest, _admin_groups.ListGroupsResponse),                # 16
    _api(_sasl.SaslHandshakeRequest, _sasl.SaslHandshakeResponse),                          # 17
    _api(_api_versions.ApiVersionsRequest, _api_versions.ApiVersionsResponse),              # 18
    _api(_topics.CreateTopicsRequest, _topics.CreateTopicsResponse),                        # 19
    _api(_topics.DeleteTopicsRequest, _topics.DeleteTopicsResponse),                        # 20
    _api(_topics.DeleteRecordsRequest, _topics.DeleteRecordsResponse),                      # 21
    _api(_txn.InitProducerIdRequest, _txn.InitProducerIdResponse),                          # 22
    _api(_offsets.OffsetForLeaderEpochRequest, _offsets.OffsetForLeaderEpochResponse),      # 23
    _api(_txn.AddPartitionsToTxnRequest, _txn.AddPartitionsToTxnResponse),                  # 24
    _api(_txn.AddOffsetsToTxnRequest, _txn.AddOffsetsToTxnResponse),                       # 25
    _api(_txn.EndTxnRequest, _txn.EndTxnResponse),                                          # 26
    _api(_txn.WriteTxnMarkersRequest, _txn.WriteTxnMarkersResponse),                        # 27
    _api(_txn.TxnOffsetCommitRequest, _txn.TxnOffsetCommitResponse),                        # 28
    _api(_acl.DescribeAclsRequest, _acl.DescribeAclsResponse),                              # 29
    _api(_acl.CreateAclsRequest, _acl.CreateAclsResponse),                                  # 30
    _api(_acl.DeleteAclsRequest, _acl.DeleteAclsResponse),                                  # 31
    _api(_configs.DescribeConfigsRequest, _configs.DescribeConfigsResponse),                # 32
    _api(_configs.AlterConfigsRequest, _configs.AlterConfigsResponse),                      # 33
    _api(_cluster.AlterReplicaLogDirsRequest, _cluster.AlterReplicaLogDirsResponse),        # 34
    _api(_cluster.DescribeLogDirsRequest, _cluster.DescribeLogDirsResponse),                # 35
    _api(_sasl.SaslAuthenticateRequest, _sasl.SaslAuthenticateResponse),                    # 36
    _api(_topics.CreatePartitionsRequest, _topics.CreatePartitionsResponse),                # 37
    _api(_ours.CreateDelegationTokenRequest, _ours.CreateDelegationTokenResponse),          # 38
    _api(_ours.RenewDelegationTokenRequest, _ours.RenewDelegationTokenResponse),            # 39
    _api(_ours.ExpireDelegationTokenRequest, _ours.ExpireDelegationTokenResponse),          # 40
    _api(_ours.DescribeDelegationTokenRequest, _ours.DescribeDelegationTokenResponse),      # 41
    _api(_admin_groups.DeleteGroupsRequest, _admin_groups.DeleteGroupsResponse),            # 42
    _api(_topics.ElectLeadersRequest, _topics.ElectLeadersResponse),                        # 43
    _api(_configs.IncrementalAlterConfigsRequest, _configs.IncrementalAlterConfigsResponse),  # 44
    _api(_topics.AlterPartitionReassignmentsRequest, _topics.AlterPartitionReassignmentsResponse),  # 45
    _api(_topics.ListPartitionReassignmentsRequest, _topics.ListPartitionReassignmentsResponse),  # 46
    _api(_group.OffsetDeleteRequest, _group.OffsetDeleteResponse),                          # 47
    _api(_quotas.DescribeClientQuotasRequest, _quotas.DescribeClientQuotasResponse),        # 48
    _api(_quotas.AlterClientQuotasRequest, _quotas.AlterClientQuotasResponse),              # 49
    _api(_users.DescribeUserScramCredentialsRequest, _users.DescribeUserScramCredentialsResponse),  # 50
    _api(_users.AlterUserScramCredentialsRequest, _users.AlterUserScramCredentialsResponse),  # 51
    _api(_cluster.DescribeQuorumRequest, _cluster.DescribeQuorumResponse),                  # 55
    _api(_cluster.UpdateFeaturesRequest, _cluster.UpdateFeaturesResponse),                  # 57
    _api(_cluster.DescribeClusterRequest, _cluster.DescribeClusterResponse),                # 60
    _api(_admin_txn.DescribeProducersRequest, _admin_txn.DescribeProducersResponse),        # 61
    _api(_ours.UnregisterBrokerRequest, _ours.UnregisterBrokerResponse),                    # 64
    _api(_admin_txn.DescribeTransactionsRequest, _admin_txn.DescribeTransactionsResponse),  # 65
    _api(_admin_txn.ListTransactionsRequest, _admin_txn.ListTransactionsResponse),          # 66
    _api(_ours.ConsumerGroupHeartbeatRequest, _ours.ConsumerGroupHeartbeatResponse),        # 68
    _api(_ours.ConsumerGroupDescribeRequest, _ours.ConsumerGroupDescribeResponse),          # 69
    _api(_ours.GetTelemetrySubscriptionsRequest, _ours.GetTelemetrySubscriptionsResponse),  # 71
    _api(_configs.ListConfigResourcesRequest, _configs.ListConfigResourcesResponse),        # 74
    _api(_topics.DescribeTopicPartitionsRequest, _topics.DescribeTopicPartitionsResponse),  # 75
    _api(_ours.AddRaftVoterRequest, _ours.AddRaftVoterResponse),                            # 80
    _api(_ours.RemoveRaftVoterRequest, _ours.RemoveRaftVoterResponse),                      # 81
]

API: dict[int, Api] = {api.key: api for api in _TABLE}
assert len(API) == len(_TABLE), "duplicate API key in the registry"
for _a in _TABLE:
    assert _a.response.API_KEY == _a.key, _a
del _a

API_VERSIONS_KEY = 18


def is_flexible(key: int, version: int) -> bool:
    """Whether (key, version) uses compact encodings and tagged fields (request header v2)."""
    entry = API.get(key)
    return entry is not None and entry.flexible_from is not None and version >= entry.flexible_from


def request_header_version(key: int, version: int) -> int:
    return 2 if is_flexible(key, version) else 1


def response_header_version(key: int, version: int) -> int:
    # ApiVersions answers with header v0 at every version: a client that does not yet know our
    # versions must be able to read the answer (KIP-511).
    if key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(key, version) else 0


def _flex(cls: type, version: int) -> bool:
    return cls.flexible_version_q(version)


def decoder(key: int, version: int):
    """The compiled `f(data, pos) -> (request, pos)` for a request version (cached by kafka-python)."""
    cls = API[key].request
    flex = _flex(cls, version)
    return cls._struct.compiled_decode_from(version, compact=flex, tagged=flex, data_class=cls)


def encoder(key: int, version: int):
    """The compiled `f(response, out)` writing a response body into an EncodeBuffer."""
    cls = API[key].response
    flex = _flex(cls, version)
    return cls._struct.compiled_encode_into(version, compact=flex, tagged=flex)


def warm(ranges: dict[int, tuple[int, int]]) -> int:
    """Compile the request decoders and response encoders of every served (key, version) now.

    Returns how many codecs were compiled.
    """
    n = 0
    for key, (lo, hi) in ranges.items():
        entry = API.get(key)
        if entry is None:
            continue
        for version in range(max(lo, entry.schema_min), min(hi, entry.schema_max) + 1):
            decoder(key, version)
            encoder(key, version)
            n += 2
    return n
