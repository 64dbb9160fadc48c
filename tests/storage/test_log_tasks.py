"""Deferred deletions and the background task runner."""
import asyncio
import os

from kompakt.storage.log_tasks import DeletionQueue, LogTasks
from kompakt.storage.segment import LogSegment


def test_segments_unlinked_in_due_order(tmp_path):
    q = DeletionQueue()
    files = []
    for i, due in enumerate([300, 100, 200]):
        seg = LogSegment(str(tmp_path), i * 10, max_index_size=4096)
        files.append(tmp_path / os.path.basename(seg.log_path))
        q.add_segments([seg], due)
    assert q.next_due_ms() == 100 and q.pending() == (0, 3)
    assert q.run_due_segments(99) == 0
    assert q.run_due_segments(200) == 2
    assert [f.exists() for f in files] == [True, False, False]
    assert q.run_due_segments(10**9) == 1 and q.next_due_ms() is None
    assert q.unlinked_segments_total == 3


def test_dirs_deleted_when_due_and_missing_ones_ignored(tmp_path):
    q = DeletionQueue()
    d = tmp_path / "t-0.abc-delete"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "f").write_text("x")
    q.add_dir(str(d), 50)
    q.add_dir(str(tmp_path / "gone-delete"), 10)
    assert q.run_due_dirs(49) == 1  # the missing one: nothing to do, not retried
    assert d.exists() and q.pending() == (1, 0)
    assert q.run_due_dirs(50) == 1 and not d.exists() and q.deleted_dirs_total == 1


async def test_kick_wakes_the_deleter_and_periodic_jobs_run():
    now = [0]
    ran, deletions = [], []
    q_due = [None]
    tasks = LogTasks(lambda: now[0])
    tasks.start(asyncio.get_running_loop(), [("job", lambda: ran.append(1), lambda: 10)],
                lambda: deletions.append(now[0]), lambda: q_due[0], initial_delay_ms=0)
    try:
        for _ in range(500):
            if len(ran) >= 3 and deletions:
                break
            await asyncio.sleep(0.01)
        assert len(ran) >= 3 and deletions == [0]  # the deleter ran once and sleeps (nothing due)
        now[0] = 5
        q_due[0] = 5  # a deletion is due now: kicking must wake the deleter
        tasks.kick()
        for _ in range(500):
            if len(deletions) >= 2:
                break
            await asyncio.sleep(0.01)
        assert deletions[:2] == [0, 5]
        done = []
        assert tasks.run_in_thread(lambda: done.append(1))
        for _ in range(500):
            if done:
                break
            await asyncio.sleep(0.01)
        assert done == [1]
    finally:
        await tasks.stop()
    assert not tasks.run_in_thread(lambda: None)
