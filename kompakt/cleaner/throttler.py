"""The I/O throttle shared by all cleaner workers: `log.cleaner.io.max.bytes.per.second`.

Role: Kafka's Throttler. Every read or write of a worker reports its bytes; when the bytes observed
since the period started exceed the desired rate, the caller sleeps until the rate is back at the
target, then a new period starts. The state (period start, bytes observed) lives in a
`multiprocessing` shared array guarded by its lock, so all worker processes draw from one budget:
the limit is for the whole cleaner, not per worker (seed 001: "a single shared Throttler").

Invariants: an infinite rate (the default, Double.MAX_VALUE) never sleeps and never takes the lock;
a sleep is cut into slices of at most `ABORT_SLICE_S` with `check_done()` between them so an abort
reaches a throttled worker within a second. Clock and sleep are passed in.
"""
from __future__ import annotations

import multiprocessing
import time as _time

CHECK_INTERVAL_S = 0.3
ABORT_SLICE_S = 0.2
_UNLIMITED = 1e300


class Throttler:
    def __init__(self, desired_rate_per_sec: float, *, shared=None, check_interval_s: float = CHECK_INTERVAL_S,
                 monotonic=_time.monotonic, sleep=_time.sleep, mp_context=None):
        self.desired_rate = float(desired_rate_per_sec)
        self.check_interval_s = check_interval_s
        self.monotonic = monotonic
        self.sleep = sleep
        self.unlimited = self.desired_rate >= _UNLIMITED or self.desired_rate <= 0
        if shared is None:
            ctx = mp_context or multiprocessing.get_context("spawn")
            shared = ctx.Array("d", [monotonic(), 0.0])
        self.shared = shared
        self.total_slept_s = 0.0

    def __getstate__(self):
        # the clock and sleep are module functions in workers; only the shared array travels
        return {"desired_rate": self.desired_rate, "check_interval_s": self.check_interval_s,
                "shared": self.shared, "unlimited": self.unlimited}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.monotonic = _time.monotonic
        self.sleep = _time.sleep
        self.total_slept_s = 0.0

    def maybe_throttle(self, observed: int, check_done=None) -> float:
        """Account `observed` bytes; sleep if the shared rate is above target. Returns seconds slept."""
        if self.unlimited:
            return 0.0
        shared = self.shared
        with shared.get_lock():
            now = self.monotonic()
            shared[1] += observed
            elapsed = now - shared[0]
            if elapsed < self.check_interval_s:
                return 0.0
            rate = shared[1] / elapsed
            slept = 0.0
            if rate > self.desired_rate:
                wanted = shared[1] / self.desired_rate - elapsed
                while slept < wanted:
                    step = min(ABORT_SLICE_S, wanted - slept)
                    self.sleep(step)
                    slept += step
                    if check_done is not None:
                        check_done()
            shared[0] = self.monotonic()
            shared[1] = 0.0
        self.total_slept_s += slept
        return slept
