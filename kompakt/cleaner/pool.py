"""The cleaner's worker processes: `log.cleaner.threads` of them, each with its own offset map.

Role: run `Cleaner.clean(job)` outside the broker process so compaction never holds the GIL of the
event loop. One `Worker` per slot: a spawned process (multiprocessing "spawn": safe beside the
broker's threads) that allocates its SkimpyOffsetMap once (dedupe buffer / threads, capped at
2 GiB like Kafka) and then serves jobs from a pipe; the broker side waits on the pipe in the slot's
cleaner thread.

Protocol over the pipe: parent sends a `CleanJob` (or None to stop); the worker answers
("ok", CleanResult) | ("aborted", None) | ("disk_full", message) (its partial output deleted; the
partition is not marked uncleanable) | ("error", traceback text). An EOF or a dead process is
"died": the slot counts it (dead-thread-count), deletes the partial `.cleaned` output and starts a
new process.

Abort: each worker has an Event; the slot sets it when the partition's state becomes Aborted. The
worker checks it between batches (every 64) and inside throttle sleeps, so it stops well within a
second; its `Cleaner.clean` deletes every `.cleaned` file it wrote before answering "aborted".

Orphans: if the broker dies (SIGKILL), a worker must not keep writing next to a restarted broker:
it asks the kernel for SIGKILL on parent death (prctl PR_SET_PDEATHSIG, Linux) and also checks that
its parent pid is unchanged whenever it checks for an abort.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import multiprocessing
import os
import signal
import traceback

log = logging.getLogger(__name__)

MAX_MAP_MEMORY = 2**31 - 1
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: the ppid check still applies
        pass


def worker_main(conn, abort_event, throttle, worker_id: int, map_memory: int, load_factor: float,
                parent_pid: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the broker decides when workers stop
    from kompakt.cleaner.cleaner import Cleaner, CleaningAbortedError
    from kompakt.cleaner.offset_map import SkimpyOffsetMap

    def check_done() -> None:
        if abort_event.is_set():
            raise CleaningAbortedError()
        if os.getppid() != parent_pid:
            raise SystemExit(0)

    cleaner = Cleaner(worker_id, SkimpyOffsetMap(map_memory, load_factor), throttle, check_done)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            result = cleaner.clean(job)
            conn.send(("ok", result))
        except CleaningAbortedError:
            conn.send(("aborted", None))
        except SystemExit:
            return
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):   # the clean deleted its partial output
                conn.send(("disk_full", str(exc)))
            else:
                conn.send(("error", traceback.format_exc()))
        except BaseException:  # noqa: BLE001 - reported to the broker, which marks the partition
            conn.send(("error", traceback.format_exc()))


class Worker:
    """The broker-side handle of one worker process (restartable)."""

    def __init__(self, worker_id: int, map_memory: int, load_factor: float, throttle, ctx=None):
        self.id = worker_id
        self.map_memory = min(map_memory, MAX_MAP_MEMORY)
        self.load_factor = load_factor
        self.throttle = throttle
        self.ctx = ctx or multiprocessing.get_context("spawn")
        self.proc = None
        self.conn = None
        self.abort = self.ctx.Event()
        self.deaths = 0
        self.idle_deaths = 0

    def start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.abort.clear()
        self.proc = self.ctx.Process(
            target=worker_main, name=f"kompakt-log-cleaner-{self.id}", daemon=True,
            args=(child, self.abort, self.throttle, self.id, self.map_memory, self.load_factor, os.getpid()))
        self.proc.start()
        child.close()
        self.conn = parent

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def run(self, job, should_abort, should_stop=lambda: False, poll_s: float = 0.05):
        """Send a job and wait for its answer; ("died", exitcode) if the process went away."""
        if not self.alive():
            if self.proc is not None:          # it died while idle: count it, then replace it
                self.deaths += 1
                self.idle_deaths += 1
                log.warning("log cleaner worker %d (pid %s) died while idle (exit code %s); starting a new one",
                            self.id, self.pid, self.proc.exitcode)
                self._close()
            self.start()
        self.abort.clear()
        try:
            self.conn.send(job)
        except (BrokenPipeError, OSError):
            return self._died()
        while True:
            try:
                if self.conn.poll(poll_s):
                    return self.conn.recv()
            except (EOFError, OSError):
                return self._died()
            if not self.proc.is_alive():
                # the answer may have landed just before the exit
                try:
                    if self.conn.poll(0):
                        return self.conn.recv()
                except (EOFError, OSError):
                    pass
                return self._died()
            if should_abort() or should_stop():
                self.abort.set()

    def _died(self):
        code = self.proc.exitcode if self.proc is not None else None
        self.deaths += 1
        log.warning("log cleaner worker %d (pid %s) died with exit code %s; starting a new one",
                    self.id, self.pid, code)
        self._close()
        return ("died", code)

    def _close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None
        if self.proc is not None:
            self.proc.join(timeout=0.1)
        self.proc = None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc is None:
            return
        self.abort.set()
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout)
        self._close()
