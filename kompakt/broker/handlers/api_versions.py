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
- No feature flags (SupportedFeatures/FinalizedFeatures stay empty): a single node has no
  metadata.version to negotiate.
"""
from __future__ import annotations

from kafka.protocol.metadata.api_versions import ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

_ApiVersion = ApiVersionsResponse.ApiVersion


async def handle(ctx, request):
    ranges = ctx.broker.dispatcher.ranges
    return ApiVersionsResponse(
        version=ctx.api_version,
        error_code=0,
        api_keys=[_ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges],
        throttle_time_ms=0,
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
    )
