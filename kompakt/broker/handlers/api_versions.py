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
- v3+ carry the feature flags (KIP-584) from broker/features/levels.py: SupportedFeatures as a
  broker of the release Kompakt advertises (Kafka 4.0, docs/compatibility.md) formatted with its
  defaults and `--standalone`, except where Kompakt serves less (levels.SUPPORTED says which and
  why); FinalizedFeatures and their epoch as UpdateFeatures (handlers/update_features.py) last
  left them. Kafka's rules, followed: SupportedFeatures in v0-v3 omit features whose minimum is
  0 (older clients reject a 0 minimum, KAFKA-17011; ApiVersionsResponse.json: "in v0-v3,
  features with MinSupportedVersion = 0 are omitted"); FinalizedFeatures lists metadata.version
  and every feature finalized above level 0 (level 0 means "not enabled", Kafka keeps no record
  of it); the epoch grows with every applied UpdateFeatures.
- What clients do with them: the Java producer uses transactions v2 (KIP-890 part 2: EndTxn v5,
  Produce v12 adding partitions implicitly, TxnOffsetCommit v5 without AddOffsetsToTxn) iff
  transaction.version >= 2 is finalized (TransactionManager.isTransactionV2Enabled), as it is on a
  fresh node, Kafka 4.0's default; the API table advertises those versions whatever the level,
  as Kafka's does. `kafka-features.sh describe` and Admin.describeFeatures print these lines.
"""
from __future__ import annotations

from kafka.protocol.metadata.api_versions import ApiVersionsResponse

from kompakt.broker.features.levels import SUPPORTED, FeatureLevels

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_ApiVersion = ApiVersionsResponse.ApiVersion
_Supported = ApiVersionsResponse.SupportedFeatureKey
_Finalized = ApiVersionsResponse.FinalizedFeatureKey


def supported_features(version: int) -> list:
    return [_Supported(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in SUPPORTED.items() if version >= 4 or lo > 0]


def finalized_features(levels: FeatureLevels) -> list:
    return [_Finalized(name=name, max_version_level=level, min_version_level=level)
            for name, level in levels.finalized().items()]


async def handle(ctx, request):
    ranges = ctx.broker.dispatcher.ranges
    levels = ctx.broker.features
    return ApiVersionsResponse(
        version=ctx.api_version,
        error_code=0,
        api_keys=[_ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges],
        throttle_time_ms=0,
        supported_features=supported_features(ctx.api_version),
        finalized_features_epoch=levels.epoch,
        finalized_features=finalized_features(levels),
    )
