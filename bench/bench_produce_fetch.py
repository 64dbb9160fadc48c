"""Produce/fetch throughput and produce latency of a real `kompakt serve`, driven by confluent-kafka.

    python bench/bench_produce_fetch.py [--quick] [--profile OUT.prof] [--no-write]
    python bench/bench_produce_fetch.py --keyed [--rounds 3] [--codecs none,lz4,zstd]
    python bench/bench_produce_fetch.py --startup [--rounds 5]

Measures, against a broker subprocess on a fresh log dir:
  * start-up: process start to the first Metadata answer; idle RSS after start-up;
  * produce throughput (records/s, MB/s) for 100 B and 1 KiB records, 1 and 4 partitions,
    acks=1 and acks=all (librdkafka defaults otherwise: linger 5 ms, batches up to 1 MB, no compression);
  * fetch throughput reading those topics back from offset 0, twice: with the consumer settings
    below, and again with `fetch.queue.backoff.ms=10` (librdkafka idles a second whenever its
    queue holds 100 000 records, which a fast broker makes it do every ~0.1 s of 100 B records);
  * produce latency p50/p99 with acks=all at a fixed 5,000 msg/s (linger.ms=0);
and, for scale, this machine's loopback TCP and sequential disk write/read rates.
`--keyed` measures instead keyed produce (100 B values, 200 K distinct keys, acks=all, one
partition, linger 5 ms) into a `cleanup.policy=compact` topic against the same producer loop into
a `delete` topic, per codec, alternating the two in each round so load from other work hits both
alike; the ratio compact / delete is the figure (Kafka 4.0: 308-385 K rec/s keyed into compact).
`--startup` measures only start-up and idle RSS, `--rounds` times, with the admin listener on
(as `kompakt serve` runs by default, so the web console is mounted): process start to the first
Metadata answer and RSS 2 s later, then RSS again after the console's first page and first chart
(what loading Jinja2 and matplotlib costs once someone uses it); medians.
Results go to stdout and, unless --no-write, a dated section appended to bench/RESULTS.md.
`--profile` runs the broker under cProfile (the event loop thread) and writes the stats file.
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka as ck

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Metadata v1 request for all topics: size, key 3, version 1, correlation 1, client "b", topics null
_METADATA = struct.pack(">ihhih1si", 15, 3, 1, 1, 1, b"b", -1)


def metadata_answered(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(_METADATA)
            return len(s.recv(8)) >= 8
    except OSError:
        return False


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Broker:
    def __init__(self, profile: str | None, extra: tuple[str, ...] = ()):
        """`extra`: more `key=value` overrides, after (so over) the defaults here; `{port}` in one
        stands for the PLAINTEXT port this broker picked."""
        self.dir = tempfile.mkdtemp(prefix="kompakt-bench-")
        self.port = free_port()
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "kompakt", "serve", "--log-level", "WARNING",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.dir}/data", "--override", "metrics.port=0",
                "--override", "num.partitions=1", "--override", "offsets.topic.num.partitions=1"]
        for item in extra:
            cmd += ["--override", item.replace("{port}", str(self.port))]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/broker.log", "wb"))
        while not metadata_answered(self.port):
            if self.proc.poll() is not None:
                raise SystemExit(f"broker died: {Path(self.dir, 'broker.log').read_text()}")
            time.sleep(0.01)
        self.startup_s = time.monotonic() - t0
        self.bootstrap = f"127.0.0.1:{self.port}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)


def startup(args) -> None:
    """--startup: start-up time and idle RSS with the admin listener (and so the console) on."""
    import urllib.error
    import urllib.request
    runs = []
    load0 = os.getloadavg()[0]
    for _ in range(args.rounds):
        admin = free_port()
        broker = Broker(None, (f"metrics.port={admin}",))
        start_cpu = cpu_s(broker.proc.pid)      # CPU to get ready: a start-up figure other load barely moves
        try:
            time.sleep(2.0)
            idle = rss_mib(broker.proc.pid)
            t0 = time.monotonic()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/console/broker", timeout=60).read()
                first_page = time.monotonic() - t0
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/console/charts/passes.png", timeout=60).read()
                used = rss_mib(broker.proc.pid)
            except urllib.error.HTTPError:        # a build without the console (a baseline run)
                first_page = used = float("nan")
        finally:
            broker.stop()
        runs.append((broker.startup_s, idle, first_page, used, start_cpu))
        print(f"start-up {broker.startup_s:.2f} s ({start_cpu:.2f} CPU-s), idle RSS {idle:.1f} MiB; console first page {first_page:.2f} s, "
              f"RSS after a page and a chart {used:.0f} MiB", flush=True)
    med = [statistics.median(col) for col in zip(*runs)]
    print(f"median of {len(runs)}: start-up {med[0]:.2f} s ({med[4]:.2f} CPU-s), idle RSS {med[1]:.1f} MiB, console first page "
          f"{med[2]:.2f} s, RSS after a page and a chart {med[3]:.0f} MiB")
    if args.no_write:
        return
    lines = [f"\n## Start-up and idle RSS with the admin listener on, {time.strftime('%Y-%m-%d %H:%M')} "
             f"({_cpu()}, {os.cpu_count()} cores)\n",
             f"`python bench/bench_produce_fetch.py --startup --rounds {args.rounds}`; median of {len(runs)} runs; "
             f"load average {load0:.1f} at the start (the machine was shared with other work).\n",
             f"- start-up to first Metadata answer: {med[0]:.2f} s ({med[4]:.2f} s of the broker's CPU); "
             f"idle RSS {med[1]:.1f} MiB",
             f"- the console's first page: {med[2]:.2f} s (Jinja2 loads); RSS after one page and one chart "
             f"(matplotlib loads): {med[3]:.0f} MiB", ""]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(lines))
    print(f"appended to {HERE / 'RESULTS.md'}")


def keyed(args) -> None:
    """--keyed: compact vs delete topics, same keyed producer loop (see the module docstring)."""
    import random
    n = 200_000 if args.quick else 1_000_000
    keys = [b"key-%08d" % (i % 200_000) for i in range(n)]
    random.Random(7).shuffle(keys)
    codecs = args.codecs.split(",")
    broker = Broker(args.profile)
    res: dict = {}
    load0 = os.getloadavg()[0]
    try:
        for rnd in range(args.rounds):
            for codec in codecs:
                for policy in ("delete", "compact") if rnd % 2 == 0 else ("compact", "delete"):
                    topic = f"keyed-{policy}-{codec}-{rnd}"
                    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": policy})
                    c0 = cpu_s(broker.proc.pid)
                    secs = produce(broker.bootstrap, topic, n, 100, "all", keys, codec)
                    cpu = cpu_s(broker.proc.pid) - c0
                    res.setdefault((codec, policy), []).append((n / secs, cpu / n * 1e6))
                    print(f"round {rnd} {codec:5} {policy:8} {n / secs:>10,.0f} rec/s  broker {cpu / n * 1e6:.2f} "
                          f"CPU-us/record", flush=True)
    finally:
        broker.stop()
        import shutil
        shutil.rmtree(broker.dir, ignore_errors=True)   # 18 M records: gigabytes
    load1 = os.getloadavg()[0]
    rows = []
    for codec in codecs:
        d = sorted(r for r, _ in res[(codec, "delete")])
        c = sorted(r for r, _ in res[(codec, "compact")])
        ratios = [cr / dr for (cr, _), (dr, _) in zip(res[(codec, "compact")], res[(codec, "delete")])]
        cpu_c = statistics.median(u for _, u in res[(codec, "compact")])
        cpu_d = statistics.median(u for _, u in res[(codec, "delete")])
        rows.append((codec, statistics.median(c), min(c), statistics.median(d), statistics.median(ratios),
                     min(ratios), cpu_c, cpu_d, statistics.median(c) / 385_000, statistics.median(c) / 308_000))
    text = ["| codec | compact rec/s (median / min) | delete rec/s (median) | compact / delete (median / min) "
            "| broker CPU-us per record compact / delete | vs Kafka 385 K / 308 K |",
            "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        text.append(f"| {r[0]} | {r[1]:,.0f} / {r[2]:,.0f} | {r[3]:,.0f} | {r[4]:.2f} / {r[5]:.2f} "
                    f"| {r[6]:.2f} / {r[7]:.2f} | {r[8]:.2f}x / {r[9]:.2f}x |")
    print("\n".join(text))
    if args.no_write:
        return
    head = [f"\n## Keyed produce into a compacted topic (`python bench/bench_produce_fetch.py --keyed"
            f"{' --quick' if args.quick else ''} --rounds {args.rounds}`) — "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
            f"Machine: {platform.platform()}, {_cpu()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
            f"load average {load0:.1f} at the start, {load1:.1f} at the end. confluent-kafka {ck.version()} / "
            f"librdkafka {ck.libversion()[0]}: {n:,} records of 100 B over 200,000 keys per run, acks=all, "
            f"linger.ms=5, one partition, the producer's compression.type per row; each round runs compact "
            f"and delete back to back (order alternating), {args.rounds} rounds. Record checks: "
            f"{_seam()} seam.\n"]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(head + text) + "\n")
    print(f"appended to {HERE / 'RESULTS.md'}")


def _seam() -> str:
    sys.path.insert(0, str(HERE.parent))
    from kompakt import native
    return native.implementation()


def produce(bootstrap, topic, n, size, acks, keys=None, codec="none", conf=None):
    """Seconds to produce n values of `size` bytes (keyed by `keys[i]` when given, pre-built so the
    loop is the client's own cost); `conf` adds client settings (TLS, SASL: bench_security.py)."""
    value = os.urandom(size)
    p = ck.Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "compression.type": codec,
                     "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                     "enable.idempotence": False})
    t0 = time.perf_counter()
    for i in range(n):
        key = keys[i] if keys is not None else None
        while True:
            try:
                p.produce(topic, value, key)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


# librdkafka (2.4+) stops fetching a partition for fetch.queue.backoff.ms (1000 ms) whenever its
# local queue holds queued.min.messages (100 000): a broker that answers faster than the
# application drains the queue trips it every ~100 K records (with 100 B records: a second idle
# per ~0.1 s of work). The second fetch figure shortens that back-off to show the broker's rate.
SHORT_QUEUE_BACKOFF = {"fetch.queue.backoff.ms": 10}


def fetch(bootstrap, topic, partitions, n, conf=None, group_suffix=""):
    c = ck.Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": f"bench-{topic}{group_suffix}",
                     "enable.auto.commit": False,
                     "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                     "queued.max.messages.kbytes": 1_048_576})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        msgs = c.consume(10_000, 5.0)
        if not msgs:
            raise SystemExit(f"fetch stalled at {got}/{n}")
        got += len(msgs)
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def latency(bootstrap, topic, rate, seconds):
    lat = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False})

    def done(err, msg, t0):
        lat.append(time.perf_counter() - t0)

    value = os.urandom(100)
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            p.poll(max(0.0, min(0.0005, target - now)))
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda err, msg, t0=t0: done(err, msg, t0))
        p.poll(0)
    p.flush(30)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000, len(lat)


def loopback_mb_s(seconds=1.5):
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    total = [0]

    def sink():
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        while (n := conn.recv_into(buf)):
            total[0] += n

    t = threading.Thread(target=sink)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    chunk = b"x" * (1 << 20)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        c.sendall(chunk)
    c.close()
    t.join()
    srv.close()
    return total[0] / (time.perf_counter() - t0) / 1e6


def disk_mb_s(path, size=256 << 20):
    chunk = os.urandom(1 << 20)
    fn = os.path.join(path, "disk.bench")
    t0 = time.perf_counter()
    with open(fn, "wb") as f:
        for _ in range(size >> 20):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    write = size / (time.perf_counter() - t0) / 1e6
    t0 = time.perf_counter()
    with open(fn, "rb") as f:
        while f.read(1 << 20):
            pass
    read = size / (time.perf_counter() - t0) / 1e6      # page cache, as a broker's fetches mostly are
    os.unlink(fn)
    return write, read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer records (a smoke run)")
    ap.add_argument("--profile", metavar="OUT.prof", help="run the broker under cProfile")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--keyed", action="store_true", help="keyed produce: compact vs delete topics")
    ap.add_argument("--rounds", type=int, default=3, help="--keyed: rounds of every codec; --startup: broker starts")
    ap.add_argument("--startup", action="store_true", help="only start-up time and idle RSS (admin listener on)")
    ap.add_argument("--codecs", default="none,lz4,zstd", help="--keyed: producer compression types")
    args = ap.parse_args()
    if args.keyed:
        return keyed(args)
    if args.startup:
        return startup(args)
    scale = 0.1 if args.quick else 1.0

    broker = Broker(args.profile)
    time.sleep(2.0)
    idle_rss = rss_mib(broker.proc.pid)
    print(f"startup to first Metadata: {broker.startup_s:.2f} s; idle RSS {idle_rss:.0f} MiB", flush=True)
    rows = []
    try:
        for size, n in ((100, int(1_000_000 * scale)), (1024, int(300_000 * scale))):
            for partitions in (1, 4):
                for acks in ("1", "all"):
                    topic = f"b{size}-p{partitions}-a{acks}"
                    create_topic(broker.bootstrap, topic, partitions)
                    c0 = cpu_s(broker.proc.pid)
                    pt = produce(broker.bootstrap, topic, n, size, acks)
                    c1 = cpu_s(broker.proc.pid)
                    ft = fetch(broker.bootstrap, topic, partitions, n)
                    c2 = cpu_s(broker.proc.pid)
                    ft_short = fetch(broker.bootstrap, topic, partitions, n, SHORT_QUEUE_BACKOFF, "-short")
                    row = (size, partitions, acks, n, n / pt, n * size / pt / 1e6, (c1 - c0) / pt * 100,
                           n / ft, n * size / ft / 1e6, (c2 - c1) / ft * 100, n / ft_short)
                    rows.append(row)
                    print("{:>5} B  p={}  acks={:<3}  {:>8} recs  produce {:>9,.0f} rec/s {:>7.1f} MB/s "
                          "(broker CPU {:>3.0f}%)   fetch {:>9,.0f} rec/s {:>7.1f} MB/s (broker CPU {:>3.0f}%)  "
                          "fetch.queue.backoff.ms=10: {:>9,.0f} rec/s"
                          .format(*row), flush=True)
        create_topic(broker.bootstrap, "latency", 1)
        p50, p99, count = latency(broker.bootstrap, "latency", 5000, 6 * max(scale, 0.5))
        print(f"acks=all latency at 5,000 msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({count} msgs)", flush=True)
        busy_rss = rss_mib(broker.proc.pid)
    finally:
        broker.stop()
    lo = loopback_mb_s()
    dw, dr = disk_mb_s(broker.dir)
    print(f"machine: loopback TCP {lo:,.0f} MB/s (one Python stream); disk write+fsync {dw:,.0f} MB/s, "
          f"read (page cache) {dr:,.0f} MB/s")
    if args.profile:
        print(f"profile written to {args.profile} (python -m pstats {args.profile})")
    if args.no_write:
        return
    lines = [f"\n## Produce/fetch through `kompakt serve` (protocol-server) — "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
             f"Machine: {platform.platform()}, {_cpu()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
             f"shared with other work while measured. `python bench/bench_produce_fetch.py{' --quick' if args.quick else ''}`; "
             f"confluent-kafka {ck.version()} / librdkafka {ck.libversion()[0]}, no compression, "
             f"linger.ms=5, idempotence off.\n",
             "| record | partitions | acks | records | produce rec/s | produce MB/s | broker CPU | fetch rec/s | fetch MB/s | broker CPU "
             "| fetch rec/s, `fetch.queue.backoff.ms=10` |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| {} B | {} | {} | {:,} | {:,.0f} | {:.1f} | {:.0f}% | {:,.0f} | {:.1f} | {:.0f}% | {:,.0f} |"
                     .format(*r))
    lines += ["",
              f"- acks=all produce latency at 5,000 msg/s (linger.ms=0, 100 B): p50 {p50:.2f} ms, p99 {p99:.2f} ms",
              f"- start-up to first Metadata answer: {broker.startup_s:.2f} s; idle RSS {idle_rss:.0f} MiB "
              f"(after the runs: {busy_rss:.0f} MiB)",
              f"- for scale: loopback TCP {lo:,.0f} MB/s (one Python stream), disk sequential write+fsync "
              f"{dw:,.0f} MB/s, read from page cache {dr:,.0f} MB/s",
              "- Kafka 4.0 on this machine (the bar): 627 K rec/s produce of 100 B, 186 MB/s with 1 KiB, fetch "
              "831 K rec/s, acks=all p99 9 ms at 5 K msg/s, first Metadata 3.8 s after start, 337 MiB idle RSS.", ""]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(lines))
    print(f"appended to {HERE / 'RESULTS.md'}")


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
