"""The validation pool: threads that validate large produced batches beside the event loop.

Role: the codec half of validating a produced batch - `Log.prepare` for a batch whose records
must be decompressed to be read (compacted topics, a finite message.timestamp.before.max.ms) or
re-encoded (a topic compression.type other than the producer's), with its CRC-32C and per-record
checks - runs, for a batch of at least `kompakt.produce.validation.offload.bytes`, on one of
`kompakt.produce.validation.threads` threads while the event loop serves other connections. The
append itself (offsets, producer state, the page-cache write, durable acks) stays where it was,
on the loop or the log writer, after the request's validations are all done: so a partition's
appends keep their order, and the produce handler's rules about it are unchanged
(broker/handlers/produce.py).

What pays for a hop (measured, bench/RESULTS.md "Validation beside the event loop"): a hop costs
about 0.1 ms of CPU per batch (a wake-up, a call back into the loop, the batch's bytes read on
another core) and, while the loop runs Python, up to the interpreter's switch interval (5 ms)
before the thread gets the GIL back between its C calls. A batch that needs only its CRC (the
common case: the producer's codec kept on a delete topic, 30-100 us per MB) therefore stays on
the loop whatever its size; so does any batch below the threshold. The work runs beside the loop
only because what it calls releases the GIL: zstandard, lz4, zlib and cramjam while they
(de)compress, crc32c from 32 KiB, the compiled record walk (a ctypes call).

Threads: `wants` and `prepare` are called on the event loop; the threads are made on first use
(a broker that never sees such a batch never starts them); `shutdown` (LogManager.shutdown) waits
for nothing: the work is pure and its requests are gone with the loop. 0 threads (the default):
every batch is validated in the append, on the loop. -1: one thread per CPU the process may run
on beyond the first, at most 4 (none when confined to one CPU: `taskset -c 0`). The life cycle
(made on first use, closed once, a batch handed over after shutdown validated here) is
storage/worker_threads.py's, shared with the log writer.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from kompakt.storage.log_validator import needs_codec
from kompakt.storage.worker_threads import WorkerThreads, os_thread_namer, run_here, threads_beside_the_loop

AUTO = -1
MAX_AUTO_THREADS = 4
THREAD_NAME = b"kompakt-validat"    # the OS name of the pool's threads (15 bytes: Linux's limit)


def auto_threads() -> int:
    """The thread count for -1: one per CPU this process may run on beyond the loop's, at most
    MAX_AUTO_THREADS (so 0, no pool, when the process is confined to one CPU: `taskset -c 0`)."""
    return threads_beside_the_loop(MAX_AUTO_THREADS)


class ValidationPool:
    """See module docstring."""

    def __init__(self, threads: int = 0, offload_bytes: int = 65536) -> None:
        self.threads = auto_threads() if threads == AUTO else threads
        self.offload_bytes = offload_bytes
        self._workers = WorkerThreads(self.threads, "kompakt-validate", initializer=os_thread_namer(THREAD_NAME))

    def wants(self, plog, records) -> bool:
        """Whether this batch for `plog` is validated on the pool: large, and its validation runs
        a codec (log_validator.needs_codec)."""
        return (self.threads > 0 and records is not None and len(records) >= self.offload_bytes
                and not self._workers.closed and needs_codec(records, plog.config))

    def prepare(self, plog, records) -> Awaitable[Any]:
        """`plog.prepare(records)` on a pool thread, as an awaitable of the Prepared (or the
        KafkaError it raised). Called on the event loop."""
        cf = self._workers.submit(plog.prepare, records)
        if cf is not None:
            return asyncio.wrap_future(cf)
        # shut down meanwhile: validate here
        return run_here(asyncio.get_running_loop().create_future(), plog.prepare, records)

    def shutdown(self) -> None:
        """Waits for nothing and drops what has not started (see the module docstring)."""
        self._workers.shutdown(wait=False, cancel_futures=True)
