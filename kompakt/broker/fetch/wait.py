"""Long-poll support for Fetch: wake waiting fetches when their partitions get new data.

Role: `FetchWaiters.wait(tps, timeout)` parks a fetch until an append to any of `tps` or the
timeout; `notify(tp)` is installed as `LogManager.append_listener` and wakes every fetch waiting
on `tp`. The fetch handler re-reads after waking (a wake-up is a hint, never data).

Appends during a read: a read that runs in a worker thread (a cold read) is not on the loop, so
an append that lands meanwhile wakes nobody, and a fetch parked after it would sit out its whole
max_wait although the data is there (Kafka's DelayedFetch tries once more after it registers its
watch). So the loop counts the appends per partition: `appends(tps)` taken before the read is
handed to `wait(..., since=)`, which returns True at once (re-read) when any of `tps` was
appended to since. The counts live as long as the broker, one int per partition appended to.

Shutdown: `close()` wakes every parked fetch and makes later waits return at once, so a graceful
stop does not sit out clients' max_wait_ms. The same per connection: each connection owns a
`Parked`; a wait given it registers there, and `Parked.release()` (the client sent EOF, or the
connection is closing) wakes that connection's fetches, which answer with what they have, and
makes its later waits return at once.

Invariants: waiters live in the event loop thread; `notify` may be called from any thread (an
append done in a worker thread hops to the loop with call_soon_threadsafe). A waiter is removed
from every partition it registered on when it wakes or times out, so nothing accumulates for
fetches that went away.
"""
from __future__ import annotations

import asyncio
import threading


class Parked:
    """The fetches one connection has parked; `release()` answers them now and parks no more."""
    __slots__ = ("futures", "released")

    def __init__(self):
        self.futures: set[asyncio.Future] = set()
        self.released = False

    def release(self) -> None:
        self.released = True
        futures, self.futures = self.futures, set()
        for fut in futures:
            if not fut.done():
                fut.set_result(None)


_TIMED_OUT = object()     # a wait's result when its timer ended it


def _time_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(_TIMED_OUT)


class FetchWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop
        self._thread = threading.get_ident()
        self._waiters: dict[object, set[asyncio.Future]] = {}
        self._appended: dict[object, int] = {}     # tp -> appends seen on the loop (see above)
        self._closed = False

    def close(self) -> None:
        """Broker shutdown: wake every parked fetch (each answers with what it has) and park no more."""
        self._closed = True
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()

    def notify(self, tp) -> None:
        """An append happened on `tp` (callable from any thread)."""
        if threading.get_ident() != self._thread:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._wake, tp)
            return
        self._wake(tp)

    def appends(self, tps) -> int:
        """A mark of the appends seen so far to `tps` (loop thread), for `wait(since=)`."""
        appended = self._appended
        return sum(appended.get(tp, 0) for tp in tps)

    def _wake(self, tp) -> None:
        self._appended[tp] = self._appended.get(tp, 0) + 1
        futures = self._waiters.pop(tp, None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(tp)

    async def wait(self, tps, timeout: float, parked: Parked | None = None, since: int | None = None) -> bool:
        """Wait up to `timeout` seconds for an append to any of `tps`; True if woken (by an append,
        `close()` or `parked.release()`), and True at once when `since` (an `appends(tps)` mark)
        shows one happened already. False at once when closed or `parked` is released."""
        if timeout <= 0 or self._closed or (parked is not None and parked.released):
            return False
        if since is not None and self.appends(tps) != since:
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        if parked is not None:
            parked.futures.add(fut)
        # A timer, not asyncio.wait_for: this wait may be reached in a handler's first step, which
        # the connection runs outside any task (its eager start) or inside the task of the request
        # before it (that one's effects_applied() starts it); from Python 3.12 wait_for is
        # asyncio.timeout, which binds to the current task: RuntimeError outside one, and inside
        # another request's task it cancels that request when the fetch's max_wait_ms ends.
        timer = loop.call_later(timeout, _time_out, fut)
        try:
            return await fut is not _TIMED_OUT
        finally:
            timer.cancel()
            if parked is not None:
                parked.futures.discard(fut)
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[tp]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def waiting(self) -> int:
        return len({id(f) for fs in self._waiters.values() for f in fs})
