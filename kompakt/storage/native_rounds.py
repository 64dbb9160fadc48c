"""The group commit's rounds run by the event loop with a sync thread that never takes the GIL.

Role: the same rounds as GroupCommit's Python flusher thread (storage/group_commit.py: take every
log waiting, sync it, move its durable offset to the log end offset seen before the sync, answer
every waiter the round covered; logs someone waits for first), with the roles split differently:
the event loop does all the bookkeeping (which logs, which descriptors, the durable offsets, the
futures) and the native thread (kompakt/native/flusher.c) only calls fdatasync/fsync on
duplicated descriptors and writes an eventfd when the round is done. Why: the Python thread had
to take the GIL after every fdatasync before it could tell the loop, and to run a round at all;
on two busy cores those hand-overs were where acks=all answers spent their time (loop -> flusher
-> loop, each waiting for a CPU and the GIL). Here the loop hands a round over with one short call
and hears of its end from its own selector. Measured: bench/RESULTS.md, 2026-11-28 21:15.

Invariants:
  * loop-confined: every method but `close` runs on the loop's thread (`request` from elsewhere
    arrives through call_soon_threadsafe); at most one round is with the thread at a time, and
    the next starts as soon as the previous one's results are taken, with whatever arrived;
  * a log's durable offset moves only in Log.sync_finish after every `.log` descriptor of its
    plan synced without an error (a failed one fails its waiters with KAFKA_STORAGE_ERROR and goes
    to `on_error`, as in the Python rounds); directory fsync errors are ignored as files.fsync_dir
    ignores them;
  * duplicated descriptors keep each file's open description: a segment closed, deleted or
    swapped while its sync runs is still the file synced, and a closed log moves nothing;
  * `close` (any thread) lets the round with the thread finish, answers it, then syncs what is
    still pending in Python in the closing thread, and stops the thread.
Used only where every sync may bypass files.py: no fault seam armed and no page-cache model
(tests that cut power or inject sync errors run the Python rounds, which pass through files.py).
"""
from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import threading
import time as _time

from kompakt import native
from kompakt.storage import faults
from kompakt.storage import files as fs
from kompakt.storage.log import SYNC_BUSY

log = logging.getLogger(__name__)

_KIND_DATA, _KIND_DIR = 0, 1
BUSY_RETRY_S = 0.001     # a log whose flush lock another thread holds is asked again after this


def available() -> bool:
    """Whether rounds may run natively here (module docstring)."""
    return (native.GIL_LIB is not None and hasattr(os, "eventfd") and not faults.sync_seams_armed()
            and not fs.power_model_on())


class NativeRounds:
    """The loop's side of one log dir's native sync thread (module docstring)."""

    def __init__(self, commit, loop: asyncio.AbstractEventLoop):
        self.commit = commit                # the GroupCommit: waiters, figures, callbacks
        self.loop = loop
        self.pending: dict = {}             # logs for the next round (an ordered set)
        self.flight: list | None = None     # [(log, plan or None, exception or None)] with the thread
        self.flight_fds: list = []          # (index into flight, kind) per descriptor submitted
        self.started = 0.0                  # monotonic start of the round with the thread
        self.scheduled = False
        self.closing = False
        self._lock = threading.Lock()       # `close` from another thread against the loop's `_done`
        self._errs = (ctypes.c_int * 64)()
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.handle = native.GIL_LIB.km_flusher_new(self.efd)
        if not self.handle:
            os.close(self.efd)
            raise OSError("cannot start the native sync thread")
        loop.add_reader(self.efd, self._done)

    # -- on the loop ---------------------------------------------------------------------------
    def request(self, plog) -> None:
        """Make `plog` part of the next round (on the loop)."""
        if self.closing:
            return
        self.pending[plog] = None
        if self.flight is None and not self.scheduled:
            # the rest of this loop pass may append more: one round for all of it
            self.scheduled = True
            self.loop.call_soon(self._start)

    def _start(self) -> None:
        self.scheduled = False
        with self._lock:
            if self.flight is not None or not self.pending or self.closing:
                return
            waiters = self.commit._waiters
            batch = list(self.pending)
            waited = [plog for plog in batch if plog in waiters]
            # the logs someone waits for go alone when there are others: an acks=1 backlog never
            # delays an acks=all answer (GroupCommit's module docstring); the rest go next round
            this = waited if waited else batch
            for plog in this:
                del self.pending[plog]
            flight, fds, kinds, where = [], [], [], []
            busy = []
            for plog in this:
                try:
                    plan = plog.sync_plan()
                except Exception as exc:  # noqa: BLE001 - as a failed sync: its waiters get the error
                    flight.append((plog, None, exc))
                    continue
                if plan is SYNC_BUSY:         # a flush or close holds it: asked again shortly
                    busy.append(plog)
                    continue
                flight.append((plog, plan, None))
                if plan is None:
                    continue
                for fd in plan.fds:
                    fds.append(fd)
                    kinds.append(_KIND_DATA)
                    where.append(len(flight) - 1)
                if plan.dir_fd >= 0:
                    fds.append(plan.dir_fd)
                    kinds.append(_KIND_DIR)
                    where.append(len(flight) - 1)
            if busy:
                self.loop.call_later(BUSY_RETRY_S, self._retry, busy)
            if not flight:
                return
            self.commit.rounds_total += 1
            self.started = _time.perf_counter()
            self.flight = flight
            self.flight_fds = list(zip(where, kinds))
            if not fds:                        # nothing written since the last sync: answer now
                done = (self.started, [])
            else:
                n = len(fds)
                if n > len(self._errs):
                    self._errs = (ctypes.c_int * n)()
                rc = native.GIL_LIB.km_flusher_submit(self.handle, (ctypes.c_int * n)(*fds),
                                                      (ctypes.c_int * n)(*kinds), n)
                if rc != 0:                    # no memory in the thread (or a round in flight): nothing synced
                    errs = [errno.EIO] * n
                    for i, (plog, plan, _) in enumerate(flight):
                        flight[i] = (plog, plan, OSError(f"the native sync thread refused a round ({rc})"))
                    done = (self.started, errs)
                else:
                    return
        self._finish(*done)

    def _retry(self, logs: list) -> None:
        for plog in logs:
            self.request(plog)

    def _done(self) -> None:
        """The eventfd fired: the thread finished the round."""
        try:
            os.eventfd_read(self.efd)
        except (BlockingIOError, OSError):
            return
        taken = self._take()
        if taken is not None:
            self._finish(*taken)

    def _take(self):
        """The finished round's (end time, errno per descriptor), or None when none finished."""
        with self._lock:
            if self.flight is None:
                return None
            done_at = ctypes.c_double()
            n = native.GIL_LIB.km_flusher_take(self.handle, self._errs, ctypes.byref(done_at))
            if n < 0:
                return None
            return done_at.value, list(self._errs[:n])

    def _finish(self, done_at: float, errs: list, on_loop: bool = True) -> None:
        """Move durable offsets, answer the round's waiters and tell the readers
        (GroupCommit._deliver: on the loop, handed to it when called off it by `close`), then
        start the next round."""
        with self._lock:
            flight, self.flight = self.flight, None
            where, self.flight_fds = self.flight_fds, []
        if flight is None:
            return
        failed_errno: dict[int, int] = {}
        for (i, kind), err in zip(where, errs):
            if err and kind == _KIND_DATA and i not in failed_errno:
                failed_errno[i] = err
        commit = self.commit
        now = _time.perf_counter()
        resolved, failed, advanced = [], [], []
        waited_total = queued_total = 0.0
        for i, (plog, plan, exc) in enumerate(flight):
            if plan is not None:
                plan.close()
                if exc is None and i in failed_errno:
                    exc = OSError(failed_errno[i], f"{os.strerror(failed_errno[i])}: syncing {plog.dir}")
                if exc is None:              # only a plan every descriptor of which synced moves anything
                    try:
                        plog.sync_finish(plan)
                    except Exception as e:  # noqa: BLE001
                        exc = e
            if exc is not None and commit._on_error is not None:
                try:
                    commit._on_error(plog, exc)
                except Exception:  # noqa: BLE001
                    log.exception("%s: reporting a failed sync of %s failed", commit.name, plog)
            if exc is None and not plog.closed:
                advanced.append(plog)
            with commit._cond:                   # (the Python rounds and close touch them too)
                done, bad, w, q = commit._split_waiters(plog, exc, now, self.started)
            resolved += done
            failed += bad
            waited_total += w
            queued_total += q
        commit.synced_logs_total += len(flight)
        commit.acks_total += len(resolved)
        commit.wait_seconds_total += waited_total
        commit.queue_seconds_total += queued_total
        commit.round_seconds_total += max(0.0, done_at - self.started)
        commit.max_acks_per_round = max(commit.max_acks_per_round, len(resolved))
        if not on_loop:
            try:
                self.loop.call_soon_threadsafe(commit._deliver, resolved, failed, advanced, done_at)
            except RuntimeError:             # the loop is closed: nobody waits any more
                pass
            return
        commit._deliver(resolved, failed, advanced, done_at)
        if self.pending and not self.closing:
            self._start()

    # -- any thread ----------------------------------------------------------------------------
    def close(self) -> list:
        """Stop: the round with the thread finishes and is answered, the thread stops; returns
        the logs still pending (the caller syncs them the Python way)."""
        on_loop = asyncio._get_running_loop() is self.loop
        with self._lock:
            if self.handle is None:          # closed already
                return []
            self.closing = True
        if self.flight is not None:
            while True:                      # the thread's sync ends soon: take it ourselves
                taken = self._take()
                if taken is not None or self.flight is None:
                    break
                _time.sleep(0.0005)
            if taken is not None:
                self._finish(*taken, on_loop=on_loop or self.loop.is_closed())
        native.LIB.km_flusher_free(self.handle)    # (CDLL: drops the GIL while it joins)
        self.handle = None
        efd = self.efd

        def drop_reader() -> None:
            try:
                self.loop.remove_reader(efd)
            finally:
                os.close(efd)
        if on_loop or self.loop.is_closed():
            try:
                drop_reader()
            except Exception:  # noqa: BLE001 - a closed loop has no reader left to remove
                pass
        else:
            try:
                self.loop.call_soon_threadsafe(drop_reader)
            except RuntimeError:             # the loop closed meanwhile
                os.close(efd)
        pending, self.pending = list(self.pending), {}
        return pending
