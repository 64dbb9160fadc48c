"""Dispatcher.prepare: what closes a connection, what is answered at once, what runs a handler."""
import struct

import pytest

from admin_harness import h, s16  # noqa: F401  (h is a fixture)

from kompakt.broker.network.dispatch import ProtocolViolation
from kompakt.broker.handlers import metadata


@pytest.mark.parametrize("frame, reason", [
    (b"\x00\x03", "shorter than a request header"),
    (struct.pack(">hhih", 999, 0, 1, -1), "unknown or unsupported API key 999"),
    (struct.pack(">hhih", 3, 14, 1, -1) + b"\x00", "Metadata v14 is not supported"),
    (struct.pack(">hhih", 1, 3, 1, -1), "Fetch v3 is not supported"),
    (struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00", "cannot decode Metadata v1"),
])
def test_violations(h, frame, reason):
    with pytest.raises(ProtocolViolation, match=reason):
        h.broker.dispatcher.prepare(bytearray(frame))


def test_too_new_api_versions_is_answered_without_a_handler(h):
    out = h.broker.dispatcher.prepare(bytearray(struct.pack(">hhih", 18, 77, 5, -1)))
    assert isinstance(out, bytes) and struct.unpack(">iih", out[:10]) == (len(out) - 4, 5, 35)


def test_a_good_frame_gets_context_module_and_request(h):
    ctx, module, request = h.broker.dispatcher.prepare(
        bytearray(struct.pack(">hhih", 3, 1, 9, 1) + b"c" + struct.pack(">i", -1)))
    assert module is metadata and request.topics is None
    assert (ctx.api_version, ctx.correlation_id, ctx.client_id) == (1, 9, "c")
    assert ctx.log_manager is h.lm and ctx.config is h.broker.config


def test_warm_order_covers_known_clients_and_every_newest_version(h):
    order = h.broker.dispatcher.warm_order()
    ranges = h.broker.dispatcher.ranges
    assert len(order) == len(set(order))
    assert {(key, hi) for key, lo, hi in ranges} <= set(order)
    assert {(0, 10), (1, 16), (0, 7), (1, 11), (3, 5), (1, 12)} <= set(order)   # librdkafka, aiokafka, kafka-python
    assert order.index((1, 16)) < order.index((20, max(hi for k, lo, hi in ranges if k == 20)))
    assert len(order) < sum(hi - lo + 1 for _, lo, hi in ranges) / 2             # not everything
