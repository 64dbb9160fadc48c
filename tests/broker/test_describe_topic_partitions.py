"""DescribeTopicPartitions (key 75): golden bytes and cursor pagination."""
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest as DTP

from admin_harness import cs, framed, h, s16


async def page(h, names=(), limit=2000, cursor=None):
    request = DTP(topics=[DTP.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                  cursor=DTP.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)
    response = await h.call(request, 0)
    nxt = response.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics],
            (nxt.topic_name, nxt.partition_index) if nxt is not None else None)


async def test_golden_v0_first_page(h):
    topic_id = h.create("t1", 2).topic_id
    request = (
        bytes.fromhex("004b 0000 0000000b") + s16("test") + b"\x00"   # header v2: DescribeTopicPartitions v0
        + b"\x02" + cs("t1") + b"\x00"             # topics: ["t1"] (name, tagged fields)
        + bytes.fromhex("00000001")                # response_partition_limit 1
        + b"\xff"                                  # cursor: null
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("0000000b") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # topics: 1
        + bytes.fromhex("0000") + cs("t1")         #   error_code NONE, name
        + topic_id.bytes + b"\x00"                 #   topic_id, is_internal false
        + b"\x02"                                  #   partitions: 1
        + bytes.fromhex("0000 00000000")           #     error_code, partition_index 0
        + bytes.fromhex("00000001 00000000")       #     leader_id 1, leader_epoch 0
        + b"\x02" + bytes.fromhex("00000001")      #     replica_nodes [1]
        + b"\x02" + bytes.fromhex("00000001")      #     isr_nodes [1]
        + b"\x01\x01"                              #     eligible_leader_replicas [], last_known_elr [] (never null, as Kafka)
        + b"\x01" + b"\x00"                        #     offline_replicas [], tagged fields
        + bytes.fromhex("00000df8")                #   topic_authorized_operations (topic ops 3-8,10,11)
        + b"\x00"                                  #   tagged fields
        + b"\x01" + cs("t1") + bytes.fromhex("00000001") + b"\x00"   # next_cursor: t1, partition 1
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected


async def test_pagination_over_all_topics(h):
    h.create("a", 3)
    h.create("b", 1)
    h.create("c", 2)
    assert await page(h, limit=2) == ([("a", 0, [0, 1])], ("a", 2))
    assert await page(h, limit=2, cursor=("a", 2)) == ([("a", 0, [2]), ("b", 0, [0])], ("c", 0))
    assert await page(h, limit=2, cursor=("c", 0)) == ([("c", 0, [0, 1])], None)
    assert await page(h) == ([("a", 0, [0, 1, 2]), ("b", 0, [0]), ("c", 0, [0, 1])], None)


async def test_named_topics_unknown_and_invalid(h):
    h.create("b", 1)
    assert await page(h, ["zz", "b", "bad/name"]) == (
        [("b", 0, [0]), ("bad/name", 17, []), ("zz", 3, [])], None)
    # the cursor topic must be one of the named topics
    topics, _ = await page(h, ["b"], cursor=("a", 0))
    assert topics == [("b", 42, [])]


async def test_null_names_do_not_break_the_handler(h):
    h.create("b", 1)
    assert await page(h, [None, "b"]) == ([("", 17, []), ("b", 0, [0])], None)
