"""GetTelemetrySubscriptions (API key 71), version 0: "no telemetry" (KIP-714), not advertised.

Advertising: Kafka leaves GetTelemetrySubscriptions and PushTelemetry out of ApiVersions when no
client-metrics plugin is configured (ApiVersionsResponse: `!clientTelemetryEnabled`), yet answers
a client that calls anyway. Kompakt has no plugin, so it does the same (`ADVERTISED = False`):
clients (librdkafka 2.5+, the Java client 3.7+) then never ask, and do not log a telemetry
instance id at INFO on every start as they do when the API is advertised.

Behaviour: Kompakt collects no client metrics, so every client is told it is subscribed to none,
which is what Kafka's ClientMetricsManager answers when no subscription matches the client:
  client_instance_id   the request's, or a new random one when the request's is zero
  subscription_id      CRC32C of the empty metric set and the interval, XOR the instance id's
                       Java hashCode (Kafka's computeSubscriptionId)
  requested_metrics    [] (empty: the client pushes nothing, so PushTelemetry is never sent
                       and is not served)
  push_interval_ms     300000 (Kafka's default interval: the client asks again after it)
  accepted compression zstd, lz4, gzip, snappy; telemetry_max_bytes 1048576; delta temporality.
Kafka throttles a client that asks again before its interval; with nothing to push there is no
cost to answering, so Kompakt answers every time.

Version notes: v0 only (flexible). kafka-python 3.0.12 has no schema for it:
protocol/schemas holds ours.
"""
from __future__ import annotations

import uuid

import crc32c

from kompakt.protocol.schemas.messages import GetTelemetrySubscriptionsResponse

API_KEY = 71
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False

DEFAULT_PUSH_INTERVAL_MS = 300_000         # Kafka's ClientMetricsConfigs.DEFAULT_INTERVAL_MS
TELEMETRY_MAX_BYTES = 1_048_576            # Kafka's telemetry.max.bytes default
ACCEPTED_COMPRESSION = [4, 3, 1, 2]        # zstd, lz4, gzip, snappy (Kafka's order)
ZERO = uuid.UUID(int=0)


def _java_uuid_hash(u: uuid.UUID) -> int:
    """org.apache.kafka.common.Uuid.hashCode: fold msb ^ lsb to a signed 32-bit int."""
    h = (u.int >> 64) ^ (u.int & (2**64 - 1))
    return _int32((h >> 32) ^ h)


def _int32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - 2**32 if n >= 2**31 else n


def subscription_id(instance_id: uuid.UUID) -> int:
    # Java's Set.toString() of the empty set is "[]"; the interval is appended as text.
    crc = crc32c.crc32c(f"[]{DEFAULT_PUSH_INTERVAL_MS}".encode())
    return _int32(crc ^ _java_uuid_hash(instance_id))


async def handle(ctx, request) -> GetTelemetrySubscriptionsResponse:
    instance = request.client_instance_id
    if instance is None or instance == ZERO:
        instance = uuid.uuid4()
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=0, client_instance_id=instance,
        subscription_id=subscription_id(instance), accepted_compression_types=ACCEPTED_COMPRESSION,
        push_interval_ms=DEFAULT_PUSH_INTERVAL_MS, telemetry_max_bytes=TELEMETRY_MAX_BYTES,
        delta_temporality=True, requested_metrics=[])
