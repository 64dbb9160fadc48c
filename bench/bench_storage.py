"""Storage benchmark: Log append/read throughput and unclean-shutdown recovery speed.

One command: `python bench/bench_storage.py [--quick] [--no-results]`.
Measures, on a temporary directory (override with KOMPAKT_BENCH_DIR):
- append_as_leader MB/s and batches/s for 1 KiB and 16 KiB batches, without and with a flush
  (fsync) after every batch;
- sequential read (fetch of 1 MiB at a time) MB/s and batches/s over what was appended;
- the fetch path: Log.read of 1 MiB with max_offset at 1,000 spread offsets, microseconds each;
- recovery: ~256 MiB of unflushed log reopened as an unclean shutdown (every batch CRC-checked,
  indexes rebuilt), reported as seconds per GiB;
- opening a 256 MiB log of 1 MiB segments after a clean shutdown.
Appends a dated section with the machine to bench/RESULTS.md (unless --no-results).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kompakt.config.topic_config import LogConfig  # noqa: E402
from kompakt.protocol import records as R  # noqa: E402
from kompakt.storage import Log  # noqa: E402

MIB = 1024 * 1024


def make_batch(size: int) -> bytes:
    """One uncompressed batch of about `size` bytes (records of ~100 bytes, like small events)."""
    n = max(1, size // 110)
    value = b"v" * (size // n - 30)
    return R.build_batch([(b"key-%06d" % i, value) for i in range(n)])


def bench_append(root: str, batch_size: int, total_bytes: int, flush_each: bool, time_cap: float):
    d = os.path.join(root, f"append{batch_size}{'f' if flush_each else ''}-0")
    log = Log.open(d, LogConfig.default())
    data = make_batch(batch_size)
    n = 0
    t0 = time.perf_counter()
    limit = total_bytes // len(data)
    while n < limit:
        log.append_as_leader(data)
        if flush_each:
            log.flush()
        n += 1
        if n % 64 == 0 and time.perf_counter() - t0 > time_cap:
            break
    if not flush_each:
        log.flush()
    dt = time.perf_counter() - t0
    return log, n, n * len(data), dt


def bench_read(log: Log):
    t0 = time.perf_counter()
    off, nbytes, nbatches = 0, 0, 0
    end = log.log_end_offset
    while off < end:
        data = log.read(off, MIB).records
        nbytes += len(data)
        last = None
        for _, h in R.iter_batches(data):
            nbatches += 1
            last = h
        off = last.next_offset
    return nbytes, nbatches, time.perf_counter() - t0


def bench_fetch(log: Log, count: int = 1000):
    """Log.read as the fetch handler calls it (1 MiB, max_offset = high watermark) at `count`
    offsets spread over the log; the bytes are not parsed (they go to the socket as they are)."""
    end = log.log_end_offset
    nbytes = 0
    t0 = time.perf_counter()
    for i in range(count):
        nbytes += len(log.read((i * 7919) % end, MIB, max_offset=end).records)
    dt = time.perf_counter() - t0
    return dt / count, nbytes / MIB / dt


def bench_recovery(root: str, total_bytes: int):
    d = os.path.join(root, "recover-0")
    log = Log.open(d, LogConfig.default())
    data = make_batch(16 * 1024)
    for _ in range(total_bytes // len(data)):
        log.append_as_leader(data)
    size = log.size
    log.close_handlers()  # no flush, no index trim, no snapshot: like a kill -9
    t0 = time.perf_counter()
    again = Log.open(d, LogConfig.default(), had_clean_shutdown=False, recovery_point=0)
    dt = time.perf_counter() - t0
    assert again.log_end_offset > 0 and again.size == size
    again.close()
    return size, dt


def bench_clean_open(root: str, total_bytes: int):
    """Open after a clean shutdown: a log of 1 MiB segments (index files are not read: lazy)."""
    d = os.path.join(root, "open-0")
    cfg = LogConfig.from_overrides({"segment.bytes": str(MIB)})
    log = Log.open(d, cfg)
    data = make_batch(16 * 1024)
    for _ in range(total_bytes // len(data)):
        log.append_as_leader(data)
    n = log.num_segments
    log.close()
    t0 = time.perf_counter()
    again = Log.open(d, cfg)
    dt = time.perf_counter() - t0
    again.close()
    return n, dt


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cpus, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--no-results", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    scale = 1 / 16 if args.quick else 1
    root = tempfile.mkdtemp(prefix="kompakt-bench-", dir=os.environ.get("KOMPAKT_BENCH_DIR"))
    rows = []
    fetches = []
    try:
        for size in (1024, 16 * 1024):
            for flush_each in (False, True):
                total = int((64 if not flush_each else 8) * MIB * scale)
                log, n, nbytes, dt = bench_append(root, size, total, flush_each, time_cap=5.0)
                rows.append((f"append {size // 1024} KiB batches" + (", flush each" if flush_each else ""),
                             nbytes / MIB / dt, n / dt, n, dt))
                if not flush_each:
                    rb, rn, rdt = bench_read(log)
                    rows.append((f"read {size // 1024} KiB batches (1 MiB fetches)", rb / MIB / rdt, rn / rdt, rn, rdt))
                    fetches.append((size, *bench_fetch(log)))
                log.close()
        rec_bytes, rec_dt = bench_recovery(root, int(256 * MIB * scale))
        open_segments, open_dt = bench_clean_open(root, int(256 * MIB * scale))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [f"| {name} | {mbs:,.1f} | {bps:,.0f} | {n:,} | {dt:.2f} |" for name, mbs, bps, n, dt in rows]
    rec_line = (f"Recovery (unclean shutdown, {rec_bytes / MIB:.0f} MiB of 16 KiB batches, every batch CRC-checked, "
                f"indexes rebuilt): {rec_dt:.2f} s = **{rec_dt / (rec_bytes / (1024 * MIB)):.1f} s per GiB**.")
    section = "\n".join([
        f"\n## Storage (bench/bench_storage.py) — {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {machine()}. Shared with other work while measured (2 cores); single thread, page cache warm, "
        "uncompressed batches of ~110-byte records, delete topic (header + CRC validation only).",
        "",
        "| operation | MB/s | batches/s | batches | seconds |",
        "|---|---:|---:|---:|---:|",
        *lines,
        "",
        rec_line,
        "",
        "Fetch path (Log.read(offset, 1 MiB, max_offset=high watermark) at 1,000 spread offsets, bytes not "
        "parsed): " + "; ".join(f"{size // 1024} KiB batches {per * 1e6:,.0f} us per fetch ({mbs:,.0f} MB/s)"
                                for size, per, mbs in fetches) + ".",
        "",
        f"Open after a clean shutdown: {open_segments} segments of 1 MiB in {open_dt * 1000:.0f} ms "
        f"(no index file read until a lookup needs it).",
        "",
    ])
    print(section)
    if not args.no_results and not args.quick:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
        with open(path, "a", encoding="utf-8") as f:
            f.write(section)


if __name__ == "__main__":
    main()
