"""__consumer_offsets under our own cleaner: after compaction (superseded commits and deleted
groups gone) and a SIGKILL, the coordinator rebuilds exactly the latest state from the cleaned log.
"""
from __future__ import annotations

import json
import os
import urllib.request

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from groups_support import GROUP_BROKER, committed_offsets, create_topic, listed_groups


def compact(broker, topic: str, partition: int) -> dict:
    req = urllib.request.Request(f"{broker.metrics_url}/v1/partitions/{topic}/{partition}/compact?wait=60",
                                 method="POST")
    with urllib.request.urlopen(req, timeout=90) as resp:
        assert resp.status == 200, resp.status
        return json.loads(resp.read())


def log_bytes(broker, topic: str, partition: int) -> int:
    """Bytes of the partition's .log segment files (compaction keeps offsets, drops bytes)."""
    d = os.path.join(broker.log_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))


def test_offsets_survive_compaction_and_sigkill(start_broker):
    broker = start_broker(config={**GROUP_BROKER, "offsets.topic.num.partitions": "1",
                                  "offsets.topic.segment.bytes": "4096"})
    create_topic(broker.bootstrap, "t", 2)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    hot = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="hot", enable_auto_commit=False)
    for i in range(150):       # 300 commit records of 2 keys: ~6 segments of 4 KiB
        hot.commit({tp0: OffsetAndMetadata(i, f"m{i}", -1), tp1: OffsetAndMetadata(2 * i, "", -1)})
    hot.close()
    for group in ("cold", "doomed"):
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
        c.commit({tp0: OffsetAndMetadata(7, "", -1)})
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        assert dict(admin.delete_groups(["doomed"])) == {"doomed": "OK"}
    finally:
        admin.close()

    before = log_bytes(broker, "__consumer_offsets", 0)
    stats = compact(broker, "__consumer_offsets", 0)
    assert stats, "the cleaner reported nothing"
    broker.restart(kill=True)
    # The cleaner kept only the latest record per key (the active segment is never cleaned).
    after = log_bytes(broker, "__consumer_offsets", 0)
    assert after < before / 3, (before, after)

    assert committed_offsets(broker.bootstrap, "hot") == {0: 149, 1: 298}
    assert committed_offsets(broker.bootstrap, "cold") == {0: 7}
    groups = listed_groups(broker.bootstrap)
    assert "doomed" not in groups and {"hot", "cold"} <= set(groups)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        assert admin.list_group_offsets("hot")["hot"][tp0].metadata == "m149"
    finally:
        admin.close()
