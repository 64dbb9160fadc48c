"""Arbitrary bytes never escape the protocol layer as anything but its own errors."""
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kompakt.broker.handlers import load_handlers
from kompakt.protocol import codec
from kompakt.protocol.framing import FrameReader, InvalidFrameError

SERVED = sorted((key, m.MIN_VERSION, m.MAX_VERSION) for key, m in load_handlers().items())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_frame_reader_on_any_stream(data, piece):
    r = FrameReader(max_bytes=1000)
    try:
        for i in range(0, len(data), piece):
            r.feed(data[i:i + piece])
            while (f := r.next_frame()) is not None:
                assert len(f) <= 1000
    except InvalidFrameError:
        pass


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SERVED), st.data(), st.binary(max_size=120))
def test_any_body_decodes_or_is_malformed(api, data, body):
    key, lo, hi = api
    version = data.draw(st.integers(min_value=lo, max_value=hi))
    frame = bytearray(struct.pack(">hhih", key, version, 1, -1) + b"\x00" + body)
    try:
        header = codec.read_request_header(frame)
        if key == 0:
            codec.decode_produce(header, frame)
        else:
            codec.decode_request(header, frame)
    except codec.MalformedRequestError:
        pass
