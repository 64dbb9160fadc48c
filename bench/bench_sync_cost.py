"""Sync cost: the CPU an fdatasync round charges to the thread that calls it, by round size.

One command: `python bench/bench_sync_cost.py [--mb 256] [--no-results]`.

Durable acknowledgements (storage/group_commit.py) make one thread per log dir fdatasync what
the broker appended since its last round; the page writeback the kernel does inside that call is
CPU charged to the broker's process, where Kafka, which does not sync on the produce path, leaves
it to the kernel's flusher threads (charged to no process). This measures that charge on the
machine's disk: the same stream of 16 KiB appends (a temporary directory, override with
KOMPAKT_BENCH_DIR), not synced, then synced every 64 KiB ... 16 MiB, each as this process's
user + system CPU seconds per GB appended (getrusage) and the rate. The difference between a row
and the first is what syncing costs the caller at that round size; bench_produce_fetch.py
--contention's "off the loop" column is the same cost measured inside a running broker.
Appends a dated section with the machine to bench/RESULTS.md (unless --no-results).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import tempfile
import time

CHUNK = 16 << 10
EVERY = (0, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)     # 0: never synced


def cpu_s() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime


def one_stream(root: str, total: int, every: int) -> tuple[int, float, float, float]:
    """Append `total` bytes in CHUNK writes, fdatasync every `every` bytes (never when 0);
    returns (rounds, CPU-s, of it system, seconds)."""
    chunk = os.urandom(CHUNK)
    path = os.path.join(root, f"stream-{every}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        c0, s0 = cpu_s()
        t0 = time.perf_counter()
        since = rounds = 0
        for _ in range(total // CHUNK):
            os.write(fd, chunk)
            since += CHUNK
            if every and since >= every:
                os.fdatasync(fd)
                since = 0
                rounds += 1
        if every and since:
            os.fdatasync(fd)
            rounds += 1
        c1, s1 = cpu_s()
        return rounds, c1 - c0, s1 - s0, time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256, help="MB appended per row (default 256)")
    ap.add_argument("--no-results", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    total = args.mb << 20
    root = tempfile.mkdtemp(prefix="kompakt-bench-sync-", dir=os.environ.get("KOMPAKT_BENCH_DIR"))
    load0 = os.getloadavg()[0]
    rows = []
    try:
        for every in EVERY:
            os.sync()        # the row before left pages in writeback (the unsynced one, 256 MB)
            rounds, cpu, sys_cpu, secs = one_stream(root, total, every)
            gb = total / 1e9
            rows.append((every, rounds, cpu / gb, sys_cpu / gb, gb * 1000 / secs))
            print(f"sync every {every >> 10:>6} KiB: {rounds:6,} rounds, {cpu / gb:5.2f} CPU-s/GB "
                  f"(system {sys_cpu / gb:.2f}), {gb * 1000 / secs:,.0f} MB/s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = rows[0][2]
    per_round_us = [(cpu - base) * (total / 1e9) / rounds * 1e6 for every, rounds, cpu, _, _ in rows[1:]]
    section = "\n".join([
        f"\n## Sync cost by round size (`python bench/bench_sync_cost.py --mb {args.mb}`) — "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} cpus; load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end. {args.mb} MB appended per row in 16 KiB writes; CPU: this "
        "process's user + system seconds per GB (the kernel's writeback inside fdatasync included).",
        "",
        "| synced every | rounds | CPU-s/GB | of it system | MB/s | CPU per round over not syncing |",
        "|---:|---:|---:|---:|---:|---:|",
        *(f"| {'never' if every == 0 else f'{every >> 10:,} KiB'} | {rounds:,} | {cpu:.2f} | {sys_cpu:.2f} | {mbs:,.0f} | "
          + ("-" if every == 0 else f"{us:,.0f} us") + " |"
          for (every, rounds, cpu, sys_cpu, mbs), us in zip(rows, [0.0, *per_round_us])),
        "",
    ])
    print(section)
    if not args.no_results:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), "a", encoding="utf-8") as f:
            f.write(section)


if __name__ == "__main__":
    main()
