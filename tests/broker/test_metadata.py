"""Metadata (key 3): golden bytes (v1, v12 with topic ids), auto-creation rules, names, ids."""
import struct
import uuid

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest

from admin_harness import Harness, cs, framed, h, s16  # noqa: F401  (h is a fixture)

T = MetadataRequest.MetadataRequestTopic


async def test_golden_v1_one_topic(h):
    h.create("t", 2)
    out = await h.send(bytes.fromhex("0003 0001 00000003") + s16("c")   # Metadata v1, corr 3
                       + bytes.fromhex("00000001") + s16("t"))          # topics: ["t"]
    partition = lambda i: (bytes.fromhex("0000") + struct.pack(">i", i)  # error, index
                           + bytes.fromhex("00000001"                    # leader 1
                                           "00000001 00000001"          # replicas [1]
                                           "00000001 00000001"))        # isr [1]
    assert out == framed(
        bytes.fromhex("00000003")                        # correlation_id
        + bytes.fromhex("00000001")                      # brokers: 1
        + bytes.fromhex("00000001") + s16("127.0.0.1")   #   node 1, host
        + bytes.fromhex("00004a94") + s16(None)          #   port 19092, rack null
        + bytes.fromhex("00000001")                      # controller_id 1
        + bytes.fromhex("00000001")                      # topics: 1
        + bytes.fromhex("0000") + s16("t")               #   error 0, name
        + bytes.fromhex("00")                            #   is_internal false
        + bytes.fromhex("00000002") + partition(0) + partition(1))


async def test_golden_v12_with_topic_id(h):
    meta = h.create("t", 1)
    out = await h.send(bytes.fromhex("0003 000c 00000004 ffff 00")     # Metadata v12, header v2
                       + bytes.fromhex("02")                           # topics: 1
                       + bytes(16) + cs("t") + bytes.fromhex("00")     #   id zero, name "t", tags
                       + bytes.fromhex("00 00 00"))                    # no auto-create, no ops, tags
    cluster = h.broker.cluster_id
    assert out == framed(
        bytes.fromhex("00000004 00")                     # correlation_id, header tags
        + bytes.fromhex("00000000")                      # throttle_time_ms
        + bytes.fromhex("02 00000001") + cs("127.0.0.1") + bytes.fromhex("00004a94 00 00")  # broker
        + cs(cluster)                                    # cluster_id
        + bytes.fromhex("00000001")                      # controller_id
        + bytes.fromhex("02 0000") + cs("t")             # topics: 1; error 0; name
        + meta.topic_id.bytes                            # topic_id
        + bytes.fromhex("00")                            # is_internal
        + bytes.fromhex("02 0000 00000000 00000001")     # partitions: 1; error; index 0; leader 1
        + bytes.fromhex("00000000")                      # leader_epoch 0
        + bytes.fromhex("02 00000001 02 00000001 01 00") # replicas [1], isr [1], offline [], tags
        + bytes.fromhex("80000000 00")                   # authorized ops (not asked), topic tags
        + bytes.fromhex("00"))                           # response tags


async def test_all_topics_v0_empty_list_and_v1_null(h):
    h.create("a", 1)
    h.create("b", 3)
    for version, topics in [(0, []), (1, None), (12, None)]:
        resp = await h.call(MetadataRequest(topics=topics), version)
        assert sorted((t.name, len(t.partitions)) for t in resp.topics) == [("a", 1), ("b", 3)]
    resp = await h.call(MetadataRequest(topics=[]), 1)                   # v1+: empty means none
    assert resp.topics == []


async def test_auto_create_uses_num_partitions(tmp_path):
    h = Harness(tmp_path, **{"num.partitions": "4"})
    try:
        resp = await h.call(MetadataRequest(topics=[T(name="fresh")], allow_auto_topic_creation=True), 4)
        [t] = resp.topics
        assert (t.error_code, t.name, len(t.partitions)) == (0, "fresh", 4)
        assert h.lm.topics["fresh"].partitions == 4
    finally:
        h.close()


async def test_no_auto_create_when_the_request_or_the_broker_says_no(tmp_path, h):
    resp = await h.call(MetadataRequest(topics=[T(name="nope")], allow_auto_topic_creation=False), 4)
    assert resp.topics[0].error_code == 3 and "nope" not in h.lm.topics     # UNKNOWN_TOPIC_OR_PARTITION
    off = Harness(tmp_path / "off", **{"auto.create.topics.enable": "false"})
    try:
        resp = await off.call(MetadataRequest(topics=[T(name="nope")], allow_auto_topic_creation=True), 4)
        assert resp.topics[0].error_code == 3 and "nope" not in off.lm.topics
    finally:
        off.close()


@pytest.mark.parametrize("name", ["bad name", "..", "x" * 250, "ünïcode", "trailing-newline\n"])
async def test_invalid_names(h, name):
    resp = await h.call(MetadataRequest(topics=[T(name=name)], allow_auto_topic_creation=True), 4)
    assert resp.topics[0].error_code == 17                                   # INVALID_TOPIC_EXCEPTION
    assert name not in h.lm.topics                                           # ("$" matched before "\n")


async def test_internal_topic_is_flagged_and_never_auto_created(h):
    resp = await h.call(MetadataRequest(topics=[T(name="__consumer_offsets")], allow_auto_topic_creation=True), 4)
    assert resp.topics[0].error_code == 3
    h.create("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    resp = await h.call(MetadataRequest(topics=[T(name="__consumer_offsets")]), 4)
    assert resp.topics[0].is_internal is True


async def test_lookup_by_topic_id(h):
    meta = h.create("by-id", 2)
    resp = await h.call(MetadataRequest(topics=[T(name=None, topic_id=meta.topic_id)]), 12)
    assert (resp.topics[0].name, resp.topics[0].topic_id, resp.topics[0].error_code) == ("by-id", meta.topic_id, 0)
    resp = await h.call(MetadataRequest(topics=[T(name=None, topic_id=uuid.uuid4())]), 12)
    assert resp.topics[0].error_code == 100                                  # UNKNOWN_TOPIC_ID


async def test_advertised_listener_and_controller(h):
    resp = await h.call(MetadataRequest(topics=None), 9)
    [b] = resp.brokers
    assert (b.node_id, b.host, b.port, resp.controller_id) == (1, "127.0.0.1", 19092, 1)
    assert resp.cluster_id == h.broker.cluster_id


async def test_auto_create_runs_off_the_event_loop(h):
    # create_topic fsyncs directories and files: on the loop it would stall every connection
    import threading
    loop_thread = threading.get_ident()
    real = h.lm.create_topic
    threads = []

    def create_topic(*args, **kw):
        threads.append(threading.get_ident())
        return real(*args, **kw)

    h.lm.create_topic = create_topic
    resp = await h.call(MetadataRequest(topics=[T(name="fresh"), T(name="fresher")],
                                        allow_auto_topic_creation=True), 4)
    assert [(t.error_code, t.name) for t in resp.topics] == [(0, "fresh"), (0, "fresher")]
    assert len(threads) == 2 and loop_thread not in threads


async def test_concurrent_auto_creates_of_one_topic_both_answer_it(h):
    import asyncio
    req = lambda: MetadataRequest(topics=[T(name="raced")], allow_auto_topic_creation=True)
    a, b = await asyncio.gather(h.call(req(), 10), h.call(req(), 10))
    assert [(t.error_code, t.name, len(t.partitions)) for t in a.topics + b.topics] == [(0, "raced", 1)] * 2
    assert a.topics[0].topic_id == b.topics[0].topic_id == h.lm.topics["raced"].topic_id
