"""ApiVersions (key 18), versions 0-4.

Behaviour: answers the (api key, min, max) of every handler module listed in
broker/handlers/__init__.py, nothing else. Clients send this first on every connection and pick
the highest version both sides know.

Version notes:
- v1 adds throttle_time_ms; v3 becomes flexible (tagged fields, compact arrays) and the request
  carries client_software_name/version, which we accept and ignore.
- The response header is always v0, even for flexible versions (registry.response_header_version).
- A request newer than v4 is answered by the dispatcher, not here: UNSUPPORTED_VERSION with our
  ranges in the v0 body layout, which every client can read (KIP-511); librdkafka and the Java
  client then retry with a version from that list.
- v3+ carry the feature flags (KIP-584) as a broker of the release Kompakt advertises (Kafka 4.0,
  docs/compatibility.md) formatted with its defaults and `--standalone` does, except where
  Kompakt serves less (FEATURES below). Kafka's rules, followed:
  SupportedFeatures in v0-v3 omit features whose minimum is 0 (older clients reject a 0 minimum,
  KAFKA-17011; ApiVersionsResponse.json: "in v0-v3, features with MinSupportedVersion = 0 are
  omitted"); FinalizedFeatures lists metadata.version and every feature finalized above level 0
  (level 0 means "not enabled", Kafka keeps no record of it); the epoch never changes, since
  nothing here changes a feature level (UpdateFeatures is not served).
- What clients do with them: the Java producer uses transactions v2 (KIP-890 part 2: EndTxn v5,
  implicit AddPartitionsToTxn) iff transaction.version >= 2 is finalized
  (TransactionManager.isTransactionV2Enabled); Kompakt writes TransactionLogValue v0 and serves
  EndTxn up to v4, i.e. transaction.version 0, so that is what it finalizes and supports.
  `kafka-features.sh describe` and Admin.describeFeatures print these lines.
"""
from __future__ import annotations

from kafka.protocol.metadata.api_versions import ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_ApiVersion = ApiVersionsResponse.ApiVersion
_Supported = ApiVersionsResponse.SupportedFeatureKey
_Finalized = ApiVersionsResponse.FinalizedFeatureKey

# metadata.version levels (server-common MetadataVersion): MINIMUM_VERSION IBP_3_3_IV3 = 7;
# Kafka 4.0's LATEST_PRODUCTION IBP_4_0_IV3 = 25, the release whose API table Kompakt advertises
# (4.1's would be IBP_4_1_IV1 = 27).
METADATA_VERSION_MIN = 7
METADATA_VERSION = 25

# feature -> (supported min, supported max, finalized level). Kafka 4.1 supports, and a fresh
# 4.1 cluster finalizes (4.0 the same for these, ELR aside: 4.0 leaves it at 0):
#   group.version 0-1, 1 (GV_1: KIP-848 consumer groups)             Kompakt: the same
#   transaction.version 0-2, 2 (TV_2: KIP-890 part 2)                 Kompakt: 0-0, 0 (see above)
#   kraft.version 0-1, 1 with --standalone (dynamic quorum, KIP-853)  Kompakt: the same (its
#       DescribeQuorum answers as a standalone quorum's single voter)
#   eligible.leader.replicas.version 0-1, 1 (ELRV_1, KIP-966)        Kompakt: 0-0, 0 (one node has
#       no eligible leaders; DescribeTopicPartitions sends empty ELR lists)
FEATURES = {
    "metadata.version": (METADATA_VERSION_MIN, METADATA_VERSION, METADATA_VERSION),
    "group.version": (0, 1, 1),
    "transaction.version": (0, 0, 0),
    "kraft.version": (0, 1, 1),
    "eligible.leader.replicas.version": (0, 0, 0),
}
FINALIZED_FEATURES_EPOCH = 1


def supported_features(version: int) -> list:
    return [_Supported(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi, _) in FEATURES.items() if version >= 4 or lo > 0]


def finalized_features() -> list:
    return [_Finalized(name=name, max_version_level=level, min_version_level=level)
            for name, (_, _, level) in FEATURES.items() if level > 0]


async def handle(ctx, request):
    ranges = ctx.broker.dispatcher.ranges
    return ApiVersionsResponse(
        version=ctx.api_version,
        error_code=0,
        api_keys=[_ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges],
        throttle_time_ms=0,
        supported_features=supported_features(ctx.api_version),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=finalized_features(),
    )
