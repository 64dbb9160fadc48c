"""kafkajs (the pure-JavaScript Kafka client, npm `kafkajs`) against a real `kompakt serve`.

kafkajs speaks older API versions than the Python clients and librdkafka (Metadata v6, Produce v7,
Fetch v11, JoinGroup v5, SyncGroup v3, OffsetCommit v5, OffsetFetch v4, FindCoordinator v2,
CreateTopics v3, DescribeConfigs v2, DeleteGroups v1, ...), so it covers version ranges the other
clients never send. Each test runs tests/integration/js/kafkajs_client.js steps (JSON on stdout; a
test runs its steps in one node process with `sequence`) and checks what kafkajs saw, and where
useful what the broker wrote on disk.

kafkajs is pinned in tests/integration/js/package.json + package-lock.json; `npm ci` installs it
into tests/integration/js/node_modules (git-ignored) on first use. The tests skip only when node or
npm are missing from the machine.
"""
from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from compat_support import NODE, NPM, kafkajs, node_group_broker
from compat_support import stored_batches as _stored

pytestmark = pytest.mark.skipif(NODE is None or NPM is None,
                                reason="node/npm not installed (kafkajs tests need Node >= 14 and npm)")


@pytest.fixture(scope="module")
def js_broker(tmp_path_factory):
    with node_group_broker(tmp_path_factory, "kafkajs-broker") as proc:
        yield proc


def stored_batches(broker, topic, partition):
    return _stored(broker.log_dir, topic, partition)


def test_kafkajs_admin(js_broker):
    r = kafkajs(js_broker, "admin", topic="js-admin", doomed="js-doomed")
    assert r["created"] is True
    assert r["createdAgain"] is False            # TOPIC_ALREADY_EXISTS, which kafkajs reports as false
    assert {"js-admin", "js-doomed"} <= set(r["listed"])

    node = r["cluster"]["brokers"]
    assert node == [{"nodeId": node[0]["nodeId"], "host": "127.0.0.1", "port": js_broker.port}]
    node_id = node[0]["nodeId"]
    assert r["cluster"]["controller"] == node_id and r["cluster"]["clusterId"]
    meta = {t["name"]: t["partitions"] for t in r["metadata"]}
    assert meta["js-admin"] == [{"partitionId": p, "leader": node_id, "replicas": [node_id], "isr": [node_id]}
                                for p in range(3)]
    assert len(meta["js-doomed"]) == 1

    configs = r["topicConfigs"]
    assert r["topicConfigError"] == 0
    assert configs["cleanup.policy"] == {"value": "compact", "isDefault": False}
    assert configs["segment.bytes"] == {"value": "1048576", "isDefault": False}
    assert configs["retention.ms"] == {"value": "604800000", "isDefault": True}
    assert configs["min.cleanable.dirty.ratio"]["value"] == "0.5"
    # AlterConfigs (the non-incremental API) replaces the whole set: cleanup.policy falls back
    assert r["alteredConfigs"] == {"retention.ms": "86400000", "cleanup.policy": "delete"}
    assert r["brokerConfigs"] == {"log.cleaner.enable": "true"}

    assert r["doomedPartitions"] == 2           # CreatePartitions
    assert "js-doomed" not in r["listedAfterDelete"] and "js-admin" in r["listedAfterDelete"]
    assert not os.path.exists(os.path.join(js_broker.log_dir, "js-doomed-0"))


def test_kafkajs_produce_group_commit_resume(js_broker):
    topic, group = "js-orders", "js-group"
    # One node process runs the story (js/driver.js `sequence`), then every step is checked:
    (_, produced, consumed, offsets, more, resumed, offsets2, described, deleted, missing,
     offsets3, set_offsets) = kafkajs(js_broker, "sequence", steps=[
        ["createTopic", {"topic": topic, "numPartitions": 3}],
        # 300 keyed GZIP messages with headers in 3 batches
        ["produce", {"topic": topic, "count": 300, "batches": 3, "compression": "GZIP"}],
        # a group of two members reads everything from the beginning, committing as it goes
        ["group", {"topic": topic, "groupId": group, "members": 2, "expect": 300}],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
        # 30 more from an idempotent producer; the group resumes at its commits
        ["produce", {"topic": topic, "count": 30, "start": 300, "batches": 1, "idempotent": True}],
        ["group", {"topic": topic, "groupId": group, "members": 1, "expect": 30}],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
        # DescribeGroups / ListGroups, DeleteGroups (and of an unknown group); commits are gone
        ["groups", {"groupIds": [group, "js-never"]}],
        ["deleteGroups", {"groupIds": [group]}],
        ["deleteGroups", {"groupIds": ["js-never"]}],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
        # admin setOffsets: commits for the (now empty) group from outside it
        ["setOffsets", {"groupId": group, "topic": topic,
                        "partitions": [{"partition": 0, "offset": "5"}, {"partition": 2, "offset": "7"}]}],
    ])

    # -- every ack is error-free; the broker stored kafkajs' batches as they came: GZIP (codec 1),
    #    CreateTime, keys and headers intact, the last 30 with a producer id and sequences
    assert produced["acks"] and all(a["errorCode"] == 0 for a in produced["acks"] + more["acks"])
    sent = {m["value"]: m for m in produced["sent"] + more["sent"]}
    assert len(sent) == 330
    on_disk = {}
    for p in range(3):
        for header, records in stored_batches(js_broker, topic, p):
            assert header.compression == 1 and header.timestamp_type == 0
            for rec in records:
                value = rec.value.decode()
                on_disk[value] = (p, header.base_offset + rec.offset_delta, rec.key.decode(),
                                  dict((k, v.decode()) for k, v in rec.headers))
                assert (header.producer_id >= 0 and header.base_sequence >= 0) == (int(value[6:]) >= 300)
    assert set(on_disk) == set(sent)
    for value, (_, _, key, headers) in on_disk.items():
        assert key == sent[value]["key"] and headers == sent[value]["headers"]

    # -- the two members: each partition by one member, everything once, from the beginning
    assert consumed["outcome"] == "complete"
    seen = consumed["seen"]
    positions = Counter((s["partition"], int(s["offset"])) for s in seen)
    assert [pos for pos, n in positions.items() if n > 1] == []          # no duplicates
    assert len(seen) == 300 and {s["value"] for s in seen} == {m["value"] for m in produced["sent"]}
    assignments = {}
    for join in consumed["joins"]:
        assignments[join["member"]] = set(join["memberAssignment"].get(topic, []))
    assert set(assignments) == {0, 1}, consumed["joins"]
    assert assignments[0] | assignments[1] == {0, 1, 2} and not assignments[0] & assignments[1]
    for s in seen:
        partition, offset, key, headers = on_disk[s["value"]]
        assert (s["partition"], int(s["offset"]), s["key"], s["headers"]) == (partition, offset, key, headers)
        assert s["partition"] in assignments[s["member"]]
        assert abs(int(s["timestamp"]) - time.time() * 1000) < 600_000
    for p in range(3):       # per partition the read is in offset order
        offsets_read = [int(s["offset"]) for s in seen if s["partition"] == p]
        assert offsets_read == sorted(offsets_read)

    # -- committed offsets (OffsetFetch) equal the end offsets (ListOffsets)
    ends = {int(p["partition"]): p["high"] for p in offsets["topicOffsets"][topic]}
    assert sum(int(v) for v in ends.values()) == 300
    (committed,) = offsets["offsets"]
    assert {p["partition"]: p["offset"] for p in committed["partitions"]} == ends

    # -- the resumed member reads only the 30 new ones, and commits them
    assert resumed["outcome"] == "complete"
    assert sorted(s["value"] for s in resumed["seen"]) == sorted(m["value"] for m in more["sent"])
    for s in resumed["seen"]:
        assert int(s["offset"]) >= int(ends[s["partition"]])
    ends = {int(p["partition"]): p["high"] for p in offsets2["topicOffsets"][topic]}
    assert sum(int(v) for v in ends.values()) == 330
    assert {p["partition"]: p["offset"] for p in offsets2["offsets"][0]["partitions"]} == ends

    # -- DescribeGroups / ListGroups, then DeleteGroups; its commits are gone afterwards
    states = {g["groupId"]: (g["state"], g["members"], g["errorCode"]) for g in described["described"]}
    assert states == {group: ("Empty", 0, 0), "js-never": ("Dead", 0, 0)}
    assert {"groupId": group, "protocolType": "consumer"} in described["listed"]
    assert deleted["deleted"] == [{"groupId": group, "errorCode": 0, "error": None}]
    assert group not in deleted["listed"]
    assert missing["failed"] == [{"groupId": "js-never", "errorCode": 69, "error": "GROUP_ID_NOT_FOUND"}]
    assert {p["offset"] for p in offsets3["offsets"][0]["partitions"]} == {"-1"}
    assert {p["partition"]: p["offset"] for p in set_offsets["offsets"][0]["partitions"]} == \
        {0: "5", 1: "-1", 2: "7"}


def test_kafkajs_offsets_by_timestamp_and_delete_records(js_broker):
    topic = "js-times"
    base = int(time.time() * 1000) - 60_000
    _, produced, r, r2 = kafkajs(js_broker, "sequence", steps=[
        ["createTopic", {"topic": topic, "numPartitions": 1}],
        ["produce", {"topic": topic, "count": 10, "batches": 2, "compression": "None", "timestamp": base}],
        ["offsetsByTime", {"topic": topic, "timestamp": base + 7, "deleteBelow": 3}],
        ["offsetsByTime", {"topic": topic, "timestamp": base + 3_600_000}],
    ])
    assert [a["baseOffset"] for a in produced["acks"]] == ["0", "5"]
    # the producer's timestamps are kept (CreateTime), uncompressed batches as sent
    stored = [(h.compression, h.base_timestamp + r.timestamp_delta)
              for h, recs in stored_batches(js_broker, topic, 0) for r in recs]
    assert stored == [(0, base + i) for i in range(10)]

    assert r["byTimestamp"] == [{"partition": 0, "offset": "7"}]
    assert r["after"] == [{"partition": 0, "offset": "10", "high": "10", "low": "3"}]
    # past the newest timestamp: kafkajs maps "no such offset" to the end offset
    assert r2["byTimestamp"] == [{"partition": 0, "offset": "10"}]


def test_kafkajs_transactions(js_broker):
    """kafkajs' transactional producer: a transaction over two topics with sendOffsets commits,
    one aborts (its records and its offsets vanish), a third commits; its read_committed consumer
    sees exactly the committed records, in order, and the group's offset is the committed one."""
    topic, other = "js-tx", "js-tx-other"
    _, _, tx = kafkajs(js_broker, "sequence", steps=[
        ["createTopic", {"topic": topic, "numPartitions": 1}],
        ["createTopic", {"topic": other, "numPartitions": 1}],
        ["transaction", {"topic": topic, "other": other, "groupId": "js-tx-group", "expect": 3}],
    ])
    assert tx["outcomes"] == ["committed", "aborted", "committed"], tx
    assert tx["outcome"] == "complete" and tx["values"] == ["committed-1", "committed-2", "committed-3"], tx
    assert tx["offsets"] == [{"topic": other, "partitions": [{"partition": 0, "offset": "1", "metadata": None}]}]
    # on disk: the aborted record is there, between markers, and no reader saw it
    stored = [(h.is_control, r.value) for h, recs in stored_batches(js_broker, topic, 0) for r in recs]
    assert (False, b"aborted-1") in stored and sum(1 for c, _ in stored if c) == 3