"""The group-commit flusher (storage/group_commit.py) over real logs in real files: the durable
offset and the high watermark, rounds shared by many waiters, the directory entry of a roll,
failures, and readers woken by rounds (not appends)."""
import asyncio
import threading
import time

import pytest

from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol.errors import KafkaStorageErrorError
from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition, native_rounds
from kompakt.storage.group_commit import GroupCommit
from kompakt.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from kompakt.testing.poll import until


def make_manager(tmp_path, **extra):
    props = {"log.dirs": str(tmp_path / "logs"), "log.initial.task.delay.ms": "0",
             "log.index.size.max.bytes": "4096"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    m = LogManager(BrokerConfig(props))
    m.startup()
    return m


def batch(n=1):
    return bytearray(build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)]))


@pytest.fixture(autouse=True)
def python_rounds(monkeypatch):
    """These tests describe the Python flusher thread's rounds (the fallback where the native
    sync thread is unavailable, and what fault and power-cut tests run); the native rounds have
    tests/storage/test_native_rounds.py."""
    monkeypatch.setattr(native_rounds, "available", lambda: False)


@pytest.fixture
def manager(tmp_path):
    made = []

    def make(**extra):
        m = make_manager(tmp_path, **extra)
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown()


@pytest.fixture
async def running(manager):
    """Managers with their background tasks on the test's loop (the flusher's readers hear there)."""
    started = []

    def make(**extra):
        m = manager(**extra)
        m.start_background(asyncio.get_running_loop())
        started.append(m)
        return m
    yield make
    for m in started:
        await m.stop_background()


async def test_the_high_watermark_is_the_durable_offset_and_a_wait_ends_once_synced(running):
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    commit = plog.group_commit
    assert plog.hw_is_durable and isinstance(commit, GroupCommit)
    with plog._flush_lock:           # the round cannot sync this log yet
        info = plog.append_as_leader(batch(3))
        assert plog.log_end_offset == 3
        assert plog.high_watermark == plog.durable_offset == 0    # in the page cache only
        assert plog.last_stable_offset == 0 and plog.latest()[0] == 0
        assert not plog.read(0, 10_000, max_offset=plog.high_watermark).records
        waiter = asyncio.ensure_future(m.wait_durable(plog, info.last_offset + 1))
        await asyncio.sleep(0.01)
        assert not waiter.done()
    await asyncio.wait_for(waiter, 10)
    assert plog.durable_offset == plog.high_watermark == 3
    assert plog.read(0, 10_000).high_watermark == 3
    stats = commit.stats()
    assert stats["acks_total"] == 1
    # where the wait's time went: until the held sync ended, then the hand-over to the loop
    assert stats["wait_seconds_total"] > 0 and stats["answer_lag_seconds_total"] > 0
    assert 0 <= stats["queue_seconds_total"] < stats["wait_seconds_total"]


async def test_one_round_answers_every_waiter_that_arrived_during_the_last(running):
    m = running()
    m.create_topic("a", 1)
    m.create_topic("many", 20)
    first = m.get_log(("a", 0))
    commit = first.group_commit
    logs = [m.get_log(("many", p)) for p in range(20)]
    first._flush_lock.acquire()      # round 1 takes `a` and blocks syncing it
    try:
        m.append_as_leader(("a", 0), batch())
        await until(lambda: not commit._pending, "round 1 to take `a`")
        waiters = []
        for plog in logs:            # they all arrive while round 1 syncs
            plog.append_as_leader(batch())
            waiters.append(asyncio.ensure_future(m.wait_durable(plog, 1)))
        await until(lambda: len(commit._waiters) == 20, "20 waiters")
    finally:
        first._flush_lock.release()
    await asyncio.wait_for(asyncio.gather(*waiters), 10)
    stats = commit.stats()
    assert stats["rounds_total"] == 2 and stats["synced_logs_total"] == 21
    assert stats["acks_total"] == 20 and stats["max_acks_per_round"] == 20
    assert all(plog.durable_offset == 1 for plog in logs)
    lm_stats = m.stats()
    assert lm_stats["group_commit_rounds_total"] == 2 and lm_stats["group_commit_max_acks_per_round"] == 20
    # the 20 waited for round 1 to end before round 2 (theirs) started: queue time, part of the wait
    assert 0 < stats["queue_seconds_total"] < stats["wait_seconds_total"]
    assert lm_stats["group_commit_queue_seconds_total"] == stats["queue_seconds_total"]


def test_sync_data_covers_a_roll_and_its_directory_entry(manager, monkeypatch):
    m = manager(log_segment_bytes=200)
    m.create_topic("r", 1)
    plog = m.get_log(("r", 0))
    for _ in range(6):
        plog.append_as_leader(batch())
    assert len(plog.segments) > 1 and plog.needs_flush_dir
    synced_dirs = []
    import kompakt.storage.log as log_module
    real = log_module.fsync_dir
    monkeypatch.setattr(log_module, "fsync_dir", lambda d: (synced_dirs.append(d), real(d)))
    synced = []
    for seg in plog.segments:
        monkeypatch.setattr(seg, "sync_data", lambda seg=seg, real=seg.sync_data: (synced.append(seg.base_offset), real()))
    assert plog.sync_data() == 6 == plog.durable_offset
    assert synced_dirs == [plog.dir] and not plog.needs_flush_dir
    assert synced == [s.base_offset for s in plog.segments]     # every segment holding unsynced offsets
    assert plog.recovery_point == 0     # the indexes are flush()'s: recovery rebuilds them
    synced.clear()
    assert plog.sync_data() == 6 and synced == [] and synced_dirs == [plog.dir]   # nothing new


async def test_a_log_closed_before_its_sync_fails_its_waiters(running):
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    with plog._flush_lock:
        plog.append_as_leader(batch())
        waiter = asyncio.ensure_future(m.wait_durable(plog, 1))
        await asyncio.sleep(0.01)
        plog.close_handlers()      # an offline dir or a deleted topic: never synced
    with pytest.raises(KafkaStorageErrorError):
        await asyncio.wait_for(waiter, 10)


async def test_readers_are_woken_by_rounds_not_by_appends(running):
    m = running()
    woken = []
    m.append_listener = woken.append
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    with plog._flush_lock:
        m.append_as_leader(("t", 0), batch())
        await asyncio.sleep(0.01)
        assert woken == []           # nothing readable yet
    await until(lambda: woken, "the append listener to hear")
    assert woken[0] == TopicPartition("t", 0) and plog.high_watermark == 1


def test_durable_acks_off_keeps_the_high_watermark_at_the_log_end(manager):
    m = manager(kompakt_durable_acks_enable="false")
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog.append_as_leader(batch(2))
    assert plog.group_commit is None and plog.high_watermark == plog.log_end_offset == 2
    assert plog.durable_offset == 0


def test_an_unclean_restart_syncs_the_loaded_tail_before_readers_see_it(tmp_path):
    m = make_manager(tmp_path)
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog.append_as_leader(batch(4))
    plog.sync_data()
    m.crash()                          # a killed process: no flush, no clean-shutdown marker
    m2 = make_manager(tmp_path)
    try:
        plog2 = m2.get_log(("t", 0))
        assert plog2.log_end_offset == 4
        # the loaded tail above the recovery point is synced while loading: readers see the
        # whole recovered log from the first request, not after a first round (no round ran)
        assert plog2.high_watermark == plog2.durable_offset == 4
        assert plog2.group_commit.synced_logs_total == 0
    finally:
        m2.shutdown()


def test_a_crash_stops_the_flusher_and_leaves_the_dir_to_recover(tmp_path):
    m = make_manager(tmp_path)
    m.create_topic("t", 1)
    m.append_as_leader(("t", 0), batch(2))                # the dir's flusher thread starts
    flusher = f"kompakt-group-commit-{tmp_path / 'logs'}"
    assert flusher in {t.name for t in threading.enumerate()}
    m.crash()
    assert flusher not in {t.name for t in threading.enumerate()}
    m.shutdown()                                          # after a crash: nothing, no marker
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()
    m2 = make_manager(tmp_path)                           # the dir locks went with the crash
    try:
        assert m2.had_clean_shutdown == {str(tmp_path / "logs"): False}
        assert m2.get_log(("t", 0)).log_end_offset == 2
    finally:
        m2.shutdown()


def test_the_cleaner_and_delete_records_stop_at_the_high_watermark(manager):
    from kompakt.cleaner.manager import cleanable_offsets
    from kompakt.protocol.errors import OffsetOutOfRangeError
    m = manager(log_segment_bytes=200)
    m.create_topic("c", 1, {"cleanup.policy": "compact"})
    plog = m.get_log(("c", 0))
    with plog._flush_lock:               # nothing can be synced meanwhile
        for _ in range(6):
            plog.append_as_leader(batch())
        assert len(plog.segments) > 2 and plog.high_watermark == 0
        _, uncleanable, _ = cleanable_offsets(plog, None, 0)
        assert uncleanable == 0          # Kafka's first uncleanable offset: min(LSO <= HW, active base)
        with pytest.raises(OffsetOutOfRangeError):
            plog.delete_records(1)       # Kafka: never past the high watermark
        assert plog.delete_records(-1) == 0
    plog.sync_data()
    _, uncleanable, _ = cleanable_offsets(plog, None, 0)
    assert uncleanable == plog.segments[-1].base_offset > 0
    assert plog.delete_records(1) == 1


async def test_a_round_answers_the_logs_waited_for_before_syncing_the_others(running):
    m = running()
    for topic in ("blocker", "busy", "waited"):
        m.create_topic(topic, 1)
    blocker, busy, waited = (m.get_log((topic, 0)) for topic in ("blocker", "busy", "waited"))
    commit = waited.group_commit
    blocker._flush_lock.acquire()
    busy._flush_lock.acquire()          # a log whose sync takes its time (a large acks=1 backlog)
    try:
        m.append_as_leader(("blocker", 0), batch())
        await until(lambda: not commit._pending, "round 1 to take the blocker")   # and hang there
        m.append_as_leader(("busy", 0), batch())          # acks=1: nobody waits for it, and it came first
        m.append_as_leader(("waited", 0), batch())
        waiter = asyncio.ensure_future(m.wait_durable(waited, 1))
        await until(lambda: waited in commit._waiters, "the waiter registered")
        blocker._flush_lock.release()                     # round 2 takes `busy` and `waited`
        await asyncio.wait_for(waiter, 10)                # answered although `busy` cannot be synced yet
        assert waited.durable_offset == 1 and busy.durable_offset == 0
    finally:
        if blocker._flush_lock.locked():
            blocker._flush_lock.release()
        busy._flush_lock.release()
    await until(lambda: busy.durable_offset == 1, "`busy` synced")   # by the same round
    assert commit.stats()["rounds_total"] == 2


def test_sync_data_runs_while_an_append_holds_the_log_lock_and_a_truncation_beside_it_moves_nothing(manager):
    import threading
    m = manager()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog.append_as_leader(batch(3))
    held, release = threading.Event(), threading.Event()

    def appending():                   # an append on the loop holds `lock` through its write
        with plog.lock:
            held.set()
            release.wait(10)
    holder = threading.Thread(target=appending)
    holder.start()
    try:
        assert held.wait(10)
        done = []
        syncer = threading.Thread(target=lambda: done.append(plog.sync_data()))
        syncer.start()
        syncer.join(10)
        assert done == [3] and plog.durable_offset == 3     # the sync never waited for the append
    finally:
        release.set()
        holder.join()
    plog.append_as_leader(batch())                          # offset 3
    plog.append_as_leader(batch())                          # offset 4
    seg = plog.segments[-1]
    real = seg.sync_data

    def truncated_meanwhile():
        plog.truncate_to(4)                                 # the one downward move of the log end
        real()
    seg.sync_data = truncated_meanwhile
    assert plog.sync_data() == 3 and plog.log_end_offset == 4   # overlapped a truncation: no move
    seg.sync_data = real
    assert plog.sync_data() == 4 == plog.durable_offset     # the next sync does
