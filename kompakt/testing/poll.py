"""Waiting in tests for something a broker does in its own time: poll, never sleep a guess.

`wait_until(predicate, what)` calls `predicate` every `interval` seconds until it returns
something truthy, and returns that; at the deadline it fails the test with an AssertionError
naming `what` (and `details()`, for the state worth seeing). The deadline only bounds how long a
failing test hangs, so it is generous (a loaded 2-core CI machine), and a passing test waits
exactly as long as the broker takes.

`await until(predicate, what)` is the same for a coroutine on an event loop (an async test
watching a broker that runs on that loop): it awaits `asyncio.sleep` between the calls, so the
loop goes on meanwhile, where `wait_until` would block it (and the broker with it). Its interval
is shorter: its predicates read in-memory state, nothing that costs a request.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")
TIMEOUT_S = 120.0


def wait_until(predicate: Callable[[], T], what: str, *, timeout: float = TIMEOUT_S, interval: float = 0.05,
               details: Callable[[], str] = lambda: "") -> T:
    """The first truthy value of `predicate()`; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _check(deadline, what, timeout, details)
        time.sleep(interval)
    return value


async def until(predicate: Callable[[], T], what: str, *, timeout: float = TIMEOUT_S, interval: float = 0.005,
                details: Callable[[], str] = lambda: "") -> T:
    """`wait_until` on the running event loop (which keeps running between the calls)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        _check(deadline, what, timeout, details)
        await asyncio.sleep(interval)
    return value


def _check(deadline: float, what: str, timeout: float, details: Callable[[], str]) -> None:
    if time.monotonic() > deadline:
        more = details()
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f": {more}" if more else ""))
