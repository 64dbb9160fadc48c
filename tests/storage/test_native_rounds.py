"""The group commit's native rounds (storage/native_rounds.py: the event loop's bookkeeping, a sync
thread without the GIL) over real logs in real files, on the test's event loop: waits answered
once synced, a flush lock held elsewhere, a sync that fails, the log dir taken offline, close."""
import asyncio
import os

import pytest

from kompakt.protocol.errors import KafkaStorageErrorError
from kompakt.storage import native_rounds
from kompakt.storage.native_rounds import NativeRounds

from test_group_commit import batch, manager, running  # noqa: F401  (fixtures)


pytestmark = pytest.mark.skipif(not native_rounds.available(),
                                reason="no C compiler for the native seam (its Python fallback is tested)")


async def test_waits_are_answered_by_native_rounds_once_synced(running):
    m = running()
    m.create_topic("t", 2)
    a, b = m.get_log(("t", 0)), m.get_log(("t", 1))
    commit = a.group_commit
    infos = [a.append_as_leader(batch(3)), b.append_as_leader(batch(2))]
    assert a.durable_offset == 0 and a.high_watermark == 0
    await asyncio.wait_for(asyncio.gather(m.wait_durable(a, 3), m.wait_durable(b, 2)), 10)
    assert isinstance(commit._native, NativeRounds)              # the rounds did run natively
    assert a.durable_offset == a.high_watermark == infos[0].last_offset + 1 == 3
    assert b.durable_offset == 2
    stats = commit.stats()
    assert stats["acks_total"] == 2 and stats["rounds_total"] >= 1
    assert stats["wait_seconds_total"] > 0 and stats["round_seconds_total"] > 0
    assert not commit._waiters


async def test_a_flush_lock_held_elsewhere_delays_the_round_without_blocking_the_loop(running):
    """Log.sync_plan runs on the loop, so it never waits for the flush lock (a flush or close in
    another thread holds it while it fsyncs): the log is asked again shortly, the loop goes on."""
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog._flush_lock.acquire()
    try:
        plog.append_as_leader(batch())
        waiter = asyncio.ensure_future(m.wait_durable(plog, 1))
        for _ in range(10):
            await asyncio.sleep(0.005)                            # the loop is not blocked
        assert not waiter.done() and plog.durable_offset == 0
    finally:
        plog._flush_lock.release()
    await asyncio.wait_for(waiter, 10)
    assert plog.durable_offset == 1


async def test_a_failed_sync_fails_its_waiters_and_takes_the_dir_offline(running, monkeypatch):
    """A `.log` descriptor whose fdatasync fails (here a pipe's: EINVAL, as the kernel answers a
    sync it cannot make) fails the log's waiters with KAFKA_STORAGE_ERROR, moves nothing, and goes
    to the LogManager as a failed sync (the dir goes offline), as in the Python rounds."""
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    seg = plog.active_segment
    r, w = os.pipe()
    monkeypatch.setattr(seg, "sync_descriptor", lambda: os.dup(r))
    try:
        plog.append_as_leader(batch())
        with pytest.raises(KafkaStorageErrorError):
            await asyncio.wait_for(m.wait_durable(plog, 1), 10)
        assert plog.durable_offset == 0
        assert m.is_offline(("t", 0))
    finally:
        os.close(r)
        os.close(w)


async def test_close_answers_a_round_under_way_and_syncs_what_is_pending(running):
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    commit = plog.group_commit
    plog.append_as_leader(batch())
    await asyncio.wait_for(m.wait_durable(plog, 1), 10)          # the native rounds exist now
    rounds = commit._native
    plog.append_as_leader(batch(2))
    waiter = asyncio.ensure_future(m.wait_durable(plog, 3))
    await asyncio.sleep(0)                                         # registered; its round may run
    await asyncio.to_thread(commit.close)                          # as LogManager.shutdown does
    await asyncio.wait_for(waiter, 10)
    assert plog.durable_offset == 3
    assert rounds.handle is None and rounds.closing


def test_a_flush_beside_a_planned_sync_still_syncs_for_itself(manager, monkeypatch):
    """A native round's plan is synced later, after the flush lock is released; a Log.flush in
    between (a roll's, flush.ms) must not take the plan for a sync already made: it fsyncs the
    segment (and the directory after a roll) itself before it moves the recovery point and the
    durable offset. Before, the plan cleared the segment's dirty flag and the dir flag, the flush
    skipped both, and an acks=all wait was answered with nothing synced (second read, review)."""
    from kompakt.storage import files
    m = manager()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog.append_as_leader(batch(3))
    plog.roll()                                   # a new segment: the dir needs its fsync too
    plog.append_as_leader(batch(2))
    synced = []
    for name in ("fdatasync", "fsync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real: (synced.append(os.fstat(fd).st_ino), real(fd)))
    plan = plog.sync_plan()
    assert plan is not None and plan.fds and plan.dir_fd >= 0
    plog.flush()                                  # beside the plan, before its syncs
    active = os.stat(plog.active_segment.log_path).st_ino
    assert active in synced                       # the flush synced the segment itself
    assert os.stat(plog.dir).st_ino in synced     # and the directory
    assert plog.durable_offset == 5
    plan.close()
    assert files.power_model_on() is False


async def test_the_directory_is_fsynced_once_not_in_every_round(running, monkeypatch):
    """A new partition's directory needs one fsync; a native round that made it clears the flag,
    so the rounds after it sync the segment alone. Before, only a flush cleared the flag and a
    log that never rolled had its directory fsynced in every round (as many fsyncs as fdatasyncs
    in a produce flood)."""
    m = running()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    assert plog.needs_flush_dir                   # a new partition's directory
    plog.append_as_leader(batch(3))
    await asyncio.wait_for(m.wait_durable(plog, 3), 10)
    assert not plog.needs_flush_dir
    plog.append_as_leader(batch(2))
    plan = plog.sync_plan()
    try:
        assert plan.fds and plan.dir_fd == -1     # the segment, not the directory
    finally:
        plan.close()
    await asyncio.wait_for(m.wait_durable(plog, 5), 10)


def test_a_directory_change_after_the_plan_keeps_the_flag(manager):
    """The round fsyncs the directory it opened at its plan; a roll after the plan (its new segment
    file) is a change that fsync may not cover: sync_finish leaves the flag for the next sync."""
    m = manager()
    m.create_topic("t", 1)
    plog = m.get_log(("t", 0))
    plog.append_as_leader(batch(3))
    plan = plog.sync_plan()
    assert plan.dir_fd >= 0
    plog.roll()                                   # after the plan: a new segment file
    for fd in plan.fds:
        os.fdatasync(fd)
    os.fsync(plan.dir_fd)
    plan.close()
    plog.sync_finish(plan)
    assert plog.durable_offset == 3
    assert plog.needs_flush_dir                   # the roll's file still needs its directory fsync
    plan = plog.sync_plan()                       # ... which the next round makes, and then clears
    assert plan.dir_fd >= 0
    os.fsync(plan.dir_fd)
    plan.close()
    plog.sync_finish(plan)
    assert not plog.needs_flush_dir
