"""Event-loop lag probe: how long the loop was stalled, as `kompakt_event_loop_lag_seconds`.

Role: a task that asks to wake every `interval` seconds and measures how late it woke. Lateness is
time the loop spent on something else without yielding (a blocking call, a long pure-Python
stretch): every connection waited that long. Two gauges: the lag of the last probe and the longest
lag since start (the figure the kill soak reports). A lag shorter than the probe interval between
two probes is not seen, so the maximum is a lower bound for stalls, exact for the long ones.
"""
from __future__ import annotations

import asyncio
import time

INTERVAL = 0.05


async def probe(metrics, interval: float = INTERVAL, clock=time.monotonic) -> None:
    """Run until cancelled, setting `metrics.loop_lag` and `metrics.loop_lag_max`."""
    worst = 0.0
    while True:
        before = clock()
        await asyncio.sleep(interval)
        lag = max(0.0, clock() - before - interval)
        metrics.loop_lag.set(lag)
        if lag > worst:
            worst = lag
            metrics.loop_lag_max.set(lag)
