"""Cost of observing the broker: /metrics and /v1/partitions render time against partition count,
and what a scrape does to Kafka request latency on the broker's loop.

    python bench/bench_admin.py [--partitions 1000] [--requests 400]

Starts `python -m kompakt serve` on free ports in a temp dir, creates one compacted topic with
--partitions partitions, then reports: median time of GET /metrics and GET /v1/partitions; p50/p99
of a loop-bound Kafka request (ApiVersions v0 over one connection) while idle and while another
thread scrapes /metrics back to back. Numbers go to bench/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

API_VERSIONS_V0 = struct.pack(">ihhih5s", 2 + 2 + 4 + 2 + 5, 18, 0, 1, 5, b"bench")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("broker not ready")


def timed_get(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        resp.read()
    return time.perf_counter() - t


def api_versions_latencies(port: int, n: int) -> list[float]:
    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(n):
            t = time.perf_counter()
            s.sendall(API_VERSIONS_V0)
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            size = struct.unpack(">i", head)[0]
            body = b""
            while len(body) < size:
                body += s.recv(size - len(body))
            out.append(time.perf_counter() - t)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    tmp = tempfile.mkdtemp(prefix="kompakt-bench-admin-")
    kport, mport = free_port(), free_port()
    cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "WARNING",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{kport}", "--override", f"log.dirs={tmp}/data",
           "--override", f"metrics.port={mport}", "--override", "log.cleaner.backoff.ms=600000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{mport}"
    try:
        wait_ready(url, proc)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kport}", "log_level": 0})
        for fut in admin.create_topics([NewTopic("bench", args.partitions, 1,
                                                 config={"cleanup.policy": "compact"})]).values():
            fut.result(120)
        timed_get(url + "/metrics")
        scrape = [timed_get(url + "/metrics") for _ in range(5)]
        listing = [timed_get(url + "/v1/partitions") for _ in range(5)]
        print(f"partitions={args.partitions} (+ internal topics)")
        print(f"GET /metrics        median {statistics.median(scrape) * 1000:8.1f} ms")
        print(f"GET /v1/partitions  median {statistics.median(listing) * 1000:8.1f} ms")

        idle = api_versions_latencies(kport, args.requests)
        stop = threading.Event()
        scrapes = [0]

        def scraper():
            while not stop.is_set():
                timed_get(url + "/metrics")
                scrapes[0] += 1

        t = threading.Thread(target=scraper, daemon=True)
        t.start()
        busy = api_versions_latencies(kport, args.requests)
        stop.set()
        t.join()
        print(f"ApiVersions idle            p50 {pct(idle, 0.5):6.2f} ms  p99 {pct(idle, 0.99):7.2f} ms")
        print(f"ApiVersions during scrapes  p50 {pct(busy, 0.5):6.2f} ms  p99 {pct(busy, 0.99):7.2f} ms"
              f"  max {max(busy) * 1000:7.1f} ms  ({scrapes[0]} scrapes)")
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)      # ~150 MB of preallocated indexes at 10 000 partitions
    return 0


if __name__ == "__main__":
    sys.exit(main())
