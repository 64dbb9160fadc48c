"""Pause/abort against real worker processes: retention-style pause and topic deletion during a long
(throttled) clean, a worker killed mid-clean, an uncleanable partition."""
import asyncio
import os
import signal

import pytest

from kompakt.cleaner import LogCleaner
from kompakt.cleaner import state as S

from .conftest import Logs, append, read_log


def big_log(logs, name, batches=300, value=b"v" * 1000):
    lg = logs.create(name, min_cleanable_dirty_ratio="0.01")
    for i in range(batches):
        append(lg, [(b"k%d" % (i % 10), value)])
        if i % 100 == 99:
            lg.roll()
    lg.roll()
    return lg


async def wait_for(pred, what, deadline_s=120):
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def cleaned_files(lg_dir):
    return [n for n in os.listdir(lg_dir) if n.endswith(".cleaned")]


@pytest.fixture
async def slow_cleaner(tmp_path, clock):
    logs = Logs(str(tmp_path), clock, **{"log.cleaner.io.max.bytes.per.second": "30000"})
    c = LogCleaner(logs.config, logs.manager, time=clock)
    logs.manager.cleaner = c
    c.start()
    yield logs, c
    await c.shutdown()
    logs.close()


async def test_abort_and_pause_stops_a_running_clean(slow_cleaner):
    logs, c = slow_cleaner
    lg = big_log(logs, "t")
    before = read_log(lg)
    tp = ("t", 0)
    task = asyncio.ensure_future(c.clean_now(tp))
    await wait_for(lambda: 0 in c.current, "the worker to start cleaning")
    await asyncio.to_thread(c.abort_and_pause_cleaning, tp)
    assert c.manager.state_of(tp) == S.paused(1)
    res = await task
    assert res["cleaned"] is False and res["reason"] == "aborted"
    assert cleaned_files(lg.dir) == [] and read_log(lg) == before
    assert c.manager.all_cleaner_checkpoints().get(tp) is None
    # while paused nothing cleans it; after resume it can be cleaned
    paused = await c.clean_now(tp)
    assert paused["cleaned"] is False and paused["reason"].startswith("cleaning is paused")
    c.resume_cleaning(tp)
    assert c.manager.state_of(tp) == S.NONE


async def test_topic_deletion_during_a_long_clean(slow_cleaner):
    logs, c = slow_cleaner
    lg = big_log(logs, "gone")
    other = big_log(logs, "stays", batches=30)
    task = asyncio.ensure_future(c.clean_now(("gone", 0)))
    await wait_for(lambda: 0 in c.current, "the worker to start cleaning")
    await asyncio.to_thread(logs.manager.delete_topic, "gone")
    res = await task
    assert res["cleaned"] is False
    assert logs.manager.get_log(("gone", 0)) is None
    assert not os.path.exists(os.path.join(logs.log_dir, "gone-0"))
    assert c.manager.state_of(("gone", 0)) == S.NONE
    # the cleaner carries on with other partitions (its own selection or this request cleans it)
    await c.clean_now(("stays", 0))
    await wait_for(lambda: c.manager.all_cleaner_checkpoints().get(("stays", 0)) == 30, "stays cleaned")
    assert len(read_log(other)) == 10


async def test_dead_worker_is_counted_and_replaced(slow_cleaner):
    logs, c = slow_cleaner
    lg = big_log(logs, "t")
    before = read_log(lg)
    task = asyncio.ensure_future(c.clean_now(("t", 0)))
    await wait_for(lambda: 0 in c.current and c.workers[0].pid, "the worker to start cleaning")
    first_pid = c.workers[0].pid
    os.kill(first_pid, signal.SIGKILL)
    res = await task
    assert res == {"topic": "t", "partition": 0, "cleaned": False, "reason": "worker died"}
    assert c.status()["dead_thread_count"] == 1
    assert cleaned_files(lg.dir) == [] and read_log(lg) == before
    await wait_for(lambda: c.manager.state_of(("t", 0)) == S.NONE, "the partition free again")
    res = await c.clean_now(("t", 0))
    if not res["cleaned"]:   # the thread's own selection may have cleaned it first
        assert c.manager.all_cleaner_checkpoints().get(("t", 0)) == 300
    assert c.workers[0].pid != first_pid
    assert [k for _, k, _ in read_log(lg)] == [b"k%d" % i for i in range(10)]


async def test_corrupt_segment_marks_partition_uncleanable(cleaner, logs):
    lg = logs.create("bad", min_cleanable_dirty_ratio="0.01")
    for i in range(5):
        append(lg, [(b"k", b"v%d" % i)])
    lg.roll()
    seg = lg.segments[0]
    with open(seg.log_path, "r+b") as f:     # a record length pointing past its batch
        f.seek(61)
        f.write(b"\x7f\x7f\x7f")
    res = await cleaner.clean_now(("bad", 0))
    assert res["cleaned"] is False
    st = cleaner.status()
    assert st["uncleanable_partitions_count"] == {logs.log_dir: 1}
    ps = cleaner.partition_status(("bad", 0))
    assert ps["uncleanable"] and ps["uncleanable_reason"]
    assert cleaner.manager.grab_filthiest_compacted_log() is None


async def test_two_workers_clean_two_partitions(tmp_path, clock):
    logs = Logs(str(tmp_path), clock, **{"log.cleaner.threads": "2", "log.cleaner.backoff.ms": "50"})
    c = LogCleaner(logs.config, logs.manager, time=clock)
    logs.manager.cleaner = c
    a = big_log(logs, "a", batches=200)
    b = big_log(logs, "b", batches=200)
    c.start()
    try:
        await wait_for(lambda: c.manager.all_cleaner_checkpoints().get(("a", 0)) == 200
                       and c.manager.all_cleaner_checkpoints().get(("b", 0)) == 200, "both partitions cleaned")
        assert len(c.workers) == 2 and any(w.pid for w in c.workers)
        assert [k for _, k, _ in read_log(a)] == [b"k%d" % i for i in range(10)]
        assert [k for _, k, _ in read_log(b)] == [b"k%d" % i for i in range(10)]
        assert c.status()["cleanings_total"] >= 2
    finally:
        await c.shutdown()
        logs.close()


async def test_worker_dying_while_idle_is_counted_and_replaced(cleaner, logs):
    lg = logs.create("idle", min_cleanable_dirty_ratio="0.01")
    append(lg, [(b"k", b"1")])
    lg.roll()
    append(lg, [(b"k", b"2")])
    await cleaner.clean_now(("idle", 0))
    pid = cleaner.workers[0].pid
    os.kill(pid, signal.SIGKILL)
    await wait_for(lambda: not cleaner.workers[0].alive(), "the worker to die")
    lg.roll()
    append(lg, [(b"k", b"3")])
    await cleaner.clean_now(("idle", 0))
    await wait_for(lambda: cleaner.manager.all_cleaner_checkpoints().get(("idle", 0)) == 2, "the second clean")
    assert cleaner.workers[0].pid != pid
    assert cleaner.status()["dead_thread_count"] == 1
    assert [v for _, _, v in read_log(lg)] == [b"2", b"3"]
