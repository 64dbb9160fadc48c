"""LiveCollector against a real LogManager and LogCleaner (in process, no server): log families
per partition, the cleaner's figures after a real clean, and `partition_labels=False` folding
partitions into topics (sums for sizes and counts, maxima for ratios and times)."""
from __future__ import annotations

import types

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kompakt.broker.observability.metrics import Metrics
from kompakt.cleaner import LogCleaner
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition
from kompakt.storage.log_manager import LogManager


@pytest.fixture
def storage(tmp_path):
    cfg = BrokerConfig.load(overrides=[f"log.dirs={tmp_path}", "log.segment.bytes=1024",
                                       "log.cleaner.backoff.ms=600000"], environ={})
    manager = LogManager(cfg)
    manager.startup()
    cleaner = LogCleaner(cfg, manager)
    manager.cleaner = cleaner
    manager.create_topic("cmp", 2, {"cleanup.policy": "compact"})
    manager.create_topic("del", 1, {"cleanup.policy": "delete"})
    yield manager, cleaner
    manager.shutdown()


def append(manager, topic, partition, n, keys=4):
    lg = manager.get_log(TopicPartition(topic, partition))
    for i in range(n):
        lg.append_as_leader(build_batch([(b"k%d" % (i % keys), b"v%d-" % i + b"x" * 100)]))
    lg.sync_data()    # the cleaner cleans only below the high watermark, the durable offset
    return lg


def scrape(manager, cleaner, partition_labels=True) -> dict[tuple[str, tuple], float]:
    m = Metrics(partition_labels=partition_labels, process_metrics=False)
    m.attach(types.SimpleNamespace(log_manager=manager, cleaner=cleaner, ready=True))
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def lbl(topic, partition=None):
    return (("partition", str(partition)), ("topic", topic)) if partition is not None else (("topic", topic),)


def test_log_families_per_partition(storage):
    manager, cleaner = storage
    lg = append(manager, "cmp", 0, 30)
    append(manager, "del", 0, 5)
    s = scrape(manager, cleaner)
    assert s[("kompakt_log_end_offset", lbl("cmp", 0))] == 30
    assert s[("kompakt_log_end_offset", lbl("cmp", 1))] == 0
    assert s[("kompakt_log_start_offset", lbl("cmp", 0))] == 0
    assert s[("kompakt_log_segments", lbl("cmp", 0))] == len(lg.segments) > 1
    assert s[("kompakt_log_size_bytes", lbl("cmp", 0))] == sum(seg.size for seg in lg.segments)
    assert s[("kompakt_log_partitions", lbl("cmp"))] == 2
    # cleaner per-partition gauges only for compacted logs
    assert ("kompakt_cleaner_partition_dirty_ratio", lbl("cmp", 0)) in s
    assert ("kompakt_cleaner_partition_dirty_ratio", lbl("del", 0)) not in s
    # never cleaned: no last-clean time is exported (the cleaner reports -1)
    assert ("kompakt_cleaner_partition_last_clean_timestamp_seconds", lbl("cmp", 0)) not in s
    assert s[("kompakt_cleaner_partition_paused", lbl("cmp", 0))] == 0


async def test_cleaner_figures_after_a_real_clean(storage):
    manager, cleaner = storage
    lg = append(manager, "cmp", 0, 40)
    cleaner.start()
    try:
        stats = await cleaner.clean_now(TopicPartition("cmp", 0))
    finally:
        await cleaner.shutdown()
    assert stats
    s = scrape(manager, cleaner)
    active_base = lg.segments[-1].base_offset
    assert s[("kompakt_cleaner_partition_cleaner_point_offset", lbl("cmp", 0))] == active_base
    assert s[("kompakt_cleaner_partition_last_clean_timestamp_seconds", lbl("cmp", 0))] > 1e9
    assert s[("kompakt_cleaner_partition_records_after_last_clean", lbl("cmp", 0))] > 0
    assert s[("kompakt_cleaner_cleanings_total", ())] == 1
    assert s[("kompakt_cleaner_read_bytes_total", ())] > s[("kompakt_cleaner_written_bytes_total", ())] > 0
    assert 0 < s[("kompakt_cleaner_recopy_ratio", ())] < 1
    assert s[("kompakt_log_size_bytes", lbl("cmp", 0))] == sum(seg.size for seg in lg.segments)


def test_partition_labels_false_folds_into_topics(storage):
    manager, cleaner = storage
    append(manager, "cmp", 0, 30)
    append(manager, "cmp", 1, 10)
    cleaner.abort_and_pause_cleaning(TopicPartition("cmp", 1))
    per_partition = scrape(manager, cleaner)
    s = scrape(manager, cleaner, partition_labels=False)
    assert not any(dict(labels).get("partition") for _, labels in s)
    assert s[("kompakt_log_end_offset", lbl("cmp"))] == 40
    assert s[("kompakt_log_size_bytes", lbl("cmp"))] == (per_partition[("kompakt_log_size_bytes", lbl("cmp", 0))]
                                                        + per_partition[("kompakt_log_size_bytes", lbl("cmp", 1))])
    assert s[("kompakt_cleaner_partition_dirty_ratio", lbl("cmp"))] == max(
        per_partition[("kompakt_cleaner_partition_dirty_ratio", lbl("cmp", p))] for p in (0, 1))
    assert s[("kompakt_cleaner_partition_paused", lbl("cmp"))] == 1  # number of paused partitions


@pytest.mark.parametrize("partition_labels", [True, False])
def test_promtool_accepts_the_partition_families(storage, partition_labels):
    # The per-partition families are written as text by TextGauge, not by prometheus-client.
    import shutil
    import subprocess
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/test.sh does)"
    manager, cleaner = storage
    append(manager, "cmp", 0, 30)
    m = Metrics(partition_labels=partition_labels, process_metrics=False)
    m.attach(types.SimpleNamespace(log_manager=manager, cleaner=cleaner, ready=True))
    body = m.render()
    assert b"# TYPE kompakt_log_end_offset gauge\n" in body and b"# TYPE kompakt_cleaner_partition_dirty_ratio gauge\n" in body
    if partition_labels:   # labels sorted by name, as prometheus-client writes them
        assert b'\nkompakt_log_end_offset{partition="0",topic="cmp"} 30.0\n' in body
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
