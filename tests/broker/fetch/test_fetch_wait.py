"""FetchWaiters.wait where the connection runs it: a handler's first step is stepped by hand
outside any task (connection.py's eager start), or inside the task of the request before it (whose
`effects_applied()` starts it), and only the rest runs in a task of its own (connection._resumed).

A long-poll fetch reaches `wait` in that first step when nothing is readable yet. The wait's
timeout must belong to the wait, not to whatever task happens to be current: with
asyncio.wait_for (asyncio.timeout from Python 3.12) the first case raised RuntimeError ("Timeout
should be used inside a task", the fetch's connection closed) and the second cancelled the
request before it when the fetch's max_wait_ms ended.

Plain asyncio.run, no fixtures: it runs with nothing but the module under test.
"""
from __future__ import annotations

import asyncio

from kompakt.broker.fetch.wait import FetchWaiters

TP = ("t", 0)


def _start_eagerly(coro):
    """What connection._start does: the first step by hand, the rest in a task."""
    from kompakt.broker.network.connection import _resumed
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        done = asyncio.get_running_loop().create_future()
        done.set_result(stop.value)
        return done
    return asyncio.get_running_loop().create_task(_resumed(coro, waiting_on))


def _start_in_callback(loop, coro) -> asyncio.Future:
    """Start `coro` eagerly from a loop callback, as Protocol.buffer_updated does (no current
    task); the future gets its task, or the exception its first step raised."""
    started = loop.create_future()

    def callback():
        try:
            started.set_result(_start_eagerly(coro))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            started.set_exception(exc)
    loop.call_soon(callback)
    return started


def test_wait_first_stepped_outside_a_task_times_out():
    async def main():
        loop = asyncio.get_running_loop()
        waiters = FetchWaiters(loop)
        task = await _start_in_callback(loop, waiters.wait([TP], 0.05))
        assert await asyncio.wait_for(task, 5) is False
        assert waiters.waiting == 0
    asyncio.run(main())


def test_wait_first_stepped_outside_a_task_wakes_on_append():
    async def main():
        loop = asyncio.get_running_loop()
        waiters = FetchWaiters(loop)
        task = await _start_in_callback(loop, waiters.wait([TP], 5.0))
        waiters.notify(TP)
        assert await asyncio.wait_for(task, 5) is True
        assert waiters.waiting == 0
    asyncio.run(main())


def test_wait_first_stepped_inside_another_requests_task_leaves_that_task_alone():
    async def earlier_request(waiters):
        # its effects applied, the connection starts the next request (a long poll) right here
        fetch = _start_eagerly(waiters.wait([TP], 0.05))
        await asyncio.sleep(0.3)          # e.g. a Produce waiting for its durable acknowledgement
        return "answered", await fetch

    async def main():
        waiters = FetchWaiters(asyncio.get_running_loop())
        assert await asyncio.wait_for(asyncio.ensure_future(earlier_request(waiters)), 5) == ("answered", False)
    asyncio.run(main())
