"""LogManager over real dirs and real logs: locking, placement, topics, retention, flush,
checkpoints, deferred deletion, startup repairs and background tasks."""
import asyncio
import json
import logging
import os
import time

import pytest

from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import (ErrorCode, InvalidConfigError, InvalidPartitionsError,
                                     InvalidTopicExceptionError, TopicAlreadyExistsError,
                                     UnknownTopicOrPartitionError)
from kompakt.storage import TopicPartition
from kompakt.storage.checkpoint import OffsetCheckpointFile
from kompakt.storage.log_manager import (CLEAN_SHUTDOWN_FILE, LogDirError, LogDirLockedError, LogManager,
                                         describe_partition_placement)
from kompakt.storage.topic_store import STORE_FILE, TopicStore, encode, random_topic_id

T0 = 1_700_000_000_000


class FakeTime:
    """A settable clock (ms granularity) passed to the manager and its logs."""

    def __init__(self, ms: int = T0):
        self.ms = ms

    def time(self) -> float:
        return self.ms / 1000.0

    def monotonic(self) -> float:
        return self.ms / 1000.0


def make_config(*dirs, **extra):
    # small indexes: a preallocated 10 MiB index costs ~1 s to reload after an unclean stop
    props = {"log.dirs": ",".join(str(d) for d in dirs), "log.segment.bytes": "300",
             "log.initial.task.delay.ms": "0", "log.index.size.max.bytes": "4096"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return BrokerConfig(props)


@pytest.fixture
def clock():
    return FakeTime()


@pytest.fixture
def manager(tmp_path, clock):
    managers = []

    def start(*dirs, **extra):
        dirs = dirs or (tmp_path / "logs",)
        m = LogManager(make_config(*dirs, **extra), time=clock)
        m.startup()
        managers.append(m)
        return m

    yield start
    for m in managers:
        m.shutdown()        # does nothing after a crash(): that stopped its threads already


def batch(i: int, ts: int = T0, size: int = 20) -> bytes:  # 90 bytes: 3 per 300-byte segment
    return R.build_batch([(b"k%d" % i, b"v" * size, [], ts)], base_timestamp=ts)


def fill(m, tp, n, ts=T0):
    """n batches, synced: with durable acks (the default) the high watermark, which retention
    never passes, is the durable offset; the group commit would get there on its own, soon."""
    for i in range(n):
        m.append_as_leader(tp, batch(i, ts))
    m.get_log(tp).sync_data()


# ---- dirs ------------------------------------------------------------------------------------

def test_second_manager_on_the_same_dir_fails_clearly(tmp_path, manager):
    first = manager()
    second = LogManager(make_config(tmp_path / "logs"))
    with pytest.raises(LogDirLockedError) as info:
        second.startup()
    assert str(tmp_path / "logs") in str(info.value) and ".lock" in str(info.value)
    first.shutdown()
    second.startup()  # the lock is released at shutdown
    second.shutdown()


def test_meta_properties_and_clean_shutdown_marker(tmp_path, manager):
    d = tmp_path / "logs"
    m = manager(d)
    assert m.had_clean_shutdown == {str(d): False}
    props = dict(line.split("=", 1) for line in (d / "meta.properties").read_text().splitlines()
                 if not line.startswith("#"))
    assert props["version"] == "1" and props["node.id"] == "1"
    assert props["cluster.id"] == m.cluster_id and len(m.cluster_id) == 22 and props["directory.id"]
    m.shutdown()
    assert json.loads((d / CLEAN_SHUTDOWN_FILE).read_text()) == {"version": 0, "brokerEpoch": -1}
    m2 = manager(d)
    assert m2.had_clean_shutdown == {str(d): True} and m2.cluster_id == m.cluster_id
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # removed at once: a crash while loading is unclean



def test_a_producer_snapshot_that_fails_at_shutdown_leaves_no_clean_marker(tmp_path, manager, caplog):
    # Kafka's UnifiedLog.close: the snapshot at close is taken so that the next start cannot hit
    # the no-snapshot shortcut; a failed write fails the close, and the dir gets no clean-shutdown
    # marker (the next start recovers it). The other logs still close and the dir is unlocked.
    d = tmp_path / "logs"
    m = manager(d)
    m.create_topic("x", 2)
    tp = TopicPartition("x", 0)
    for seq in range(3):
        m.append_as_leader(tp, R.build_batch([(b"k", b"v", [], T0)], base_timestamp=T0,
                                             producer_id=5, producer_epoch=0, base_sequence=seq))
    m.append_as_leader(TopicPartition("x", 1), batch(0))
    end = m.get_log(tp).log_end_offset
    os.mkdir(d / "x-0" / ("%020d.snapshot.tmp" % end))   # the snapshot's temp file cannot be created
    with caplog.at_level(logging.ERROR):
        m.shutdown()
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert "x-0" in caplog.text and "unclean log shutdown" in caplog.text
    assert os.path.exists(d / "x-1" / ("%020d.snapshot" % 1))   # the other log closed as usual
    os.rmdir(d / "x-0" / ("%020d.snapshot.tmp" % end))
    m2 = manager(d)                                            # not left locked
    assert m2.had_clean_shutdown == {str(d): False}
    assert m2.append_as_leader(tp, R.build_batch([(b"k", b"v", [], T0)], base_timestamp=T0,
                                                 producer_id=5, producer_epoch=0, base_sequence=2)).duplicate

def test_inconsistent_meta_properties_refuse_to_start(tmp_path, manager):
    d = tmp_path / "logs"
    manager(d).shutdown()
    with pytest.raises(LogDirError, match="cluster.id"):
        LogManager(make_config(d, cluster_id="somethingelse")).startup()
    with pytest.raises(LogDirError, match="node id"):
        LogManager(make_config(d, node_id=7)).startup()
    LogManager(make_config(d)).startup()  # and nothing was left locked by the failures


def test_placement_goes_to_the_dir_with_fewest_partitions(tmp_path, manager):
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    m.create_topic("x", 3)
    placement = describe_partition_placement(m)
    assert placement == {str(a): ["x-0", "x-2"], str(b): ["x-1"]}
    m.create_topic("y", 1)
    assert describe_partition_placement(m)[str(b)] == ["x-1", "y-0"]
    m.shutdown()
    m2 = manager(a, b)
    assert sorted(m2.all_logs()) == [("x", 0), ("x", 1), ("x", 2), ("y", 0)]


def test_duplicate_partition_in_two_dirs_refuses_to_start(tmp_path, manager):
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    m.create_topic("x", 1)
    m.shutdown()
    os.makedirs(b / "x-0")
    with pytest.raises(LogDirError, match="Duplicate log directories for x-0"):
        LogManager(make_config(a, b)).startup()


# ---- topics ----------------------------------------------------------------------------------

def test_topic_metadata_survives_restart(tmp_path, manager):
    m = manager()
    meta = m.create_topic("orders", 2, {"cleanup.policy": "compact", "retention.ms": "1000"})
    fill(m, ("orders", 1), 3)
    m.shutdown()
    m2 = manager()
    again = m2.topics["orders"]
    assert (again.topic_id, again.partitions, again.configs) == (meta.topic_id, 2, meta.configs)
    assert m2.get_log(("orders", 1)).log_end_offset == 3
    assert m2.get_log(("orders", 0)).config.compact and m2.get_log(("orders", 0)).topic_id == meta.topic_id


def test_create_topic_errors(manager):
    m = manager()
    m.create_topic("a.b", 1)
    with pytest.raises(TopicAlreadyExistsError):
        m.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicExceptionError, match="collides"):
        m.create_topic("a_b", 1)
    with pytest.raises(InvalidTopicExceptionError):
        m.create_topic("bad name", 1)
    with pytest.raises(InvalidPartitionsError):
        m.create_topic("z", 0)
    with pytest.raises(InvalidConfigError) as info:
        m.create_topic("z", 1, {"segment.bytes": "10"})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert sorted(m.topics) == ["a.b"] and sorted(m.all_logs()) == [("a.b", 0)]


def test_create_partitions_and_alter_config_live(manager):
    m = manager()
    m.create_topic("t", 1)
    with pytest.raises(InvalidPartitionsError, match="already has 1"):
        m.create_partitions("t", 1)
    m.create_partitions("t", 3)
    assert sorted(m.all_logs()) == [("t", 0), ("t", 1), ("t", 2)]
    with pytest.raises(InvalidPartitionsError, match="higher than the requested 2"):
        m.create_partitions("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.create_partitions("nope", 2)
    m.alter_topic_config("t", {"cleanup.policy": "compact,delete", "internal.segment.bytes": "100"})
    for p in range(3):
        cfg = m.get_log(("t", p)).config
        assert cfg.compact and cfg.delete and cfg.segment_bytes == 100
    with pytest.raises(InvalidConfigError):
        m.alter_topic_config("t", {"retention.ms": "-7"})
    assert m.topics["t"].configs["cleanup.policy"] == "compact,delete"


def test_delete_topic_renames_then_deletes_after_delay(tmp_path, manager, clock):
    d = tmp_path / "logs"
    m = manager(d, log_segment_delete_delay_ms=5000)
    m.create_topic("gone", 2)
    fill(m, ("gone", 0), 3)
    m.delete_topic("gone")
    assert m.get_log(("gone", 0)) is None and "gone" not in m.topics
    doomed = sorted(n for n in os.listdir(d) if n.endswith("-delete"))
    assert len(doomed) == 2 and all(n.startswith("gone-") for n in doomed)
    assert m.delete_logs(clock.ms + 4999) == 0
    assert m.delete_logs(clock.ms + 5000) == 2
    assert not any(n.startswith("gone") for n in os.listdir(d))
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("gone")
    m.create_topic("gone", 1)  # the name is free again, with a new id
    assert m.get_log(("gone", 0)).log_end_offset == 0


def test_crash_between_delete_steps_finishes_the_deletion(tmp_path, manager):
    d = tmp_path / "logs"
    m = manager(d)
    meta = m.create_topic("t", 1)
    keep = m.create_topic("keep", 1)
    m.shutdown()
    # step 1 happened (store without the topic, its id remembered), step 2 (rename) did not
    TopicStore(str(d)).save({"keep": keep}, {meta.topic_id})
    m2 = manager(d)
    assert sorted(m2.all_logs()) == [("keep", 0)] and "t" not in m2.topics
    assert any(n.startswith("t-0.") and n.endswith("-delete") for n in os.listdir(d))
    assert TopicStore(str(d)).load()[1] == set()  # the deleted id is forgotten once handled


def test_store_topic_without_dirs_is_created(tmp_path, manager):
    d = tmp_path / "logs"
    m = manager(d)
    m.shutdown()
    meta = {"t": __import__("kompakt.storage.topic_store", fromlist=["TopicMeta"]).TopicMeta(
        "t", random_topic_id(), 2, {"cleanup.policy": "compact"})}
    TopicStore(str(d)).save(meta)  # a crash after create_topic's step 1
    m2 = manager(d)
    assert sorted(m2.all_logs()) == [("t", 0), ("t", 1)]
    assert m2.get_log(("t", 1)).config.compact and m2.get_log(("t", 1)).topic_id == meta["t"].topic_id


def test_corrupt_or_torn_topic_store(tmp_path, manager, caplog):
    d = tmp_path / "logs"
    m = manager(d)
    meta = m.create_topic("t", 2, {"cleanup.policy": "compact"})
    m.shutdown()
    good = (d / STORE_FILE).read_bytes()
    # torn write of a newer version: only the temp file is half written
    (d / (STORE_FILE + ".tmp")).write_bytes(encode({})[:10])
    m2 = manager(d)
    assert m2.topics["t"].configs == {"cleanup.policy": "compact"}
    assert not (d / (STORE_FILE + ".tmp")).exists()
    m2.shutdown()
    # a flipped byte in the store itself: rebuilt from the partition dirs, ids kept, configs lost
    bad = bytearray(good)
    bad[bad.index(b"compact")] ^= 0x01
    (d / STORE_FILE).write_bytes(bytes(bad))
    with caplog.at_level(logging.WARNING):
        m3 = manager(d)
    assert m3.topics["t"].topic_id == meta.topic_id and m3.topics["t"].partitions == 2
    assert m3.topics["t"].configs == {}
    assert "corrupt" in caplog.text and any("adopted" in r for r in m3.repairs)
    assert TopicStore(str(d)).load()[2]  # rewritten, valid again


def test_garbage_checkpoint_and_foreign_files(tmp_path, manager, caplog):
    d = tmp_path / "logs"
    m = manager(d)
    m.create_topic("t", 1)
    fill(m, ("t", 0), 5)
    m.shutdown()
    (d / "recovery-point-offset-checkpoint").write_bytes(b"\x00garbage\nmore")
    (d / "log-start-offset-checkpoint").write_bytes(b"0\n5\n")
    (d / "notes.txt").write_text("operator notes")
    (d / "not_a_partition").mkdir()
    (d / "t-0" / "README").write_text("foreign file inside a partition")
    (d / CLEAN_SHUTDOWN_FILE).unlink()  # and the shutdown was unclean: recover from offset 0
    with caplog.at_level(logging.WARNING):
        m2 = manager(d)
    assert m2.get_log(("t", 0)).log_end_offset == 5
    assert (d / "notes.txt").read_text() == "operator notes" and (d / "t-0" / "README").exists()
    assert "corrupt checkpoint" in caplog.text and "notes.txt" in caplog.text
    assert "not_a_partition" in caplog.text
    # recovered from 0: once the group commit has synced the recovered tail (here by hand, it
    # may race us), the checkpoint flushes the log and follows its durable offset
    m2.get_log(("t", 0)).sync_data()
    m2.checkpoint_recovery_offsets()
    assert OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read() == {("t", 0): 5}


# ---- retention -----------------------------------------------------------------------------------

def segment_bases(m, tp):
    return [s.base_offset for s in m.get_log(tp).segments]


def test_retention_by_time_takes_an_expired_active_segment_too(tmp_path, manager, clock):
    d = tmp_path / "logs"
    m = manager(d, log_segment_delete_delay_ms=1000)
    m.create_topic("t", 1, {"retention.ms": "10000"})
    tp = TopicPartition("t", 0)
    for i in range(12):  # ~100-byte batches, 300-byte segments: 3 batches a segment
        m.append_as_leader(tp, batch(i, ts=T0 + i * 1000))
    m.get_log(tp).sync_data()
    assert segment_bases(m, tp) == [0, 3, 6, 9]
    clock.ms = T0 + 12_500  # segment [0,3) is 10.5 s old (largest ts T0+2000)
    assert m.cleanup_logs() == 1
    assert segment_bases(m, tp) == [3, 6, 9] and m.get_log(tp).log_start_offset == 3
    clock.ms = T0 + 19_500  # [3,6) and [6,9) expired, the active [9,12) (largest ts T0+11000) not
    assert m.cleanup_logs() == 2
    assert segment_bases(m, tp) == [9] and m.get_log(tp).log_end_offset == 12
    assert m.get_log(tp).read(9, 10_000).records  # still readable
    # everything is old: Kafka's UnifiedLog.deletableSegments takes the active segment too, rolling
    # a new empty one first, so a topic nobody writes to any more still loses its data
    clock.ms = T0 + 10**9
    assert m.cleanup_logs() == 1
    plog = m.get_log(tp)
    assert segment_bases(m, tp) == [12] and plog.log_start_offset == plog.log_end_offset == 12
    assert not plog.read(12, 10_000).records
    assert m.cleanup_logs() == 0  # the empty active segment is never deleted


def test_retention_by_size_and_log_start(manager, clock):
    m = manager()
    m.create_topic("t", 1, {"retention.bytes": "700"})
    tp = TopicPartition("t", 0)
    fill(m, tp, 12)
    sizes = [s.size for s in m.get_log(tp).segments]
    assert len(sizes) == 4
    deleted = m.cleanup_logs()
    total = sum(sizes)
    expect, over = 0, total - 700
    for s in sizes[:-1]:
        if over - s < 0:
            break
        over -= s
        expect += 1
    assert deleted == expect and expect >= 1
    plog = m.get_log(tp)
    plog.delete_records(plog.segments[1].base_offset + 1)  # DeleteRecords inside the 2nd segment
    assert m.cleanup_logs() == 1
    assert plog.segments[0].base_offset <= plog.log_start_offset


def test_compact_only_topic_keeps_old_segments(manager, clock):
    m = manager()
    m.create_topic("c", 1, {"cleanup.policy": "compact", "retention.ms": "1", "retention.bytes": "1"})
    fill(m, ("c", 0), 9)
    clock.ms += 10**9
    assert m.cleanup_logs() == 0 and len(m.get_log(("c", 0)).segments) == 3


def test_retention_of_compact_delete_topic_with_a_cleaner(tmp_path, clock):
    from kompakt.cleaner import LogCleaner
    cfg = make_config(tmp_path / "logs")
    m = LogManager(cfg, time=clock)
    m.cleaner = LogCleaner(cfg, m, time=clock)
    m.startup()
    try:
        m.create_topic("cd", 1, {"cleanup.policy": "compact,delete", "retention.ms": "100"})
        fill(m, ("cd", 0), 9)
        clock.ms += 1000
        assert m.cleanup_logs() == 3  # the expired active segment too (Kafka's deletableSegments)
        status = m.cleaner.partition_status(TopicPartition("cd", 0))
        assert status is None or "Paused" not in str(status)  # paused around the deletion, resumed after
    finally:
        m.shutdown()


def test_deleted_segments_are_unlinked_after_the_delay(tmp_path, manager, clock):
    d = tmp_path / "logs"
    m = manager(d, log_segment_delete_delay_ms=2000)
    m.create_topic("t", 1, {"retention.ms": "1"})
    fill(m, ("t", 0), 6)
    clock.ms += 10
    assert m.cleanup_logs() == 2  # both segments expired, the active one included
    part = d / "t-0"
    deleted = sorted(n for n in os.listdir(part) if n.endswith(".deleted"))
    assert "00000000000000000000.log.deleted" in deleted and "00000000000000000003.log.deleted" in deleted
    assert m.run_due_segment_deletions(clock.ms + 1999) == 0
    assert m.run_due_segment_deletions(clock.ms + 2000) == 2
    assert not any(n.endswith(".deleted") for n in os.listdir(part))


# ---- flush and checkpoints -----------------------------------------------------------------------

def test_flush_ms_moves_the_recovery_point(manager, clock):
    m = manager()
    m.create_topic("f", 1, {"flush.ms": "1000"})
    m.create_topic("never", 1)
    fill(m, ("f", 0), 2)
    fill(m, ("never", 0), 2)
    plog = m.get_log(("f", 0))
    assert plog.recovery_point == 0
    assert m.flush_dirty_logs() == 0  # not dirty long enough
    clock.ms += 1000
    assert m.flush_dirty_logs() == 1
    assert plog.recovery_point == 2 and m.get_log(("never", 0)).recovery_point == 0


def test_flush_messages_and_checkpoints(tmp_path, manager):
    d = tmp_path / "logs"
    m = manager(d)
    m.create_topic("f", 1, {"flush.messages": "1"})
    fill(m, ("f", 0), 3)
    m.get_log(("f", 0)).delete_records(1)
    m.checkpoint_recovery_offsets()
    m.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read() == {("f", 0): 3}
    assert OffsetCheckpointFile(str(d / "log-start-offset-checkpoint")).read() == {("f", 0): 1}
    m.shutdown()
    m2 = manager(d)
    assert m2.get_log(("f", 0)).log_start_offset == 1  # deleted records stay deleted


# ---- background --------------------------------------------------------------------------------

async def test_background_tasks_run_retention_and_deletion(tmp_path, clock):
    d = tmp_path / "logs"
    # durable acks off: readers hear of every append at once (with them on, of every synced round:
    # test_group_commit.py)
    cfg = make_config(d, log_retention_check_interval_ms=20, log_segment_delete_delay_ms=0,
                      log_flush_offset_checkpoint_interval_ms=20, kompakt_durable_acks_enable="false")
    m = LogManager(cfg, time=clock)
    await asyncio.to_thread(m.startup)
    woken = []
    m.append_listener = woken.append
    m.start_background(asyncio.get_running_loop())
    try:
        await asyncio.to_thread(m.create_topic, "t", 1, {"retention.ms": "1"})

        def append_all():   # off the loop: the rolls happen in this thread, where Kafka's would
            for i in range(9):
                m.append_as_leader(("t", 0), batch(i))
        await asyncio.to_thread(append_all)
        assert woken == [("t", 0)] * 9
        clock.ms += 100
        part = d / "t-0"
        # Poll with a deadline for the whole outcome: the retention thread removes the segments,
        # then raises the log start offset, while the delete-file task may unlink the files in
        # between; on a loaded machine the unlink alone is no sign that the offset has moved.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            names = os.listdir(part)
            if not any(n.startswith("00000000000000000000") for n in names) and \
                    m.get_log(("t", 0)).log_start_offset == 9 and \
                    OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read():
                break
            await asyncio.sleep(0.01)
        assert not any(n.startswith("00000000000000000000") for n in os.listdir(part))
        assert m.get_log(("t", 0)).log_start_offset == 9  # every segment expired, the active one too
    finally:
        await m.stop_background()
        await asyncio.to_thread(m.shutdown)


def test_parallel_recovery_of_many_partitions_after_an_unclean_stop(tmp_path, manager):
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b, num_recovery_threads_per_data_dir=3)
    m.create_topic("many", 12)
    for p in range(12):
        fill(m, ("many", p), p % 5 + 1)
    for plog in m.all_logs().values():
        plog.flush()
    m.crash()  # locks gone, no clean shutdown, no checkpoints
    m2 = manager(a, b, num_recovery_threads_per_data_dir=3)
    assert m2.had_clean_shutdown == {str(a): False, str(b): False}
    assert {tp.partition: plog.log_end_offset for tp, plog in m2.all_logs().items()} == \
        {p: p % 5 + 1 for p in range(12)}


def test_unusable_dir_is_taken_offline_but_the_rest_serve(tmp_path, manager):
    bad = tmp_path / "file-not-dir"
    bad.write_text("x")
    m = manager(tmp_path / "ok", bad)
    assert m.log_dirs == [str(tmp_path / "ok")] and m.offline_dirs == [str(bad)]
    m.create_topic("t", 2)
    assert len(m.all_logs()) == 2
    with pytest.raises(LogDirError, match="can be created or validated"):
        LogManager(make_config(bad)).startup()


def test_stats_count_retention_flushes_and_deletions(manager, clock):
    m = manager(log_segment_delete_delay_ms=0)
    m.create_topic("t", 1, {"retention.ms": "1", "flush.ms": "0"})
    fill(m, ("t", 0), 6)
    clock.ms += 10
    assert m.flush_dirty_logs() == 1
    deleted = m.cleanup_logs()
    m.run_due_segment_deletions()
    st = m.stats()
    assert st["retention_deleted_segments_total"] == deleted == 2  # the expired active segment too
    assert st["retention_deleted_bytes_total"] == 540 and st["deleted_segments_unlinked_total"] == 2
    assert st["flushes_total"] == 1 and st["offline_log_dirs"] == 0 and st["startup_seconds"] > 0


def test_topic_store_follows_reordered_log_dirs(tmp_path, manager):
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    meta = m.create_topic("t", 2, {"cleanup.policy": "compact"})
    m.shutdown()
    m2 = manager(b, a)  # the operator swapped log.dirs: the store moves to the new first dir
    assert m2.topics["t"].configs == {"cleanup.policy": "compact"} and m2.topics["t"].topic_id == meta.topic_id
    assert (b / STORE_FILE).exists() and not (a / STORE_FILE).exists()
    assert any("moved the topic store" in r for r in m2.repairs)


def test_longest_topic_name_can_be_deleted(tmp_path, manager, clock):
    d = tmp_path / "logs"
    m = manager(d)
    name = "t" * 249
    m.create_topic(name, 1)
    m.delete_topic(name)
    doomed = [n for n in os.listdir(d) if n.endswith("-delete")]
    assert len(doomed) == 1 and len(doomed[0]) == 255 and doomed[0].startswith("t" * 200)
    assert m.delete_logs(clock.ms + 60_000) == 1


def test_unreadable_meta_properties_fails_naming_the_file(tmp_path, manager):
    d = tmp_path / "logs"
    manager(d).shutdown()
    (d / "meta.properties").write_bytes(b"\xff\xfe\x00 not properties")
    with pytest.raises(LogDirError, match="meta.properties"):
        LogManager(make_config(d)).startup()
    (d / "meta.properties").unlink()  # an operator removes it: a fresh identity is written
    m = manager(d)
    assert (d / "meta.properties").exists() and m.cluster_id


def test_crash_midway_through_renaming_a_deleted_topic(tmp_path, manager, clock):
    d = tmp_path / "logs"
    m = manager(d)
    meta = m.create_topic("t", 3)
    fill(m, ("t", 1), 2)
    m.shutdown()
    TopicStore(str(d)).save({}, {meta.topic_id})  # step 1 done
    os.replace(d / "t-0", d / "t-0.0123456789abcdef0123456789abcdef-delete")  # step 2 for one partition
    m2 = manager(d)
    assert m2.all_logs() == {} and m2.topics == {}
    assert sorted(n.split(".")[0] for n in os.listdir(d) if n.endswith("-delete")) == ["t-0", "t-1", "t-2"]
    assert m2.delete_logs(clock.ms + 60_000) == 3
    assert not any(n.startswith("t-") for n in os.listdir(d))


def test_truncate_to_with_a_cleaner(tmp_path, clock):
    from kompakt.cleaner import LogCleaner
    cfg = make_config(tmp_path / "logs")
    m = LogManager(cfg, time=clock)
    m.cleaner = LogCleaner(cfg, m, time=clock)
    m.startup()
    try:
        m.create_topic("c", 1, {"cleanup.policy": "compact"})
        fill(m, ("c", 0), 8)
        assert m.truncate_to(("c", 0), 4) is True
        assert m.get_log(("c", 0)).log_end_offset == 4
        assert m.truncate_to(("c", 0), 10) is False
        status = m.cleaner.partition_status(TopicPartition("c", 0))
        assert status is None or "Paused" not in str(status)
        with pytest.raises(UnknownTopicOrPartitionError):
            m.truncate_to(("nope", 0), 1)
    finally:
        m.shutdown()


def test_expired_producers_are_removed(manager, clock):
    m = manager(producer_id_expiration_ms=1000)
    m.create_topic("p", 1)
    m.append_as_leader(("p", 0), R.build_batch([(b"k", b"v")], producer_id=42, producer_epoch=0,
                                               base_sequence=0, base_timestamp=T0))
    assert m.remove_expired_producers() == 0
    clock.ms += 1001
    assert m.remove_expired_producers() == 1
    assert m.get_log(("p", 0)).producer_state.last_entry(42) is None


async def test_roll_flushes_the_previous_segment_in_the_background(tmp_path, clock):
    cfg = make_config(tmp_path / "logs", log_initial_task_delay_ms=3_600_000)
    m = LogManager(cfg, time=clock)
    await asyncio.to_thread(m.startup)
    m.start_background(asyncio.get_running_loop())
    try:
        await asyncio.to_thread(m.create_topic, "r", 1)

        def append_all():   # off the loop: the 4th batch rolls a new segment at offset 3 here
            for i in range(4):
                m.append_as_leader(("r", 0), batch(i))
        await asyncio.to_thread(append_all)
        plog = m.get_log(("r", 0))
        for _ in range(500):
            if plog.recovery_point >= 3:
                break
            await asyncio.sleep(0.01)
        assert plog.recovery_point == 3  # flushed up to the new segment, not beyond
    finally:
        await m.stop_background()
        await asyncio.to_thread(m.shutdown)


def test_log_manager_metrics_are_exported(manager, clock):
    import shutil
    import subprocess
    import types
    from kompakt.broker.observability.metrics import Metrics
    m = manager(log_segment_delete_delay_ms=0)
    m.create_topic("t", 1, {"retention.ms": "1"})
    fill(m, ("t", 0), 6)
    clock.ms += 10
    m.cleanup_logs()
    metrics = Metrics(process_metrics=False)
    metrics.attach(types.SimpleNamespace(log_manager=m, cleaner=None, ready=True))
    text = metrics.render().decode()
    assert "kompakt_log_retention_deleted_segments_total 2.0" in text   # the expired active segment too
    assert "kompakt_log_retention_deleted_bytes_total 540.0" in text
    assert 'kompakt_log_manager_pending_deletions{kind="segment"} 2.0' in text
    assert "kompakt_log_manager_offline_dirs 0.0" in text
    promtool = shutil.which("promtool")
    if promtool:
        result = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
        assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_partitions_of_a_dir_offline_at_start_stay_offline_and_a_deletion_waits_for_its_return(tmp_path, manager):
    """Kafka's getOrCreateLog refuses a not-new log while a dir is offline: a partition of the
    topic store missing from the live dirs is offline (KAFKA_STORAGE_ERROR), never created empty
    in another dir; a topic deleted meanwhile stays deleted when the dir returns."""
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    m.create_topic("x", 2)
    m.create_topic("y", 2)
    where = {tp: os.path.dirname(p.dir) for tp, p in m.all_logs().items()}
    lost = [tp for tp, d in where.items() if d == str(b)]
    assert {tp.topic for tp in lost} == {"x", "y"}, where
    m.shutdown()
    os.rename(b, tmp_path / "b.away")
    b.write_text("not a dir")
    m2 = manager(a, b)
    for tp in lost:
        assert m2.get_log(tp) is None and m2.is_offline(tp)
        assert not (a / f"{tp.topic}-{tp.partition}").exists()
    with pytest.raises(Exception) as err:
        m2.append_as_leader(lost[0], R.build_batch([(b"k", b"v")]))
    assert getattr(err.value, "code", None) == ErrorCode.KAFKA_STORAGE_ERROR
    m2.delete_topic("y")
    m2.shutdown()
    b.unlink()
    os.rename(tmp_path / "b.away", b)
    m3 = manager(a, b)
    assert "y" not in m3.topics and not any(tp.topic == "y" for tp in m3.all_logs())
    assert m3.get_log(next(tp for tp in lost if tp.topic == "x")) is not None


def test_the_recovery_point_checkpoint_follows_the_durable_offset(tmp_path, manager):
    """The group commit syncs the .log only; the periodic recovery-point checkpoint first flushes
    logs whose recovery point lags their durable offset, so a cut re-reads at most one interval of
    appends (not everything since the last roll); logs with nothing new are left alone."""
    d = tmp_path / "logs"
    m = manager(d)
    m.create_topic("busy", 1)
    m.create_topic("idle", 1)
    fill(m, ("busy", 0), 4)                 # synced by sync_data (the group commit's sync)
    busy = m.get_log(("busy", 0))
    assert busy.durable_offset == 4 and busy.recovery_point == 0
    m.checkpoint_recovery_offsets()
    assert busy.recovery_point == 4
    assert OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read() == {("busy", 0): 4,
                                                                                        ("idle", 0): 0}
    m.append_as_leader(("busy", 0), batch(9, T0))    # appended, not synced yet: not passed
    m.checkpoint_recovery_offsets()
    assert busy.recovery_point == 4 and busy.log_end_offset == 5
