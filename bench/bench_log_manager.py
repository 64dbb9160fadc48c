"""LogManager benchmark: startup (clean and unclean), a retention pass, checkpoint writes.

    python bench/bench_log_manager.py [--partitions 50] [--batches 200]

Builds a log dir with N partitions of small batches (about 90 bytes each, several segments per
partition), then measures:
  - startup after a clean shutdown (no recovery) and after an unclean stop (every segment above
    the recovery point recovered), with Kafka's default 10 MiB indexes and with 64 KiB indexes;
  - one cleanup_logs() pass deleting every non-active segment of every partition (retention.ms);
  - checkpoint_recovery_offsets() + checkpoint_log_start_offsets() (temp + fsync + rename + dir fsync).
Prints one line per figure; numbers go to bench/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R
from kompakt.storage.log_manager import LogManager


class Clock:
    def __init__(self):
        self.offset_ms = 0

    def time(self) -> float:
        return time.time() + self.offset_ms / 1000.0


def build(root: str, partitions: int, batches: int, index_bytes: int, crash: bool = False) -> BrokerConfig:
    cfg = BrokerConfig({"log.dirs": root, "log.segment.bytes": "4096",
                        "log.index.size.max.bytes": str(index_bytes)})
    m = LogManager(cfg)
    m.startup()
    m.create_topic("bench", partitions)
    payload = R.build_batch([(b"key", b"v" * 20)])
    for p in range(partitions):
        plog = m.get_log(("bench", p))
        for _ in range(batches):
            plog.append_as_leader(payload)
    if crash:  # SIGKILL-like: nothing closed, no marker, no checkpoints, indexes still preallocated
        m._unlock_dirs()
        m._shut_down = True
    else:
        m.shutdown()
    return cfg


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def clean_startup(cfg: BrokerConfig) -> tuple[float, int]:
    m = LogManager(cfg)
    t = timed(m.startup)
    segments = sum(len(plog.segments) for plog in m.all_logs().values())
    m.shutdown()
    return t, segments


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--batches", type=int, default=200)
    args = ap.parse_args(argv)
    print(f"# {args.partitions} partitions x {args.batches} batches of ~90 bytes, 4 KiB segments, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    for index_bytes in (65536, 10 * 1024 * 1024):
        root = tempfile.mkdtemp(prefix="bench-lm-")
        try:
            cfg = build(root, args.partitions, args.batches, index_bytes, crash=True)
            unclean, segs = clean_startup(cfg)  # first start after the crash recovers everything
            clean, _ = clean_startup(cfg)
            print(f"startup index={index_bytes // 1024} KiB: after a crash {unclean:.3f} s "
                  f"({segs} segments, {unclean / max(segs, 1) * 1000:.2f} ms each), after a clean "
                  f"shutdown {clean:.3f} s")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    root = tempfile.mkdtemp(prefix="bench-lm-")
    try:
        cfg = build(root, args.partitions, args.batches, 65536)
        clock = Clock()
        m = LogManager(cfg, time=clock)
        m.startup()
        m.alter_topic_config("bench", {"retention.ms": "1"})
        clock.offset_ms = 10_000
        t = timed(lambda: print(f"retention deleted {m.cleanup_logs()} segments", end=""))
        print(f" in {t:.3f} s")
        t = timed(lambda: (m.checkpoint_recovery_offsets(), m.checkpoint_log_start_offsets()))
        print(f"two checkpoint files for {args.partitions} partitions: {t * 1000:.1f} ms")
        m.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
