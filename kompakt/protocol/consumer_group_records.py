"""`__consumer_offsets` records of KIP-848 consumer groups (sans-io, bytes in, dicts out).

Role: the keys and values Kafka 4's group coordinator writes for groups that speak the consumer
protocol (ConsumerGroupHeartbeat), byte for byte as in its
group-coordinator/src/main/resources/common/message/ConsumerGroup*.json, so Kafka's tools read
our logs and `kompakt dump-log --offsets-decoder` reads theirs. group_records.decode_key and
decode_value dispatch here for these record types; nothing here does I/O.

Keys are not flexible: int16 *record type* (the "version" every __consumer_offsets key starts
with), then STRING fields (int16 length + UTF-8):

    type 3   ConsumerGroupMetadataKey              group
    type 4   ConsumerGroupPartitionMetadataKey     group
    type 5   ConsumerGroupMemberMetadataKey        group, member_id
    type 6   ConsumerGroupTargetAssignmentMetadataKey  group
    type 7   ConsumerGroupTargetAssignmentMemberKey    group, member_id
    type 8   ConsumerGroupCurrentMemberAssignmentKey   group, member_id
    type 16  ConsumerGroupRegularExpressionKey     group, regular_expression

Values are version 0 and flexible: int16 version 0, then compact forms (strings and arrays carry
their length + 1 as an unsigned varint, 0 = null; a UUID is 16 raw bytes) and every struct ends
with a tagged-field section (we write none; unknown tags are skipped, e.g. 4.1's MetadataHash):

    ConsumerGroupMetadataValue             int32 epoch (the group epoch)
    ConsumerGroupPartitionMetadataValue    [topic_id uuid, topic_name, num_partitions int32,
                                            [partition int32, [rack]]]     (the subscribed
                                            topics' metadata; Kafka 4.0 writes it, 4.1 stops)
    ConsumerGroupMemberMetadataValue       instance_id?, rack_id?, client_id, client_host,
                                            [subscribed_topic_names], subscribed_topic_regex?,
                                            rebalance_timeout_ms int32, server_assignor?
                                            tag 0 ClassicMemberMetadata? (a member speaking the
                                            classic protocol in a consumer group):
                                            session_timeout_ms int32, [supported protocols:
                                            name, metadata bytes])
    ConsumerGroupTargetAssignmentMetadataValue  int32 assignment_epoch
    ConsumerGroupTargetAssignmentMemberValue    [topic_id uuid, [partition int32]]
    ConsumerGroupCurrentMemberAssignmentValue   member_epoch int32, previous_member_epoch int32,
                                            state int8 (0 Stable, 1 UnrevokedPartitions,
                                            2 UnreleasedPartitions), [assigned: topic_id uuid,
                                            [partition]], [pending revocation: same]
    ConsumerGroupRegularExpressionValue    [topic], version int64, timestamp int64

("?" = nullable.) A null value is a tombstone; Kafka writes them when a member leaves (its three
member records), when a regex loses its last subscriber and when the group is deleted.

`kafka_json_key` / `kafka_json_value` give Kafka's field names (what kafka-dump-log.sh
--offsets-decoder prints: camelCase schema names, topic ids in Kafka's base64 form).

Invariants: decode(encode(x)) == x; truncated or trailing bytes raise GroupRecordError.
"""
from __future__ import annotations

import base64
import uuid
from typing import Any

from kompakt.protocol.group_records import GroupRecordError, _Reader, _Writer

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16

KEY_TYPES = {
    GROUP_METADATA: "consumer_group_metadata",
    PARTITION_METADATA: "consumer_group_partition_metadata",
    MEMBER_METADATA: "consumer_group_member_metadata",
    TARGET_ASSIGNMENT_METADATA: "consumer_group_target_assignment_metadata",
    TARGET_ASSIGNMENT_MEMBER: "consumer_group_target_assignment_member",
    CURRENT_MEMBER_ASSIGNMENT: "consumer_group_current_member_assignment",
    REGULAR_EXPRESSION: "consumer_group_regular_expression",
}
TYPE_OF = {name: key for key, name in KEY_TYPES.items()}
CLASSIC_MEMBER_METADATA_TAG = 0   # ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata
_SECOND_FIELD = {MEMBER_METADATA: "member_id", TARGET_ASSIGNMENT_MEMBER: "member_id",
                 CURRENT_MEMBER_ASSIGNMENT: "member_id", REGULAR_EXPRESSION: "regex"}

Partitions = dict  # uuid.UUID -> sorted list of partition ids


# ------------------------------------------------------------------------------------- keys

def encode_key(record_type: int, group: str, second: str | None = None) -> bytes:
    """The key of a record type above; `second` is the member id or the regular expression."""
    w = _Writer()
    w.i16(record_type)
    w.string(group)
    if record_type in _SECOND_FIELD:
        if second is None:
            raise GroupRecordError(f"record type {record_type} needs a {_SECOND_FIELD[record_type]}")
        w.string(second)
    elif record_type not in KEY_TYPES:
        raise GroupRecordError(f"{record_type} is not a consumer group record type")
    return w.getvalue()


def decode_key_after_type(record_type: int, r: _Reader) -> dict[str, Any]:
    """The rest of a key whose int16 type was read (group_records.decode_key calls this)."""
    out: dict[str, Any] = {"type": KEY_TYPES[record_type], "version": record_type, "group": r.string()}
    if record_type in _SECOND_FIELD:
        out[_SECOND_FIELD[record_type]] = r.string()
    r.end()
    return out


# ----------------------------------------------------------------------------------- values

def _value_writer() -> _Writer:
    w = _Writer(flexible=True)
    w.i16(0)
    return w


def _value_reader(data: bytes, what: str) -> _Reader:
    r = _Reader(data, flexible=True)
    version = r.i16()
    if version != 0:
        raise GroupRecordError(f"{what} version {version} is not 0")
    return r


def _finish(w: _Writer) -> bytes:
    w.tagged_fields()
    return w.getvalue()


def _write_partitions(w: _Writer, partitions: Partitions) -> None:
    w.array_len(len(partitions))
    for topic_id, parts in sorted(partitions.items(), key=lambda kv: kv[0].bytes):
        w.uuid(topic_id.bytes)
        w.array_len(len(parts))
        for p in sorted(parts):
            w.i32(p)
        w.tagged_fields()


def _read_partitions(r: _Reader) -> Partitions:
    out: Partitions = {}
    for _ in range(r.array_len()):
        topic_id = uuid.UUID(bytes=r.uuid())
        out[topic_id] = sorted(r.i32() for _ in range(r.array_len()))
        r.tagged_fields()
    return out


def _write_strings(w: _Writer, items: list[str]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _read_strings(r: _Reader) -> list[str]:
    return [r.string() for _ in range(r.array_len())]


def encode_group_metadata_value(epoch: int) -> bytes:
    w = _value_writer()
    w.i32(epoch)
    return _finish(w)


def encode_partition_metadata_value(topics: list[tuple[uuid.UUID, str, int]]) -> bytes:
    """(topic id, name, partition count) of every subscribed topic; no rack information."""
    w = _value_writer()
    w.array_len(len(topics))
    for topic_id, name, num_partitions in sorted(topics, key=lambda t: t[1]):
        w.uuid(topic_id.bytes)
        w.string(name)
        w.i32(num_partitions)
        w.array_len(0)          # PartitionMetadata (racks): empty, as Kafka writes without racks
        w.tagged_fields()
    return _finish(w)


def encode_member_metadata_value(*, instance_id: str | None, rack_id: str | None, client_id: str,
                                 client_host: str, subscribed_topic_names: list[str],
                                 subscribed_topic_regex: str | None, rebalance_timeout_ms: int,
                                 server_assignor: str | None,
                                 classic_member_metadata: dict | None = None) -> bytes:
    """`classic_member_metadata` ({"session_timeout_ms", "supported_protocols": [(name,
    metadata)]}) goes in tag 0, for a member that speaks the classic protocol."""
    w = _value_writer()
    w.string(instance_id)
    w.string(rack_id)
    w.string(client_id)
    w.string(client_host)
    _write_strings(w, list(subscribed_topic_names))
    w.string(subscribed_topic_regex)
    w.i32(rebalance_timeout_ms)
    w.string(server_assignor)
    tags = {}
    if classic_member_metadata is not None:
        tags[CLASSIC_MEMBER_METADATA_TAG] = _encode_classic_member_metadata(classic_member_metadata)
    w.tagged_fields(tags)
    return w.getvalue()


def _encode_classic_member_metadata(classic: dict) -> bytes:
    w = _Writer(flexible=True)
    w.i32(classic["session_timeout_ms"])
    w.array_len(len(classic["supported_protocols"]))
    for name, metadata in classic["supported_protocols"]:
        w.string(name)
        w.bytes_(metadata)
        w.tagged_fields()
    w.tagged_fields()
    return w.getvalue()


def _decode_classic_member_metadata(data: bytes) -> dict:
    r = _Reader(data, flexible=True)
    session = r.i32()
    protocols = []
    for _ in range(r.array_len()):
        protocols.append((r.string(), r.bytes_()))
        r.tagged_fields()
    r.tagged_fields()
    r.end()
    return {"session_timeout_ms": session, "supported_protocols": protocols}


def encode_target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    w = _value_writer()
    w.i32(assignment_epoch)
    return _finish(w)


def encode_target_assignment_member_value(partitions: Partitions) -> bytes:
    w = _value_writer()
    _write_partitions(w, partitions)
    return _finish(w)


def encode_current_assignment_value(*, member_epoch: int, previous_member_epoch: int, state: int,
                                    assigned: Partitions, pending_revocation: Partitions) -> bytes:
    w = _value_writer()
    w.i32(member_epoch)
    w.i32(previous_member_epoch)
    w.i8(state)
    _write_partitions(w, assigned)
    _write_partitions(w, pending_revocation)
    return _finish(w)


def encode_regex_value(topics: list[str], version: int, timestamp: int) -> bytes:
    w = _value_writer()
    _write_strings(w, sorted(topics))
    w.i64(version)
    w.i64(timestamp)
    return _finish(w)


def decode_value(record_type: int, data: bytes) -> dict[str, Any]:
    """Decode the (non-null) value of a consumer group record type."""
    r = _value_reader(data, KEY_TYPES[record_type])
    out: dict[str, Any] = {"version": 0}
    if record_type == GROUP_METADATA:
        out["epoch"] = r.i32()
    elif record_type == PARTITION_METADATA:
        topics = []
        for _ in range(r.array_len()):
            topic_id, name, num = uuid.UUID(bytes=r.uuid()), r.string(), r.i32()
            for _ in range(r.array_len()):    # per-partition racks: not used
                r.i32()
                _read_strings(r)
                r.tagged_fields()
            r.tagged_fields()
            topics.append({"topic_id": topic_id, "topic_name": name, "num_partitions": num})
        out["topics"] = topics
    elif record_type == MEMBER_METADATA:
        out.update(instance_id=r.string(nullable=True), rack_id=r.string(nullable=True),
                   client_id=r.string(), client_host=r.string(),
                   subscribed_topic_names=_read_strings(r),
                   subscribed_topic_regex=r.string(nullable=True),
                   rebalance_timeout_ms=r.i32(), server_assignor=r.string(nullable=True))
        classic = r.tagged_fields().get(CLASSIC_MEMBER_METADATA_TAG)
        out["classic_member_metadata"] = (None if classic is None
                                          else _decode_classic_member_metadata(classic))
        r.end()
        return out
    elif record_type == TARGET_ASSIGNMENT_METADATA:
        out["assignment_epoch"] = r.i32()
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        out["partitions"] = _read_partitions(r)
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        out.update(member_epoch=r.i32(), previous_member_epoch=r.i32(), state=r.i8(),
                   assigned=_read_partitions(r), pending_revocation=_read_partitions(r))
    elif record_type == REGULAR_EXPRESSION:
        out.update(topics=_read_strings(r), regex_version=r.i64(), timestamp=r.i64())
    r.tagged_fields()
    r.end()
    return out


# ------------------------------------------------------------------ Kafka's JSON (dump-log)

def _uuid_json(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka prints it (Uuid.toString: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _partitions_json(partitions: Partitions) -> list:
    return [{"topicId": _uuid_json(t), "partitions": list(p)} for t, p in partitions.items()]


def kafka_json_key(key: dict) -> dict:
    """A decoded key's fields under Kafka's names (kafka-dump-log --offsets-decoder's "data")."""
    out = {"groupId": key["group"]}
    if "member_id" in key:
        out["memberId"] = key["member_id"]
    if "regex" in key:
        out["regularExpression"] = key["regex"]
    return out


def kafka_json_value(record_type: int, value: dict) -> dict:
    """A decoded value's fields under Kafka's names, JSON-ready."""
    if record_type == GROUP_METADATA:
        return {"epoch": value["epoch"]}
    if record_type == PARTITION_METADATA:
        return {"topics": [{"topicId": _uuid_json(t["topic_id"]), "topicName": t["topic_name"],
                            "numPartitions": t["num_partitions"], "partitionMetadata": []}
                           for t in value["topics"]]}
    if record_type == MEMBER_METADATA:
        out = {"instanceId": value["instance_id"], "rackId": value["rack_id"],
               "clientId": value["client_id"], "clientHost": value["client_host"],
               "subscribedTopicNames": value["subscribed_topic_names"],
               "subscribedTopicRegex": value["subscribed_topic_regex"],
               "rebalanceTimeoutMs": value["rebalance_timeout_ms"],
               "serverAssignor": value["server_assignor"]}
        classic = value.get("classic_member_metadata")
        if classic is not None:
            out["classicMemberMetadata"] = {
                "sessionTimeoutMs": classic["session_timeout_ms"],
                "supportedProtocols": [{"name": n, "metadata": base64.b64encode(m).decode()}
                                       for n, m in classic["supported_protocols"]]}
        return out
    if record_type == TARGET_ASSIGNMENT_METADATA:
        return {"assignmentEpoch": value["assignment_epoch"]}
    if record_type == TARGET_ASSIGNMENT_MEMBER:
        return {"topicPartitions": _partitions_json(value["partitions"])}
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        return {"memberEpoch": value["member_epoch"], "previousMemberEpoch": value["previous_member_epoch"],
                "state": value["state"], "assignedPartitions": _partitions_json(value["assigned"]),
                "partitionsPendingRevocation": _partitions_json(value["pending_revocation"])}
    return {"topics": value["topics"], "version": value["regex_version"], "timestamp": value["timestamp"]}
