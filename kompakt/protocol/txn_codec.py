"""Hand-written codecs for the requests a transactional producer sends once or more per transaction.

Role: bytes <-> objects for EndTxn (v0-5), AddOffsetsToTxn (v0-5) and the client versions of
AddPartitionsToTxn (v0-3), the three round trips of every transaction after the first (with
Produce, which codec.py already decodes by hand). kafka-python's generic codecs cost 2-4 us to
decode each request and 5-7 us to build and encode each answer; these cost well under 1 us. The
decoded objects carry kafka-python's field names, so handlers read them either way, and every
codec here is checked byte for byte against kafka-python's in tests/protocol/test_txn_codec.py.
Other versions (AddPartitionsToTxn v4+, the broker-to-broker batch form) keep the generic codec.

Layouts (Kafka's EndTxnRequest.json, AddOffsetsToTxnRequest.json, AddPartitionsToTxnRequest.json;
v3+ are flexible: compact strings and arrays (length + 1 as an unsigned varint), each struct ends
with a tagged-field section):

    EndTxn request            transactional_id STRING, producer_id int64, producer_epoch int16,
                              committed bool
    EndTxn response           throttle_time_ms int32, error_code int16, (v5+) producer_id int64,
                              producer_epoch int16
    AddOffsetsToTxn request   transactional_id STRING, producer_id int64, producer_epoch int16,
                              group_id STRING
    AddOffsetsToTxn response  throttle_time_ms int32, error_code int16
    AddPartitionsToTxn v0-3   transactional_id STRING, producer_id int64, producer_epoch int16,
      request                 topics ARRAY of (name STRING, partitions ARRAY of int32)
    AddPartitionsToTxn v0-3   throttle_time_ms int32, results ARRAY of (name STRING,
      response                results ARRAY of (partition_index int32, error_code int16))

Invariant: as codec.py's decoders, nothing is read past the frame and a shortfall, a bad length or
a null array raises MalformedRequestError (the connection is closed); a null string decodes as None
(the handlers answer it, as with the generic codec).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from kompakt.protocol.codec import (FRAME_AND_CORRELATION, INT32, MalformedRequestError, RequestHeader,
                                    _put_array_len, _put_string, _read_array_len, _read_string,
                                    skip_tagged_fields)

_PRODUCER = struct.Struct(">qh")            # producer_id, producer_epoch
_THROTTLE_ERROR = struct.Struct(">ih")      # throttle_time_ms, error_code
_PARTITION_RESULT = struct.Struct(">ih")    # partition_index, error_code
_FLEXIBLE_FROM = 3                          # the first flexible version of all three APIs
END_TXN_PRODUCER_FIELDS_FROM = 5            # EndTxn v5 answers the (bumped) producer id and epoch


class EndTxnRequestData(NamedTuple):
    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    committed: bool


class AddOffsetsToTxnRequestData(NamedTuple):
    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    group_id: str | None


class TxnTopic(NamedTuple):
    name: str | None
    partitions: list


class AddPartitionsToTxnRequestData(NamedTuple):
    """AddPartitionsToTxn v0-3 under kafka-python's v3_and_below_* names."""
    v3_and_below_transactional_id: str | None
    v3_and_below_producer_id: int
    v3_and_below_producer_epoch: int
    v3_and_below_topics: list


def _decode(name: str, header: RequestHeader, frame, read_rest, make):
    """The common prefix (transactional_id, producer_id, producer_epoch), then `read_rest(view,
    pos, flexible, version) -> (value, pos)`, then the request's tagged fields."""
    flex = header.api_version >= _FLEXIBLE_FROM
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        tid, pos = _read_string(view, header.body_offset, flex)
        pid, epoch = _PRODUCER.unpack_from(view, pos)
        rest, pos = read_rest(view, pos + _PRODUCER.size, flex, header.api_version)
        if flex:
            skip_tagged_fields(view, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedRequestError(f"cannot decode {name} v{header.api_version}: "
                                    f"{exc or type(exc).__name__}") from None
    return make(tid, pid, epoch, rest)


def _committed(view, pos: int, _flex: bool, _version: int):
    return view[pos] != 0, pos + 1


def _topics(view, pos: int, flex: bool, version: int):
    n_topics, pos = _read_array_len(view, pos, flex)
    if n_topics < 0:
        raise MalformedRequestError(f"AddPartitionsToTxn v{version}: non-nullable field "
                                    f"v3_and_below_topics is null")
    topics = []
    for _ in range(n_topics):
        name, pos = _read_string(view, pos, flex)
        n, pos = _read_array_len(view, pos, flex)
        if n < 0:
            raise MalformedRequestError(f"AddPartitionsToTxn v{version}: non-nullable field partitions is null")
        partitions = list(struct.unpack_from(f">{n}i", view, pos))
        pos += 4 * n
        if flex:
            pos = skip_tagged_fields(view, pos)
        topics.append(TxnTopic(name, partitions))
    return topics, pos


def decode_end_txn(header: RequestHeader, frame) -> EndTxnRequestData:
    return _decode("EndTxn", header, frame, _committed, EndTxnRequestData)


def decode_add_offsets_to_txn(header: RequestHeader, frame) -> AddOffsetsToTxnRequestData:
    return _decode("AddOffsetsToTxn", header, frame, lambda view, pos, flex, _v: _read_string(view, pos, flex),
                   AddOffsetsToTxnRequestData)


def decode_add_partitions_v3_and_below(header: RequestHeader, frame) -> AddPartitionsToTxnRequestData:
    return _decode("AddPartitionsToTxn", header, frame, _topics, AddPartitionsToTxnRequestData)


def _framed(out: bytearray) -> bytes:
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _head(correlation_id: int, flex: bool) -> bytearray:
    out = bytearray(FRAME_AND_CORRELATION.pack(0, correlation_id))
    if flex:
        out.append(0)                   # response header v1: no tagged fields
    return out


def encode_end_txn_response(correlation_id: int, version: int, error_code: int, throttle_time_ms: int = 0,
                            producer_id: int = -1, producer_epoch: int = -1) -> bytes:
    """EndTxnResponse v0-5, framed."""
    flex = version >= _FLEXIBLE_FROM
    out = _head(correlation_id, flex)
    out += _THROTTLE_ERROR.pack(throttle_time_ms, error_code)
    if version >= END_TXN_PRODUCER_FIELDS_FROM:
        out += _PRODUCER.pack(producer_id, producer_epoch)
    if flex:
        out.append(0)
    return _framed(out)


def encode_add_offsets_to_txn_response(correlation_id: int, version: int, error_code: int,
                                       throttle_time_ms: int = 0) -> bytes:
    """AddOffsetsToTxnResponse v0-5, framed."""
    flex = version >= _FLEXIBLE_FROM
    out = _head(correlation_id, flex)
    out += _THROTTLE_ERROR.pack(throttle_time_ms, error_code)
    if flex:
        out.append(0)
    return _framed(out)


def encode_add_partitions_response_v3_and_below(correlation_id: int, version: int, topics,
                                                throttle_time_ms: int = 0) -> bytes:
    """AddPartitionsToTxnResponse v0-3, framed; `topics`: [(name, [(partition, error_code)])]."""
    flex = version >= _FLEXIBLE_FROM
    out = _head(correlation_id, flex)
    out += INT32.pack(throttle_time_ms)
    _put_array_len(out, len(topics), flex)
    for name, partitions in topics:
        _put_string(out, name, flex)
        _put_array_len(out, len(partitions), flex)
        for partition, code in partitions:
            out += _PARTITION_RESULT.pack(partition, code)
            if flex:
                out.append(0)
        if flex:
            out.append(0)
    if flex:
        out.append(0)
    return _framed(out)
