"""The consumer protocol: the opaque JoinGroup metadata and SyncGroup assignment of classic
members with protocol type "consumer" (sans-io, bytes in, values out).

Role: Kafka's ConsumerProtocol (clients/src/main/resources/common/message/
ConsumerProtocolSubscription.json and ConsumerProtocolAssignment.json, versions 0-3, not
flexible). The coordinator reads these bytes only where Kafka's does: the topics a classic group
subscribes (offset expiry, OffsetDelete), and the subscriptions and assignments of classic
members when a group moves between the classic and the consumer protocol (KIP-848's online
migration: broker/groups/consumer/migration.py), or lives in a consumer group
(broker/groups/consumer/classic_members.py).

    ConsumerProtocolSubscription                 ConsumerProtocolAssignment
        int16  version                               int16  version
        ARRAY  topics of STRING                      ARRAY  assigned partitions of:
        NULLABLE_BYTES user data                         STRING topic
        ARRAY  owned partitions of:      v1+             ARRAY  of int32 partition
            STRING topic                             NULLABLE_BYTES user data
            ARRAY  of int32 partition
        int32  generation id (-1)        v2+
        NULLABLE_STRING rack id          v3+

A version above 3 is read with version 3's layout and anything after it ignored, as Kafka does
("future versions will not break compatibility"); the assignment is written in the version of the
member's subscription, capped at 3 (Kafka's checkAssignmentVersion).

Invariants: decode(encode(x)) == x; truncated or negative-version input raises GroupRecordError.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kompakt.protocol.group_records import GroupRecordError, _Reader, _Writer

HIGHEST_VERSION = 3
Partitions = dict   # topic name -> sorted list of partition numbers


@dataclass(frozen=True)
class Subscription:
    topics: list
    user_data: bytes | None = None
    owned_partitions: Partitions = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 0


def _read_partitions(r: _Reader) -> Partitions:
    out: Partitions = {}
    for _ in range(r.array_len()):
        topic = r.string()
        out.setdefault(topic, []).extend(r.i32() for _ in range(r.array_len()))
    return {t: sorted(set(p)) for t, p in out.items()}


def _write_partitions(w: _Writer, partitions: Partitions) -> None:
    w.array_len(len(partitions))
    for topic, parts in sorted(partitions.items()):
        w.string(topic)
        w.array_len(len(parts))
        for p in sorted(parts):
            w.i32(p)


def _version(r: _Reader) -> int:
    version = r.i16()
    if version < 0:
        raise GroupRecordError(f"consumer protocol version {version} is negative")
    return min(version, HIGHEST_VERSION)


def decode_subscription(data: bytes) -> Subscription:
    try:
        r = _Reader(data)
        version = _version(r)
        topics = [r.string() for _ in range(r.array_len())]
        user_data = r.bytes_(nullable=True)
        owned = _read_partitions(r) if version >= 1 else {}
        generation = r.i32() if version >= 2 else -1
        rack = r.string(nullable=True) if version >= 3 else None
    except struct.error as exc:
        raise GroupRecordError(f"malformed consumer protocol subscription: {exc}") from None
    return Subscription(topics, user_data, owned, generation, rack, version)


def encode_subscription(sub: Subscription) -> bytes:
    w = _Writer()
    w.i16(sub.version)
    w.array_len(len(sub.topics))
    for t in sub.topics:
        w.string(t)
    w.bytes_(sub.user_data)
    if sub.version >= 1:
        _write_partitions(w, sub.owned_partitions)
    if sub.version >= 2:
        w.i32(sub.generation_id)
    if sub.version >= 3:
        w.string(sub.rack_id)
    return w.getvalue()


def subscription_version(data: bytes) -> int:
    """The version a member speaks (its subscription's), capped at HIGHEST_VERSION."""
    try:
        return _version(_Reader(data))
    except struct.error as exc:
        raise GroupRecordError(f"malformed consumer protocol subscription: {exc}") from None


def decode_assignment(data: bytes) -> Partitions:
    """The assigned partitions; empty bytes (a member that never got an assignment) are none."""
    if not data:
        return {}
    try:
        r = _Reader(data)
        _version(r)
        return _read_partitions(r)
    except struct.error as exc:
        raise GroupRecordError(f"malformed consumer protocol assignment: {exc}") from None


def encode_assignment(partitions: Partitions, version: int = HIGHEST_VERSION,
                      user_data: bytes | None = None) -> bytes:
    w = _Writer()
    w.i16(min(max(version, 0), HIGHEST_VERSION))
    _write_partitions(w, {t: p for t, p in partitions.items() if p})
    w.bytes_(user_data)
    return w.getvalue()


def consumer_subscription_topics(data: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription; None when the bytes are not one (a custom
    protocol behind protocol type "consumer")."""
    try:
        return decode_subscription(data).topics
    except GroupRecordError:
        return None


def encode_consumer_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A version 0 ConsumerProtocolSubscription (tests and tools)."""
    return encode_subscription(Subscription(list(topics), user_data))
