"""The log writer (storage/log_writer.py): one thread, first in first out, and `busy(log)` true
until the log's work has run in the thread - also when whoever awaited it gave up - so the
produce handler never appends on the loop ahead of work still queued; shutdown finishes what is
queued, after which work runs in the caller's thread."""
from __future__ import annotations

import asyncio
import threading

import pytest

from kompakt.storage.log_writer import LogWriter

DEADLINE_S = 30


async def until_idle(writer, plog):
    for _ in range(int(DEADLINE_S / 0.01)):
        if not writer.busy(plog):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the log writer never finished")


async def test_a_cancelled_waiter_leaves_its_work_queued_and_the_log_busy_until_it_ran():
    writer = LogWriter()
    gate = threading.Event()
    ran = []
    first = writer.submit("L", lambda: (gate.wait(DEADLINE_S), ran.append(1)))   # handed over at the call
    assert writer.busy("L") and not writer.busy("M")
    first.cancel()                      # e.g. the request's connection closed
    with pytest.raises(asyncio.CancelledError):
        await first
    assert writer.busy("L")             # still in the thread: the next append must follow it
    second = writer.submit("L", lambda: (ran.append(2), threading.get_ident())[1])
    gate.set()
    thread = await second
    assert ran == [1, 2] and thread != threading.get_ident()
    await until_idle(writer, "L")
    writer.shutdown()


async def test_shutdown_finishes_queued_work_then_work_runs_in_the_callers_thread():
    writer = LogWriter()
    gate = threading.Event()
    ran = []
    assert writer.run_later("L", lambda: (gate.wait(DEADLINE_S), ran.append("slow")))
    assert writer.run_later("L", lambda: ran.append("next"))
    stopping = asyncio.ensure_future(asyncio.to_thread(writer.shutdown))
    await asyncio.sleep(0.05)
    assert not stopping.done()          # waits for the queued work
    gate.set()
    await stopping
    assert ran == ["slow", "next"]
    assert not writer.run_later("L", lambda: ran.append("late"))   # the caller runs it itself
    assert await writer.submit("L", threading.get_ident) == threading.get_ident()
    assert ran == ["slow", "next"]


def test_without_a_running_loop_nothing_is_handed_over():
    writer = LogWriter()
    assert not writer.run_later("L", lambda: None)
    assert not writer._thread.started   # no thread made for nothing
