"""The LogManager's background machinery: deferred deletions and the periodic tasks on the loop.

`DeletionQueue` holds what waits for file.delete.delay.ms before its unlink: segments already
renamed `.deleted` (Kafka's delete-file tasks, LocalLog.deleteSegmentFiles) and partition dirs
renamed `-delete` (Kafka's kafka-delete-logs). Thread-safe; the unlinks run in the caller's thread.
A crash loses nothing here: the loader removes `.deleted` files and the LogManager re-queues
`-delete` dirs at the next start.

`LogTasks` runs, on the broker's asyncio loop, one task per periodic job (each pass in a worker
thread via asyncio.to_thread, so the loop never waits on fsync or unlink) plus one deleter task that
sleeps until the next deletion is due or `kick()` says a new one arrived. Every task first waits
log.initial.task.delay.ms. A failing pass is logged and the schedule goes on.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import threading
from typing import Any, Callable

from kompakt.config.broker_config import LONG_MAX
from kompakt.storage.checkpoint import fsync_dir
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

MAX_SLEEP_S = 3600.0  # long periods are slept in slices so Kafka's huge defaults never overflow
DIR_RETRY_MS = 1000


class DeletionQueue:
    """Segments and partition dirs waiting for their unlink time (ms, the manager's clock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._segments: list[tuple[int, int, list]] = []  # heap of (due_ms, seq, segments)
        self._dirs: list[tuple[int, str]] = []  # (due_ms, path)
        self._seq = itertools.count()
        self.unlinked_segments_total = 0
        self.deleted_dirs_total = 0

    def add_segments(self, segments: list, due_ms: int) -> None:
        with self._lock:
            heapq.heappush(self._segments, (due_ms, next(self._seq), list(segments)))

    def add_dir(self, path: str, due_ms: int) -> None:
        with self._lock:
            self._dirs.append((due_ms, path))

    def run_due_segments(self, now_ms: int) -> int:
        """Close and unlink every segment due by now_ms; returns how many."""
        due = []
        with self._lock:
            while self._segments and self._segments[0][0] <= now_ms:
                due.extend(heapq.heappop(self._segments)[2])
        for seg in due:
            try:
                seg.delete()
            except OSError as exc:
                log.warning("could not delete segment files of %s: %s", seg, exc)
        self.unlinked_segments_total += len(due)
        return len(due)

    def run_due_dirs(self, now_ms: int) -> int:
        """Remove every `-delete` dir due by now_ms (a failure is retried a second later)."""
        with self._lock:
            due = [path for t, path in self._dirs if t <= now_ms]
            self._dirs = [(t, path) for t, path in self._dirs if t > now_ms]
        for path in due:
            try:
                fs.rmtree(path)
                fsync_dir(os.path.dirname(path))
                self.deleted_dirs_total += 1
                log.info("deleted log directory %s", path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete %s (will retry): %s", path, exc)
                self.add_dir(path, now_ms + DIR_RETRY_MS)
        return len(due)

    def next_due_ms(self) -> int | None:
        with self._lock:
            dues = [t for t, _ in self._dirs]
            if self._segments:
                dues.append(self._segments[0][0])
        return min(dues) if dues else None

    def pending(self) -> tuple[int, int]:
        """(dirs, segments) waiting."""
        with self._lock:
            return len(self._dirs), sum(len(e[2]) for e in self._segments)


async def sleep_ms(ms: int) -> None:
    remaining = max(ms, 0) / 1000.0
    while remaining > 0:
        step = min(remaining, MAX_SLEEP_S)
        await asyncio.sleep(step)
        remaining -= step


class LogTasks:
    """Periodic jobs + the deleter on one asyncio loop; `run_in_thread` submits one-off work."""

    def __init__(self, now_ms: Callable[[], int]):
        self._now_ms = now_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def running(self) -> bool:
        return self._loop is not None

    def start(self, loop: asyncio.AbstractEventLoop, periodic: list[tuple[str, Callable[[], Any], Callable[[], int]]],
              run_deletions: Callable[[], Any], next_due_ms: Callable[[], int | None],
              initial_delay_ms: int) -> None:
        """Schedule `periodic` jobs `(name, fn, period_ms())` and the deleter (call on the loop)."""
        self._loop = loop
        self._wake = asyncio.Event()
        for name, fn, period in periodic:
            self._tasks.append(loop.create_task(self._periodic(name, fn, period, initial_delay_ms), name=name))
        self._tasks.append(loop.create_task(self._deleter(run_deletions, next_due_ms, initial_delay_ms),
                                            name="kafka-delete-logs"))

    async def _periodic(self, name: str, fn, period_ms: Callable[[], int], initial_delay_ms: int) -> None:
        await sleep_ms(initial_delay_ms)
        while True:
            try:
                await asyncio.to_thread(fn)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a failing pass must not kill the schedule
                log.exception("background task %s failed", name)
            period = period_ms()
            await sleep_ms(int(MAX_SLEEP_S * 1000) if period == LONG_MAX else min(period, int(MAX_SLEEP_S * 1000)))

    async def _deleter(self, run_deletions, next_due_ms, initial_delay_ms: int) -> None:
        await sleep_ms(initial_delay_ms)
        while True:
            self._wake.clear()  # before the pass: a kick during it wakes the next wait at once
            try:
                await asyncio.to_thread(run_deletions)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("background deletion failed")
            due = next_due_ms()
            wait_s = MAX_SLEEP_S if due is None else max(0.0, (due - self._now_ms()) / 1000.0)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(wait_s, MAX_SLEEP_S))
            except asyncio.TimeoutError:
                pass

    def kick(self) -> None:
        """A deletion was queued (from any thread): let the deleter recompute its sleep."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass  # the loop is closing

    def run_in_thread(self, fn: Callable[[], Any]) -> bool:
        """Run fn in a worker thread from any thread; False when no loop is running."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False

        def submit() -> None:
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(loop.create_task(asyncio.to_thread(fn)))

        try:
            loop.call_soon_threadsafe(submit)
        except RuntimeError:
            return False
        return True

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001
                log.exception("background task ended with an error")
        self._loop = None
        self._wake = None
