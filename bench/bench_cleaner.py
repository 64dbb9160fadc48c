"""Cleaner throughput per pass (MB/s, records/s) and offset-map memory per key.

One command: `python bench/bench_cleaner.py` runs the default sizes (a few minutes here);
`--runs 5` cleans the 2 M / 200 K log five times per codec (none, lz4, zstd) against 3x Kafka;
`--large` adds 10 M and 50 M records; `--sizes 1000000:100000:100,...` picks your own
(records:keys:value bytes). Logs are generated once into `--cache` (segment files of v2 batches of
100 records, uncompressed unless --codec) and reused; each run cleans the whole log as one first
clean (every record dirty) with one worker's map (log.cleaner.dedupe.buffer.size = 128 MiB, load
factor 0.9), in this process, exactly the code a worker process runs (kompakt.cleaner.cleaner).

Figures: pass 1 = building the offset map over the dirty range (plus the header-only prescan);
pass 2 = recopying every segment through the filter; overall = Kafka's "MB of log processed in
N seconds" (bytes read in pass 2 over the whole clean). Memory: the map's fixed buffer, keys it
held, bytes of buffer per key, and the Python heap peak (tracemalloc) of the clean, which must
stay a small constant independent of the key count.
Results are appended to bench/RESULTS.md with `--write`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kompakt.cleaner import cleaner as C  # noqa: E402
from kompakt.cleaner.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap  # noqa: E402
from kompakt.protocol import records as R  # noqa: E402

DEFAULT_SIZES = [(1_000_000, 100_000, 100), (2_000_000, 200_000, 100), (1_000_000, 100_000, 1024)]
LARGE_SIZES = [(10_000_000, 1_000_000, 100), (50_000_000, 5_000_000, 100)]
SEGMENT_BYTES = 64 * 1024 * 1024
BATCH_RECORDS = 100
MAP_MEMORY = 128 * 1024 * 1024
MB = 1024 * 1024
INDEX_INTERVAL = 4096         # index.interval.bytes


def generate(dir_: str, n: int, keys: int, value_size: int, codec: int) -> None:
    os.makedirs(dir_, exist_ok=True)
    rnd = random.Random(42)
    ts = 1_700_000_000_000
    value_pad = b"x" * max(value_size - 10, 0)
    base = 0
    seg_base = 0
    f = open(C.segment_file(dir_, 0, ".log"), "wb")
    size = 0
    index = bytearray()       # the segment's offset index, one entry per index.interval.bytes, as the log writes
    since_entry = 0
    enc = R.encode_varint
    while base < n:
        count = min(BATCH_RECORDS, n - base)
        parts = []
        for i in range(count):
            key = b"key-%08d" % rnd.randrange(keys)
            value = value_pad + b"%010d" % (base + i)
            body = b"\x00\x00" + enc(i) + enc(len(key)) + key + enc(len(value)) + value + b"\x00"
            parts.append(enc(len(body)) + body)
        payload = b"".join(parts)
        if codec:
            payload = R.compress(codec, payload)
        batch = bytearray(R.BATCH_OVERHEAD + len(payload))
        R._HEADER.pack_into(batch, 0, base, len(batch) - 12, 0, 2, 0, codec, count - 1, ts, ts, -1, -1, -1, count)
        batch[61:] = payload
        R._rewrite_crc(batch, 0, len(batch))
        if size + len(batch) > SEGMENT_BYTES:
            f.close()
            _write_index(dir_, seg_base, index)
            seg_base = base
            f = open(C.segment_file(dir_, seg_base, ".log"), "wb")
            size = 0
            index, since_entry = bytearray(), 0
        if since_entry > INDEX_INTERVAL:
            index += C.OFFSET_ENTRY.pack(base + count - 1 - seg_base, size)
            since_entry = 0
        f.write(batch)
        size += len(batch)
        since_entry += len(batch)
        base += count
    f.close()
    _write_index(dir_, seg_base, index)
    # an empty active segment after the last one, so every record is cleanable
    open(C.segment_file(dir_, n, ".log"), "wb").close()
    for ext in (".index", ".timeindex"):
        open(C.segment_file(dir_, n, ext), "wb").close()


def _write_index(dir_: str, base: int, entries: bytes) -> None:
    with open(C.segment_file(dir_, base, ".index"), "wb") as f:
        f.write(entries)
    open(C.segment_file(dir_, base, ".timeindex"), "wb").close()


def job_for(dir_: str, n: int, active_producers=None, check_ratio: float = 0.0) -> C.CleanJob:
    infos = []
    for name in sorted(os.listdir(dir_)):
        if name.endswith(".log"):
            p = os.path.join(dir_, name)
            infos.append(C.SegmentInfo(int(name[:20]), p, os.path.getsize(p), os.path.getsize(p[:-4] + ".index"),
                                       0, 0.0))
    return C.CleanJob(("bench", 0), dir_, infos[:-1], infos[-1:], 0, n, 0, 1_700_000_000_000 + 1000,
                      86_400_000, segment_bytes=1 << 30, active_producers=active_producers,
                      guarantee_check_ratio=check_ratio)


def heap_peak(dir_: str, n: int) -> int:
    """Python heap peak (tracemalloc) of a clean: per-batch temporaries, not per key."""
    C.delete_cleaned_files(dir_)
    cl = C.Cleaner(0, SkimpyOffsetMap(MAP_MEMORY, 0.9))
    tracemalloc.start()
    cl.clean(job_for(dir_, n))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def run(n: int, keys: int, value_size: int, codec: int, cache: str, measure_heap: bool = False,
        check_ratio: float = 0.0) -> dict:
    # "-i": segments with their offset index (the guarantee check samples through it, as on a broker)
    name = f"n{n}-k{keys}-v{value_size}-c{codec}-i" + (f"-b{BATCH_RECORDS}" if BATCH_RECORDS != 100 else "")
    dir_ = os.path.join(cache, name)
    if not os.path.exists(os.path.join(dir_, "done")):
        shutil.rmtree(dir_, ignore_errors=True)
        t = time.perf_counter()
        generate(dir_, n, keys, value_size, codec)
        open(os.path.join(dir_, "done"), "w").close()
        print(f"  generated {name} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    C.delete_cleaned_files(dir_)
    omap = SkimpyOffsetMap(MAP_MEMORY, 0.9)
    # the stats clock is CPU time of this process: the machine is shared, wall time is reported too
    cl = C.Cleaner(0, omap, monotonic=time.process_time)
    t0 = time.perf_counter()
    # as in the broker, the producer state comes from the log (none here: no idempotent producers)
    res = cl.clean(job_for(dir_, n, active_producers={}, check_ratio=check_ratio))
    wall = time.perf_counter() - t0
    check = res.guarantee
    assert check is None or check.ok, check.violations
    total = res.stats.elapsed_secs
    peak = heap_peak(dir_, n) if measure_heap else 0
    C.delete_cleaned_files(dir_)
    s = res.stats
    idx, clean = s.elapsed_index_secs, s.elapsed_secs - s.elapsed_index_secs
    return {
        "records": n, "keys": keys, "value": value_size, "codec": R.CODEC_NAMES[codec],
        "log_mb": s.bytes_read / MB, "end_offset": res.end_offset, "kept": s.messages_written,
        "p1_s": idx, "p1_mbs": s.map_bytes_read / MB / idx, "p1_rps": s.map_messages_read / idx,
        "p2_s": clean, "p2_mbs": s.bytes_read / MB / clean, "p2_rps": s.messages_read / clean,
        "total_s": total, "mbs": s.bytes_read / MB / total, "rps": s.messages_read / total, "wall_s": wall,
        "map_keys": res.map_size, "map_bytes": len(omap.buffer),
        "bytes_per_key_capacity": len(omap.buffer) / omap.capacity_max_desired_size,
        "heap_peak_mb": peak / MB, "util": s.buffer_utilization,
        "check_s": check.seconds if check else 0.0, "check_ratio": check_ratio,
        "check_records": check.records_checked if check else 0,
        "check_batches": check.sampled_batches if check else 0,
        "output_batches": check.output_batches if check else 0,
    }


def table(rows) -> str:
    out = ["| records | keys | value | codec | log MB | pass 1 MB/s | pass 1 rec/s | pass 2 MB/s | pass 2 rec/s "
           "| overall MB/s | overall rec/s | CPU s | wall s | kept | map keys | heap peak MB |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        heap = f"{r['heap_peak_mb']:.1f}" if r["heap_peak_mb"] else "-"
        out.append(f"| {r['records']:,} | {r['keys']:,} | {r['value']} | {r['codec']} | {r['log_mb']:.0f} "
                   f"| {r['p1_mbs']:.1f} | {r['p1_rps']:,.0f} | {r['p2_mbs']:.1f} | {r['p2_rps']:,.0f} "
                   f"| {r['mbs']:.1f} | {r['rps']:,.0f} | {r['total_s']:.1f} | {r['wall_s']:.1f} | {r['kept']:,} "
                   f"| {r['map_keys']:,} | {heap} |")
    return "\n".join(out)


def check_table(rows) -> str:
    """The guarantee check's cost (kompakt.cleaner.guarantee.check.ratio) against the clean it checks."""
    out = ["| records | keys | check ratio | clean CPU s | check CPU s | check / clean | input batches read back "
           "| records checked | output batches walked |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['records']:,} | {r['keys']:,} | {r['check_ratio']:g} | {r['total_s']:.3f} | {r['check_s']:.3f} "
                   f"| {100 * r['check_s'] / r['total_s']:.1f}% | {r['check_batches']:,} | {r['check_records']:,} "
                   f"| {r['output_batches']:,} |")
    return "\n".join(out)


def check_cost(args, codec) -> None:
    """--check-ratios: the first size cleaned once per ratio, best of --repeat runs each."""
    n, k, v = (DEFAULT_SIZES[1] if not args.sizes else tuple(int(x) for x in args.sizes.split(",")[0].split(":")))
    rows = []
    for ratio in [float(x) for x in args.check_ratios.split(",")]:
        runs = [run(n, k, v, codec, args.cache, check_ratio=ratio) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["check_s"] / r["total_s"])
        rows.append(best)
        print(check_table([best]).split("\n")[-1], file=sys.stderr)
    text = check_table(rows)
    print(text)
    if args.write:
        append_results(f"Guarantee check cost, `bench/bench_cleaner.py {' '.join(sys.argv[1:])}`",
                       f"load average {os.getloadavg()[0]:.1f} (shared with other work). CPU seconds of this "
                       f"process, best of {args.repeat} per ratio; the check runs after the clean (same process, "
                       f"same map).", text)


def append_results(title: str, about: str, text: str) -> None:
    """A dated section in bench/RESULTS.md: title, the machine line, `about`, the table."""
    head = (f"\n### {title} — {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC\n\n"
            f"Machine: {platform.platform()}, {os.cpu_count()} cpus, Python {platform.python_version()}; {about}\n\n")
    with open(os.path.join(os.path.dirname(__file__), "RESULTS.md"), "a") as f:
        f.write(head + text + "\n")


KAFKA_RPS = 701_000   # Kafka 4.0's cleaner thread on the 2 M / 200 K log, same machine kind


def runs_per_codec(args) -> None:
    """--runs N --codecs a,b: the 2 M / 200 K log (or the first --sizes entry) cleaned N times per
    codec; every run against 3x Kafka's thread, per CPU second and in wall time."""
    n, k, v = (tuple(int(x) for x in args.sizes.split(",")[0].split(":")) if args.sizes
               else (2_000_000, 200_000, 100))
    rows, lines = [], []
    load0 = os.getloadavg()[0]
    for name in args.codecs.split(","):
        codec = R.CODEC_BY_NAME[name]
        for i in range(args.runs):
            r = run(n, k, v, codec, args.cache)
            rows.append(r)
            print(f"{name:5} run {i}: {r['rps']:,.0f} rec/s per CPU s ({r['rps'] / KAFKA_RPS:.2f}x Kafka), "
                  f"wall {n / r['wall_s']:,.0f} rec/s ({n / r['wall_s'] / KAFKA_RPS:.2f}x)", file=sys.stderr)
        cpu = [r["rps"] for r in rows if r["codec"] == name]
        wall = [n / r["wall_s"] for r in rows if r["codec"] == name]
        lines.append(f"| {name} | {args.runs} | {min(cpu):,.0f} | {sorted(cpu)[len(cpu) // 2]:,.0f} "
                     f"| {min(cpu) / KAFKA_RPS:.2f}x | {min(wall):,.0f} | {min(wall) / KAFKA_RPS:.2f}x "
                     f"| {rows[-1]['log_mb']:.0f} |")
    text = ("| codec | runs | min rec/s per CPU s | median | min vs Kafka 701 K | min rec/s wall | wall vs Kafka "
            "| log MB |\n|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(lines))
    print(text)
    if args.write:
        append_results(f"Cleaner vs 3x Kafka, every run: `python bench/bench_cleaner.py {' '.join(sys.argv[1:])}`",
                       f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. {n:,} records "
                       f"over {k:,} keys, {v}-byte values, batches of {BATCH_RECORDS} records, one clean of the "
                       f"all-dirty log per run, one worker's 128 MiB map, compiled seam. Goal: 3x Kafka's thread = "
                       f"{3 * KAFKA_RPS:,} rec/s.", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", action="store_true", help="add 10 M and 50 M records")
    ap.add_argument("--sizes", help="records:keys:value_bytes,... instead of the defaults")
    ap.add_argument("--codec", default="none", choices=list(R.CODEC_BY_NAME))
    ap.add_argument("--cache", default=os.path.join("/tmp", "kompakt-bench-cleaner"))
    ap.add_argument("--write", action="store_true", help="append the table to bench/RESULTS.md")
    ap.add_argument("--no-heap", action="store_true", help="skip the tracemalloc run of each size")
    ap.add_argument("--batch-records", type=int, default=BATCH_RECORDS, help="records per batch (default 100)")
    ap.add_argument("--check-ratios", help="measure the guarantee check at these ratios (e.g. 0.01,0.1,1) "
                    "on the 2 M / 200 K clean (or the first --sizes entry) instead of the throughput table")
    ap.add_argument("--repeat", type=int, default=3, help="runs per ratio with --check-ratios (best kept)")
    ap.add_argument("--runs", type=int, help="with --codecs: clean the 2 M / 200 K log this many times per codec")
    ap.add_argument("--codecs", default="none,lz4,zstd", help="codecs of --runs (default none,lz4,zstd)")
    args = ap.parse_args()
    if args.runs:
        return runs_per_codec(args)
    sizes = DEFAULT_SIZES + (LARGE_SIZES if args.large else [])
    if args.sizes:
        sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",")]
    codec = R.CODEC_BY_NAME[args.codec]
    globals()["BATCH_RECORDS"] = args.batch_records
    if args.check_ratios:
        check_cost(args, codec)
        return
    rows = []
    for n, k, v in sizes:
        print(f"cleaning {n:,} records over {k:,} keys, {v}-byte values ...", file=sys.stderr)
        r = run(n, k, v, codec, args.cache, measure_heap=not args.no_heap)
        rows.append(r)
        print(table([r]).split("\n")[-1], file=sys.stderr)
    mem = rows[0]
    text = table(rows)
    text += (f"\n\nOffset map: {mem['map_bytes'] / MB:.0f} MiB fixed buffer = {mem['map_bytes'] // BYTES_PER_ENTRY:,} "
             f"slots of {BYTES_PER_ENTRY} bytes; at load factor 0.9 that is "
             f"{mem['bytes_per_key_capacity']:.1f} bytes of buffer per key it can hold "
             f"({int(mem['map_bytes'] / mem['bytes_per_key_capacity']):,} keys per pass).")
    print(text)
    if args.write:
        from kompakt.cleaner import batch_ops
        head = (f"\n### Cleaner, {batch_ops.implementation()} seam, `{' '.join(sys.argv[1:]) or '(defaults)'}` — "
                f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC\n\n"
                f"Machine: {platform.platform()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
                f"shared with other work while measured (load average {os.getloadavg()[0]:.1f}), so rates are per "
                f"CPU second of the cleaning process (wall seconds shown too). One clean of an all-dirty log, "
                f"in process, one worker's 128 MiB map, "
                f"{'uncompressed' if codec == 0 else args.codec} batches of {BATCH_RECORDS} records.\n\n")
        with open(os.path.join(os.path.dirname(__file__), "RESULTS.md"), "a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
