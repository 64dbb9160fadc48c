"""The log writer: one worker thread for the log work the event loop must not wait for.

Role: an append that fsyncs (flush.messages) or rolls its log (Log.RollRequired: a roll creates
the new segment's files and a producer snapshot), and the rolls that synchronous appends on the
loop leave for later (Log.ROLL_LATER: group and transaction coordinators, markers), run here
instead of on the broker's event loop.

Order: one thread, first in first out, so a log's work runs in the order it was handed over.
While a log has work here (`busy(log)`: from hand-over until the work has finished in the thread,
even when whoever awaited it gave up), the produce handler hands its next appends here too
instead of appending on the loop, so a partition's appends keep their arrival order (idempotent
producers' sequences depend on it). Log.lock still makes each append, roll and flush the
partition's only writer while it runs. Work handed over is never cancelled: a request whose
connection closed meanwhile still has its append run (and answered to nobody), as Kafka's.

Threads: `submit`, `run_later` and `busy` are called on the event loop (the queued counts
are the loop's alone; the thread reports completion with call_soon_threadsafe); `shutdown` from
the thread that shuts the LogManager down: it finishes what is queued, and afterwards `submit`
runs its work in the caller's thread and `run_later` declines. The thread is made on first
use: a broker that never rolls or fsyncs on behalf of the loop never starts it.
(That life cycle is storage/worker_threads.py's, shared with the validation pool.)
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Any, Awaitable, Callable

from kompakt.storage.worker_threads import WorkerThreads, run_here

log = logging.getLogger(__name__)


class LogWriter:
    """See module docstring."""

    def __init__(self) -> None:
        self._thread = WorkerThreads(1, "kompakt-log-writer")     # one thread: first in first out
        self._queued: dict[Any, int] = {}        # log -> its tasks handed over and not finished

    def busy(self, plog) -> bool:
        """Whether `plog` has work queued or running here (its next appends must follow it)."""
        return plog in self._queued

    def submit(self, plog, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Hand fn (work on `plog`) over now, at the call, and return an awaitable of its result:
        a caller with several logs' work (a produce request's partitions) hands them all over
        before it waits, so none of its later partitions is overtaken meanwhile by another
        request's append on the loop. After shutdown fn runs here, now."""
        cf = self._submit(plog, fn)
        if cf is None:                           # shut down: the logs are closing anyway
            cf = run_here(Future(), fn)
        # shield: cancelling the awaiting request must not cancel (or reorder) the append
        return asyncio.shield(asyncio.wrap_future(cf))

    def run_later(self, plog, fn: Callable[[], Any]) -> bool:
        """Queue fn (work on `plog`, nobody waits for it) from the event loop; False when called
        outside a running loop or after shutdown (the caller then runs it itself)."""
        cf = self._submit(plog, fn)
        if cf is None:
            return False

        def report(f: Future) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.error("background log work on %s failed", plog, exc_info=f.exception())

        cf.add_done_callback(report)
        return True

    def shutdown(self) -> None:
        """Finish what is queued, then stop the thread (LogManager.shutdown, before logs close)."""
        self._thread.shutdown(wait=True)

    def _submit(self, plog, fn: Callable[[], Any]) -> Future | None:
        """Hand fn over (on the event loop); None when there is no loop here or after shutdown."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        cf = self._thread.submit(fn)
        if cf is None:
            return None
        self._queued[plog] = self._queued.get(plog, 0) + 1

        def finished(_f: Future) -> None:        # in the writer thread
            try:
                loop.call_soon_threadsafe(self._leave, plog)
            except RuntimeError:                 # the loop is closed: nobody asks busy() any more
                pass

        cf.add_done_callback(finished)
        return cf

    def _leave(self, plog) -> None:
        left = self._queued[plog] - 1
        if left:
            self._queued[plog] = left
        else:
            del self._queued[plog]
