"""Kafka 2.1+ offset retention rules (offsets.expired_offsets)."""
from kompakt.broker.groups.group import ClassicGroup, GroupEvent
from kompakt.broker.groups.member import ClassicMember
from kompakt.broker.groups.offsets import OffsetAndMetadata, expired_offsets
from kompakt.protocol.consumer_protocol import encode_consumer_subscription

DAY = 86_400_000


def stable_consumer_group(topics):
    g = ClassicGroup("g", 0)
    g.add(ClassicMember("m", None, "c", "/h", 1, 1, "consumer",
                        [("range", encode_consumer_subscription(topics))]))
    g.fire(GroupEvent.PREPARE_REBALANCE, 0)
    g.init_next_generation(0)
    g.fire(GroupEvent.SYNC_COMPLETE, 0)
    return g


def test_empty_consumer_group_expires_from_when_it_became_empty():
    g = ClassicGroup("g", now_ms=10 * DAY)
    g.protocol_type = "consumer"
    offsets = {("t", 0): OffsetAndMetadata(5, commit_timestamp_ms=0)}
    # the commit is 10 days old, but the group has only been empty for 6 days
    assert expired_offsets(g, offsets, 16 * DAY, 7 * DAY) == []
    assert expired_offsets(g, offsets, 17 * DAY, 7 * DAY) == [("t", 0)]


def test_simple_group_expires_from_commit_time():
    g = ClassicGroup("g", now_ms=0)
    offsets = {("t", 0): OffsetAndMetadata(5, commit_timestamp_ms=DAY),
               ("t", 1): OffsetAndMetadata(5, commit_timestamp_ms=5 * DAY)}
    assert expired_offsets(g, offsets, 8 * DAY, 7 * DAY) == [("t", 0)]
    assert expired_offsets(None, offsets, 12 * DAY, 7 * DAY) == [("t", 0), ("t", 1)]


def test_stable_group_keeps_subscribed_topics_and_expires_others():
    g = stable_consumer_group(["live"])
    offsets = {("live", 0): OffsetAndMetadata(1, commit_timestamp_ms=0),
               ("old", 0): OffsetAndMetadata(1, commit_timestamp_ms=0)}
    assert expired_offsets(g, offsets, 30 * DAY, 7 * DAY) == [("old", 0)]


def test_rebalancing_group_expires_nothing():
    g = stable_consumer_group(["live"])
    g.fire(GroupEvent.PREPARE_REBALANCE, 0)
    offsets = {("old", 0): OffsetAndMetadata(1, commit_timestamp_ms=0)}
    assert expired_offsets(g, offsets, 300 * DAY, 7 * DAY) == []


def test_explicit_expire_timestamp_wins():
    g = ClassicGroup("g", now_ms=0)
    offsets = {("t", 0): OffsetAndMetadata(5, commit_timestamp_ms=0, expire_timestamp_ms=100)}
    assert expired_offsets(g, offsets, 99, 7 * DAY) == []
    assert expired_offsets(g, offsets, 100, 7 * DAY) == [("t", 0)]
