"""Throttler: sleeps to the target rate with a driven clock; unlimited never sleeps; abort cuts in."""
import multiprocessing

import pytest

from kompakt.cleaner.throttler import Throttler


class Clock:
    def __init__(self):
        self.t = 100.0
        self.sleeps = []

    def monotonic(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


def test_sleeps_to_target_rate():
    c = Clock()
    th = Throttler(1000.0, monotonic=c.monotonic, sleep=c.sleep)
    assert th.maybe_throttle(100) == 0.0          # within the check interval
    c.t += 0.5
    slept = th.maybe_throttle(1900)               # 2000 bytes in 0.5 s at 1000 B/s: 1.5 s more
    assert slept == pytest.approx(1.5)
    assert all(s <= 0.2 + 1e-9 for s in c.sleeps)
    c.t += 1.0
    assert th.maybe_throttle(500) == 0.0          # 500 B/s is under the target


def test_unlimited_never_sleeps():
    c = Clock()
    th = Throttler(1.7976931348623157e308, monotonic=c.monotonic, sleep=c.sleep)
    c.t += 10
    assert th.maybe_throttle(10**12) == 0.0 and not c.sleeps


def test_abort_interrupts_the_sleep():
    c = Clock()
    th = Throttler(10.0, monotonic=c.monotonic, sleep=c.sleep)
    c.t += 1.0

    class Stop(Exception):
        pass

    calls = []

    def check():
        calls.append(1)
        if len(calls) == 3:
            raise Stop

    with pytest.raises(Stop):
        th.maybe_throttle(10_000, check)
    assert sum(c.sleeps) <= 0.6 + 1e-9


def test_state_is_shared_between_instances():
    c = Clock()
    shared = multiprocessing.get_context("spawn").Array("d", [c.t, 0.0])
    a = Throttler(1000.0, shared=shared, monotonic=c.monotonic, sleep=c.sleep)
    b = Throttler(1000.0, shared=shared, monotonic=c.monotonic, sleep=c.sleep)
    a.maybe_throttle(1000)
    c.t += 1.0
    assert b.maybe_throttle(1000) == pytest.approx(1.0)   # 2000 bytes in 1 s across both
