"""Keys and values of the internal `__consumer_offsets` topic (sans-io, bytes in, dicts out).

Role: Kafka's group coordinator stores committed offsets and classic-group metadata as records of
the compacted topic `__consumer_offsets`; this module encodes and decodes their keys and values
exactly as Kafka 4 does (group-coordinator/src/main/resources/common/message/*.json), so Kafka's
tools read our logs and `kompakt dump-log --offsets-decoder` reads Kafka's. It never does I/O.

Every key and every non-null value starts with a big-endian int16 *version*; the key's version
also says which record it is (Kafka's "record type"):

    key version 0 or 1  -> OffsetCommitKey   value: OffsetCommitValue v0-v4
    key version 2       -> GroupMetadataKey  value: GroupMetadataValue v0-v4
    key version 3-8, 16 -> KIP-848 consumer group records (consumer_group_records.py)
    other versions >= 3 -> share / streams group records; decoded as {"type": "unknown"}

A record whose value is null is a *tombstone*: the cleaner removes the key after
delete.retention.ms. Offsets deleted or expired and groups deleted are written as tombstones.

Byte layout (STRING = int16 length + UTF-8; NULLABLE_STRING: length -1 is null;
BYTES = int32 length + bytes; ARRAY = int32 count + items). Flexible versions (v4 of both values)
use COMPACT forms instead (unsigned varint length+1, 0 = null) and end every struct with a tagged
field section (unsigned varint count, then tag/size/bytes; unknown tags are skipped):

    OffsetCommitKey (key version 0/1)
        int16  version        0 or 1 (Kafka 4 writes 1)
        STRING group
        STRING topic
        int32  partition
    OffsetCommitValue
        int16  version        Kafka 4 writes 3, or 1 when the commit carries an expire timestamp
        int64  offset
        int32  leaderEpoch    v3+ (-1 = none)
        STRING metadata
        int64  commitTimestamp
        int64  expireTimestamp  v1 only (-1 = none)
    GroupMetadataKey (key version 2)
        int16  version        2
        STRING group
    GroupMetadataValue
        int16  version        Kafka 4 writes 3
        STRING protocolType
        int32  generation
        NULLABLE_STRING protocol
        NULLABLE_STRING leader
        int64  currentStateTimestamp   v2+ (-1 = none)
        ARRAY  members of:
            STRING memberId
            NULLABLE_STRING groupInstanceId   v3+
            STRING clientId
            STRING clientHost
            int32  rebalanceTimeout   v1+ (-1 = none)
            int32  sessionTimeout
            BYTES  subscription
            BYTES  assignment

Invariants: `decode_*(encode_*(x)) == x` for every version; decoding rejects truncated or
trailing bytes with `GroupRecordError` (never returns half a record).
"""
from __future__ import annotations

import struct
from typing import Any

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3           # Kafka 4: highest non-flexible version
OFFSET_COMMIT_VALUE_VERSION_EXPIRE = 1    # the only version with expireTimestamp
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_V3_HEAD = struct.Struct(">hqi")   # version, offset, leaderEpoch
assert (_I16.size, _I32.size, _I64.size, _VALUE_V3_HEAD.size) == (2, 4, 8, 14)


class GroupRecordError(ValueError):
    """Bytes that are not a valid __consumer_offsets key or value."""


# ---------------------------------------------------------------------------------------------
# Primitive readers/writers
# ---------------------------------------------------------------------------------------------

class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, flexible: bool = False):
        self.buf = memoryview(buf)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise GroupRecordError(f"truncated record: need {n} bytes at position {self.pos}, "
                                   f"have {len(self.buf) - self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uuid(self) -> bytes:
        """A UUID as its 16 raw bytes."""
        return bytes(self._take(16))

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise GroupRecordError("unsigned varint longer than 5 bytes")

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.i32() if wide else self.i16()

    def string(self, nullable: bool = False) -> str | None:
        n = self._length(wide=False)
        if n < 0:
            if nullable:
                return None
            raise GroupRecordError(f"null in a non-nullable string at position {self.pos}")
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroupRecordError(f"string is not UTF-8: {exc}") from None

    def bytes_(self, nullable: bool = False) -> bytes | None:
        n = self._length(wide=True)
        if n < 0:
            if nullable:
                return None
            raise GroupRecordError(f"null in a non-nullable bytes field at position {self.pos}")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self._length(wide=True)
        if n < 0:
            raise GroupRecordError("null array")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged-field section: {tag: raw bytes}; callers read the tags they know and
        ignore the others, as Kafka does."""
        if not self.flexible:
            return {}
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = bytes(self._take(self.uvarint()))
        return out

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise GroupRecordError(f"{len(self.buf) - self.pos} trailing bytes after the record")


class _Writer:
    __slots__ = ("parts", "flexible")

    def __init__(self, flexible: bool = False):
        self.parts: list[bytes] = []
        self.flexible = flexible

    def i8(self, v: int) -> None:
        self.parts.append(struct.pack(">b", v))

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def uuid(self, raw: bytes) -> None:
        if len(raw) != 16:
            raise GroupRecordError(f"a UUID is 16 bytes, not {len(raw)}")
        self.parts.append(bytes(raw))

    def uvarint(self, v: int) -> None:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        self.parts.append(bytes(out))

    def _length(self, n: int, wide: bool) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        elif wide:
            self.i32(n)
        else:
            self.i16(n)

    def string(self, s: str | None) -> None:
        if s is None:
            self._length(-1, wide=False)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF:
            raise GroupRecordError(f"string of {len(data)} bytes exceeds 32767")
        self._length(len(data), wide=False)
        self.parts.append(data)

    def bytes_(self, b: bytes | None) -> None:
        if b is None:
            self._length(-1, wide=True)
            return
        self._length(len(b), wide=True)
        self.parts.append(bytes(b))

    def array_len(self, n: int) -> None:
        self._length(n, wide=True)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """The tagged-field section, with `fields` ({tag: encoded bytes}) in tag order."""
        if not self.flexible:
            return
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self.parts.append(bytes(fields[tag]))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------

def _short_string(s: str) -> bytes:
    """STRING (int16 length + UTF-8) of the non-flexible versions: the commit hot path."""
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise GroupRecordError(f"string of {len(data)} bytes exceeds 32767")
    return _I16.pack(len(data)) + data


def encode_offset_commit_key(group: str, topic: str, partition: int,
                             version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in (0, 1):
        raise GroupRecordError(f"OffsetCommitKey version {version} not in 0-1")
    return b"".join((_I16.pack(version), _short_string(group), _short_string(topic),
                     _I32.pack(partition)))


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _short_string(group)


def decode_key(data: bytes) -> dict[str, Any]:
    """Decode a key: `{"type": "offset_commit", "version", "group", "topic", "partition"}`,
    `{"type": "group_metadata", "version", "group"}`, a consumer group record's key
    (`{"type": "consumer_group_...", "version", "group"[, "member_id" | "regex"]}`) or
    `{"type": "unknown", "version"}`."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        out = {"type": "offset_commit", "version": version, "group": r.string(),
               "topic": r.string(), "partition": r.i32()}
    elif version == 2:
        out = {"type": "group_metadata", "version": version, "group": r.string()}
    elif version >= 3:
        from kompakt.protocol import consumer_group_records as cgr   # (it imports this module)
        if version in cgr.KEY_TYPES:
            return cgr.decode_key_after_type(version, r)
        # Share and streams group records: Kompakt has no such groups.
        return {"type": "unknown", "version": version}
    else:
        raise GroupRecordError(f"negative key version {version}")
    r.end()
    return out


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------

def encode_offset_commit_value(offset: int, metadata: str = "", commit_timestamp: int = -1, *,
                               leader_epoch: int = -1, expire_timestamp: int = -1,
                               version: int | None = None) -> bytes:
    """Kafka 4's choice of version when `version` is None: 1 with an expire timestamp, else 3."""
    if version is None:
        version = (OFFSET_COMMIT_VALUE_VERSION_EXPIRE if expire_timestamp >= 0
                   else OFFSET_COMMIT_VALUE_VERSION)
    if version == 3:   # what every plain commit writes: one struct pack, no writer
        return b"".join((_VALUE_V3_HEAD.pack(3, offset, leader_epoch),
                         _short_string(metadata if metadata is not None else ""),
                         _I64.pack(commit_timestamp)))
    if not 0 <= version <= 4:
        raise GroupRecordError(f"OffsetCommitValue version {version} not in 0-4")
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.i64(offset)
    if version >= 3:
        w.i32(leader_epoch)
    w.string(metadata if metadata is not None else "")
    w.i64(commit_timestamp)
    if version == 1:
        w.i64(expire_timestamp)
    w.tagged_fields()
    return w.getvalue()


def _decode_offset_commit_value(data: bytes) -> dict[str, Any]:
    version = _I16.unpack_from(data, 0)[0] if len(data) >= 2 else None
    if version is None or not 0 <= version <= 4:
        raise GroupRecordError(f"OffsetCommitValue version {version} not in 0-4")
    r = _Reader(data, flexible=version >= 4)
    r.i16()
    out: dict[str, Any] = {"version": version, "offset": r.i64(), "leader_epoch": -1}
    if version >= 3:
        out["leader_epoch"] = r.i32()
    out["metadata"] = r.string()
    out["commit_timestamp"] = r.i64()
    out["expire_timestamp"] = r.i64() if version == 1 else -1
    r.tagged_fields()
    r.end()
    return out


def encode_group_metadata_value(protocol_type: str, generation: int, protocol: str | None,
                                leader: str | None, members: list[dict[str, Any]],
                                current_state_timestamp: int = -1,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    """`members`: dicts with member_id, group_instance_id, client_id, client_host,
    rebalance_timeout, session_timeout, subscription, assignment."""
    if not 0 <= version <= 4:
        raise GroupRecordError(f"GroupMetadataValue version {version} not in 0-4")
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.string(protocol_type if protocol_type is not None else "")
    w.i32(generation)
    w.string(protocol)
    w.string(leader)
    if version >= 2:
        w.i64(current_state_timestamp)
    w.array_len(len(members))
    for m in members:
        w.string(m["member_id"])
        if version >= 3:
            w.string(m.get("group_instance_id"))
        w.string(m.get("client_id", ""))
        w.string(m.get("client_host", ""))
        if version >= 1:
            w.i32(m.get("rebalance_timeout", -1))
        w.i32(m["session_timeout"])
        w.bytes_(m.get("subscription", b""))
        w.bytes_(m.get("assignment", b""))
        w.tagged_fields()
    w.tagged_fields()
    return w.getvalue()


def _decode_group_metadata_value(data: bytes) -> dict[str, Any]:
    version = _I16.unpack_from(data, 0)[0] if len(data) >= 2 else None
    if version is None or not 0 <= version <= 4:
        raise GroupRecordError(f"GroupMetadataValue version {version} not in 0-4")
    r = _Reader(data, flexible=version >= 4)
    r.i16()
    out: dict[str, Any] = {"version": version, "protocol_type": r.string(),
                           "generation": r.i32(), "protocol": r.string(nullable=True),
                           "leader": r.string(nullable=True)}
    out["current_state_timestamp"] = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        m: dict[str, Any] = {"member_id": r.string()}
        m["group_instance_id"] = r.string(nullable=True) if version >= 3 else None
        m["client_id"] = r.string()
        m["client_host"] = r.string()
        m["rebalance_timeout"] = r.i32() if version >= 1 else -1
        m["session_timeout"] = r.i32()
        m["subscription"] = r.bytes_()
        m["assignment"] = r.bytes_()
        r.tagged_fields()
        members.append(m)
    out["members"] = members
    r.tagged_fields()
    r.end()
    return out


def decode_value(key: dict[str, Any] | bytes, data: bytes | None) -> dict[str, Any] | None:
    """Decode the value belonging to `key` (a decoded key dict or raw key bytes).

    Returns None for a tombstone (null value) and for record types we do not know."""
    if data is None:
        return None
    if not isinstance(key, dict):
        key = decode_key(key)
    if key["type"] == "offset_commit":
        return _decode_offset_commit_value(data)
    if key["type"] == "group_metadata":
        return _decode_group_metadata_value(data)
    if key["type"].startswith("consumer_group_"):
        from kompakt.protocol import consumer_group_records as cgr
        return cgr.decode_value(cgr.TYPE_OF[key["type"]], data)
    return None


# ---------------------------------------------------------------------------------------------
# Partitioning
# ---------------------------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, in int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_string_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units (an astral character counts 2), what Kafka
    compares offset.metadata.max.bytes with, despite the name."""
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition of a group: Utils.abs(groupId.hashCode()) % partitions
    (Utils.abs maps Integer.MIN_VALUE to 0, unlike Math.abs)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
