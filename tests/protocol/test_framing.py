"""FrameReader: size prefixes, split reads, large frames read in place, and bad sizes."""
import os
import struct

import pytest

from kompakt.protocol.framing import LARGE_FRAME, FrameReader, InvalidFrameError, frame


def frames_of(reader: FrameReader) -> list[bytes]:
    out = []
    while (f := reader.next_frame()) is not None:
        out.append(bytes(f))
    return out


def test_one_frame_in_one_piece():
    r = FrameReader()
    r.feed(b"\x00\x00\x00\x03abc")
    assert frames_of(r) == [b"abc"]
    assert r.buffered == 0


def test_frames_split_at_every_byte_boundary():
    payloads = [b"", b"x", b"hello world", os.urandom(1000)]
    stream = b"".join(frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        r = FrameReader()
        got = []
        for piece in (stream[:cut], stream[cut:]):
            r.feed(piece)
            got += frames_of(r)
        assert got == payloads, cut


def test_many_small_frames_in_one_read_and_buffer_reuse():
    r = FrameReader(initial=64)
    payloads = [os.urandom(n) for n in range(1, 200)]
    r.feed(b"".join(frame(p) for p in payloads))
    assert frames_of(r) == payloads


def test_large_frame_gets_its_own_buffer_and_is_read_in_place():
    payload = os.urandom(LARGE_FRAME * 3 + 17)
    data = frame(payload) + frame(b"next")
    r = FrameReader()
    got = []
    pos = 0
    while pos < len(data):                       # the BufferedProtocol loop: get_buffer, fill, update
        buf = r.get_buffer(-1)
        n = min(len(buf), 5000, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        r.buffer_updated(n)
        pos += n
        got += frames_of(r)
    assert got == [payload, b"next"]


def test_frames_are_independent_writable_copies():
    r = FrameReader()
    r.feed(frame(b"first") + frame(b"second"))
    a = r.next_frame()
    b = r.next_frame()
    a[0:1] = b"F"                                 # storage patches produce requests in place
    assert bytes(a) == b"First" and bytes(b) == b"second"
    r.feed(frame(b"third"))
    assert bytes(r.next_frame()) == b"third" and bytes(a) == b"First"


def test_size_above_max_is_rejected_before_buffering():
    r = FrameReader(max_bytes=1000)
    r.feed(struct.pack(">i", 1001))
    with pytest.raises(InvalidFrameError, match="socket.request.max.bytes = 1000"):
        r.next_frame()


def test_negative_size_is_rejected():
    r = FrameReader()
    r.feed(b"\xff\xff\xff\xfe")
    with pytest.raises(InvalidFrameError, match="size = -2"):
        r.next_frame()


def test_frame_of_exactly_max_bytes_is_accepted():
    r = FrameReader(max_bytes=10)
    r.feed(frame(b"0123456789"))
    assert frames_of(r) == [b"0123456789"]


def test_incomplete_prefix_waits():
    r = FrameReader()
    r.feed(b"\x00\x00")
    assert r.next_frame() is None
    r.feed(b"\x00\x01Z")
    assert frames_of(r) == [b"Z"]


def test_large_frame_buffers_are_recycled():
    r = FrameReader()
    first_payload = os.urandom(LARGE_FRAME * 2)
    r.feed(frame(first_payload)[:1000])
    assert r.next_frame() is None                    # incomplete and large: gets its own buffer
    r.feed(frame(first_payload)[1000:])
    first = r.next_frame()
    assert bytes(first) == first_payload and isinstance(first, memoryview) and not first.readonly
    owner = first.obj
    r.recycle(first)
    second_payload = os.urandom(LARGE_FRAME + 10)    # smaller: fits the recycled buffer
    r.feed(frame(second_payload)[:100])
    assert r.next_frame() is None
    r.feed(frame(second_payload)[100:])
    second = r.next_frame()
    assert second.obj is owner and len(second) == len(second_payload)
    assert bytes(second) == second_payload
    third_payload = os.urandom(LARGE_FRAME * 3)      # larger than any spare: a new buffer
    r.feed(frame(third_payload)[:100])
    assert r.next_frame() is None
    r.feed(frame(third_payload)[100:])
    third = r.next_frame()
    assert third.obj is not owner and bytes(third) == third_payload


def test_recycle_ignores_small_frames_and_caps_spares():
    r = FrameReader()
    r.feed(frame(b"small"))
    small = r.next_frame()
    r.recycle(small)
    for _ in range(5):
        r.recycle(memoryview(bytearray(LARGE_FRAME * 2)))
    assert len(r._spares) == 2
