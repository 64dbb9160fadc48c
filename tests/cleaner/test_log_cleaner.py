"""LogCleaner pieces that need no worker: compact,delete retention after cleaning, status figures,
and forgetting a deleted partition."""
from kompakt.cleaner import LogCleaner

from .conftest import append

HOUR = 3_600_000


def make(logs, clock):
    c = LogCleaner(logs.config, logs.manager, time=clock)
    logs.manager.cleaner = c
    return c


def test_compact_delete_runs_retention_after_cleaning(logs, clock):
    c = make(logs, clock)
    lg = logs.create("cd", cleanup_policy="compact,delete", retention_ms=str(HOUR))
    append(lg, [(b"a", b"old")])
    lg.roll()
    clock.ms += 2 * HOUR
    append(lg, [(b"b", b"new")])
    lg.roll()
    append(lg, [(b"c", b"active")])
    assert [s.base_offset for s in lg.segments] == [0, 1, 2]
    c._retention_for_compact_delete()
    # the first segment's records are older than retention.ms: gone even though its key is unique
    assert [s.base_offset for s in lg.segments] == [1, 2] and lg.log_start_offset == 1
    assert c.manager.state_of(("cd", 0)).kind == "None"


def test_compact_only_logs_are_not_touched_by_retention(logs, clock):
    c = make(logs, clock)
    lg = logs.create("co", retention_ms=str(HOUR))
    append(lg, [(b"a", b"old")])
    lg.roll()
    clock.ms += 2 * HOUR
    append(lg, [(b"b", b"new")])
    c._retention_for_compact_delete()
    assert [s.base_offset for s in lg.segments] == [0, 1]


def test_status_and_partition_status_shapes(logs, clock):
    c = make(logs, clock)
    lg = logs.create("s", min_cleanable_dirty_ratio="0.01")
    append(lg, [(b"a", b"1")])
    lg.roll()
    st = c.status()
    for key in ("max_dirty_percent", "max_clean_time_secs", "max_compaction_delay_secs",
                "max_buffer_utilization_percent", "cleaner_recopy_percent", "uncleanable_partitions_count",
                "uncleanable_bytes", "dead_thread_count", "time_since_last_run_ms", "workers"):
        assert key in st
    ps = c.partition_status(("s", 0))
    assert ps["dirty_ratio"] == 1.0 and ps["cleaner_point"] == 0 and ps["state"] == "None"
    assert c.partition_status(("nope", 0)) is None


def test_deleted_partition_is_forgotten(logs, clock):
    c = make(logs, clock)
    logs.create("gone")
    c.manager.mark_uncleanable(logs.log_dir, ("gone", 0), "boom")
    logs.manager.delete_topic("gone")
    assert c.status()["uncleanable_partitions_count"] == {logs.log_dir: 0}


def test_too_small_dedupe_buffer_is_refused_at_start(tmp_path, clock):
    from .conftest import broker_config
    cfg = broker_config(str(tmp_path), **{"log.cleaner.dedupe.buffer.size": "40", "log.cleaner.threads": "1"})
    c = LogCleaner(cfg, None, time=clock)
    import pytest
    with pytest.raises(ValueError, match="increase log.cleaner.dedupe.buffer.size"):
        c.start()
