"""Request and response bytes <-> objects: headers, kafka-python bodies, and two hot-path codecs.

Role: everything between a frame (framing.py) and a handler. Generic APIs go through
kafka-python's compiled schema codecs (registry.py). The produce/fetch hot paths are written by
hand: Produce responses (`encode_produce_response`, no per-partition Python objects), and two
that carry record data and must not copy it:
  * Produce requests: `decode_produce` hands each partition's records out as a *writable
    memoryview into the request frame*, so storage can patch baseOffset in place and write it
    without a copy. (kafka-python's schema decodes `records` as `bytes(...)`: a copy, immutable.)
  * Fetch responses: `encode_fetch_response` returns a list of buffers (small header pieces with
    the record bytes from the segment files between them) for `transport.writelines`.
All three are checked byte for byte against kafka-python's codecs in tests/protocol.

Request header (v1; v2 adds the tagged-field section, used when the API version is flexible):

    offset  size  field
    0       2     int16  request_api_key
    2       2     int16  request_api_version
    4       4     int32  correlation_id
    8       2+n   string client_id      -- int16 length (-1 = null) + UTF-8; never compact
    10+n    1+    tagged fields (v2 only) -- uvarint count, then (uvarint tag, uvarint size, bytes)*

Response header: v0 = int32 correlation_id; v1 = v0 + tagged fields (a single 0x00 here).
ApiVersions responses always use v0 (registry.response_header_version).

Invariant: decoding never reads past the frame; any shortfall, bad length or null in a
non-nullable array raises `MalformedRequestError`, which closes the connection (Kafka does the
same), so handlers only ever see requests that match their schema.
"""
from __future__ import annotations

import struct
import threading
import uuid

from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer

from kompakt.protocol import registry

HEADER_FIXED = struct.Struct(">hhih")   # api_key, api_version, correlation_id, client_id length
assert HEADER_FIXED.size == 10
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
ACKS_TIMEOUT = struct.Struct(">hi")
assert ACKS_TIMEOUT.size == 6
FRAME_AND_CORRELATION = struct.Struct(">ii")
assert FRAME_AND_CORRELATION.size == 8
ZERO_UUID = uuid.UUID(int=0)


class MalformedRequestError(Exception):
    """Bytes that do not decode as the request they claim to be; the connection gets closed."""


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "body_offset", "flexible")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body_offset: int, flexible: bool):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_offset = body_offset
        self.flexible = flexible

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")


# -- primitives -------------------------------------------------------------------------------

def read_uvarint(buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:                      # the common case: lengths and counts below 128
        return b, pos + 1
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedRequestError("unsigned varint longer than 5 bytes")


def skip_tagged_fields(buf, pos: int) -> int:
    if buf[pos] == 0:                 # no tagged fields: nearly always
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise MalformedRequestError("tagged field runs past the end of the request")
    return pos


def write_uvarint(out: bytearray, value: int) -> None:
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# -- request header ------------------------------------------------------------------------------

def read_request_header(frame) -> RequestHeader:
    """Parse the request header at the start of `frame` (no size prefix)."""
    if len(frame) < HEADER_FIXED.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, n = HEADER_FIXED.unpack_from(frame, 0)
    pos = HEADER_FIXED.size
    if n < 0:
        client_id = None
    else:
        if pos + n > len(frame):
            raise MalformedRequestError("client_id runs past the end of the request")
        try:
            client_id = bytes(frame[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError("client_id is not valid UTF-8") from None
        pos += n
    flexible = registry.is_flexible(api_key, api_version)
    if flexible:
        try:
            pos = skip_tagged_fields(frame, pos)
        except (IndexError, MalformedRequestError):
            # An ApiVersions request newer than we know is answered from the correlation id alone
            # (KIP-511); its header layout is not ours to judge.
            if api_key != registry.API_VERSIONS_KEY:
                raise MalformedRequestError("request header tagged fields are truncated") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, flexible)


# -- generic bodies (kafka-python schemas) ---------------------------------------------------------

def decode_request(header: RequestHeader, frame):
    """Decode the body after the header with the API's compiled kafka-python decoder."""
    decode = registry.decoder(header.api_key, header.api_version)
    data = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        request, end = decode(data, header.body_offset)
    except Exception as exc:
        # kafka-python's generated decoders are pure functions of the bytes, so whatever they raise
        # (IndexError, struct.error, ... and AssertionError for a non-empty tagged-field section of a
        # struct that has no tagged fields) means the bytes are not this request.
        raise MalformedRequestError(f"cannot decode {registry.API[header.api_key].name} "
                                    f"v{header.api_version}: {str(exc) or type(exc).__name__}") from None
    if end > len(data):
        raise MalformedRequestError(f"{registry.API[header.api_key].name} v{header.api_version} "
                                    f"body runs {end - len(data)} bytes past the end of the request")
    api = registry.API[header.api_key]
    _check_nulls(request, api.request._struct, header.api_version, api.name)
    return request


# kafka-python decodes a length of -1 as None for every array, nullable or not; Kafka's own
# decoders refuse a null where the schema does not allow one (and close the connection). So do we,
# before a handler iterates a None: field lists per (struct, version), built once. Null strings
# pass: handlers answer them per entry (e.g. INVALID_TOPIC_EXCEPTION for a null topic name).
_NULL_CHECKS: dict[tuple[int, int], list] = {}


def _null_checks(struct, version: int) -> list:
    """(field name, nullable, sub-struct to descend into or None, is an array) for the fields of
    `struct` at `version` that need looking at: a non-nullable array or struct, or one whose
    elements hold such a field. Subtrees with nothing to check are left out, so the common request
    (every array non-null, leaf structs of scalars) is not walked element by element."""
    key = (id(struct), version)
    checks = _NULL_CHECKS.get(key)
    if checks is None:
        checks = []
        for field in struct.untagged_fields(version):
            if field.is_struct_array() or field.is_struct():
                sub = field if _null_checks(field, version) else None
            elif field.is_array():
                sub = None
            else:
                continue             # scalars and strings (a zero uuid decoding as None is legitimate)
            nullable = field.nullable_for_version_q(version)
            if nullable and sub is None:
                continue             # may be null, and nothing inside needs checking
            checks.append((field.name, nullable, sub, field.is_struct_array()))
        _NULL_CHECKS[key] = checks
    return checks


def _check_nulls(obj, struct, version: int, api_name: str) -> None:
    for name, nullable, sub, is_array in _null_checks(struct, version):
        value = getattr(obj, name)
        if value is None:
            if not nullable:
                raise MalformedRequestError(f"{api_name} v{version}: non-nullable field {name} is null")
        elif sub is not None:
            if is_array:
                for item in value:
                    _check_nulls(item, sub, version, api_name)
            else:
                _check_nulls(value, sub, version, api_name)


# One buffer per thread, reused for every generic response: a broker's loop encodes one response
# at a time, but two brokers in one process (kompakt.testing runs each on its own thread) must not
# share one.
_local = threading.local()


def _encode_buffer() -> EncodeBuffer:
    buf = getattr(_local, "buffer", None)
    if buf is None:
        buf = _local.buffer = EncodeBuffer(64 * 1024)
    return buf


def encode_response(header: RequestHeader, response, version: int | None = None) -> bytes:
    """Frame + response header + body for `response` (a kafka-python response object)."""
    key = header.api_key
    version = header.api_version if version is None else version
    encode = registry.encoder(key, version)
    out = _encode_buffer()
    out.pos = 0
    out.ensure(9)
    FRAME_AND_CORRELATION.pack_into(out.buf, 0, 0, header.correlation_id)
    out.pos = 8
    if registry.response_header_version(key, version) == 1:
        out.buf[8] = 0   # empty tagged fields
        out.pos = 9
    encode(response, out)
    INT32.pack_into(out.buf, 0, out.pos - 4)
    return bytes(memoryview(out.buf)[:out.pos])


def decode_response(api_key: int, version: int, body):
    """A response (without its size prefix) -> (correlation id, response object, bytes consumed):
    the client side of encode_response, for tools and tests that speak to a broker."""
    api = registry.API[api_key]
    (correlation_id,) = INT32.unpack_from(body, 0)
    pos = 4
    if registry.response_header_version(api_key, version) == 1:
        pos = skip_tagged_fields(body, pos)
    flexible = api.response.flexible_version_q(version)
    decode = api.response._struct.compiled_decode_from(version, compact=flexible, tagged=flexible,
                                                       data_class=api.response)
    response, end = decode(memoryview(body), pos)
    return correlation_id, response, end


# -- Produce request (hand-written: records stay in the frame) -----------------------------------

class ProduceTopicData:
    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, name, topic_id, partitions):
        self.name = name                  # str, None from v13
        self.topic_id = topic_id          # uuid.UUID from v13, else None
        self.partitions = partitions      # list of (index, records memoryview | None)

    def __repr__(self) -> str:
        return f"ProduceTopicData({self.name!r}, {self.topic_id}, {[(i, None if r is None else len(r)) for i, r in self.partitions]})"


class ProduceRequestData:
    __slots__ = ("version", "transactional_id", "acks", "timeout_ms", "topics")

    def __init__(self, version, transactional_id, acks, timeout_ms, topics):
        self.version = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics

    def __repr__(self) -> str:
        return (f"ProduceRequestData(v{self.version}, txn={self.transactional_id!r}, acks={self.acks}, "
                f"timeout_ms={self.timeout_ms}, topics={self.topics})")


def _read_string(view, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n, pos = read_uvarint(view, pos)
        n -= 1
    else:
        (n,) = INT16.unpack_from(view, pos)
        pos += 2
    if n < 0:
        return None, pos
    if pos + n > len(view):
        raise MalformedRequestError("string runs past the end of the request")
    return str(view[pos:pos + n], "utf-8"), pos + n


def _read_array_len(view, pos: int, compact: bool) -> tuple[int, int]:
    if compact:
        n, pos = read_uvarint(view, pos)
        n -= 1
    else:
        (n,) = INT32.unpack_from(view, pos)
        pos += 4
    if n > len(view) - pos:   # every element takes at least one byte
        raise MalformedRequestError(f"array of {n} elements cannot fit in the request")
    return n, pos


def decode_produce(header: RequestHeader, frame) -> ProduceRequestData:
    """ProduceRequest v0-v13 with each partition's records as a memoryview into `frame`."""
    version = header.api_version
    flex = version >= 9
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        pos = header.body_offset
        txn_id = None
        if version >= 3:          # v0-2 (only decoded to be refused politely) have no transactional id
            txn_id, pos = _read_string(view, pos, flex)
        acks, timeout_ms = ACKS_TIMEOUT.unpack_from(view, pos)
        pos += 6
        n_topics, pos = _read_array_len(view, pos, flex)
        topics = []
        for _ in range(max(n_topics, 0)):
            if version >= 13:
                topic_id = uuid.UUID(bytes=bytes(view[pos:pos + 16]))
                pos += 16
                name = None
            else:
                name, pos = _read_string(view, pos, flex)
                topic_id = None
            n_parts, pos = _read_array_len(view, pos, flex)
            parts = []
            for _ in range(max(n_parts, 0)):
                (index,) = INT32.unpack_from(view, pos)
                pos += 4
                if flex:
                    size, pos = read_uvarint(view, pos)
                    size -= 1
                else:
                    (size,) = INT32.unpack_from(view, pos)
                    pos += 4
                if size < 0:
                    records = None
                else:
                    if pos + size > len(view):
                        raise MalformedRequestError(
                            f"records of partition {index} run past the end of the request")
                    records = view[pos:pos + size]
                    pos += size
                if flex:
                    pos = skip_tagged_fields(view, pos)
                parts.append((index, records))
            if flex:
                pos = skip_tagged_fields(view, pos)
            topics.append(ProduceTopicData(name, topic_id, parts))
        if flex:
            pos = skip_tagged_fields(view, pos)
    except (IndexError, struct.error, UnicodeDecodeError, ValueError) as exc:
        raise MalformedRequestError(f"cannot decode Produce v{version}: {exc}") from None
    return ProduceRequestData(version, txn_id, acks, timeout_ms, topics)


# -- Produce response (hand-written: the produce path's per-request cost is mostly Python objects) ---

_PRODUCE_PART = struct.Struct(">ihq")        # index, error_code, base_offset
assert _PRODUCE_PART.size == 14


def _put_nullable_string(out: bytearray, s: str | None, compact: bool) -> None:
    if s is None:
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff"
    else:
        _put_string(out, s, compact)


def encode_produce_response(correlation_id: int, version: int, topics, throttle_time_ms: int = 0) -> bytes:
    """ProduceResponse v0-v13, framed. `topics`: [(name, topic_id, [(index, error_code, base_offset,
    log_append_time_ms, log_start_offset, error_message[, record_errors])])], record_errors
    [(batch_index, message)] (v8+). The v10+ tagged fields (current leader, node endpoints) are
    never sent: we are always the leader."""
    flex = version >= 9
    out = bytearray(FRAME_AND_CORRELATION.pack(0, correlation_id))
    if flex:
        out.append(0)
    _put_array_len(out, len(topics), flex)
    for name, topic_id, partitions in topics:
        if version >= 13:
            out += (topic_id or ZERO_UUID).bytes
        else:
            _put_string(out, name, flex)
        _put_array_len(out, len(partitions), flex)
        for index, error_code, base_offset, append_time, log_start, message, *rest in partitions:
            out += _PRODUCE_PART.pack(index, error_code, base_offset)
            if version >= 2:
                out += INT64.pack(append_time)
            if version >= 5:
                out += INT64.pack(log_start)
            if version >= 8:
                record_errors = rest[0] if rest else ()
                _put_array_len(out, len(record_errors), flex)
                for batch_index, reason in record_errors:
                    out += INT32.pack(batch_index)
                    _put_nullable_string(out, reason, flex)
                    if flex:
                        out.append(0)                   # the RecordError's tagged fields
                _put_nullable_string(out, message, flex)
            if flex:
                out.append(0)
        if flex:
            out.append(0)
    if version >= 1:
        out += INT32.pack(throttle_time_ms)
    if flex:
        out.append(0)
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# -- Fetch response (hand-written: record bytes are never copied into a response buffer) ---------

class FetchPartitionResult:
    __slots__ = ("index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "aborted_transactions", "preferred_read_replica", "records")

    def __init__(self, index, error_code=0, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
                 records=None):
        self.index = index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions  # list of (producer_id, first_offset) or None
        self.preferred_read_replica = preferred_read_replica
        self.records = records                            # bytes-like or None

    def __repr__(self) -> str:
        return (f"FetchPartitionResult({self.index}, err={self.error_code}, hw={self.high_watermark}, "
                f"lso={self.last_stable_offset}, lso_start={self.log_start_offset}, "
                f"records={None if self.records is None else len(self.records)})")


class FetchTopicResult:
    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, name, topic_id, partitions):
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions


_PART_FIXED_V4 = struct.Struct(">ihqq")      # index, error, high watermark, last stable offset
_PART_FIXED_V5 = struct.Struct(">ihqqq")     # + log start offset
assert _PART_FIXED_V4.size == 22 and _PART_FIXED_V5.size == 30
_ABORTED = struct.Struct(">qq")


def _put_string(out: bytearray, s: str, compact: bool) -> None:
    b = s.encode("utf-8")
    if compact:
        write_uvarint(out, len(b) + 1)
    else:
        out += INT16.pack(len(b))
    out += b


def _put_array_len(out: bytearray, n: int | None, compact: bool) -> None:
    if compact:
        write_uvarint(out, 0 if n is None else n + 1)
    else:
        out += INT32.pack(-1 if n is None else n)


def encode_fetch_response(correlation_id: int, version: int, topics: list[FetchTopicResult], *,
                          throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0) -> list:
    """FetchResponse v4-v18, framed, as a list of buffers; record bytes are passed through as-is."""
    flex = version >= 12
    chunks: list = []
    out = bytearray()
    out += FRAME_AND_CORRELATION.pack(0, correlation_id)
    if flex:
        out.append(0)                               # response header v1: no tagged fields
    out += INT32.pack(throttle_time_ms)
    if version >= 7:
        out += INT16.pack(error_code)
        out += INT32.pack(session_id)
    _put_array_len(out, len(topics), flex)
    part_fixed = _PART_FIXED_V5 if version >= 5 else _PART_FIXED_V4
    total = 0
    for topic in topics:
        if version >= 13:
            out += (topic.topic_id or ZERO_UUID).bytes
        else:
            _put_string(out, topic.name, flex)
        _put_array_len(out, len(topic.partitions), flex)
        for p in topic.partitions:
            if version >= 5:
                out += part_fixed.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset,
                                       p.log_start_offset)
            else:
                out += part_fixed.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            _put_array_len(out, None if aborted is None else len(aborted), flex)
            if aborted:
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flex:
                        out.append(0)
            if version >= 11:
                out += INT32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                if flex:
                    out.append(0)
                else:
                    out += INT32.pack(-1)
            else:
                n = len(records)
                if flex:
                    write_uvarint(out, n + 1)
                else:
                    out += INT32.pack(n)
                if n:
                    if n < 512:          # tiny: cheaper to copy than to add a chunk
                        out += records
                    else:
                        total += len(out)
                        chunks.append(out)
                        chunks.append(records)
                        total += n
                        out = bytearray()
            if flex:
                out.append(0)                       # partition tagged fields
        if flex:
            out.append(0)                           # topic tagged fields
    if flex:
        out.append(0)                               # top-level tagged fields
    chunks.append(out)
    total += len(out)
    INT32.pack_into(chunks[0], 0, total - 4)
    return chunks


# -- ApiVersions fallback ---------------------------------------------------------------------

def encode_api_versions_error(correlation_id: int, error_code: int,
                              ranges: list[tuple[int, int, int]]) -> bytes:
    """ApiVersionsResponse v0 body with `error_code` (for request versions newer than ours).

        int32 size | int32 correlation_id | int16 error_code | int32 n | (int16 key, int16 min, int16 max)*n
    """
    body = bytearray(FRAME_AND_CORRELATION.pack(0, correlation_id))
    body += INT16.pack(error_code)
    body += INT32.pack(len(ranges))
    for key, lo, hi in ranges:
        body += struct.pack(">hhh", key, lo, hi)
    INT32.pack_into(body, 0, len(body) - 4)
    return bytes(body)
