"""OffsetForLeaderEpoch (key 23): golden bytes (v4) and the leader-epoch cache lookup."""
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest as O

from admin_harness import cs, framed, h, s16

from kompakt.broker.handlers.offset_for_leader_epoch import end_offset_for
from kompakt.storage import TopicPartition


async def query(h, topic, *parts, version=4):
    request = O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic=topic, partitions=[
        O.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=p, current_leader_epoch=c, leader_epoch=e)
        for p, c, e in parts])])
    (result,) = (await h.call(request, version)).topics
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in result.partitions]


async def test_golden_v4(h):
    h.create("t1")
    h.append("t1", 0, 5)
    request = (
        bytes.fromhex("0017 0004 0000000c") + s16("test") + b"\x00"   # header v2: OffsetForLeaderEpoch v4
        + bytes.fromhex("ffffffff")                # replica_id -1 (consumer)
        + b"\x02" + cs("t1")                       # topics: 1, topic
        + b"\x02"                                  #   partitions: 1
        + bytes.fromhex("00000000")                #     partition 0
        + bytes.fromhex("00000000")                #     current_leader_epoch 0
        + bytes.fromhex("00000000") + b"\x00"      #     leader_epoch 0, tagged fields
        + b"\x00"                                  #   tagged fields
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("0000000c") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02" + cs("t1")                       # topics: 1, topic
        + b"\x02"                                  #   partitions: 1
        + bytes.fromhex("0000 00000000")           #     error_code NONE, partition 0
        + bytes.fromhex("00000000")                #     leader_epoch 0
        + bytes.fromhex("0000000000000005")        #     end_offset 5 (log end offset)
        + b"\x00" + b"\x00" + b"\x00"              #     tagged fields (partition, topic, top level)
    )
    assert await h.send(request) == expected


async def test_fencing_and_unknowns(h):
    h.create("t")
    assert await query(h, "t", (0, -1, 0), (0, 1, 0), (1, -1, 0)) == [(0, 0, 0), (75, -1, -1), (3, -1, -1)]
    assert await query(h, "t", (0, -1, -1), (0, -1, 3)) == [(0, -1, -1), (0, -1, -1)]


def test_end_offset_for_matches_kafka_cache_rules():
    entries = [(1, 10), (3, 50), (6, 80)]
    assert end_offset_for(entries, -1, 100) == (-1, -1)
    assert end_offset_for(entries, 6, 100) == (6, 100)       # latest: the log end offset
    assert end_offset_for(entries, 0, 100) == (0, 10)        # older than the first known epoch
    assert end_offset_for(entries, 1, 100) == (1, 50)
    assert end_offset_for(entries, 2, 100) == (1, 50)        # unknown epoch between: the floor's end
    assert end_offset_for(entries, 5, 100) == (3, 80)
    assert end_offset_for(entries, 7, 100) == (-1, -1)       # newer than any epoch


async def test_cache_entries_from_imported_epochs(h):
    h.create("t")
    log = h.lm.get_log(TopicPartition("t", 0))
    h.append("t", 0, 4)
    log.leader_epoch_cache.assign(3, log.log_end_offset)    # as if a Kafka broker had led epoch 3
    h.append("t", 0, 2)
    # the current leader epoch (0) is below the cache's latest: its end is where epoch 3 starts
    assert await query(h, "t", (0, 0, 0)) == [(0, 0, 4)]
    assert await query(h, "t", (0, -1, 3)) == [(0, 3, 6)]
