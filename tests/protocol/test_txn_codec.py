"""The hand-written transactional codecs (protocol/txn_codec.py) against golden bytes and against
kafka-python's schema codecs for every version they serve."""
import struct

import pytest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
                                                 AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
                                                 EndTxnRequest, EndTxnResponse)
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer

from kompakt.protocol import codec, registry, txn_codec
from kompakt.protocol.codec import MalformedRequestError


def hx(s: str) -> bytearray:
    """Hex with spaces and #-comments, one field per line."""
    return bytearray.fromhex("".join(line.split("#")[0] for line in s.splitlines()))


def frame_of(request, version: int, cid: int = 7) -> bytearray:
    request.with_header(correlation_id=cid, client_id="c")
    return bytearray(request.encode(version=version, header=True))


def reference(api_key: int, version: int, response, cid: int) -> bytes:
    """kafka-python's encoding of `response`, framed the way codec.encode_response frames it."""
    out = EncodeBuffer(256)
    registry.encoder(api_key, version)(response, out)
    head = struct.pack(">i", cid) + (b"\x00" if registry.response_header_version(api_key, version) else b"")
    body = head + bytes(out.buf[:out.pos])
    return struct.pack(">i", len(body)) + body


# -- EndTxn -----------------------------------------------------------------------------------------

def test_end_txn_v1_golden():
    frame = hx("""
        001a 0001 00000009 0002 7264   # EndTxn v1, correlation 9, client_id "rd"
        0004 74782d31                  # transactional_id "tx-1"
        0000000000000405               # producer_id 1029
        0003                           # producer_epoch 3
        01                             # committed
    """)
    r = txn_codec.decode_end_txn(codec.read_request_header(frame), frame)
    assert (r.transactional_id, r.producer_id, r.producer_epoch, r.committed) == ("tx-1", 1029, 3, True)
    assert txn_codec.encode_end_txn_response(9, 1, 47) == hx("""
        0000000a    # frame size 10
        00000009    # correlation id
        00000000    # throttle_time_ms
        002f        # error_code 47 INVALID_PRODUCER_EPOCH
    """)


@pytest.mark.parametrize("version", range(0, 6))
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_matches_kafka_python(version, committed):
    frame = frame_of(EndTxnRequest(transactional_id="émile-7", producer_id=2**40 + 3, producer_epoch=32766,
                                   committed=committed), version)
    ours = txn_codec.decode_end_txn(codec.read_request_header(frame), frame)
    ref = codec.decode_request(codec.read_request_header(frame), frame)
    assert (ours.transactional_id, ours.producer_id, ours.producer_epoch, ours.committed) == \
           (ref.transactional_id, ref.producer_id, ref.producer_epoch, ref.committed)
    pid, epoch = (77, 4) if version >= 5 else (-1, -1)
    assert txn_codec.encode_end_txn_response(7, version, 51, 12, pid, epoch) == reference(
        26, version, EndTxnResponse(version=version, throttle_time_ms=12, error_code=51, producer_id=pid,
                                    producer_epoch=epoch), 7)


# -- AddOffsetsToTxn --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_add_offsets_to_txn_matches_kafka_python(version):
    frame = frame_of(AddOffsetsToTxnRequest(transactional_id="t", producer_id=5, producer_epoch=0,
                                            group_id="group-ü"), version)
    ours = txn_codec.decode_add_offsets_to_txn(codec.read_request_header(frame), frame)
    ref = codec.decode_request(codec.read_request_header(frame), frame)
    assert (ours.transactional_id, ours.producer_id, ours.producer_epoch, ours.group_id) == \
           (ref.transactional_id, ref.producer_id, ref.producer_epoch, ref.group_id)
    assert txn_codec.encode_add_offsets_to_txn_response(7, version, 51) == reference(
        25, version, AddOffsetsToTxnResponse(version=version, throttle_time_ms=0, error_code=51), 7)


# -- AddPartitionsToTxn v0-3 ------------------------------------------------------------------------

def test_add_partitions_v0_golden():
    frame = hx("""
        0018 0000 00000003 ffff   # AddPartitionsToTxn v0, correlation 3, client_id null
        0001 74                   # transactional_id "t"
        0000000000000001 0000     # producer_id 1, epoch 0
        00000001                  # topics: 1
        0001 61                   #   name "a"
        00000002 00000000 00000005  # partitions [0, 5]
    """)
    r = txn_codec.decode_add_partitions_v3_and_below(codec.read_request_header(frame), frame)
    assert (r.v3_and_below_transactional_id, r.v3_and_below_producer_id, r.v3_and_below_producer_epoch) == ("t", 1, 0)
    assert [(t.name, t.partitions) for t in r.v3_and_below_topics] == [("a", [0, 5])]
    assert txn_codec.encode_add_partitions_response_v3_and_below(3, 0, [("a", [(0, 0), (5, 51)])]) == hx("""
        0000001f    # frame size 31
        00000003    # correlation id
        00000000    # throttle_time_ms
        00000001    # results: 1 topic
        0001 61     #   name "a"
        00000002    #   2 partitions
        00000000 0000   # partition 0, NONE
        00000005 0033   # partition 5, CONCURRENT_TRANSACTIONS
    """)


@pytest.mark.parametrize("version", range(0, 4))
def test_add_partitions_matches_kafka_python(version):
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    frame = frame_of(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=9, v3_and_below_producer_epoch=2,
        v3_and_below_topics=[T(name="a", partitions=[0, 1, 2]), T(name="bé", partitions=[])]), version)
    ours = txn_codec.decode_add_partitions_v3_and_below(codec.read_request_header(frame), frame)
    ref = codec.decode_request(codec.read_request_header(frame), frame)
    assert (ours.v3_and_below_transactional_id, ours.v3_and_below_producer_id, ours.v3_and_below_producer_epoch) == \
           (ref.v3_and_below_transactional_id, ref.v3_and_below_producer_id, ref.v3_and_below_producer_epoch)
    assert [(t.name, list(t.partitions)) for t in ours.v3_and_below_topics] == \
           [(t.name, list(t.partitions)) for t in ref.v3_and_below_topics]
    R = AddPartitionsToTxnResponse
    TR, PR = R.AddPartitionsToTxnTopicResult, R.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult
    results = [("a", [(0, 0), (1, 3)]), ("bé", [])]
    assert txn_codec.encode_add_partitions_response_v3_and_below(7, version, results, 5) == reference(
        24, version, R(version=version, throttle_time_ms=5, results_by_topic_v3_and_below=[
            TR(name=n, results_by_partition=[PR(partition_index=p, partition_error_code=c) for p, c in parts])
            for n, parts in results]), 7)


# -- malformed input closes the connection (MalformedRequestError), never a crash -------------------

@pytest.mark.parametrize("decode, request_, version", [
    (txn_codec.decode_end_txn, EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0,
                                              committed=True), 1),
    (txn_codec.decode_end_txn, EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0,
                                              committed=True), 3),
    (txn_codec.decode_add_offsets_to_txn, AddOffsetsToTxnRequest(transactional_id="t", producer_id=1,
                                                                  producer_epoch=0, group_id="g"), 3),
    (txn_codec.decode_add_partitions_v3_and_below, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="t", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="a", partitions=[1])]), 0),
])
def test_every_truncation_is_malformed(decode, request_, version):
    frame = frame_of(request_, version)
    header = codec.read_request_header(frame)
    for end in range(header.body_offset, len(frame)):
        with pytest.raises(MalformedRequestError):
            decode(header, frame[:end])


def test_null_topics_and_absurd_lengths_are_malformed():
    head = "0018 0000 00000003 ffff 0001 74 0000000000000001 0000"
    for body, match in (("ffffffff", "non-nullable field v3_and_below_topics"),
                        ("00000001 0001 61 ffffffff", "non-nullable field partitions"),
                        ("7fffffff", "cannot fit")):
        frame = hx(head + body)
        with pytest.raises(MalformedRequestError, match=match):
            txn_codec.decode_add_partitions_v3_and_below(codec.read_request_header(frame), frame)
