"""@platformatic/kafka (a modern pure-JavaScript client, npm `@platformatic/kafka`) against a real
`kompakt serve`.

Where kafkajs (test_kafkajs.py) speaks the old end of the version ranges, this client speaks the new
end: flexible versions throughout, Produce v11, Fetch v17, Metadata v12, CreateTopics v7,
DescribeConfigs v4 (config sources instead of isDefault), IncrementalAlterConfigs v1, ListOffsets v9
(max-timestamp lookup), JoinGroup v9, OffsetCommit v9, OffsetFetch v9 (groups array), DeleteRecords
v2. Each test runs js/platformatic_client.js steps (JSON on stdout); loading the client costs about
a second of CPU, so a test runs its steps in one process (`sequence`).

Pinned in js/package.json + package-lock.json (1.35.0: the last release for Node 20); installed
by `npm ci` on first use. Skips only without node/npm.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest

from compat_support import NODE, NPM, node_group_broker, platformatic, stored_batches

pytestmark = pytest.mark.skipif(NODE is None or NPM is None,
                                reason="node/npm not installed (@platformatic/kafka tests need Node >= 20.19 and npm)")

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5      # DescribeConfigs config sources


@pytest.fixture(scope="module")
def pf_broker(tmp_path_factory):
    with node_group_broker(tmp_path_factory, "platformatic-broker") as proc:
        yield proc


def test_platformatic_admin(pf_broker):
    r = platformatic(pf_broker, "admin", topic="pf-admin", doomed="pf-doomed")
    (created,) = r["created"]
    assert created["name"] == "pf-admin" and created["partitions"] == 3 and created["replicas"] == 1
    assert created["configuration"]["cleanup.policy"] == "compact"      # CreateTopics v5+ echoes configs
    assert "TOPIC_ALREADY_EXISTS" in r["createAgain"]
    assert {"pf-admin", "pf-doomed"} <= set(r["listed"])

    meta = r["metadata"]
    (node_id,) = [int(n) for n in meta["brokers"]]
    assert meta["brokers"][str(node_id)]["port"] == pf_broker.port and meta["controllerId"] == node_id
    topic = meta["topics"]["pf-admin"]
    assert topic["id"] == created["id"] and topic["partitionsCount"] == 3
    assert all(p["leader"] == node_id and p["replicas"] == [node_id] and p["isr"] == [node_id]
               for p in topic["partitions"])

    assert r["configs"] == {
        "cleanup.policy": {"value": "compact", "source": DYNAMIC_TOPIC_CONFIG},
        "min.cleanable.dirty.ratio": {"value": "0.1", "source": DYNAMIC_TOPIC_CONFIG},
        "retention.ms": {"value": "604800000", "source": DEFAULT_CONFIG},
    }
    # IncrementalAlterConfigs SET touches one key and keeps the others (unlike AlterConfigs)
    assert r["altered"] == {"cleanup.policy": "compact", "retention.ms": "3600000"}
    assert r["doomedPartitions"] == 2
    assert "pf-doomed" not in r["listedAfterDelete"]


def test_platformatic_produce_group_commit_resume(pf_broker):
    topic, group = "pf-orders", "pf-group"
    b = pf_broker

    def jobs(start, n, codec):
        return [{"topic": topic, "compression": codec,
                 "batches": [[{"partition": i % 3, "key": f"k{i % 7}", "value": f"v{i}",
                               "headers": [["seq", str(i)], ["codec", codec]], "timestamp": None}
                              for i in range(start, start + n)]]}]

    # One node process runs the whole story (js/driver.js `sequence`):
    # - an idempotent producer (InitProducerId, sequences), lz4 then snappy, to a topic that
    #   Metadata v12 auto-creates (num.partitions=3);
    # - a group of two members reads all 200 from the earliest offsets, committing each message;
    # - the group's commits (OffsetFetch v9 groups form) and the end offsets (ListOffsets);
    # - 20 more (gzip), read by one member resuming from the commits;
    # - ListGroups / DescribeGroups, then DeleteGroups.
    first, consumed, offsets, _, resumed, groups = platformatic(b, "sequence", steps=[
        ["send", {"jobs": jobs(0, 100, "lz4") + jobs(100, 100, "snappy"), "idempotent": True, "autocreate": True}],
        ["group", {"topics": [topic], "groupId": group, "members": 2, "expect": 200}],
        ["offsets", {"groupId": group, "topic": topic, "partitions": 3}],
        ["send", {"jobs": jobs(200, 20, "gzip")}],
        ["group", {"topics": [topic], "groupId": group, "members": 1, "expect": 20}],
        ["groups", {"groupIds": [group, "pf-never"], "remove": [group]}],
    ])
    assert len(first["offsets"]) >= 3
    codecs = Counter()
    for p in range(3):
        for header, records in stored_batches(b.log_dir, topic, p):
            if header.compression != 1:
                assert header.producer_id >= 0 and header.base_sequence >= 0
            codecs[header.compression] += len(records)
    assert codecs == {3: 100, 2: 100, 1: 20}        # lz4, snappy, gzip as sent

    assert consumed["outcome"] == "complete", consumed["outcome"]
    seen = consumed["seen"]
    assert [pos for pos, n in Counter((s["partition"], s["offset"]) for s in seen).items() if n > 1] == []
    assert sorted(int(s["value"][1:]) for s in seen) == list(range(200))
    for s in seen:
        i = int(s["value"][1:])
        assert (s["partition"], s["key"]) == (i % 3, f"k{i % 7}")
        assert s["headers"] == [["seq", str(i)], ["codec", "lz4" if i < 100 else "snappy"]]
        assert abs(s["timestamp"] - time.time() * 1000) < 600_000
    joins = {j["member"]: {p for a in j["assignments"] for p in a["partitions"]} for j in consumed["joins"]}
    assert set(joins) == {0, 1} and joins[0] | joins[1] == {0, 1, 2} and not joins[0] & joins[1], consumed["joins"]
    assert len({j["generationId"] for j in consumed["joins"]}) == 1
    for s in seen:
        assert s["partition"] in joins[s["member"]]

    ends = {p["partitionIndex"]: p["offset"] for p in offsets["ends"][0]["partitions"]}
    assert sum(int(v) for v in ends.values()) == 200
    (committed,) = offsets["committed"]
    (t,) = committed["topics"]
    assert {p["partitionIndex"]: p["committedOffset"] for p in t["partitions"]} == ends

    assert resumed["outcome"] == "complete"
    assert sorted(int(s["value"][1:]) for s in resumed["seen"]) == list(range(200, 220))
    for s in resumed["seen"]:
        assert s["offset"] >= int(ends[s["partition"]])

    assert groups["listed"][group]["state"] == "EMPTY" and groups["listed"][group]["protocolType"] == "consumer"
    assert groups["described"][group]["members"] == {}
    assert groups["described"]["pf-never"]["state"] == "DEAD"
    assert group not in groups["listedAfterDelete"]


def test_platformatic_list_offsets_and_delete_records(pf_broker):
    b = pf_broker
    topic = "pf-times"
    base = int(time.time() * 1000) - 60_000
    # ten records, timestamps base+0..9, but offset 4 carries the newest timestamp (base+100)
    stamps = [base + i for i in range(10)]
    stamps[4] = base + 100
    batch = [{"partition": 0, "key": f"k{i}", "value": f"v{i}", "headers": [], "timestamp": stamps[i]} for i in range(10)]
    _, r = platformatic(b, "sequence", steps=[
        ["send", {"autocreate": True, "jobs": [{"topic": topic, "compression": "none", "batches": [batch[:5], batch[5:]]}]}],
        ["times", {"topic": topic, "timestamp": base + 6, "deleteBelow": 3}],
    ])

    def only(listed):
        (t,) = listed
        (p,) = t["partitions"]
        return p["offset"], p["timestamp"]
    assert only(r["byTimestamp"]) == ("4", str(base + 100))   # first offset with timestamp >= base+6
    assert only(r["earliest"])[0] == "0"
    assert only(r["maxTimestamp"]) == ("4", str(base + 100))  # KIP-734 MAX_TIMESTAMP (-3)
    assert r["deleted"] == [{"name": topic, "partitions": [{"partition": 0, "lowWatermark": "3"}]}]
    assert only(r["earliestAfter"])[0] == "3"
