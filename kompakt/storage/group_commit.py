"""Group commit: one flusher thread per log dir makes appends durable, many requests per sync.

Role: "acknowledged means on disk" without one fsync per request (PostgreSQL's XLogFlush group
commit, Redpanda's flush batching). Every append marks its log as waiting for a sync (`request`,
any thread); a request that must be answered only once durable (Produce acks=all, the
coordinators' writes) also registers a waiter, (log, offset), and awaits it (`wait`, on the event
loop). The flusher thread runs rounds: it takes every log waiting at that moment, syncs each one
(Log.sync_data: the `.log` bytes of its unsynced segments and, after a roll, the directory
entry), which moves each log's durable offset to the log end offset it saw, then resolves every
waiter whose offset the round covered, in one hand-over to the loop. The logs someone waits for
(acks=all, coordinators) go first and are answered before the round syncs the others (logs
with acks=1 appends only, whose readers alone wait): a log taking acks=1 records as fast as a
producer can send them holds a large unsynced backlog, and syncing it first made every acks=all
request of the dir wait for it (bench_produce_fetch.py --flood). The next round starts
as soon as this one ends, with whatever arrived meanwhile: no timer, so a lone request waits one
sync, and under load one sync serves every request that arrived during the previous one.

Two ways to run the rounds. Native (LogManager's group commits, where storage/native_rounds.py
is available: the compiled seam loaded, no fault or power-cut seam armed): the event loop takes
the round's logs and their duplicated descriptors and answers the waiters, and a native thread
that never waits for the GIL makes the syncs; the round structure below is the same. Otherwise
(no compiler, fault tests, a GroupCommit made without `native`, or appends before the loop is
known) the Python flusher thread below runs them; `close` hands what the native rounds still had
to it for the last round.

Threads: `request` and `wait` take `_cond` briefly (a set insert, a notify when the thread is
idle); the syncs run in the flusher thread without it. Waiters live under `_cond` too, so one
registered during a round is either covered by that round (its offset was below what the round
saw) or found by the next one (its log is pending again): no wake-up is lost. Futures are set on
the loop they belong to (`call_soon_threadsafe`, once per round).

Coordinators' writes (OffsetCommit, TxnOffsetCommit, EndTxn and its markers, InitProducerId,
AddPartitionsToTxn, group metadata) append synchronously on the loop through
LogManager.append_as_leader, which notes each one in `pending_acks`; the dispatcher waits for
them after the handler returned its answer and before sending it.

Failures: a sync that raises (a failing disk) fails the waiters of that log with
KAFKA_STORAGE_ERROR and goes to `on_error` (the LogManager takes the dir offline whatever the
errno, ENOSPC too: the kernel may have dropped the pages it could not write, so a later sync that
succeeds proves nothing; LogManager.handle_io_error), and the logs of the round after it, closed
by then, fail theirs; a log closed before its offset was synced (topic deleted) fails its
waiters the same way. A log closed by a
clean shutdown was synced by its close and resolves its waiters normally.

Figures (`stats()`, exported as kompakt_log_group_commit_* by broker/observability/live.py): rounds, logs
synced, waiters answered, time in rounds, the largest number of waiters one round answered, and
where the answered waits' time went, summed: from the wait to the start of the round that answered
it (`queue_seconds`: the thread's wake-up, or the rest of the round under way), on to the end of
that round's sync (`wait_seconds` includes both), then until the event loop ran the answer
(`answer_lag_seconds`).
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time as _time
from typing import Any, Callable

from kompakt.protocol.errors import KafkaStorageErrorError
from kompakt.storage import native_rounds
from kompakt.storage.native_rounds import NativeRounds

log = logging.getLogger(__name__)

# The (log, end offset) of every append the coordinators made for the request being handled
# (LogManager.append_as_leader adds them): the dispatcher sets a list around each handler and
# answers only once they are durable (broker/network/dispatch.py). None outside a request, so background
# work (timeouts, expirations, marker retries) records nothing.
pending_acks: contextvars.ContextVar[list | None] = contextvars.ContextVar("kompakt_pending_acks", default=None)


class GroupCommit:
    """The flusher of one log dir (see module docstring)."""

    def __init__(self, name: str, *, on_error: Callable[[Any, BaseException], None] | None = None,
                 on_durable: Callable[[list], None] | None = None, native: bool = False):
        self.name = name
        # native: rounds run by the event loop with a sync thread that needs no GIL
        # (storage/native_rounds.py), where that is available; else (and off the loop before the
        # loop is known) the Python flusher thread below
        self._native_wanted = native
        self._native: NativeRounds | None = None
        self._on_error = on_error          # (log, exc), in the flusher thread
        self._on_durable = on_durable      # [logs the round synced], on the loop
        self._cond = threading.Condition(threading.Lock())
        self._pending: dict[Any, None] = {}           # logs for the next round (an ordered set)
        self._waiters: dict[Any, list[tuple[int, asyncio.Future, float]]] = {}   # (offset, future, since)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._idle = False
        self._closed = False
        self.rounds_total = 0
        self.synced_logs_total = 0
        self.acks_total = 0
        self.round_seconds_total = 0.0
        self.max_acks_per_round = 0
        self.wait_seconds_total = 0.0
        self.queue_seconds_total = 0.0
        self.answer_lag_seconds_total = 0.0
        self._round_started = 0.0          # the running round's start (the flusher thread's own)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that hears about durable offsets moving (the broker's)."""
        self._loop = loop

    def request(self, plog) -> None:
        """Make `plog` part of the next round (after an append; any thread)."""
        if self._native_wanted and not self._closed:
            rounds = self._native_rounds()
            if rounds is not None:
                if asyncio._get_running_loop() is rounds.loop:
                    rounds.request(plog)
                else:
                    try:
                        rounds.loop.call_soon_threadsafe(rounds.request, plog)
                    except RuntimeError:     # the loop is closed: the shutdown syncs every log
                        pass
                return
        with self._cond:
            if self._closed:
                return
            if self._loop is None:         # the first request from the broker's loop names it
                self._loop = asyncio._get_running_loop()
            self._pending[plog] = None
            self._wake()

    async def wait(self, plog, offset: int) -> None:
        """Return once every offset below `offset` of `plog` is durable (on the event loop);
        raises KafkaStorageErrorError when its sync failed or the log closed first."""
        if plog.durable_offset >= offset:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._native_wanted and not self._closed:
            rounds = self._native_rounds()
            if rounds is not None and rounds.loop is loop:
                with self._cond:               # against close's hand-over and the Python rounds
                    if self._closed:
                        raise KafkaStorageErrorError(f"{self.name}: the broker is shutting down")
                    self._waiters.setdefault(plog, []).append((offset, fut, _time.perf_counter()))
                rounds.request(plog)
                await fut
                return
        with self._cond:
            if self._closed:       # shutting down: the close syncs every log
                raise KafkaStorageErrorError(f"{self.name}: the broker is shutting down")
            if self._loop is None:
                self._loop = loop
            self._waiters.setdefault(plog, []).append((offset, fut, _time.perf_counter()))
            self._pending[plog] = None
            self._wake()
        await fut

    def close(self) -> None:
        """Run what is pending, then stop the thread (LogManager.shutdown, before logs close)."""
        rounds = self._native
        if rounds is not None:
            # the native round under way is answered; what is still pending, and every log
            # someone still waits for, goes to the Python round this close runs
            with self._cond:
                self._closed = True
            left = rounds.close()
            self._native = None
            with self._cond:
                for plog in left + list(self._waiters):
                    self._pending[plog] = None
                if self._pending:
                    self._wake()               # the Python thread's one round (closed: then it ends)
        self._stop(run_pending=True)

    def abandon(self) -> None:
        """Stop the thread without another round, as a killed process would (LogManager.crash):
        pending logs stay unsynced, waiters stay unanswered (their loop goes with the process)."""
        rounds = self._native
        if rounds is not None:
            with self._cond:
                self._closed = True
            rounds.pending.clear()
            rounds.close()
            self._native = None
        self._stop(run_pending=False)

    def _native_rounds(self) -> "NativeRounds | None":
        """The native rounds, started on the first call from the broker's loop (add_reader must
        run there) when native_rounds.available(); None elsewhere or when unavailable."""
        rounds = self._native
        if rounds is not None:
            return rounds
        loop = asyncio._get_running_loop()
        if loop is None or (self._loop is not None and loop is not self._loop):
            return None
        if not native_rounds.available():
            self._native_wanted = False
            return None
        try:
            rounds = self._native = NativeRounds(self, loop)
        except OSError as exc:
            log.warning("%s: no native sync thread (%s); the Python flusher syncs", self.name, exc)
            self._native_wanted = False
            return None
        self._loop = loop
        return rounds

    def _stop(self, run_pending: bool) -> None:
        with self._cond:
            self._closed = True
            if not run_pending:
                self._pending.clear()
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def stats(self) -> dict[str, float]:
        return {"rounds_total": self.rounds_total, "synced_logs_total": self.synced_logs_total,
                "acks_total": self.acks_total, "round_seconds_total": self.round_seconds_total,
                "max_acks_per_round": self.max_acks_per_round, "wait_seconds_total": self.wait_seconds_total,
                "queue_seconds_total": self.queue_seconds_total,
                "answer_lag_seconds_total": self.answer_lag_seconds_total}

    # ---- the flusher thread ------------------------------------------------------------------
    def _wake(self) -> None:
        """Under _cond: start the thread on first use, or wake it when it waits for work."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"kompakt-group-commit-{self.name}",
                                            daemon=True)
            self._thread.start()
        elif self._idle:
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if not self._pending:
                    return                      # closed, nothing left
                batch = list(self._pending)
                self._pending.clear()
                waited = [plog for plog in batch if plog in self._waiters]
                others = [plog for plog in batch if plog not in self._waiters] if waited else batch
            self._round(waited, others if waited else batch)

    def _round(self, waited: list, others: list) -> None:
        """Sync and answer the logs someone waits for first, then the others (see module doc)."""
        t0 = self._round_started = _time.perf_counter()
        with self._cond:
            self.rounds_total += 1
        answered = self._sync_and_answer(waited, 0) if waited else 0
        if others:
            self._sync_and_answer(others, answered)
        with self._cond:
            self.round_seconds_total += _time.perf_counter() - t0

    def _sync_and_answer(self, batch: list, answered: int) -> int:
        """Sync `batch`, then hand the loop the waiters it covered; returns `answered` (what this
        round answered before) plus how many this part answered."""
        failed_logs: dict[Any, BaseException] = {}
        for plog in batch:
            try:
                plog.sync_data()
            except Exception as exc:  # noqa: BLE001 - its waiters get the error, the others go on
                failed_logs[plog] = exc
                if self._on_error is not None:
                    try:
                        self._on_error(plog, exc)
                    except Exception:  # noqa: BLE001
                        log.exception("%s: reporting a failed sync of %s failed", self.name, plog)
        # readers hear of every log of the round, not only of those this round moved: a flush
        # elsewhere (flush.ms, a roll's) may have synced an append before the round came to it
        advanced = [plog for plog in batch if plog not in failed_logs and not plog.closed]
        resolved: list[asyncio.Future] = []
        failed: list[tuple[asyncio.Future, BaseException]] = []
        waited = queued = 0.0
        now = _time.perf_counter()
        started = self._round_started
        with self._cond:
            for plog in batch:
                done, bad, w, q = self._split_waiters(plog, failed_logs.get(plog), now, started)
                resolved += done
                failed += bad
                waited += w
                queued += q
            answered += len(resolved)
            self.synced_logs_total += len(batch)
            self.acks_total += len(resolved)
            self.wait_seconds_total += waited
            self.queue_seconds_total += queued
            self.max_acks_per_round = max(self.max_acks_per_round, answered)
            loop = self._loop
        if loop is None or not (resolved or failed or (advanced and self._on_durable is not None)):
            return answered
        try:
            loop.call_soon_threadsafe(self._deliver, resolved, failed, advanced, now)
        except RuntimeError:                     # the loop is closed: nobody waits any more
            pass
        return answered

    def _split_waiters(self, plog, exc: BaseException | None, now: float, started: float) -> tuple:
        """After a round synced `plog` (or failed to: `exc`): its waiters the durable offset now
        covers (their futures), those that fail ((future, exception): the sync's error, or the log
        closed before their offset was synced), the seconds they waited and of it the seconds
        before the round `started`; the rest stay registered for a later round. Under `_cond`
        in the Python rounds; on the loop in the native ones (storage/native_rounds.py)."""
        waiters = self._waiters.get(plog)
        if not waiters:
            return [], [], 0.0, 0.0
        durable = plog.durable_offset
        if exc is None and plog.closed and any(w[0] > durable for w in waiters):
            exc = KafkaStorageErrorError(f"{plog.dir} closed before its appends were synced")
        resolved, failed, keep = [], [], []
        waited = queued = 0.0
        for waiter in waiters:
            offset, fut, since = waiter
            if offset <= durable:
                resolved.append(fut)
                waited += now - since
                if since < started:     # (a wait registered during the round: none)
                    queued += started - since
            elif exc is not None:
                failed.append((fut, exc))
            else:
                keep.append(waiter)
        if keep:
            self._waiters[plog] = keep
        else:
            del self._waiters[plog]
        return resolved, failed, waited, queued

    def _deliver(self, resolved: list, failed: list, advanced: list, synced_at: float) -> None:
        """On the loop: answer the round's waiters, then tell who reads (fetch long polls)."""
        if resolved:
            lag = (_time.perf_counter() - synced_at) * len(resolved)
            with self._cond:
                self.answer_lag_seconds_total += lag
        for fut in resolved:
            if not fut.done():
                fut.set_result(None)
        for fut, exc in failed:
            if not fut.done():
                fut.set_exception(exc if isinstance(exc, KafkaStorageErrorError)
                                  else KafkaStorageErrorError(f"sync failed: {exc}"))
        if advanced and self._on_durable is not None:
            self._on_durable(advanced)
