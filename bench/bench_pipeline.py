"""Benchmark of the PySpark pipeline: data source rows/s vs Parquet, and exact compaction vs the
broker's cleaner on the same log.

    python bench/bench_pipeline.py            # --small (default): 200 k records over 80 k keys
    python bench/bench_pipeline.py --full     # the issue's size: 5 M records over 2 M keys
    python bench/bench_pipeline.py --records N --keys K [--driver-memory 1g] [--no-append]

Steps: write one partition (uncompressed batches of 100 records, ~100-byte values, 128 MiB
segments, plus an active segment) with the storage engine's LogSegment; read it with the
`kompakt` source into Spark's no-op sink (all columns) and time it; write the same rows as Parquet,
read that into the no-op sink; `compact` the partition (spark.driver.memory as given, default 1g;
spill = the sum of the stages' memory/disk spill from Spark's status store); then the broker's
cleaner (kompakt.cleaner.cleaner.Cleaner with the default 128 MiB SkimpyOffsetMap, passes until
the cleaner point reaches the active segment) on a copy of the same log; finally both outputs'
retained offsets are compared (exact: the same offsets, one per key). A log with more keys than
one 128 MiB map holds (5.03 M) makes the cleaner take several passes and shows `compact` is still
exact there: `--records 8000000 --keys 6000000`. Results are printed and appended to
bench/RESULTS.md with the date, machine and load.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kompakt.protocol import records as R  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEGMENT_BYTES = 128 * 1024 * 1024
PER_BATCH = 100


def write_log(pdir: str, n: int, keys: int) -> tuple[int, int]:
    from kompakt.storage.segment import LogSegment

    os.makedirs(pdir, exist_ok=True)
    seg = LogSegment(pdir, 0, index_interval_bytes=4096)
    value = b"x" * 90
    ts = 1_700_000_000_000
    offset = 0
    total = 0
    for start in range(0, n, PER_BATCH):
        recs = [(b"key-%09d" % ((i * 7919) % keys), value + b"%010d" % i, [], ts + i)
                for i in range(start, min(n, start + PER_BATCH))]
        data = R.build_batch(recs, base_offset=offset)
        if seg.size + len(data) > SEGMENT_BYTES:
            seg.on_become_inactive()
            seg.close()
            seg = LogSegment(pdir, offset, index_interval_bytes=4096)
        seg.append(offset + len(recs) - 1, ts + start + len(recs) - 1, offset + len(recs) - 1, data)
        offset += len(recs)
        total += len(data)
    seg.on_become_inactive()
    seg.close()
    # the active segment: the cleaner never cleans it, so give both tools the same boundary
    seg = LogSegment(pdir, offset, index_interval_bytes=4096)
    data = R.build_batch([(b"active", b"tail", [], ts + n)], base_offset=offset)
    seg.append(offset, ts + n, offset, data)
    seg.close()
    return offset, total


def spill(spark) -> tuple[int, int]:
    st = spark.sparkContext._jsc.sc().statusStore()
    mem = disk = 0
    misses = 0
    sid = 0
    while misses < 20:
        try:
            s = st.lastStageAttempt(sid)
            mem += s.memoryBytesSpilled()
            disk += s.diskBytesSpilled()
            misses = 0
        except Exception:
            misses += 1
        sid += 1
    return mem, disk


def run_cleaner(log_dir: str, topic: str, end: int) -> tuple[float, int, int]:
    from kompakt.cleaner.cleaner import Cleaner, CleanJob, SegmentInfo
    from kompakt.cleaner.offset_map import SkimpyOffsetMap
    from kompakt.pipeline import reader as rd

    pdir = os.path.join(log_dir, f"{topic}-0")
    omap = SkimpyOffsetMap(134_217_728, 0.9)
    t0 = time.time()
    dirty = 0
    passes = 0
    while dirty < end:
        segs = rd.list_segments(pdir)
        infos = [SegmentInfo(s.base_offset, s.log_path, s.size) for s in segs]
        job = CleanJob((topic, 0), pdir, [i for i in infos if i.base_offset < end],
                       [i for i in infos if i.base_offset >= end], dirty, end, 0,
                       int(time.time() * 1000), 86_400_000, segment_bytes=SEGMENT_BYTES)
        omap.clear()
        result = Cleaner(0, omap).clean(job)
        # swap: the cleaned file replaces its group (offline, no broker: plain renames suffice here)
        for g in result.groups:
            for b in g.replaces:
                for ext in (".log", ".index", ".timeindex"):
                    p = os.path.join(pdir, f"{b:020d}{ext}")
                    if os.path.exists(p):
                        os.unlink(p)
            for ext in (".log", ".index", ".timeindex"):
                c = os.path.join(pdir, f"{g.base_offset:020d}{ext}.cleaned")
                if os.path.exists(c):
                    os.replace(c, c[:-len(".cleaned")])
        dirty = result.end_offset
        passes += 1
    secs = time.time() - t0
    return secs, passes, retained_offsets(pdir, end)


def retained_offsets(path: str, end: int):
    """Offsets of the keyed records below `end` in a partition or staging dir (compiled key scan)."""
    import pyarrow as pa

    from kompakt.pipeline import keyscan
    from kompakt.pipeline import reader as rd

    bounds = rd.Bounds(max_offset=end - 1)
    parts = rd.find_partitions(path)
    batches = [b for s in rd.plan_splits(parts, bounds, read_committed=True)
               for b in keyscan.iter_keyed_batches(s, ["offset"], bounds)]
    return pa.Table.from_batches(batches, schema=pa.schema([("offset", pa.int64())])).column("offset")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="5 M records over 2 M keys")
    ap.add_argument("--small", action="store_true", help="200 k records over 80 k keys (default)")
    ap.add_argument("--records", type=int)
    ap.add_argument("--keys", type=int)
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--dir", help="work dir (default: a temp dir, removed afterwards)")
    ap.add_argument("--skip-read", action="store_true",
                    help="skip the source and Parquet read figures (compact and the cleaner only)")
    args = ap.parse_args(argv)
    n, keys = (5_000_000, 2_000_000) if args.full else (200_000, 80_000)
    n, keys = args.records or n, args.keys or keys
    work = args.dir or tempfile.mkdtemp(prefix="bench-pipeline-")
    log_dir = os.path.join(work, "logs")
    res: dict = dict(records=n, keys=keys)
    load0 = os.getloadavg()[0]
    try:
        t = time.time()
        end, nbytes = write_log(os.path.join(log_dir, "b-0"), n, keys)
        res["write_s"] = time.time() - t
        res["log_mb"] = nbytes / 1e6
        shutil.copytree(log_dir, os.path.join(work, "cleaner-logs"))
        print(f"wrote {n} records over {keys} keys, {nbytes / 1e6:.1f} MB in {res['write_s']:.1f}s", flush=True)

        from kompakt.pipeline.spark import get_session

        spark = get_session(None, {"spark.driver.memory": args.driver_memory, "kompakt.log.level": "ERROR"},
                            app_name="bench-pipeline")
        # warm-up: the first Spark job of a JVM pays class loading and JIT (tens of seconds here)
        warm = spark.read.format("kompakt").load(log_dir)
        (warm.limit(1000) if args.skip_read else warm).write.format("noop").mode("overwrite").save()
        if not args.skip_read:
            t = time.time()
            spark.read.format("kompakt").load(log_dir).write.format("noop").mode("overwrite").save()
            res["source_s"] = time.time() - t
            pq = os.path.join(work, "parquet")
            spark.read.format("kompakt").load(log_dir).write.mode("overwrite").parquet(pq)
            t = time.time()
            spark.read.parquet(pq).write.format("noop").mode("overwrite").save()
            res["parquet_s"] = time.time() - t
            print(f"read: kompakt {n / res['source_s']:,.0f} rows/s, parquet {n / res['parquet_s']:,.0f} rows/s",
                  flush=True)

        from kompakt.pipeline.jobs.compact import compact

        before = spill(spark)
        t = time.time()
        out = compact(spark, log_dir, "b", 0, os.path.join(work, "staging"), segment_bytes=SEGMENT_BYTES)
        res["compact_s"] = time.time() - t
        after = spill(spark)
        res["spill_mem_mb"] = (after[0] - before[0]) / 1e6
        res["spill_disk_mb"] = (after[1] - before[1]) / 1e6
        res["kept"] = out.records_out
        print(f"compact: {res['compact_s']:.1f}s, kept {out.records_out}, spill {res['spill_mem_mb']:.1f} MB memory / "
              f"{res['spill_disk_mb']:.1f} MB disk", flush=True)
        spark.stop()

        secs, passes, kept = run_cleaner(os.path.join(work, "cleaner-logs"), "b", end)
        res["cleaner_s"], res["cleaner_passes"], res["cleaner_kept"] = secs, passes, len(kept)
        print(f"broker cleaner (128 MiB map): {secs:.1f}s in {passes} pass(es), kept {len(kept)}", flush=True)
        # exact: the same offsets as the cleaner's passes, one per key (the writer's keys are all
        # distinct modulo `keys`, and each key's last record is its latest)
        staged = retained_offsets(os.path.join(work, "staging"), end)
        res["exact"] = staged.equals(kept) and len(staged) == min(keys, n)
        print(f"retained offsets identical to the cleaner's, one per key: {res['exact']}", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    res["load"] = (load0, os.getloadavg()[0])
    if not args.no_append:
        append_results(res, args.driver_memory)
    return 0


def append_results(r: dict, driver_memory: str) -> None:
    machine = f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus, Python {platform.python_version()}"
    lines = [
        "",
        f"## Pipeline (bench/bench_pipeline.py) — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Machine: {machine}; Spark local[*], spark.driver.memory={driver_memory}; load average "
        f"{r['load'][0]:.1f} at the start, {r['load'][1]:.1f} at the end (other work on the machine).",
        f"Log: {r['records']:,} records over {r['keys']:,} keys, {r['log_mb']:.1f} MB uncompressed (written in {r['write_s']:.1f} s).",
        "",
        "| figure | result |",
        "|---|---:|",
    ] + ([] if "source_s" not in r else [
        f"| `kompakt` source -> noop sink, all columns | {r['records'] / r['source_s']:,.0f} rows/s ({r['source_s']:.1f} s) |",
        f"| Parquet of the same rows -> noop sink | {r['records'] / r['parquet_s']:,.0f} rows/s ({r['parquet_s']:.1f} s) |",
    ]) + [
        f"| `compact` (shuffle + filter + segments) | {r['compact_s']:.1f} s, {r['kept']:,} records kept |",
        f"| `compact` spill (memory / disk) | {r['spill_mem_mb']:.1f} MB / {r['spill_disk_mb']:.1f} MB |",
        f"| broker cleaner, default 128 MiB map | {r['cleaner_s']:.1f} s in {r['cleaner_passes']} pass(es), "
        f"{r['cleaner_kept']:,} records kept |",
        f"| `compact` exact (the cleaner's offsets, one record per key) | {'yes' if r['exact'] else 'NO'} |",
        "",
    ]
    with open(os.path.join(HERE, "RESULTS.md"), "a") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
