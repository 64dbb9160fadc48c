"""Committed offsets of one group, and which of them have expired.

Role: the in-memory image of the offset-commit records of `__consumer_offsets`:
(topic, partition) -> OffsetAndMetadata (offset, leader epoch, metadata, commit timestamp,
optional expire timestamp). `expired_offsets` is Kafka's (2.1+, KIP-211) retention rule as a pure
function of the group's situation and the clock:

  * group Empty with a protocol type (a consumer group with nobody in it): an offset expires
    `offsets.retention.minutes` after the group became Empty (its state timestamp);
  * group Stable, consumer protocol, subscriptions known: offsets of topics nobody subscribes to
    expire `offsets.retention.minutes` after their commit;
  * no protocol type (a "simple" group that only commits): after the commit;
  * otherwise (rebalancing, or a non-consumer protocol with members) nothing expires.
  An explicit expire timestamp (OffsetCommit v1-v4 retention_time_ms, stored with record value
  version 1) overrides the rule for its offset.
  A consumer-protocol (KIP-848) group, whatever its state: offsets of topics no member subscribes
  expire `offsets.retention.minutes` after their commit (`expired_consumer_group_offsets`).

Invariant: offsets are only ever changed by applying an appended (or replayed) record, so this
image equals the compacted log.
"""
from __future__ import annotations

from dataclasses import dataclass

from kompakt.broker.groups.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1   # -1: none; the group rule applies


def expired_offsets(group: ClassicGroup | None, offsets: dict[tuple[str, int], OffsetAndMetadata],
                    now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    """The (topic, partition) keys of `offsets` that have expired at `now_ms`."""
    protocol_type = group.protocol_type if group is not None else None
    state = group.state if group is not None else GroupState.EMPTY
    subscribed: set[str] = set()
    if protocol_type and state is GroupState.EMPTY:
        base = lambda om: (group.state_timestamp_ms if group.state_timestamp_ms >= 0  # noqa: E731
                           else om.commit_timestamp_ms)
    elif (protocol_type == CONSUMER_PROTOCOL_TYPE and state is GroupState.STABLE
          and group.subscribed_topics is not None):
        base = _committed
        subscribed = group.subscribed_topics
    elif not protocol_type:
        base = _committed
    else:
        return []
    return _expired(offsets, now_ms, retention_ms, base, subscribed.__contains__)


def expired_consumer_group_offsets(subscribed, offsets: dict[tuple[str, int], OffsetAndMetadata],
                                   now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    """Kafka's rule for consumer-protocol groups: `subscribed(topic)` keeps a topic's offsets;
    the others expire from their commit time (or their explicit expire timestamp)."""
    return _expired(offsets, now_ms, retention_ms, _committed, subscribed)


def _committed(om: OffsetAndMetadata) -> int:
    return om.commit_timestamp_ms


def _expired(offsets, now_ms: int, retention_ms: int, base, kept) -> list[tuple[str, int]]:
    """Kafka's OffsetExpirationConditionImpl: an explicit expire timestamp decides alone, else
    `retention_ms` after `base(offset)`; topics for which `kept(topic)` holds never expire."""
    out = []
    for tp, om in offsets.items():
        if kept(tp[0]):
            continue
        if om.expire_timestamp_ms >= 0:
            if now_ms >= om.expire_timestamp_ms:
                out.append(tp)
        elif now_ms - base(om) >= retention_ms:
            out.append(tp)
    return out
