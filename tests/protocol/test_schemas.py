"""Our schemas for APIs kafka-python lacks (protocol/schemas): golden bytes, field by field,
through the same registry codecs the broker uses."""
import uuid

from kompakt.protocol import codec, registry
from kompakt.protocol.schemas.messages import GetTelemetrySubscriptionsResponse

INSTANCE = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_get_telemetry_subscriptions_is_registered_flexible_v0():
    api = registry.API[71]
    assert (api.name, api.schema_min, api.schema_max, api.flexible_from) == ("GetTelemetrySubscriptions", 0, 0, 0)
    assert registry.request_header_version(71, 0) == 2 and registry.response_header_version(71, 0) == 1


def test_get_telemetry_subscriptions_request_golden():
    frame = (bytes.fromhex("0047 0000 00000005")   # api key 71, v0, correlation id 5
             + b"\x00\x01c" + b"\x00"             # client id "c", header tagged fields
             + INSTANCE.bytes                     # client_instance_id
             + b"\x00")                           # tagged fields
    header = codec.read_request_header(frame)
    request = codec.decode_request(header, frame)
    assert request.client_instance_id == INSTANCE


def test_get_telemetry_subscriptions_response_golden():
    response = GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=0, client_instance_id=INSTANCE, subscription_id=-2,
        accepted_compression_types=[4, 3], push_interval_ms=300000, telemetry_max_bytes=1048576,
        delta_temporality=True, requested_metrics=[])
    header = codec.RequestHeader(71, 0, 9, "c", 0, True)
    assert codec.encode_response(header, response) == (
        bytes.fromhex("0000002d")      # frame size 45
        + bytes.fromhex("00000009")    # correlation id
        + b"\x00"                      # response header v1 tagged fields
        + bytes.fromhex("00000000")    # throttle_time_ms
        + bytes.fromhex("0000")        # error_code
        + INSTANCE.bytes               # client_instance_id
        + bytes.fromhex("fffffffe")    # subscription_id -2
        + b"\x03\x04\x03"              # accepted_compression_types: compact array of 2 int8
        + bytes.fromhex("000493e0")    # push_interval_ms 300000
        + bytes.fromhex("00100000")    # telemetry_max_bytes 1048576
        + b"\x01"                      # delta_temporality
        + b"\x01"                      # requested_metrics: empty compact array
        + b"\x00")                     # tagged fields


def test_decode_response_reads_back_what_encode_response_wrote():
    response = GetTelemetrySubscriptionsResponse(
        throttle_time_ms=7, error_code=0, client_instance_id=INSTANCE, subscription_id=3,
        accepted_compression_types=[4], push_interval_ms=1000, telemetry_max_bytes=10,
        delta_temporality=False, requested_metrics=["org.apache.kafka."])
    framed = codec.encode_response(codec.RequestHeader(71, 0, 42, "c", 0, True), response)
    correlation_id, decoded, end = codec.decode_response(71, 0, framed[4:])
    assert (correlation_id, end) == (42, len(framed) - 4)
    assert (decoded.throttle_time_ms, decoded.requested_metrics, decoded.client_instance_id) == (
        7, ["org.apache.kafka."], INSTANCE)
