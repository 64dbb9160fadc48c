"""Waiting in tests for something a broker does in its own time: poll, never sleep a guess.

`wait_until(predicate, what)` calls `predicate` every `interval` seconds until it returns
something truthy, and returns that; at the deadline it fails the test with an AssertionError
naming `what` (and `details()`, for the state worth seeing). The deadline only bounds how long a
failing test hangs, so it is generous (a loaded 2-core CI machine), and a passing test waits
exactly as long as the broker takes.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")
TIMEOUT_S = 120.0


def wait_until(predicate: Callable[[], T], what: str, *, timeout: float = TIMEOUT_S, interval: float = 0.05,
               details: Callable[[], str] = lambda: "") -> T:
    """The first truthy value of `predicate()`; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            more = details()
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f": {more}" if more else ""))
        time.sleep(interval)
