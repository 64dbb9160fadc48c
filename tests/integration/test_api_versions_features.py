"""ApiVersions' feature flags on the wire (KIP-584), as a Kafka 4.0 broker (the release Kompakt
advertises) sends them, less what
Kompakt does not serve (handlers/api_versions.py): v4 lists every supported feature, v3 leaves
out those whose minimum is 0 (KAFKA-17011: older clients reject a 0 minimum), both list the
finalized levels above 0 with the epoch of a fresh node, 1 (UpdateFeatures raises it:
test_update_features)."""
from __future__ import annotations

from wire_support import Wire, req

SUPPORTED = {"metadata.version": (7, 25), "group.version": (0, 1), "transaction.version": (0, 2),
             "kraft.version": (0, 1), "eligible.leader.replicas.version": (0, 0)}
FINALIZED = {"metadata.version": (25, 25), "group.version": (1, 1), "transaction.version": (2, 2),
             "kraft.version": (1, 1)}


def features(broker, version):
    response = Wire(broker.port).call(req(18, client_software_name="wire-test", client_software_version="1"),
                                      version)
    assert response.error_code == 0
    return ({f.name: (f.min_version, f.max_version) for f in response.supported_features},
            {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features},
            response.finalized_features_epoch)


def test_v4_lists_every_feature_and_the_finalized_levels(module_broker):
    assert features(module_broker, 4) == (SUPPORTED, FINALIZED, 1)


def test_v3_omits_features_with_a_zero_minimum(module_broker):
    supported, finalized, epoch = features(module_broker, 3)
    assert supported == {"metadata.version": (7, 25)}
    assert (finalized, epoch) == (FINALIZED, 1)
