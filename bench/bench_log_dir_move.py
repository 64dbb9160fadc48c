"""Moving a partition between log dirs (AlterReplicaLogDirs) under load, against a real `kompakt serve`.

    python bench/bench_log_dir_move.py [--mb 1000] [--rate 2000] [--size 1024]

A broker with two log dirs; one partition filled with `--mb` MB of `--size`-byte records
(confluent-kafka, acks=all); then a producer keeps writing `--rate` records/s (acks=all, one
record per produce call, latency measured per record from produce to delivery) while kafka-python's
admin moves the partition to the other dir. Prints: the copy rate (MB of the partition moved per
second, unthrottled), the broker's RSS before the move and the largest sampled during it (the copy
reads at most 1 MiB at a time), how long the swap held appends (the broker's log line), and the
producer's p50 / p99 / max delivery latency before and during the move. Nothing is lost: the
partition's end offset equals the records acknowledged. Numbers go to bench/RESULTS.md by hand,
with `uptime`'s load average (the machine is shared).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient, TopicPartitionReplica

    base = tempfile.mkdtemp(prefix="bench-move-")
    dirs = [os.path.join(base, "a"), os.path.join(base, "b")]
    port = free_port()
    log_path = os.path.join(base, "broker.log")
    cmd = [sys.executable, "-m", "kompakt", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={','.join(dirs)}", "--override", "metrics.port=0",
           "--override", "log.segment.delete.delay.ms=0"]
    with open(log_path, "wb") as log:
        broker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        from kafka.admin import NewTopic
        admin.create_topics([NewTopic("moving", 1, 1)])
        value = b"v" * args.size
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        n = args.mb * 1_000_000 // args.size
        t0 = time.perf_counter()
        for i in range(n):
            while True:
                try:
                    p.produce("moving", value=value, partition=0)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(300) == 0
        fill_s = time.perf_counter() - t0
        src = next(d for d in dirs if os.path.isdir(os.path.join(d, "moving-0")))
        dest = next(d for d in dirs if d != src)

        latencies: dict[str, list[float]] = {"before": [], "during": []}
        phase = ["before"]
        acked = [n]
        stop = threading.Event()
        live = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})

        def keep_producing():
            gap = 1.0 / args.rate
            nxt = time.perf_counter()
            while not stop.is_set():
                sent = time.perf_counter()
                bucket = latencies[phase[0]]

                def done(err, _msg, sent=sent, bucket=bucket):
                    assert err is None, err
                    bucket.append(time.perf_counter() - sent)
                    acked[0] += 1
                live.produce("moving", value=value, partition=0, on_delivery=done)
                live.poll(0)
                nxt += gap
                time.sleep(max(0.0, nxt - time.perf_counter()))
            live.flush(60)

        producer = threading.Thread(target=keep_producing)
        producer.start()
        time.sleep(3)
        rss_before = rss_kib(broker.pid, "VmRSS")
        hwm_before = rss_kib(broker.pid, "VmHWM")
        phase[0] = "during"
        t1 = time.perf_counter()
        admin.alter_replica_log_dirs({TopicPartitionReplica("moving", 0, 1): dest})
        pattern = re.compile(r"moved moving-0 .*\((\d+) bytes copied in (\d+) chunks; appends waited ([\d.]+) ms")
        found = None
        rss_during = rss_before
        while found is None and time.perf_counter() - t1 < 3600:
            time.sleep(0.05)
            rss_during = max(rss_during, rss_kib(broker.pid, "VmRSS"))
            with open(log_path, errors="replace") as f:
                found = pattern.search(f.read())
        move_s = time.perf_counter() - t1
        stop.set()
        producer.join()
        copied, chunks, waited = int(found.group(1)), int(found.group(2)), float(found.group(3))
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        low, high = c.get_watermark_offsets(TopicPartition("moving", 0), timeout=10)
        c.close()

        def pct(xs, q):
            xs = sorted(xs)
            return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

        print(f"filled {args.mb} MB ({n} records of {args.size} B) in {fill_s:.1f} s")
        print(f"moved {copied / 1e6:.0f} MB in {move_s:.1f} s = {copied / 1e6 / move_s:.0f} MB/s "
              f"({chunks} chunks) while producing {args.rate} rec/s")
        print(f"appends waited {waited:.1f} ms for the swap")
        print(f"broker RSS before the move {rss_before / 1024:.0f} MiB (peak so far, the fill: "
              f"{hwm_before / 1024:.0f} MiB), largest sampled every 50 ms during it {rss_during / 1024:.0f} MiB")
        for name, xs in latencies.items():
            print(f"produce latency {name} the move: p50 {pct(xs, 0.5):.2f} ms, p99 {pct(xs, 0.99):.2f} ms, "
                  f"max {max(xs) * 1000 if xs else float('nan'):.1f} ms ({len(xs)} records)")
        print(f"end offset {high} = records acknowledged {acked[0]}: {'yes' if high == acked[0] else 'NO'}")
        admin.close()
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
