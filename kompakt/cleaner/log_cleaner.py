"""LogCleaner: the broker-facing object that owns the cleaner's workers, config and metrics.

Role: what the Broker constructs (`LogCleaner(config, log_manager, time=time)`), starts and shuts
down, and what storage calls through `LogManager.cleaner` to pause, resume and abort cleaning of a
partition. Selection, per-partition state and checkpoints live in `manager.py`; the work itself in
`cleaner.py` run by worker processes from `pool.py`.

(Minimal early version: hooks and lifecycle only; cleaning lands in the following commits.)
"""
from __future__ import annotations

import asyncio
import time as _time


class LogCleaner:
    def __init__(self, config, log_manager, time=_time):
        self.config = config
        self.log_manager = log_manager
        self.time = time
        self._paused: dict = {}
        self._started = False

    # lifecycle -----------------------------------------------------------------------------
    def start(self, loop=None) -> None:
        self._started = True

    async def shutdown(self) -> None:
        self._started = False

    # hooks used by storage -----------------------------------------------------------------
    def abort_and_pause_cleaning(self, tp) -> None:
        self._paused[tp] = self._paused.get(tp, 0) + 1

    def resume_cleaning(self, tp) -> None:
        n = self._paused.get(tp, 0)
        if n <= 1:
            self._paused.pop(tp, None)
        else:
            self._paused[tp] = n - 1

    def abort_cleaning(self, tp) -> None:
        pass

    def update_checkpoints(self, log_dir, partition_to_remove=None, partition_to_update=None) -> None:
        pass

    def maybe_truncate_checkpoint(self, tp, offset) -> None:
        pass

    # admin ---------------------------------------------------------------------------------
    async def clean_now(self, tp):
        return None

    def status(self) -> dict:
        return {"running": self._started, "partitions": {}}

    def partition_status(self, tp) -> dict | None:
        return None
