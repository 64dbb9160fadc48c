"""Kompakt advertises the API versions of one Kafka release: Apache Kafka 4.0.

`KAFKA_4_0` is that release's ApiVersions table on a broker listener, written down here as data:
for each API, the validVersions of its request schema (clients/src/main/resources/common/message/
*Request.json at the 4.0.0 tag), less what Kafka itself leaves out of ApiVersions - a latest
version marked "latestVersionUnstable" (unless unstable.api.versions.enable) and APIs whose
"listeners" do not include "broker" (KRaft-internal and controller-only APIs), and the client
telemetry APIs (71, 72), which a broker advertises only with a metrics plugin (Kompakt serves
GetTelemetrySubscriptions unadvertised, as that broker does). kafka-python 3.x keeps a record of
a real 4.0 broker's answer (kafka.protocol.broker_version_data.BROKER_API_VERSIONS[(4, 0)]); the
table must equal it too, a second witness.

What the broker advertises must be exactly this table, except the APIs and versions listed in
`NOT_YET_SERVED` (each named, with the reason, in docs/compatibility.md), so an API that lands
moves from that list into the advertised table, and nothing newer than 4.0 creeps back in.
kafka-python infers the broker release from ApiVersions: it must infer 4.0.
"""
from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

from wire_support import Wire, req

RELEASE = (4, 0)

# api key: (min, max) that a Kafka 4.0 broker advertises
KAFKA_4_0 = {
    0: (0, 12),    # Produce (v0-2 advertised, refused per partition: KAFKA-18659)
    1: (4, 17),    # Fetch
    2: (1, 10),    # ListOffsets
    3: (0, 13),    # Metadata
    8: (2, 9),     # OffsetCommit (v0-1 removed, KIP-896)
    9: (1, 9),     # OffsetFetch
    10: (0, 6),    # FindCoordinator
    11: (2, 9),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 5),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 6),    # DescribeGroups
    16: (0, 5),    # ListGroups
    17: (0, 1),    # SaslHandshake
    18: (0, 4),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics
    21: (0, 2),    # DeleteRecords
    22: (0, 5),    # InitProducerId (v6 latestVersionUnstable)
    23: (2, 4),    # OffsetForLeaderEpoch
    24: (0, 5),    # AddPartitionsToTxn
    25: (0, 4),    # AddOffsetsToTxn
    26: (0, 5),    # EndTxn
    27: (1, 1),    # WriteTxnMarkers
    28: (0, 5),    # TxnOffsetCommit
    29: (1, 3),    # DescribeAcls
    30: (1, 3),    # CreateAcls
    31: (1, 3),    # DeleteAcls
    32: (1, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    34: (1, 2),    # AlterReplicaLogDirs
    35: (1, 4),    # DescribeLogDirs
    36: (0, 2),    # SaslAuthenticate
    37: (0, 3),    # CreatePartitions
    38: (1, 3),    # CreateDelegationToken
    39: (1, 2),    # RenewDelegationToken
    40: (1, 2),    # ExpireDelegationToken
    41: (1, 3),    # DescribeDelegationToken
    42: (0, 2),    # DeleteGroups
    43: (0, 2),    # ElectLeaders
    44: (0, 1),    # IncrementalAlterConfigs
    45: (0, 0),    # AlterPartitionReassignments
    46: (0, 0),    # ListPartitionReassignments
    47: (0, 0),    # OffsetDelete
    48: (0, 1),    # DescribeClientQuotas
    49: (0, 1),    # AlterClientQuotas
    50: (0, 0),    # DescribeUserScramCredentials
    51: (0, 0),    # AlterUserScramCredentials
    55: (0, 2),    # DescribeQuorum
    57: (0, 2),    # UpdateFeatures
    60: (0, 2),    # DescribeCluster
    61: (0, 0),    # DescribeProducers
    64: (0, 0),    # UnregisterBroker
    65: (0, 0),    # DescribeTransactions
    66: (0, 1),    # ListTransactions
    68: (0, 1),    # ConsumerGroupHeartbeat
    69: (0, 1),    # ConsumerGroupDescribe
    74: (0, 0),    # ListClientMetricsResources
    75: (0, 0),    # DescribeTopicPartitions
    80: (0, 0),    # AddRaftVoter
    81: (0, 0),    # RemoveRaftVoter
}

# What of KAFKA_4_0 Kompakt does not serve yet: api key -> the range it advertises meanwhile
# (None: not at all). docs/compatibility.md names each. Nothing since transaction version 2
# (EndTxn v5, TxnOffsetCommit v5) landed: the table is Kafka 4.0's, whole.
NOT_YET_SERVED: dict = {}


@pytest.fixture(scope="module")
def advertised(module_broker):
    wire = Wire(module_broker.port)
    answer = wire.call(req(18, client_software_name="wire-test", client_software_version="1"), 3)
    wire.close()
    assert answer.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_the_table_is_what_a_kafka_4_0_broker_answered():
    assert KAFKA_4_0 == BROKER_API_VERSIONS[RELEASE]


def test_the_broker_advertises_kafka_4_0_and_nothing_else(advertised):
    expected = {key: NOT_YET_SERVED.get(key, versions) for key, versions in KAFKA_4_0.items()}
    expected = {key: versions for key, versions in expected.items() if versions is not None}
    assert advertised == expected
    # every entry of NOT_YET_SERVED is a real gap (served APIs leave the list when they land)
    for key, meanwhile in NOT_YET_SERVED.items():
        assert advertised.get(key) == meanwhile != KAFKA_4_0[key]


def test_kafka_python_infers_kafka_4_0(module_broker):
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap, request_timeout_ms=15000)
    try:
        [broker] = admin.describe_cluster()["brokers"]
        assert admin.get_broker_version_data(broker["broker_id"]).broker_version == RELEASE
    finally:
        admin.close()
