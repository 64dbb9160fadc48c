"""The consumer protocol's subscription and assignment bytes (ConsumerProtocolSubscription /
ConsumerProtocolAssignment v0-3), and the classic member metadata a consumer group keeps in
tag 0 of ConsumerGroupMemberMetadataValue: golden bytes, round trips, malformed input."""
from __future__ import annotations

import pytest

from kompakt.protocol import consumer_group_records as cgr
from kompakt.protocol import consumer_protocol as cp
from kompakt.protocol import group_records as gr


def test_subscription_v3_golden_bytes_and_round_trip():
    sub = cp.Subscription(["t"], b"u", {"t": [1]}, 7, "r", 3)
    data = cp.encode_subscription(sub)
    assert data == (b"\x00\x03"                               # version 3
                    + b"\x00\x00\x00\x01" + b"\x00\x01t"       # topics ["t"]
                    + b"\x00\x00\x00\x01u"                     # user data b"u"
                    + b"\x00\x00\x00\x01" + b"\x00\x01t"       # owned partitions: t
                    + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"  # [1]
                    + b"\x00\x00\x00\x07"                      # generation 7
                    + b"\x00\x01r")                            # rack "r"
    assert cp.decode_subscription(data) == sub
    assert cp.subscription_version(data) == 3


def test_subscription_versions_and_future_versions():
    v0 = cp.encode_consumer_subscription(["a", "b"])
    assert v0 == b"\x00\x00" + b"\x00\x00\x00\x02\x00\x01a\x00\x01b" + b"\xff\xff\xff\xff"
    assert cp.decode_subscription(v0) == cp.Subscription(["a", "b"])
    assert cp.consumer_subscription_topics(v0) == ["a", "b"]
    # a version from the future is read with version 3's layout, the rest ignored (Kafka's rule)
    v3 = cp.encode_subscription(cp.Subscription(["a"], None, {}, -1, None, 3))
    future = b"\x00\x09" + v3[2:] + b"new fields"
    assert cp.decode_subscription(future).topics == ["a"] and cp.subscription_version(future) == 3
    for bad in (b"", b"\x00", b"\xff\xff" + v3[2:], v3[:-1]):
        with pytest.raises(gr.GroupRecordError):
            cp.decode_subscription(bad)
        assert cp.consumer_subscription_topics(bad) is None


def test_assignment_golden_bytes_versions_and_empty():
    data = cp.encode_assignment({"t": [2, 0], "u": []}, version=1)
    assert data == (b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t"      # v1, one topic "t"
                    + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x00\x00\x02"   # [0, 2]
                    + b"\xff\xff\xff\xff")                                # no user data
    assert cp.decode_assignment(data) == {"t": [0, 2]}
    assert cp.encode_assignment({}, version=7)[:2] == b"\x00\x03"        # capped at 3
    assert cp.decode_assignment(b"") == {}        # a member that never got an assignment
    with pytest.raises(gr.GroupRecordError):
        cp.decode_assignment(b"\x00\x00\x00\x00\x00\x05")


def test_member_metadata_classic_tag_golden_bytes():
    common = dict(instance_id=None, rack_id=None, client_id="c", client_host="h",
                  subscribed_topic_names=[], subscribed_topic_regex=None, rebalance_timeout_ms=5,
                  server_assignor=None)
    plain = cgr.encode_member_metadata_value(**common)
    classic = cgr.encode_member_metadata_value(**common, classic_member_metadata={
        "session_timeout_ms": 45000, "supported_protocols": [("range", b"\x00\x01")]})
    # the same fields, then a tagged-field section with tag 0 instead of an empty one
    assert plain[-1:] == b"\x00" and classic[:len(plain) - 1] == plain[:-1]
    assert classic[len(plain) - 1:] == (b"\x01" + b"\x00" + b"\x10"      # 1 tag: tag 0, 16 bytes
                                        + b"\x00\x00\xaf\xc8"            # session 45000
                                        + b"\x02" + b"\x06range"         # [1]: name "range"
                                        + b"\x03\x00\x01" + b"\x00"      # metadata 2 bytes, tags
                                        + b"\x00")                       # tags
    key = cgr.encode_key(cgr.MEMBER_METADATA, "g", "m")
    assert gr.decode_value(key, classic)["classic_member_metadata"] == {
        "session_timeout_ms": 45000, "supported_protocols": [("range", b"\x00\x01")]}
    assert gr.decode_value(key, plain)["classic_member_metadata"] is None
    assert cgr.kafka_json_value(cgr.MEMBER_METADATA, gr.decode_value(key, classic))[
        "classicMemberMetadata"] == {"sessionTimeoutMs": 45000,
                                     "supportedProtocols": [{"name": "range", "metadata": "AAE="}]}
    with pytest.raises(gr.GroupRecordError):
        gr.decode_value(key, classic[:-3] + b"\x00\x00")                 # truncated tag
