"""Cost as work grows: partitions, connections, and broker CPU per GB, against a real `kompakt serve`.

    python bench/bench_scale.py [--partitions 1,100,1000,10000] [--connections 1,100,1000]
                                [--records 1000000] [--gb 1.0] [--quick] [--no-write]

Partitions (a fresh broker and log dir per count): create one topic of P partitions (time to
create); broker RSS before and after (KiB per idle partition); produce `--records` records of
100 B with one confluent-kafka producer spreading them round-robin over the P partitions (acks=all,
linger.ms=5: librdkafka puts many partitions in each Produce request) -> rec/s; then start-up time
to the first Metadata answer after a clean stop (SIGTERM) and after a crash (SIGKILL), the time a
clean stop takes (SIGTERM to exit, right after the produce: every partition has unflushed data and
a new producer snapshot to write), and the broker's open file descriptors. The goal at 10 000
partitions: throughput >= half the 1-partition figure, clean-stop start < 5 s, < 20 KiB RSS per
idle partition.

Connections (one broker, one topic of 8 partitions): N TCP connections from one asyncio client,
each a closed loop of Produce v3 requests (acks=1, one batch of 100 records of 100 B, to partition
i % 8) for `--seconds`: total records/s and the p50 / p99 request latency.

CPU per GB: broker CPU seconds (user + system, /proc) per GB of 1 KiB records produced by
confluent-kafka (acks=1, one topic of 4 partitions) and per GB fetched back by a confluent-kafka
consumer, so a user can size a machine (the median of three fresh brokers).

Results go to stdout and, unless --no-write, a dated section of bench/RESULTS.md with the load
average at the start and the end (the machine is shared: read the ratios, not the absolutes).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka as ck

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_produce_fetch import (_cpu, cpu_s, fetch, free_port, metadata_answered, produce,  # noqa: E402
                                 rss_mib)

from kompakt.protocol import records as R  # noqa: E402


class Broker:
    """`kompakt serve` on a log dir that survives restarts (clean stop, crash)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kompakt-scale-")
        self.port = free_port()
        self.proc = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> float:
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", os.environ.get("KLOG", "WARNING"),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.dir}/data", "--override", "metrics.port=0",
               "--override", "num.partitions=1", "--override", "offsets.topic.num.partitions=1"]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=str(HERE.parent), stdout=subprocess.DEVNULL,
                                     stderr=open(f"{self.dir}/broker.log", "ab"))
        while not metadata_answered(self.port):
            if self.proc.poll() is not None:
                raise SystemExit(f"broker died: {Path(self.dir, 'broker.log').read_text()[-3000:]}")
            time.sleep(0.01)
        return time.monotonic() - t0

    def stop(self, kill: bool = False) -> float:
        """Seconds from the signal to the process's exit."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.proc.wait(300)
        return time.monotonic() - t0

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def remove(self) -> None:
        """Stop (if running) and delete the log dir: a 10 000-partition run leaves gigabytes."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int) -> float:
    from confluent_kafka.admin import NewTopic
    client = admin(bootstrap)          # kept alive until the answer: its futures die with it
    t0 = time.monotonic()
    client.create_topics([NewTopic(name, partitions)], request_timeout=900)[name].result(900)
    return time.monotonic() - t0


def produce_spread(bootstrap, topic, partitions, n, size=100, acks="all"):
    value = os.urandom(size)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151,
                     "enable.idempotence": False, "message.timeout.ms": 600_000})
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(600)
    if left:
        raise SystemExit(f"{left} messages not delivered")
    return time.perf_counter() - t0


def produce_request_multi(topic: bytes, parts: list[tuple[int, bytes]], acks: int = -1) -> bytes:
    """ProduceRequest v3 after the header with one batch for each of several partitions."""
    body = [struct.pack(">hhi", -1, acks, 30_000), struct.pack(">i", 1), _str(topic), struct.pack(">i", len(parts))]
    for index, batch in parts:
        body.append(struct.pack(">ii", index, len(batch)))
        body.append(batch)
    return b"".join(body)


def java_shaped_requests(topic: bytes, partitions: int, n: int, size: int = 100,
                         batch_bytes: int = 16_384, request_bytes: int = 1 << 20) -> tuple[list[bytes], int]:
    """The Produce requests the Java producer sends for n records spread round-robin over the
    partitions (batch.size 16 KiB per partition, one batch per partition per request, max.request.size
    1 MiB): (request bodies, records). Batches are built once per record count and shared."""
    per_part = n // partitions
    per_batch = max(1, min(per_part, batch_bytes // (size + 10)))
    cache: dict[int, bytes] = {}

    def batch(k):
        if k not in cache:
            cache[k] = R.build_batch([(None, b"x" * size)] * k)
        return cache[k]
    rounds = []
    left = per_part
    while left > 0:                       # each round: one batch for every partition
        k = min(per_batch, left)
        rounds.append(k)
        left -= k
    requests, cur, cur_bytes = [], [], 0
    for k in rounds:
        b = batch(k)
        for p in range(partitions):
            if cur and cur_bytes + len(b) > request_bytes:
                requests.append(produce_request_multi(topic, cur))
                cur, cur_bytes = [], 0
            cur.append((p, b))
            cur_bytes += len(b)
        if partitions == 1 or cur_bytes >= request_bytes:
            requests.append(produce_request_multi(topic, cur))
            cur, cur_bytes = [], 0
    if cur:
        requests.append(produce_request_multi(topic, cur))
    return requests, per_part * partitions


async def _send_pipelined(port: int, bodies: list[bytes], in_flight: int = 5) -> float:
    """Send the requests on one connection, at most `in_flight` unanswered; seconds until the last
    answer. Every partition must answer error code 0."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header, client = struct.pack(">hh", 0, 3), _str(b"scale")
    sem = asyncio.Semaphore(in_flight)
    done = asyncio.get_running_loop().create_future()
    remaining = [len(bodies)]

    async def read_answers():
        while remaining[0]:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            resp = await reader.readexactly(size)
            _check_produce_response(resp)
            remaining[0] -= 1
            sem.release()
        done.set_result(None)
    t0 = time.perf_counter()
    task = asyncio.ensure_future(read_answers())
    for corr, body in enumerate(bodies):
        await sem.acquire()
        payload = header + struct.pack(">i", corr) + client + body
        writer.write(struct.pack(">i", len(payload)) + payload)
    await done
    elapsed = time.perf_counter() - t0
    await task
    writer.close()
    return elapsed


def _check_produce_response(resp: bytes) -> None:
    pos = 4
    (topics,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    for _ in range(topics):
        (nlen,) = struct.unpack_from(">h", resp, pos)
        pos += 2 + nlen
        (parts,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        for _ in range(parts):
            index, code = struct.unpack_from(">ih", resp, pos)
            if code:
                raise SystemExit(f"partition {index} answered error {code}")
            pos += 4 + 2 + 8 + 8


def produce_java_shaped(port: int, topic: str, partitions: int, n: int) -> float:
    bodies, records = java_shaped_requests(topic.encode(), partitions, n)
    return records / asyncio.run(_send_pipelined(port, bodies))


def partitions_run(p: int, n: int) -> dict:
    b = Broker()
    try:
        first_start = b.start()
        time.sleep(1.0)
        rss0 = rss_mib(b.proc.pid)
        create_s = create_topic(b.bootstrap, "scale", p)
        time.sleep(3.0)                 # let creation settle (threads, logs)
        rss1 = rss_mib(b.proc.pid)
        c0 = cpu_s(b.proc.pid)
        time.sleep(5.0)
        idle_cpu = (cpu_s(b.proc.pid) - c0) / 5.0
        c0 = cpu_s(b.proc.pid)
        secs = produce_spread(b.bootstrap, "scale", p, n)
        cpu = cpu_s(b.proc.pid) - c0
        c0 = cpu_s(b.proc.pid)
        java_rps = produce_java_shaped(b.port, "scale", p, n)
        java_cpu_us = (cpu_s(b.proc.pid) - c0) / n * 1e6
        fds = b.fds()
        stop_s = b.stop()              # every partition written since the start: flush + snapshot each
        clean_start = b.start()
        time.sleep(2.0)
        rss_restart = rss_mib(b.proc.pid)
        b.stop(kill=True)
        crash_start = b.start()
        b.stop()
        return dict(partitions=p, create_s=create_s, rss_mib=rss1, kib_per_partition=(rss1 - rss0) * 1024 / p,
                    rss_restart_mib=rss_restart, idle_cpu=idle_cpu, rps=n / secs, broker_cpu=cpu / secs,
                    java_rps=java_rps, java_cpu_us=java_cpu_us, librdkafka_cpu_us=cpu / n * 1e6,
                    fds=fds, first_start=first_start, clean_start=clean_start, crash_start=crash_start,
                    stop_s=stop_s)
    finally:
        b.remove()


# ---- connections: a raw Produce v3 client ----------------------------------------------------

def _str(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def produce_request(topic: bytes, partition: int, batch: bytes, acks: int = 1) -> bytes:
    """ProduceRequest v3 after the header: null transactional id, acks, timeout, one partition."""
    return (struct.pack(">hhi", -1, acks, 30_000) + struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(batch)) + batch)


async def _connection(port, body: bytes, deadline: float, lat: list, errors: list):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header = struct.pack(">hh", 0, 3)
    client = _str(b"scale")
    corr = 0
    try:
        while time.perf_counter() < deadline:
            corr += 1
            payload = header + struct.pack(">i", corr) + client + body
            t0 = time.perf_counter()
            writer.write(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            resp = await reader.readexactly(size)
            lat.append(time.perf_counter() - t0)
            # correlation id, 1 topic (name), 1 partition: index, error code
            name_len = struct.unpack_from(">h", resp, 8)[0]
            code = struct.unpack_from(">h", resp, 10 + name_len + 4 + 4)[0]
            if struct.unpack_from(">i", resp, 0)[0] != corr or code:
                errors.append(code)
                return
    finally:
        writer.close()


async def _connections(port, n: int, seconds: float, partitions: int):
    batch = R.build_batch([(None, b"x" * 100)] * 100)
    bodies = [produce_request(b"conns", i % partitions, batch) for i in range(partitions)]
    lat: list = []
    errors: list = []
    deadline = time.perf_counter() + seconds
    t0 = time.perf_counter()
    await asyncio.gather(*[_connection(port, bodies[i % partitions], deadline, lat, errors) for i in range(n)])
    return lat, errors, time.perf_counter() - t0


def connections_run(counts, seconds: float) -> list[dict]:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    b = Broker()
    b.start()
    rows = []
    try:
        create_topic(b.bootstrap, "conns", 8)
        asyncio.run(_connections(b.port, 2, 1.0, 8))       # warm-up
        for n in counts:
            rss0 = rss_mib(b.proc.pid)
            c0 = cpu_s(b.proc.pid)
            lat, errors, wall = asyncio.run(_connections(b.port, n, seconds, 8))
            cpu = cpu_s(b.proc.pid) - c0
            if errors or not lat:
                raise SystemExit(f"{n} connections: errors {errors[:5]}")
            lat.sort()
            rows.append(dict(connections=n, rps=len(lat) * 100 / wall, requests=len(lat),
                             p50_ms=lat[len(lat) // 2] * 1000, p99_ms=lat[int(len(lat) * 0.99)] * 1000,
                             broker_cpu=cpu / wall, rss_mib=rss_mib(b.proc.pid), rss0_mib=rss0))
            print("connections {connections:>5}: {rps:>10,.0f} rec/s  p50 {p50_ms:.2f} ms  p99 {p99_ms:.2f} ms  "
                  "broker CPU {broker_cpu:.0%}  RSS {rss_mib:.0f} MiB".format(**rows[-1]), flush=True)
    finally:
        b.remove()
    return rows


# ---- CPU per GB ------------------------------------------------------------------------------

def cpu_per_gb(gb: float) -> dict:
    """Broker CPU seconds per GB produced and fetched (bench_produce_fetch's client loops)."""
    size = 1024
    n = int(gb * 1e9 / size)
    b = Broker()
    b.start()
    try:
        create_topic(b.bootstrap, "gb", 4)
        c0 = cpu_s(b.proc.pid)
        produce_wall = produce(b.bootstrap, "gb", n, size, "1")
        produce_cpu = cpu_s(b.proc.pid) - c0
        c0 = cpu_s(b.proc.pid)
        fetch_wall = fetch(b.bootstrap, "gb", 4, n)
        fetch_cpu = cpu_s(b.proc.pid) - c0
        real_gb = n * size / 1e9
        return dict(gb=real_gb, produce_cpu_per_gb=produce_cpu / real_gb, fetch_cpu_per_gb=fetch_cpu / real_gb,
                    produce_mb_s=real_gb * 1e3 / produce_wall, fetch_mb_s=real_gb * 1e3 / fetch_wall)
    finally:
        b.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", default="1,100,1000,10000")
    ap.add_argument("--connections", default="1,100,1000")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="a tenth of the records, 3 s per connection count")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.records //= 10
        args.seconds = 3.0
        args.gb /= 10
    load0 = os.getloadavg()[0]
    prow = []
    for p in [int(x) for x in args.partitions.split(",") if x]:
        r = partitions_run(p, args.records)
        prow.append(r)
        print("partitions {partitions:>6}: create {create_s:.1f} s, RSS {rss_mib:.0f} MiB ({kib_per_partition:.1f} "
              "KiB/partition), idle CPU {idle_cpu:.1%}, produce {java_rps:,.0f} rec/s Java-shaped ({java_cpu_us:.2f} broker CPU-us/rec), "
              "{rps:,.0f} rec/s librdkafka (broker CPU {broker_cpu:.0%}, {librdkafka_cpu_us:.2f} us/rec), fds {fds}, "
              "clean stop {stop_s:.2f} s, start after clean stop {clean_start:.2f} s, after crash {crash_start:.2f} s"
              .format(**r), flush=True)
    crow = connections_run([int(x) for x in args.connections.split(",") if x], args.seconds) \
        if args.connections else []
    gb = None
    if args.gb > 0:       # three brokers, the median of each figure (one run is noisy on a shared VM)
        runs = [cpu_per_gb(args.gb) for _ in range(3)]
        gb = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        gb["runs"] = runs
    if gb:
        print("CPU per GB: produce {produce_cpu_per_gb:.2f} s ({produce_mb_s:.0f} MB/s), fetch {fetch_cpu_per_gb:.2f} s "
              "({fetch_mb_s:.0f} MB/s)".format(**gb), flush=True)
    if not args.no_write:
        write(args, prow, crow, gb, load0, os.getloadavg()[0])


def write(args, prow, crow, gb, load0, load1) -> None:
    lines = [f"\n## Cost as work grows (`python bench/bench_scale.py{' --quick' if args.quick else ''}`) — "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
             f"Machine: {platform.platform()}, {_cpu()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
             f"load average {load0:.1f} at the start, {load1:.1f} at the end. confluent-kafka {ck.version()}.\n"]
    if prow:
        one = prow[0]["rps"]
        java_one = prow[0]["java_rps"]
        lines += [f"Partitions: one topic of P partitions, {args.records:,} records of 100 B spread round-robin over "
                  "them, produced twice: as the Java producer shapes its requests (batch.size 16 KiB per partition, "
                  "one batch per partition per request, 1 MiB requests, 5 in flight, acks=all; sent by the bench's "
                  "own asyncio client), and by confluent-kafka (librdkafka sends one partition per request, "
                  "linger.ms=5, acks=all).\n",
                  "| partitions | create s | RSS MiB | KiB per idle partition | idle CPU | Java-shaped rec/s "
                  "| vs 1 partition | broker CPU-us per record | librdkafka rec/s | vs 1 partition "
                  "| broker CPU-us per record | open fds | clean stop s | start after clean stop s | start after crash s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in prow:
            lines.append(f"| {r['partitions']:,} | {r['create_s']:.1f} | {r['rss_mib']:.0f} | {r['kib_per_partition']:.1f} "
                         f"| {r['idle_cpu']:.1%} "
                         f"| {r['java_rps']:,.0f} | {r['java_rps'] / java_one:.2f} | {r['java_cpu_us']:.2f} "
                         f"| {r['rps']:,.0f} | {r['rps'] / one:.2f} | {r['librdkafka_cpu_us']:.2f} | {r['fds']:,} "
                         f"| {r['stop_s']:.2f} | {r['clean_start']:.2f} | {r['crash_start']:.2f} |")
    if crow:
        lines += ["", f"Connections: N connections, each a closed loop of Produce v3 (acks=1, 100 records of 100 B) for "
                      f"{args.seconds:.0f} s, one asyncio client process.\n",
                  "| connections | rec/s | requests | p50 ms | p99 ms | broker CPU | broker RSS MiB |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in crow:
            lines.append(f"| {r['connections']:,} | {r['rps']:,.0f} | {r['requests']:,} | {r['p50_ms']:.2f} "
                         f"| {r['p99_ms']:.2f} | {r['broker_cpu']:.0%} | {r['rss_mib']:.0f} |")
    if gb:
        each = ", ".join(f"{r['produce_cpu_per_gb']:.2f}/{r['fetch_cpu_per_gb']:.2f}" for r in gb["runs"])
        lines += ["", f"Broker CPU per GB ({gb['gb']:.2f} GB of 1 KiB records, 4 partitions, confluent-kafka, median of "
                      f"3 fresh brokers): **{gb['produce_cpu_per_gb']:.2f} CPU-s per GB produced** "
                      f"({gb['produce_mb_s']:.0f} MB/s), **{gb['fetch_cpu_per_gb']:.2f} CPU-s per GB fetched** "
                      f"({gb['fetch_mb_s']:.0f} MB/s); each run produce/fetch: {each}."]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"appended to {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
