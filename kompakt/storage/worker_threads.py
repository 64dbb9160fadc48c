"""Worker threads made on first use and closed once: the life cycle the log writer and the
validation pool share.

Role: `WorkerThreads` owns one ThreadPoolExecutor for its owner (log_writer.LogWriter,
validation_pool.ValidationPool) and nothing of what runs on it: the owner decides what it hands
over, what the result means and what its callers see.

Invariants:
- No thread before the first `submit`: a broker that never needs the work never starts them.
- `shutdown` may come from any thread while `submit` runs on the event loop; one lock orders them,
  so after `shutdown` has begun no work reaches the executor: `submit` answers None and the owner
  runs the work in the caller's thread instead (`run_here`), where the logs are still open.
- Closed is final: `shutdown` once or several times, never reopened.
- What `shutdown` does with work already handed over is the owner's choice: the log writer
  finishes it (`wait=True`: appends are never dropped), the validation pool drops what has not
  started (`cancel_futures=True`: the work is pure and its requests are gone with the loop).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

_PR_SET_NAME = 15


def threads_beside_the_loop(at_most: int) -> int:
    """One thread per CPU this process may run on beyond the event loop's, at most `at_most`
    (so 0, no pool, when the process is confined to one CPU: `taskset -c 0`)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, min(at_most, cpus - 1))


def os_thread_namer(name: bytes) -> Callable[[], None]:
    """An executor initializer giving each pool thread the OS name `name` (Linux, 15 bytes at
    most), as `top -H`, py-spy and /proc/<pid>/task/*/comm show it (Python names only its own
    Thread objects); elsewhere it does nothing."""
    def initializer() -> None:
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    return initializer


class WorkerThreads:
    """See module docstring."""

    def __init__(self, max_workers: int, thread_name_prefix: str,
                 initializer: Callable[[], None] | None = None) -> None:
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix
        self._initializer = initializer
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()            # shutdown (any thread) against hand-overs (the loop)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def started(self) -> bool:
        """Whether the threads have been made (a first `submit` came before shutdown)."""
        return self._executor is not None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future | None:
        """fn(*args) on a worker thread (made now if this is the first work); None after shutdown."""
        with self._lock:
            if self._closed:
                return None
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._max_workers, initializer=self._initializer,
                                                    thread_name_prefix=self._thread_name_prefix)
            return self._executor.submit(fn, *args)

    def shutdown(self, wait: bool, cancel_futures: bool = False) -> None:
        """Refuse new work from now on, then stop the threads: with `wait`, once they have run
        what was handed over (less what `cancel_futures` cancels before it started)."""
        with self._lock:
            self._closed = True
            executor = self._executor
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=cancel_futures)


def run_here(future, fn: Callable[..., Any], *args: Any):
    """Run fn(*args) in this thread and settle `future` (a concurrent or an asyncio Future) with
    its result or the exception it raised; returns `future`. For work refused after shutdown."""
    try:
        future.set_result(fn(*args))
    except Exception as exc:                     # noqa: BLE001 - whoever awaits the future gets it
        future.set_exception(exc)
    return future
