"""DeleteTopics (key 20): golden bytes (v6 by topic id) and name/id/duplicate rules."""
import uuid

from kafka.protocol.admin.topics import DeleteTopicsRequest

from admin_harness import Harness, cs, framed, h, s16

DT = DeleteTopicsRequest.DeleteTopicState


async def delete(h, version=6, names=(), states=()):
    request = DeleteTopicsRequest(topic_names=list(names), topics=list(states), timeout_ms=30000)
    return (await h.call(request, version)).responses


async def test_golden_v6_delete_by_id(h):
    topic_id = h.create("t1", 2).topic_id
    request = (
        bytes.fromhex("0014 0006 00000005") + s16("test") + b"\x00"   # header v2: DeleteTopics v6, corr 5
        + b"\x02"                                  # topics: compact array of 1
        + cs(None)                                 #   name: null
        + topic_id.bytes                           #   topic_id
        + b"\x00"                                  #   tagged fields
        + bytes.fromhex("00007530")                # timeout_ms 30000
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("00000005") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # responses: 1
        + cs("t1")                                 #   name (resolved from the id)
        + topic_id.bytes                           #   topic_id
        + bytes.fromhex("0000")                    #   error_code NONE
        + cs(None)                                 #   error_message null
        + b"\x00"                                  #   tagged fields
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected
    assert "t1" not in h.lm.topics


async def test_by_name_and_unknowns(h):
    h.create("keep")
    h.create("gone")
    results = await delete(h, version=5, names=["gone", "never"])
    codes = {r.name: (r.error_code, r.error_message) for r in results}
    assert codes["gone"] == (0, None)
    assert codes["never"][0] == 3
    assert set(h.lm.topics) == {"keep"}
    unknown = uuid.uuid4()
    (result,) = await delete(h, states=[DT(name=None, topic_id=unknown)])
    assert (result.error_code, result.topic_id) == (100, unknown)


async def test_malformed_entries(h):
    t = h.create("x").topic_id
    results = await delete(h, states=[DT(name="x", topic_id=t), DT(name=None, topic_id=uuid.UUID(int=0))])
    assert sorted(r.error_code for r in results) == [42, 42]
    results = await delete(h, names=["x", "x"], version=5)
    assert [(r.name, r.error_code, r.error_message) for r in results] == [("x", 42, "Duplicate topic name.")]
    assert "x" in h.lm.topics
    # a name and the id of the same topic in one request
    results = await delete(h, states=[DT(name="x", topic_id=uuid.UUID(int=0)), DT(name=None, topic_id=t)])
    assert sorted(r.error_code for r in results) == [0, 42]
    assert "x" not in h.lm.topics


async def test_deletion_disabled(tmp_path):
    h = Harness(tmp_path, **{"delete.topic.enable": "false"})
    try:
        h.create("x")
        (result,) = await delete(h, version=5, names=["x"])
        assert result.error_code == 73
        (result,) = await delete(h, version=2, names=["x"])
        assert result.error_code == 42
        assert "x" in h.lm.topics
    finally:
        h.close()


async def test_internal_topic_is_not_deleted(h):
    h.create("__consumer_offsets", 2)
    (result,) = await delete(h, version=5, names=["__consumer_offsets"])
    assert result.error_code == 42 and "group coordinator" in result.error_message
    assert "__consumer_offsets" in h.lm.topics
