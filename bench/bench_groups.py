"""Group coordinator costs: synchronous offset-commit latency and throughput, rebalance time, and
the start-up reload of __consumer_offsets.

    python bench/bench_groups.py [--commits 3000] [--members 6] [--groups 2000]

Starts `python -m kompakt serve` on free ports in a temp dir (group.initial.rebalance.delay.ms=0)
and reports:
  * OffsetCommit round trips from one confluent-kafka consumer committing 6 partitions
    synchronously, back to back: p50 / p99 latency and commits per second (each commit is one
    appended batch of 6 records in __consumer_offsets, acknowledged after the append);
  * the same with a simple (generation -1) kafka-python commit of 1 partition;
  * time for --members confluent consumers started together to reach one assignment that covers
    every partition (a real multi-join rebalance);
  * broker restart time with --groups simple groups' offsets in the log, against an empty one
    (the replay of __consumer_offsets at start).
Numbers go to bench/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, base: str, extra: dict[str, str]):
        self.port, self.mport = free_port(), free_port()
        self.base = base
        self.config = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": f"{base}/data",
                       "metrics.port": str(self.mport), "log.initial.task.delay.ms": "0", **extra}
        self.proc = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "WARNING"]
        for k, v in self.config.items():
            cmd += ["--override", f"{k}={v}"]
        t = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=open(f"{self.base}/broker.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/ready", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - t
            except OSError:
                time.sleep(0.02)
        raise SystemExit("broker not ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}})
    admin.close()


def commit_latency_confluent(bootstrap: str, n: int) -> tuple[float, float, float]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commit", "enable.auto.commit": False})
    tps = [TopicPartition("bench", p, 0) for p in range(6)]
    c.assign(tps)
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        for tp in tps:
            tp.offset = i
        t = time.perf_counter()
        c.commit(offsets=tps, asynchronous=False)
        lat.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    c.close()
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], n / total


def commit_latency_kafka_python(bootstrap: str, n: int) -> tuple[float, float, float]:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id="bench-simple", enable_auto_commit=False)
    tp = TopicPartition("bench", 0)
    c.assign([tp])
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        c.commit({tp: OffsetAndMetadata(i, "", -1)})
        lat.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    c.close()
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], n / total


def rebalance_time(bootstrap: str, members: int) -> float:
    """Seconds from starting `members` consumers to the first moment their assignments cover
    every partition of `bench` without overlap."""
    from confluent_kafka import Consumer
    assigned: dict[int, set[int]] = {}
    lock = threading.Lock()
    done = threading.Event()
    stop = threading.Event()

    def run(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-rebalance",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})

        def on_assign(_c, ps):
            with lock:
                assigned[i] = {p.partition for p in ps}
                if len(assigned) == members and sum(len(a) for a in assigned.values()) == 6 \
                        and set().union(*assigned.values()) == set(range(6)):
                    done.set()

        def on_revoke(_c, ps):
            with lock:
                assigned.pop(i, None)

        c.subscribe(["bench"], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            c.poll(0.05)
        c.close()

    t = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(members)]
    for th in threads:
        th.start()
    done.wait(120)
    elapsed = time.perf_counter() - t
    stop.set()
    for th in threads:
        th.join()
    return elapsed


def fill_groups(bootstrap: str, groups: int) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    tp = TopicPartition("bench", 0)
    for g in range(groups):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"fill-{g}", enable_auto_commit=False)
        c.commit({tp: OffsetAndMetadata(g, "", -1)})
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--members", type=int, default=6)
    ap.add_argument("--groups", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as base:
        b = Broker(base, {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"})
        cold = b.start()
        try:
            create_topic(b.bootstrap, "bench", 6)
            p50, p99, rate = commit_latency_confluent(b.bootstrap, args.commits)
            print(f"confluent sync commit of 6 partitions: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
                  f"{rate:.0f} commits/s")
            p50, p99, rate = commit_latency_kafka_python(b.bootstrap, args.commits)
            print(f"kafka-python simple commit of 1 partition: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
                  f"{rate:.0f} commits/s")
            print(f"{args.members} confluent members to a full assignment: {rebalance_time(b.bootstrap, args.members):.2f} s")
            t = time.perf_counter()
            fill_groups(b.bootstrap, args.groups)
            print(f"wrote {args.groups} simple groups' offsets in {time.perf_counter() - t:.1f} s")
        finally:
            b.stop()
        warm = b.start()
        b.stop()
        print(f"broker start: empty dir {cold:.2f} s; with {args.groups + 2} groups and "
              f"{args.commits * 2} commits to replay {warm:.2f} s")


if __name__ == "__main__":
    main()
