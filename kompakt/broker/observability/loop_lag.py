"""Event-loop lag probe: how long the loop was stalled, as `kompakt_event_loop_lag_seconds`.

Role: a task that asks to wake every `interval` seconds and measures how late it woke. Lateness is
time the loop spent on something else without yielding (a blocking call, a long pure-Python
stretch): every connection waited that long. Two gauges: the lag of the last probe and the longest
lag since start (the figure the kill soak reports). A lag shorter than the probe interval between
two probes is not seen, so the maximum is a lower bound for stalls, exact for the long ones. A stall
of WARN_S or more is logged (WARNING). On a machine short of CPU the figure includes the time the
process waited for a core.
"""
from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger(__name__)

INTERVAL = 0.05
WARN_S = 0.5        # a stall this long is logged: every connection waited that long


async def probe(metrics, interval: float = INTERVAL, clock=time.monotonic, cpu_clock=time.thread_time) -> None:
    """Run until cancelled, setting `metrics.loop_lag` and `metrics.loop_lag_max`."""
    worst = 0.0
    while True:
        before, cpu_before = clock(), cpu_clock()
        await asyncio.sleep(interval)
        lag = max(0.0, clock() - before - interval)
        metrics.loop_lag.set(lag)
        if lag >= WARN_S:
            # the loop thread's own CPU time says whose stall it was: ours (busy) or the machine's
            # or another thread's (waiting for a core or the GIL)
            busy = cpu_clock() - cpu_before
            log.warning("the event loop stalled for %.2f s (every connection waited); the loop thread was "
                        "on a CPU for %.2f s of it, waiting for a core or the GIL the rest", lag, busy)
        if lag > worst:
            worst = lag
            metrics.loop_lag_max.set(lag)
