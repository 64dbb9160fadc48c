"""The event-loop lag probe sees a stall and keeps the longest one."""
import asyncio
import time

from kompakt.broker.observability.loop_lag import probe
from kompakt.broker.observability.metrics import Metrics
from kompakt.broker.observability.names import EVENT_LOOP_LAG_MAX


async def test_probe_measures_a_blocking_stall():
    m = Metrics(process_metrics=False)
    task = asyncio.create_task(probe(m, interval=0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.3)                       # the stall: nothing else runs on the loop meanwhile
    await asyncio.sleep(0.05)
    task.cancel()
    worst = m.registry.get_sample_value(EVENT_LOOP_LAG_MAX)
    assert 0.25 <= worst < 5
