"""Group-safe tombstones end to end (kompakt.tombstone.retention.groups): real consumer groups
(confluent-kafka, subscribe + commit), a real broker, compact-now through the admin API.

delete.retention.ms=0 makes every delete removable by the second clean that sees it (the first
stamps its horizon); that is what happens, on Kafka, to a consumer offline for longer than
delete.retention.ms. A topic naming the group keeps the deletes until the group has read them."""
from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition

from compaction_support import admin_get, create_topic, produce, read_partition
from kompakt.testing.poll import wait_until
from compat_support import running_broker

KEYS = [b"k%d" % i for i in range(8)]
DELETED = KEYS[:5]


@pytest.fixture(scope="module")
def b(tmp_path_factory):
    """One broker for the module; only compact-now cleans (the background cleaner waits long)."""
    with running_broker(tmp_path_factory.mktemp("tombstones"),
                        {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                         "log.cleaner.backoff.ms": "600000"}) as proc:
        yield proc


def topic_configs(**extra):
    base = {"cleanup.policy": "compact", "delete.retention.ms": "0", "internal.segment.bytes": "4000",
            "min.cleanable.dirty.ratio": "0.99"}
    base.update({k.replace("_", "."): v for k, v in extra.items()})
    return base


def roll(b, topic, n=[0]):
    """A record too big for the active segment's room: the segment holding what came before closes."""
    n[0] += 1
    produce(b.bootstrap, topic, [(b"filler", b"f%d" % n[0] + b"x" * 3800)])


def compact(b, topic):
    req = urllib.request.Request(f"{b.metrics_url}/v1/partitions/{topic}/0/compact?wait=60", method="POST")
    with urllib.request.urlopen(req, timeout=90) as r:
        body = json.loads(r.read())
    assert body["state"] == "done", body
    return body["stats"]


def consume_group(b, group, topic, until_offset):
    """Subscribe in `group`, read from its committed offset (earliest if none) up to `until_offset`,
    commit, leave. Returns [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    got = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not got or got[-1][0] < until_offset - 1):
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
        assert got and got[-1][0] >= until_offset - 1, (group, got[-1:] if got else None, until_offset)
        c.commit(offsets=[TopicPartition(topic, 0, got[-1][0] + 1)], asynchronous=False)
    finally:
        c.close()
    return got


def end_offset(b, topic):
    return admin_get(b, f"/v1/partitions/{topic}/0")["log_end_offset"]


def tombstones(records):
    return sorted(k for _, k, v in records if v is None and k != b"filler")


def test_an_offline_group_that_comes_back_after_the_horizon_sees_every_delete(b):
    guarded, plain = "accounts", "accounts-kafka-rule"
    create_topic(b.bootstrap, guarded, topic_configs(kompakt_tombstone_retention_groups="billing"))
    create_topic(b.bootstrap, plain, topic_configs())
    for t in (guarded, plain):
        produce(b.bootstrap, t, [(k, b"v1") for k in KEYS])
    # the billing service reads everything, commits, and goes offline
    consume_group(b, "billing", guarded, end_offset(b, guarded))
    consume_group(b, "billing", plain, end_offset(b, plain))
    for t in (guarded, plain):
        produce(b.bootstrap, t, [(k, None) for k in DELETED])
        roll(b, t)
        assert compact(b, t)["cleaned"]          # stamps the deletes' horizon (now + 0 ms)
        roll(b, t)
    held = compact(b, guarded)
    compact(b, plain)
    # Kafka's rule: the deletes are gone before billing read them
    assert tombstones(read_partition(b.bootstrap, plain)) == []
    assert tombstones(read_partition(b.bootstrap, guarded)) == DELETED
    assert held["tombstones_held_back"] == len(DELETED)
    view = admin_get(b, f"/v1/partitions/{guarded}/0")
    retention = view["tombstone_retention"]
    assert retention["held_by"] == ["billing"] and retention["held_back_by_last_clean"] == len(DELETED)
    assert view["cleaner"]["tombstones_held_back"] == len(DELETED)
    metrics = urllib.request.urlopen(f"{b.metrics_url}/metrics", timeout=10).read().decode()
    assert re.search(r'^kompakt_cleaner_partition_tombstones_held_back\{[^}]*topic="%s"[^}]*\} 5\.0$' % guarded,
                     metrics, re.M)
    # billing comes back: from its committed offset it sees every delete on the guarded topic only
    back = consume_group(b, "billing", guarded, end_offset(b, guarded))
    assert tombstones(back) == DELETED
    missed = consume_group(b, "billing", plain, end_offset(b, plain))
    assert tombstones(missed) == []
    # it has read past them: the next clean removes them
    roll(b, guarded)
    after = compact(b, guarded)
    assert after["tombstones_held_back"] == 0
    assert tombstones(read_partition(b.bootstrap, guarded)) == []


def test_a_group_that_stops_committing_stops_holding_after_max_ms(b):
    """The group holds the deletes while its last commit is younger than max.ms (a day here, so
    the first cleans never race the clock on a loaded machine); max.ms is then lowered live to
    1 s, and once the commit is older than that the group no longer holds them."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    topic = "sessions"
    create_topic(b.bootstrap, topic, topic_configs(kompakt_tombstone_retention_groups="reporting",
                                                   kompakt_tombstone_retention_max_ms="86400000"))
    produce(b.bootstrap, topic, [(k, b"v1") for k in KEYS])
    consume_group(b, "reporting", topic, end_offset(b, topic))
    committed_at = time.monotonic()
    produce(b.bootstrap, topic, [(k, None) for k in DELETED])
    roll(b, topic)
    compact(b, topic)
    roll(b, topic)
    held = compact(b, topic)
    assert held["tombstones_held_back"] == len(DELETED)
    stale_line = "consumer group reporting has not committed offsets on topic sessions"
    assert stale_line not in b.log_text()
    # reporting never commits again; with max.ms at 1 s it no longer holds the deletes back
    res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(
        "kompakt.tombstone.retention.max.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.incremental_alter_configs([res])[res].result(30)
    wait_until(lambda: time.monotonic() - committed_at > 1.5, "max.ms to pass", timeout=30)
    roll(b, topic)
    gone = compact(b, topic)
    assert gone["tombstones_held_back"] == 0
    assert tombstones(read_partition(b.bootstrap, topic)) == []
    text = b.log_text()
    assert stale_line in text and re.search(r"WARNING.*" + re.escape(stale_line), text)
    metrics = urllib.request.urlopen(f"{b.metrics_url}/metrics", timeout=10).read().decode()
    assert re.search(r'^kompakt_tombstone_retention_stale_groups\{topic="sessions"\} 1\.0$', metrics, re.M)
    assert re.search(r'^kompakt_tombstone_retention_stale_group_events_total\{topic="sessions"\} 1\.0$',
                     metrics, re.M)
    groups = admin_get(b, f"/v1/partitions/{topic}/0")["tombstone_retention"]["groups"]
    assert [(g["group"], g["stale"]) for g in groups] == [("reporting", True)]


def test_bad_configs_are_refused_with_the_reason(b):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    from confluent_kafka import KafkaException
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fut = admin.create_topics([NewTopic("bad-groups", 1, 1, config={
        "cleanup.policy": "compact", "kompakt.tombstone.retention.groups": "*,billing"})])["bad-groups"]
    with pytest.raises(KafkaException) as err:
        fut.result(30)
    assert "cannot be combined" in str(err.value) and err.value.args[0].name() == "INVALID_CONFIG"
    create_topic(b.bootstrap, "good-groups", {"cleanup.policy": "compact"})
    res = ConfigResource("topic", "good-groups", incremental_configs=[])
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    res.add_incremental_config(ConfigEntry("kompakt.tombstone.retention.max.ms", "0",
                                           incremental_operation=AlterConfigOpType.SET))
    with pytest.raises(KafkaException) as err:
        admin.incremental_alter_configs([res])[res].result(30)
    assert "at least 1" in str(err.value)
    ok = ConfigResource("topic", "good-groups", incremental_configs=[])
    ok.add_incremental_config(ConfigEntry("kompakt.tombstone.retention.groups", "billing,audit",
                                          incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([ok])[ok].result(30)
    desc = admin.describe_configs([ConfigResource("topic", "good-groups")])
    entries = list(desc.values())[0].result(30)
    assert entries["kompakt.tombstone.retention.groups"].value == "billing,audit"
    assert entries["kompakt.tombstone.retention.max.ms"].value == "604800000"
