"""Group coordinator: classic consumer groups and committed offsets (minimal placeholder).

Role: the broker constructs `GroupCoordinator(broker)` and awaits `start()` / `stop()`; the group
handlers call into it. The full implementation (state machine, __consumer_offsets storage) lands
in follow-up commits; this stub exists so the broker can be built against the contract now.
"""
from __future__ import annotations


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.started = False
