"""DeleteRecords (key 21): golden bytes (v0) and Kafka's offset/policy rules."""
from kafka.protocol.admin.topics import DeleteRecordsRequest

from admin_harness import framed, h, s16

from kompakt.storage import TopicPartition

T = DeleteRecordsRequest.DeleteRecordsTopic
P = T.DeleteRecordsPartition


async def delete(h, topic, *offsets, version=2):
    request = DeleteRecordsRequest(topics=[T(name=topic, partitions=[P(partition_index=i, offset=o)
                                                                     for i, o in offsets])], timeout_ms=1000)
    (result,) = (await h.call(request, version)).topics
    return [(p.partition_index, p.low_watermark, p.error_code) for p in result.partitions]


async def test_golden_v0_high_watermark(h):
    h.create("t1")
    h.append("t1", 0, 3)
    request = (
        bytes.fromhex("0015 0000 00000008") + s16("test")   # header v1: DeleteRecords v0, corr 8
        + bytes.fromhex("00000001") + s16("t1")    # topics: 1, name
        + bytes.fromhex("00000001")                #   partitions: 1
        + bytes.fromhex("00000000")                #     partition_index 0
        + bytes.fromhex("ffffffffffffffff")        #     offset -1 (= high watermark)
        + bytes.fromhex("000003e8")                # timeout_ms 1000
    )
    expected = framed(
        bytes.fromhex("00000008")                  # correlation id
        + bytes.fromhex("00000000")                # throttle_time_ms
        + bytes.fromhex("00000001") + s16("t1")    # topics: 1, name
        + bytes.fromhex("00000001")                #   partitions: 1
        + bytes.fromhex("00000000")                #     partition_index 0
        + bytes.fromhex("0000000000000003")        #     low_watermark 3
        + bytes.fromhex("0000")                    #     error_code NONE
    )
    assert await h.send(request) == expected
    assert h.lm.get_log(TopicPartition("t1", 0)).log_start_offset == 3


async def test_offsets_and_errors(h):
    h.create("t", 2)
    h.append("t", 0, 10)
    assert await delete(h, "t", (0, 4)) == [(0, 4, 0)]
    assert await delete(h, "t", (0, 2)) == [(0, 4, 0)]          # below the start: no change
    assert await delete(h, "t", (0, 11), (1, -5), (2, 0)) == [(0, -1, 1), (1, -1, 1), (2, -1, 3)]
    assert await delete(h, "t", (0, 10)) == [(0, 10, 0)]
    assert await delete(h, "missing", (0, 0)) == [(0, -1, 3)]
    assert h.lm.get_log(TopicPartition("t", 0)).log_start_offset == 10


async def test_compacted_and_internal_topics_refused(h):
    h.create("c", 1, {"cleanup.policy": "compact"})
    h.append("c", 0, 2)
    assert await delete(h, "c", (0, 1)) == [(0, -1, 44)]
    assert h.lm.get_log(TopicPartition("c", 0)).log_start_offset == 0
    assert await delete(h, "__consumer_offsets", (0, 0)) == [(0, -1, 17)]
