"""Worker threads made on first use and closed once (storage/worker_threads.py), the life cycle
of the log writer and the validation pool: no thread before the first work, none after shutdown
(work then comes back refused, for the owner to run here), and shutdown either finishes what was
handed over or drops what has not started."""
from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError, Future

import pytest

from kompakt.storage.worker_threads import WorkerThreads, run_here

DEADLINE_S = 30


def until(condition) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.005)


def test_threads_are_made_on_first_work_and_refuse_work_after_shutdown():
    workers = WorkerThreads(2, "test-workers")
    assert not workers.started and not workers.closed
    assert workers.submit(threading.current_thread).result(DEADLINE_S).name.startswith("test-workers")
    assert workers.started
    workers.shutdown(wait=True)
    assert workers.closed and workers.submit(lambda: None) is None
    workers.shutdown(wait=True)                 # closed is final; a second shutdown is harmless


def test_shutdown_before_any_work_makes_no_thread():
    workers = WorkerThreads(1, "test-workers")
    workers.shutdown(wait=True)
    assert workers.submit(lambda: None) is None and not workers.started


def test_initializer_runs_in_each_thread():
    named = []
    workers = WorkerThreads(1, "test-workers", initializer=lambda: named.append(threading.get_ident()))
    assert workers.submit(threading.get_ident).result(DEADLINE_S) == named[0]
    workers.shutdown(wait=True)


@pytest.mark.parametrize("cancel", [False, True])
def test_shutdown_finishes_or_drops_the_work_queued_behind_the_running_one(cancel):
    workers = WorkerThreads(1, "test-workers")
    started, gate = threading.Event(), threading.Event()
    running = workers.submit(lambda: (started.set(), gate.wait(DEADLINE_S))[1])
    queued = workers.submit(lambda: "queued ran")
    assert started.wait(DEADLINE_S)
    stopping = threading.Thread(target=workers.shutdown, args=(True, cancel))
    stopping.start()
    until(lambda: queued.cancelled() if cancel else workers.closed)    # shutdown began behind the running work
    gate.set()
    stopping.join(DEADLINE_S)
    assert not stopping.is_alive() and running.result() is True
    if cancel:
        with pytest.raises(CancelledError):
            queued.result()
    else:
        assert queued.result() == "queued ran"


async def test_run_here_settles_either_kind_of_future_with_the_result_or_the_exception():
    def boom():
        raise ValueError("bad batch")

    assert run_here(Future(), lambda x: x + 1, 1).result() == 2
    with pytest.raises(ValueError, match="bad batch"):
        run_here(Future(), boom).result()
    done = run_here(asyncio.get_running_loop().create_future(), threading.get_ident)
    assert done.done() and await done == threading.get_ident()      # in the caller's thread, now
    with pytest.raises(ValueError, match="bad batch"):
        await run_here(asyncio.get_running_loop().create_future(), boom)
