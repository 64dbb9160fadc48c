"""Produce/fetch throughput and produce latency of a real `kompakt serve`, driven by confluent-kafka.

    python bench/bench_produce_fetch.py [--quick] [--profile OUT.prof] [--no-write]
    python bench/bench_produce_fetch.py --only 1024:1:1,1024:1:all [--rounds 3] [--quick] [--no-write]
    python bench/bench_produce_fetch.py --keyed [--rounds 3] [--codecs none,lz4,zstd]
    python bench/bench_produce_fetch.py --startup [--rounds 5]
    python bench/bench_produce_fetch.py --contention [--quick] [--rounds 1] [--warm-passes 1] [--py-spy DIR] [--override KEY=VALUE]
    python bench/bench_produce_fetch.py --pipelined [--requests 20000] [--window 16] [--rounds 3]
    python bench/bench_produce_fetch.py --cores [--quick] [--rounds 2] [--override KEY=VALUE]
    python bench/bench_produce_fetch.py --flood [--rounds 3] [--override KEY=VALUE]
    python bench/bench_produce_fetch.py --latency [--rounds 3] [--warm-seconds 12] [--override KEY=VALUE]

Measures, against a broker subprocess on a fresh log dir:
  * start-up: process start to the first Metadata answer; idle RSS after start-up;
  * produce throughput (records/s, MB/s) for 100 B and 1 KiB records, 1 and 4 partitions,
    acks=1 and acks=all (librdkafka defaults otherwise: linger 5 ms, batches up to 1 MB, no compression);
    acks=all is durable (kompakt.durable.acks.enable, the default: answered once synced by the
    group commit), acks=1 is not, and each acks=all run follows its acks=1 twin, so the ratio
    acks=all / acks=1 (printed per record size and partition count) is what durability costs;
  * fetch throughput reading those topics back from offset 0, twice: with the consumer settings
    below, and again with `fetch.queue.backoff.ms=10` (librdkafka idles a second whenever its
    queue holds 100 000 records, which a fast broker makes it do every ~0.1 s of 100 B records);
  * produce latency p50/p99 with acks=all at a fixed 5,000 msg/s (linger.ms=0);
and, for scale, this machine's loopback TCP and sequential disk write/read rates. Each case's
topic is deleted once read back (here and in `--contention`: `drop_topic` says why).
`--keyed` measures instead keyed produce (100 B values, 200 K distinct keys, acks=all, one
partition, linger 5 ms) into a `cleanup.policy=compact` topic against the same producer loop into
a `delete` topic, per codec, alternating the two in each round so load from other work hits both
alike; the ratio compact / delete is the figure (Kafka 4.0: 308-385 K rec/s keyed into compact).
`--startup` measures only start-up and idle RSS, `--rounds` times, with the admin listener on
(as `kompakt serve` runs by default, so the web console is mounted): process start to the first
Metadata answer and RSS 2 s later, then RSS again after the console's first page and first chart
(what loading Jinja2 and matplotlib costs once someone uses it); medians.
`--contention` measures the same produce/fetch matrix (100 B and 1 KiB, 1 and 4 partitions, acks=1
and acks=all) while a fixed CPU load runs beside the broker: one busy-looping process pinned to
each core (`sched_setaffinity`), the same for every broker, started before and stopped after all
of them (`--no-busy-load`: none, for the same figures on an otherwise idle machine). Next to each
rate it reports the broker's CPU-seconds per GB of values produced and per GB
fetched: user + system time from /proc/<pid>/stat of the broker's whole process tree (the cleaner's
worker processes included; children already reaped count through cutime/cstime). Fetch reads with
`fetch.queue.backoff.ms=10` (the broker's rate, see SHORT_QUEUE_BACKOFF). With `KAFKA_HOME` set to
an unpacked Apache Kafka distribution (4.x, KRaft) it runs Kafka the same way, one single-node
broker+controller on a fresh log dir, alternating which broker goes first each round, so the
Kompakt / Kafka ratios come from one run; without it the mode says Kafka was not run and why.
A third broker runs the same matrix: bench/sink_broker.py, which stores nothing (Produce answered
at once, Fetch answered with the largest batch produced, replayed by sendfile): its rates are the
client's ceiling under the same load, and a second table sets each broker's rates against it,
with the client's CPU (this process, librdkafka's threads included) and the busy load's, in
cores, beside each: what a broker leaves of the two CPUs goes to the busy processes as much as to
the client (the scheduler gives each runnable thread its share), so a client at its share is the
limit, whatever the broker does. That table also adds the kernel's CPU outside the broker's process:
its threads' CPU during each phase (kthreadd's tree: flusher kworkers, softirq threads;
machine-wide, so it also holds what other work made them do) and, after each produce phase, the
CPU of writing back what the broker left dirty (the bench fsyncs every file of its log dir): a
broker that never syncs leaves its writeback to the kernel, one that syncs pays it in its own
threads, so only with it added do the two CPU figures count the same work.
Each broker first runs the whole case matrix `--warm-passes` times unmeasured (default 1): a JVM
compiles its hot code while it runs, and a cold Kafka spent 7-13 CPU-s per GB of 100 B produce
against 4-5 on its second pass (2026-11-28, RESULTS.md), so ratios against a cold Kafka flatter
us; Kompakt's second pass is no faster than its first.
`--py-spy DIR` samples the Kompakt broker (py-spy, a developer tool: `pip install py-spy`; it is no
dependency of the project) from after the warm-up to the end of the Kompakt part of the run and prints the top frames by own
time and by total time (DIR/kompakt-<time>.txt keeps the collapsed stacks).
Results go to stdout and, unless --no-write, a dated section appended to bench/RESULTS.md.
`--only SIZE:PARTITIONS:ACKS,...` runs only those produce/fetch cases, in that order, `--rounds`
times on the same broker (a fresh topic each time, so load from other work hits every case alike),
without the latency run; it prints each round's acks=all / acks=1 ratios and their medians, and
after each case where its acks=all waits went (the broker's kompakt_log_group_commit_* counters:
until their sync ended, then until the event loop ran the answer).
`--pipelined` measures instead the per-request path of one connection: raw Produce requests (v9,
one batch of 10 records of 100 B per partition, 1 or 4 partitions, acks=1 and acks=all) kept
`--window` in flight on ONE connection, `--requests` of them per run, `--rounds` runs each: the
broker's CPU time per request (from /proc, less sensitive to a shared machine than wall time) and
requests/s, medians. It is the figure the per-connection request order (broker/network/connection.py)
could cost.
`--cores` runs the broker under `taskset` on one CPU (the client on the other) and on both (the
client too), alternating each round. Produce is raw requests built once (so the client costs next
to nothing and the broker is the bottleneck): batches of 1,000 compressible 1 KiB records (about
3x) with acks=1, on 4 connections of one partition each, 4 requests in flight on each:
uncompressed, lz4 and zstd into a delete topic, zstd into a compacted topic (every record read:
decompressed) and lz4 into a topic whose compression.type is zstd (recompressed); each topic is
then read back with confluent-kafka. It reports broker CPU-s per GB, the rates, and how many cores
the broker kept busy while producing: the figure for validation beside the event loop
(storage/validation_pool.py), what a second core buys.
`--flood` measures what one busy log costs the others of its log dir under durable acks: acks=all
produce latency (p50/p99 at 5,000 msg/s of 100 B, one partition) alone, then while another
process floods a second topic of the same log dir with acks=1 1 KiB records (a large unsynced
backlog that the same group commit syncs), alternating, `--rounds` times.
`--latency` runs only the acks=all latency part (p50/p99 at 5,000 msg/s of 100 B, linger.ms=0, one
partition, 6 s a round after `--warm-seconds` of the same load unmeasured, default 12), `--rounds`
times on one broker, and after each round where the waits went (the broker's
kompakt_log_group_commit_* counters, means per wait: from its registration until the round that
answered it started, that round's sync, and from there until the event loop answered it; a broker
without the queue figure shows 0 for the first part). With `KAFKA_HOME` set it does the same
against Apache Kafka (warmed the same way: a cold Kafka's first 6 s gave p50 27 ms / p99 601 ms,
its next ones 0.2 ms / 3-12 ms), one broker after the other, and prints both.
`--profile` runs the broker under cProfile (the event loop thread) and writes the stats file.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
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


class _BrokerProcess:
    """A broker the benchmark runs: `launch` starts it (stderr to broker.log in its dir), waits
    until it answers Metadata and times that (`startup_s`); `stop` ends it."""
    dir: str
    port: int

    def launch(self, cmd: list[str], name: str, poll_s: float) -> None:
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/broker.log", "wb"))
        while not metadata_answered(self.port):
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} died: {Path(self.dir, 'broker.log').read_text()[-2000:]}")
            time.sleep(poll_s)
        self.startup_s = time.monotonic() - t0
        self.bootstrap = f"127.0.0.1:{self.port}"

    def stop(self):
        """End the broker and remove its directory: a run leaves gigabytes of segments, and runs
        that kept theirs once filled this machine's /tmp (117 of them, 69 GB)."""
        self.proc.terminate()
        self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


class Broker(_BrokerProcess):
    def __init__(self, profile: str | None, extra: tuple[str, ...] = (), prefix: tuple[str, ...] = ()):
        """`extra`: more `key=value` overrides, after (so over) the defaults here; `{port}` in one
        stands for the PLAINTEXT port this broker picked. `prefix`: a command the broker runs
        under (`taskset -c 0`: it execs, so the pid is the broker's)."""
        self.dir = tempfile.mkdtemp(prefix="kompakt-bench-")
        self.port = free_port()
        cmd = [*prefix, sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "kompakt", "serve", "--log-level", "WARNING",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.dir}/data", "--override", "metrics.port=0",
                "--override", "num.partitions=1", "--override", "offsets.topic.num.partitions=1",
                "--override", f"log.segment.delete.delay.ms={DELETE_DELAY_MS}"]      # (drop_topic)
        for item in extra:
            cmd += ["--override", item.replace("{port}", str(self.port))]
        self.launch(cmd, "Kompakt", poll_s=0.01)


# log.segment.delete.delay.ms of both brokers here: short, so drop_topic waits little, but not 0:
# Kafka's delete task, with nothing to delete, runs again after max(delay, 1) ms (LogManager's
# deleteLogs), so 0 would wake a Kafka thread 1,000 times a second through every measured phase.
DELETE_DELAY_MS = 100


def drop_topic(broker, name: str, timeout: float = 60.0) -> None:
    """Delete topic `name` and wait until its partition directories are gone from the broker's log
    dir (both brokers here delete a deleted topic's files DELETE_DELAY_MS after the request).

    Why: on this project's VM the host backs guest memory lazily and takes back what the guest
    frees (virtio-balloon free page reporting), so page cache that grows into memory not used
    lately costs ~3 CPU-s per GB of sys time in whoever writes it (the copy into the page cache
    runs at ~0.33 GB/s instead of ~4: bench/RESULTS.md, 2026-11-29 02:05). A run that kept every
    phase's data would make its later produce phases pay that, whichever broker is measured then;
    a machine whose memory is all in use recycles its page cache and never pays it."""
    import re
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})     # (held: its futures die with it)
    admin.delete_topics([name])[name].result(30)
    data = Path(broker.dir, "data")
    mine = re.compile(re.escape(name) + r"-\d+($|\.)")
    deadline = time.monotonic() + timeout
    while any(mine.match(e) for e in os.listdir(data)):
        if time.monotonic() > deadline:
            raise SystemExit(f"the files of deleted topic {name} are still in {data} after {timeout:g} s")
        time.sleep(0.05)


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
    lines = [f"\n## Start-up and idle RSS with the admin listener on, {time.strftime('%Y-%m-%d %H:%M')} "
             f"({_cpu()}, {os.cpu_count()} cores)\n",
             f"`python bench/bench_produce_fetch.py --startup --rounds {args.rounds}`; median of {len(runs)} runs; "
             f"load average {load0:.1f} at the start (the machine was shared with other work).\n",
             f"- start-up to first Metadata answer: {med[0]:.2f} s ({med[4]:.2f} s of the broker's CPU); "
             f"idle RSS {med[1]:.1f} MiB",
             f"- the console's first page: {med[2]:.2f} s (Jinja2 loads); RSS after one page and one chart "
             f"(matplotlib loads): {med[3]:.0f} MiB", ""]
    _write_results(args, "\n".join(lines))


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
    table = _table(["codec", "compact rec/s (median / min)", "delete rec/s (median)", "compact / delete (median / min)",
                    "broker CPU-us per record compact / delete", "vs Kafka 385 K / 308 K"], "lrrrrr",
                   [[r[0], f"{r[1]:,.0f} / {r[2]:,.0f}", f"{r[3]:,.0f}", f"{r[4]:.2f} / {r[5]:.2f}",
                     f"{r[6]:.2f} / {r[7]:.2f}", f"{r[8]:.2f}x / {r[9]:.2f}x"] for r in rows])
    print("\n".join(table))
    _write_results(args, _results_section(
        f"Keyed produce into a compacted topic ({_command('--keyed', args)})",
        f"load average {load0:.1f} at the start, {load1:.1f} at the end. confluent-kafka {ck.version()} / "
        f"librdkafka {ck.libversion()[0]}: {n:,} records of 100 B over 200,000 keys per run, acks=all, "
        f"linger.ms=5, one partition, the producer's compression.type per row; each round runs compact "
        f"and delete back to back (order alternating), {args.rounds} rounds. Record checks: "
        f"{_seam()} seam.", table))


def _produce_request(topic: str, partitions: int, acks: int) -> bytes:
    """One framed Produce v9 request: a batch of 10 records of 100 B to each partition."""
    from kafka.protocol.producer.produce import ProduceRequest
    sys.path.insert(0, str(HERE.parent))
    from kompakt.protocol.records import build_batch
    batch = build_batch([(None, os.urandom(100)) for _ in range(10)])
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=i, records=batch) for i in range(partitions)])])
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(header=True, framed=True))


def _read_exactly(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise SystemExit("broker closed the connection")
        out += chunk
    return bytes(out)


def _pipeline_run(port: int, request: bytes, n: int, window: int) -> float:
    """Send n copies of `request` on one connection, `window` in flight; seconds taken."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        sent = min(window, n)
        sock.sendall(request * sent)
        for _ in range(n):
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            _read_exactly(sock, size)
            if sent < n:
                sock.sendall(request)
                sent += 1
        return time.perf_counter() - t0


def pipelined(args) -> None:
    """--pipelined: see the module docstring."""
    broker = Broker(args.profile)
    load0 = os.getloadavg()[0]
    rows = []
    try:
        for partitions in (1, 4):
            for acks in (1, -1):
                topic = f"pipe-p{partitions}-a{acks}"
                create_topic(broker.bootstrap, topic, partitions)
                request = _produce_request(topic, partitions, acks)
                _pipeline_run(broker.port, request, min(1000, args.requests), args.window)   # warm-up
                cpu_us, rates = [], []
                for _ in range(args.rounds):
                    c0 = cpu_s(broker.proc.pid)
                    secs = _pipeline_run(broker.port, request, args.requests, args.window)
                    cpu_us.append((cpu_s(broker.proc.pid) - c0) / args.requests * 1e6)
                    rates.append(args.requests / secs)
                row = (partitions, "1" if acks == 1 else "all", statistics.median(cpu_us), min(cpu_us),
                       statistics.median(rates))
                rows.append(row)
                print("p={} acks={:<3} broker CPU per request: median {:.1f} us (min {:.1f}); {:,.0f} requests/s"
                      .format(*row), flush=True)
    finally:
        broker.stop()
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"{args.rounds} runs of {args.requests:,} requests, {args.window} in flight")


def _seam() -> str:
    sys.path.insert(0, str(HERE.parent))
    from kompakt import native
    return native.implementation()


def produce(bootstrap, topic, n, size, acks, keys=None, codec="none", conf=None, values=None):
    """Seconds to produce n values of `size` bytes (keyed by `keys[i]` when given, pre-built so the
    loop is the client's own cost); `conf` adds client settings (TLS, SASL: bench_security.py);
    `values`: produce these in turn instead of one random value."""
    value = os.urandom(size)
    p = ck.Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "compression.type": codec,
                     "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                     "enable.idempotence": False})
    t0 = time.perf_counter()
    for i in range(n):
        key = keys[i] if keys is not None else None
        if values is not None:
            value = values[i % len(values)]
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
    """acks=all produce latency, p50/p99 in ms and the count, of `rate` messages/s of 100 B for
    `seconds` (linger.ms=0). Each latency is librdkafka's own (Message.latency(): from produce()
    until the broker's answer arrived), so when the client next polls does not count. Between
    sends the client blocks: poll(1 ms) while a millisecond or more is left, a sleep for the rest
    (librdkafka takes whole milliseconds, so the poll(0.0005) this used before was a poll(0): the
    client spun a whole core of the two it shares with the broker)."""
    lat = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False})

    def done(err, msg):
        if err is None and msg.latency() is not None:
            lat.append(msg.latency())

    value = os.urandom(100)
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        target = start + i / rate
        while (wait := target - time.perf_counter()) > 0:
            if wait >= 0.001:
                p.poll(0.001)
            else:
                time.sleep(wait)
        p.produce(topic, value, on_delivery=done)
        p.poll(0)
    p.flush(30)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000, len(lat)


def _flood_producer(bootstrap: str, topic: str, stop, sent) -> None:
    """--flood's second process: acks=1 1 KiB records as fast as it can until `stop` is set."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "enable.idempotence": False,
                     "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    value = os.urandom(1024)
    n = 0
    while not stop.is_set():
        for _ in range(10_000):
            try:
                p.produce(topic, value)
                n += 1
            except BufferError:
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    sent.value = n


def flood(args) -> None:
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")    # librdkafka's threads do not survive a fork
    broker = Broker(None, tuple(args.override))
    load0 = os.getloadavg()[0]
    seconds = 4.0
    rows = []
    try:
        create_topic(broker.bootstrap, "latency", 1)
        create_topic(broker.bootstrap, "flood", 1)
        latency(broker.bootstrap, "latency", 5000, 1.0)                  # warm-up
        for rnd in range(max(args.rounds, 1)):
            alone = latency(broker.bootstrap, "latency", 5000, seconds)
            stop, sent = ctx.Event(), ctx.Value("q", 0)
            proc = ctx.Process(target=_flood_producer, args=(broker.bootstrap, "flood", stop, sent))
            proc.start()
            time.sleep(1.5)                                               # the flood is running
            t0 = time.perf_counter()
            beside = latency(broker.bootstrap, "latency", 5000, seconds)
            stop.set()
            proc.join(180)
            flood_s = time.perf_counter() - t0 + 1.5
            rows.append((alone, beside, sent.value / flood_s))
            print(f"round {rnd}: acks=all latency alone p50 {alone[0]:.2f} ms p99 {alone[1]:.2f} ms; beside an acks=1 "
                  f"flood of ~{sent.value / flood_s:,.0f} rec/s of 1 KiB: p50 {beside[0]:.2f} ms p99 {beside[1]:.2f} ms",
                  flush=True)
    finally:
        broker.stop()
    med = lambda xs: statistics.median(xs)     # noqa: E731
    print(f"medians: alone p50 {med([r[0][0] for r in rows]):.2f} ms p99 {med([r[0][1] for r in rows]):.2f} ms; "
          f"beside the flood p50 {med([r[1][0] for r in rows]):.2f} ms p99 {med([r[1][1] for r in rows]):.2f} ms; "
          f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


def latency_only(args) -> None:
    """`--latency`: the acks=all latency run alone, `--rounds` times, with the group commit's
    figures; Kafka's too when KAFKA_HOME is set (module docstring)."""
    kafka_home, kafka_note = _kafka_to_run()
    names = ["kompakt"] + (["kafka"] if kafka_home else [])
    load0 = os.getloadavg()[0]
    rows: dict = {name: [] for name in names}
    table_rows = []
    for name in names:
        metrics_port = free_port()
        broker = (Broker(None, tuple(args.override) + (f"metrics.port={metrics_port}",)) if name == "kompakt"
                  else KafkaBroker(kafka_home))
        try:
            create_topic(broker.bootstrap, "latency", 1)
            latency(broker.bootstrap, "latency", 5000, max(args.warm_seconds, 1.0))    # warm-up
            for rnd in range(max(args.rounds, 1)):
                g0 = _group_commit_figures(metrics_port) if name == "kompakt" else {}
                p50, p99, count = latency(broker.bootstrap, "latency", 5000, 6.0)
                rows[name].append((p50, p99))
                line = f"{name} round {rnd}: acks=all at 5,000 msg/s p50 {p50:.2f} ms p99 {p99:.2f} ms ({count} msgs)"
                commit_cells = ["-"] * 4
                if name == "kompakt":
                    g1 = _group_commit_figures(metrics_port)
                    d = {k: g1.get(k, 0) - g0.get(k, 0) for k in g1}
                    acks, rounds = max(d.get("acks", 0), 1), max(d.get("rounds", 0), 1)
                    commit_cells = [f"{d.get('acks', 0) / rounds:.1f}", f"{d.get('queue_seconds', 0) / acks * 1000:.2f}",
                                    f"{(d.get('wait_seconds', 0) - d.get('queue_seconds', 0)) / acks * 1000:.2f}",
                                    f"{d.get('answer_lag_seconds', 0) / acks * 1000:.2f}"]
                    line += (f"; group commit: {d.get('rounds', 0):,.0f} rounds, {commit_cells[0]} waits a "
                             f"round, {d.get('round_seconds', 0) / rounds * 1000:.2f} ms a round; a wait: "
                             f"{commit_cells[1]} ms until its round started + {commit_cells[2]} ms its sync + "
                             f"{commit_cells[3]} ms until the loop answered (means)")
                print(line, flush=True)
                table_rows.append([name, rnd, f"{p50:.2f}", f"{p99:.2f}", *commit_cells])
        finally:
            broker.stop()
    for name in names:
        print(f"medians {name}: p50 {statistics.median(r[0] for r in rows[name]):.2f} ms "
              f"p99 {statistics.median(r[1] for r in rows[name]):.2f} ms", flush=True)
    print(f"Kafka: {KafkaBroker.describe(kafka_home)}" if kafka_home else kafka_note)
    load1 = os.getloadavg()[0]
    print(f"load average {load0:.1f} at the start, {load1:.1f} at the end")
    table = _table(["broker", "round", "p50 ms", "p99 ms", "waits a round", "until its round started, ms",
                    "its sync, ms", "until the loop answered, ms"], "lrrrrrrr", table_rows)
    _write_results(args, _results_section(
        f"acks=all latency at 5,000 msg/s ({_command('--latency', args)})",
        f"load average {load0:.1f} at the start, {load1:.1f} at the end. confluent-kafka {ck.version()} / librdkafka "
        f"{ck.libversion()[0]}, acks=all, linger.ms=0, 100 B values, 6 s a round after {max(args.warm_seconds, 1.0):g} s "
        f"of the same load unmeasured; the group commit's columns are means per answered wait (Kompakt's metrics). "
        f"{'Kafka: ' + KafkaBroker.describe(kafka_home) + '.' if kafka_home else kafka_note + '.'}"
        f"{' Kompakt settings: ' + ', '.join(args.override) + '.' if args.override else ''}", table))


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


# -- --contention: a fixed CPU load beside the broker, CPU per GB, Kompakt and (given) Kafka ------

def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and every live descendant: each thread's time on a CPU in nanoseconds
    (/proc/<pid>/task/<tid>/schedstat: /proc/<pid>/stat counts in clock ticks, 10 ms, too coarse
    for a case's 0.1-0.3 s), plus the user + system time of children already reaped (stat's
    cutime/cstime: a cleaner worker that exited still counts). Threads that exited are not seen;
    the broker's are long-lived (the loop, the to_thread pool, the flushers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue                             # exited while we looked
            parents[int(entry.name)] = (int(fields[1]), int(fields[13]) + int(fields[14]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in parents.items():
        children.setdefault(ppid, []).append(pid)
    ns, ticks, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        if pid not in parents:
            continue
        ticks += parents[pid][1]
        todo.extend(children.get(pid, ()))
        try:
            for task in os.scandir(f"/proc/{pid}/task"):
                try:
                    ns += int(Path(task.path, "schedstat").read_text().split()[0])
                except OSError:
                    pass
        except OSError:
            pass
    return ns / 1e9 + ticks / tick


def loop_thread_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread, in nanoseconds' precision (schedstat): Kompakt's
    event loop (`kompakt serve` runs it on the main thread). The rest of the tree's CPU is off the
    loop: the group-commit flushers' fdatasyncs (and the page writeback the kernel does inside
    them), the log writers, the validation pool, cleaner workers."""
    try:
        return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9
    except OSError:
        return 0.0


def start_busy_load() -> list[subprocess.Popen]:
    """One busy-looping process pinned to each core: the fixed load every broker competes with."""
    procs = []
    for cpu in sorted(os.sched_getaffinity(0)):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]))
    return procs


class KafkaBroker(_BrokerProcess):
    """Apache Kafka from $KAFKA_HOME: one KRaft broker+controller on a fresh log dir, plaintext."""

    def __init__(self, home: str):
        self.dir = tempfile.mkdtemp(prefix="kafka-bench-")
        self.port, controller = free_port(), free_port()
        props = Path(self.dir, "server.properties")
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={self.dir}/data", "num.partitions=1", "offsets.topic.num.partitions=1",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0",
            f"log.segment.delete.delay.ms={DELETE_DELAY_MS}", ""]))      # (drop_topic)
        bin_dir = Path(home, "bin")
        cluster = subprocess.run([str(bin_dir / "kafka-storage.sh"), "random-uuid"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        subprocess.run([str(bin_dir / "kafka-storage.sh"), "format", "-t", cluster, "-c", str(props)],
                       check=True, capture_output=True)
        self.launch([str(bin_dir / "kafka-server-start.sh"), str(props)], "Kafka", poll_s=0.1)

    @staticmethod
    def describe(home: str) -> str:
        """Which Kafka ran, for the results: the version and commit its clients jar carries
        (kafka/kafka-version.properties, what the broker logs at start-up) and the JVM's version;
        a ratio against an unnamed build says little."""
        import zipfile
        props = {}
        for jar in sorted(Path(home, "libs").glob("kafka-clients-*.jar")):
            with zipfile.ZipFile(jar) as zf:
                text = zf.read("kafka/kafka-version.properties").decode("latin-1")
            props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        jvm = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.splitlines()
        return (f"Apache Kafka {props.get('version', '(version unknown)')} (commit {props.get('commitId', '?')}) "
                f"from KAFKA_HOME on {jvm[0] if jvm else 'an unknown JVM'}, heap "
                f"{os.environ.get('KAFKA_HEAP_OPTS') or '-Xmx1G -Xms1G (kafka-server-start.sh default)'}")


class SinkBroker(_BrokerProcess):
    """bench/sink_broker.py: a broker that stores nothing, for the client's ceiling (--contention)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kompakt-sink-")
        self.port = free_port()
        self.launch([sys.executable, str(HERE / "sink_broker.py"), "--port", str(self.port)], "the sink broker",
                    poll_s=0.01)


def _busy_cpu_s(busy: list) -> float:
    """CPU seconds the busy-load processes have used (clock ticks: they run for seconds)."""
    return sum(cpu_s(p.pid) for p in busy)


def client_cpu_s() -> float:
    """This process's CPU seconds, every thread: the client's Python loop and librdkafka's."""
    t = os.times()
    return t.user + t.system


def writeback_cpu_s(data_dir: Path) -> float:
    """Write back what a broker left dirty in `data_dir` (fsync every file in it) and return the
    CPU that took, this thread's and the kernel threads': the writeback a broker that does not
    sync leaves to the kernel, counted to the phase that made it (a broker that syncs has paid
    it already, in its own threads)."""
    t0, k0 = time.thread_time(), kernel_threads_cpu_s()
    for root, _, files in os.walk(data_dir):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue                             # deleted meanwhile
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
    return time.thread_time() - t0 + kernel_threads_cpu_s() - k0


def kernel_threads_cpu_s() -> float:
    """CPU seconds of the kernel's own threads (kthreadd's tree: page writeback by the flusher
    kworkers, softirq threads), for the CPU a broker makes the kernel spend outside its process:
    a broker that never syncs has its dirty pages written back there, one that syncs does it in
    its own threads."""
    return tree_cpu_s(2)


def _kafka_to_run() -> tuple[str | None, str]:
    """KAFKA_HOME when it holds a Kafka to run beside Kompakt, else None and the note saying why
    not (--contention, --latency)."""
    home = os.environ.get("KAFKA_HOME")
    if home and Path(home, "bin", "kafka-server-start.sh").exists():
        return home, ""
    note = ("Kafka not run: KAFKA_HOME is not set" if not home else
            f"Kafka not run: KAFKA_HOME={home} has no bin/kafka-server-start.sh")
    return None, note + (" (set it to an unpacked Apache Kafka 4.x distribution, e.g. kafka_2.13-4.0.0, with a "
                         "JDK on PATH, to get Kompakt / Kafka ratios from the same run)")


def _top_frames(collapsed: Path, n: int = 15) -> list[str]:
    """Top frames of a py-spy `--format raw` file (collapsed stacks): by own and by total samples."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        samples += c
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + c
        for f in set(frames):
            total[f] = total.get(f, 0) + c
    out = [f"{samples} samples; own time:"]
    out += [f"  {100 * c / samples:5.1f}%  {f}" for f, c in sorted(own.items(), key=lambda kv: -kv[1])[:n]]
    out.append("total time (frame and what it calls):")
    out += [f"  {100 * c / samples:5.1f}%  {f}" for f, c in sorted(total.items(), key=lambda kv: -kv[1])[:n]]
    return out


def contention(args) -> None:
    """--contention: see the module docstring."""
    scale = 0.1 if args.quick else 1.0
    kafka_home, kafka_note = _kafka_to_run()
    names = ["kompakt"] + (["kafka"] if kafka_home else []) + ["sink"]
    if kafka_note:
        print(kafka_note, flush=True)
    cases = [(size, n, partitions, acks)
             for size, n in ((100, int(1_000_000 * scale)), (1024, int(300_000 * scale)))
             for partitions in (1, 4) for acks in ("1", "all")]
    busy = [] if args.no_busy_load else start_busy_load()
    load0 = os.getloadavg()[0]
    res: dict = {}                  # (broker, case) -> [(produce rec/s, CPU-s/GB, fetch rec/s, CPU-s/GB)]
    spy_files = []
    try:
        for rnd in range(args.rounds):
            for name in (names if rnd % 2 == 0 else names[::-1]):
                broker = (Broker(None, tuple(args.override)) if name == "kompakt" else
                          KafkaBroker(kafka_home) if name == "kafka" else SinkBroker())
                spy = None
                try:
                    # warm-up, unmeasured: the first requests compile encoders (dispatch.warm_in_background)
                    create_topic(broker.bootstrap, "warm-up", 1)
                    produce(broker.bootstrap, "warm-up", 20_000, 1024, "1")
                    fetch(broker.bootstrap, "warm-up", 1, 20_000, SHORT_QUEUE_BACKOFF)
                    for w in range(args.warm_passes if name != "sink" else 0):   # the whole matrix, unmeasured (docstring)
                        for size, n, partitions, acks in cases:
                            topic = f"w{w}-c{size}-p{partitions}-a{acks}"
                            create_topic(broker.bootstrap, topic, partitions)
                            produce(broker.bootstrap, topic, n, size, acks)
                            fetch(broker.bootstrap, topic, partitions, n, SHORT_QUEUE_BACKOFF)
                            drop_topic(broker, topic)
                    if name == "kompakt" and args.py_spy:
                        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
                        out = Path(args.py_spy, f"kompakt-{time.strftime('%H%M%S')}.txt")
                        spy = subprocess.Popen(["py-spy", "record", "--pid", str(broker.proc.pid), "--subprocesses",
                                                "--rate", "250", "--format", "raw", "--nonblocking", "-o", str(out)],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        spy_files.append(out)
                    for size, n, partitions, acks in cases:
                        topic = f"c{size}-p{partitions}-a{acks}-r{rnd}"
                        create_topic(broker.bootstrap, topic, partitions)
                        gb = n * size / 1e9
                        # (the sink's connection threads end with their connections: only the
                        # process's own counters keep what they used)
                        used = tree_cpu_s if name != "sink" else cpu_s
                        c0, l0, k0 = used(broker.proc.pid), loop_thread_cpu_s(broker.proc.pid), kernel_threads_cpu_s()
                        m0, b0 = client_cpu_s(), _busy_cpu_s(busy)
                        pt = produce(broker.bootstrap, topic, n, size, acks)
                        c1, l1, k1 = used(broker.proc.pid), loop_thread_cpu_s(broker.proc.pid), kernel_threads_cpu_s()
                        m1, b1 = client_cpu_s(), _busy_cpu_s(busy)
                        wb = writeback_cpu_s(Path(broker.dir, "data"))
                        k1b, m1b, b1b = kernel_threads_cpu_s(), client_cpu_s(), _busy_cpu_s(busy)
                        ft = fetch(broker.bootstrap, topic, partitions, n, SHORT_QUEUE_BACKOFF)
                        c2, k2, m2, b2 = used(broker.proc.pid), kernel_threads_cpu_s(), client_cpu_s(), _busy_cpu_s(busy)
                        if name != "sink":           # (it keeps nothing)
                            drop_topic(broker, topic)
                        row = (n / pt, (c1 - c0) / gb, n / ft, (c2 - c1) / gb, max(0.0, c1 - c0 - (l1 - l0)) / gb,
                               (k1 - k0 + wb) / gb, (k2 - k1b) / gb, (m1 - m0) / pt, (m2 - m1b) / ft,
                               (b1 - b0) / pt, (b2 - b1b) / ft)
                        res.setdefault((name, size, partitions, acks), []).append(row)
                        off_loop = f" ({row[4]:.2f} off the loop)" if name == "kompakt" else ""
                        print(f"round {rnd} {name:7} {size:>5} B p={partitions} acks={acks:<3} produce {row[0]:>9,.0f} rec/s "
                              f"{row[1]:6.2f} CPU-s/GB{off_loop}   fetch {row[2]:>9,.0f} rec/s {row[3]:6.2f} CPU-s/GB "
                              f"(kernel threads {row[5]:.2f} / {row[6]:.2f}; load {os.getloadavg()[0]:.1f})", flush=True)
                finally:
                    if spy is not None:
                        spy.send_signal(2)              # SIGINT: py-spy writes its file and exits
                        spy.wait(60)
                    broker.stop()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    load1 = os.getloadavg()[0]
    for f in spy_files:
        if f.exists():
            print(f"py-spy {f}:\n" + "\n".join(_top_frames(f)))
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in res.items()}
    kafka = "kafka" in names
    columns = ["record", "partitions", "acks", "produce rec/s", "produce CPU-s/GB", "of it off the loop",
               "fetch rec/s", "fetch CPU-s/GB"]
    if kafka:
        columns += ["Kafka produce rec/s", "CPU-s/GB", "Kafka fetch rec/s", "CPU-s/GB",
                    "rate Kompakt / Kafka, produce / fetch", "CPU/GB Kompakt / Kafka, produce / fetch"]
    rows = []
    for size, _, partitions, acks in cases:
        k = med[("kompakt", size, partitions, acks)]
        row = [f"{size} B", partitions, acks, f"{k[0]:,.0f}", f"{k[1]:.2f}", f"{k[4]:.2f}", f"{k[2]:,.0f}", f"{k[3]:.2f}"]
        if kafka:
            a = med[("kafka", size, partitions, acks)]
            row += [f"{a[0]:,.0f}", f"{a[1]:.2f}", f"{a[2]:,.0f}", f"{a[3]:.2f}",
                    f"{k[0] / a[0]:.2f}x / {k[2] / a[2]:.2f}x", f"{k[1] / a[1]:.2f}x / {k[3] / a[3]:.2f}x"]
        rows.append(row)
    table = _table(columns, "rrlrrrrr" + ("rrrrrr" if kafka else ""), rows)
    table += ["", "What bounds these figures: the client's ceiling (the same client against bench/sink_broker.py, "
              "which stores nothing); and the kernel's CPU outside the broker's process per GB: in the produce "
              "phase its threads' CPU (kthreadd's tree: flusher kworkers, softirqs) plus the CPU of writing "
              "back what the broker left dirty (every file of its log dir fsynced right after the phase: "
              "Kafka never syncs, Kompakt's group commit has synced its segments already), in the fetch "
              "phase its threads' CPU:", ""] + _bounds_table(cases, med, kafka)
    print("\n".join(table))
    _write_results(args, _results_section(
        f"Produce/fetch {'without' if args.no_busy_load else 'under'} a fixed CPU load "
        f"({_command('--contention' + (' --no-busy-load' if args.no_busy_load else ''), args)})",
        f"load average {load0:.1f} at the start{'' if args.no_busy_load else ' (busy load included)'}, "
        f"{load1:.1f} at the end; shared with other work. "
        f"{'No busy load (--no-busy-load): the brokers and the client alone' if args.no_busy_load else 'One busy-looping process pinned per core beside the broker'}"
        f"; confluent-kafka {ck.version()} / "
        f"librdkafka {ck.libversion()[0]}, linger.ms=5, no compression, idempotence off; fetch with "
        f"fetch.queue.backoff.ms=10. CPU-s/GB: the broker process tree's CPU per GB of values; off the "
        f"loop: the part not on Kompakt's event-loop thread (group-commit fdatasyncs and the page writeback "
        f"they do, log writers, validation pool). "
        f"Medians of {args.rounds} round(s), each broker after {args.warm_passes} unmeasured pass(es) of the "
        f"whole matrix. {kafka_note + '.' if kafka_note else ''}"
        f"{'Kafka: ' + KafkaBroker.describe(kafka_home) + '.' if kafka else ''}"
        f"{' Kompakt settings: ' + ', '.join(args.override) + '.' if args.override else ''}", table))


def _bounds_table(cases, med, kafka: bool) -> list[str]:
    """--contention's second table: the sink's rates (the client's ceiling), each broker's share
    of it, and CPU per GB with the kernel threads' CPU of the same phases added."""
    columns = ["record", "partitions", "acks", "client ceiling rec/s, produce / fetch", "Kompakt / ceiling",
               "client cores busy beside the sink / Kompakt" + (" / Kafka" if kafka else "") + ", produce; fetch",
               "busy load's cores, same order",
               "kernel CPU-s/GB outside Kompakt, produce / fetch"]
    if kafka:
        columns += ["Kafka / ceiling", "ceiling / Kafka", "kernel outside Kafka",
                    "CPU/GB Kompakt / Kafka, kernel outside included"]
    rows = []
    for size, _, partitions, acks in cases:
        k, c = med[("kompakt", size, partitions, acks)], med[("sink", size, partitions, acks)]
        a = med[("kafka", size, partitions, acks)] if kafka else None
        busy = [c, k] + ([a] if kafka else [])
        row = [f"{size} B", partitions, acks, f"{c[0]:,.0f} / {c[2]:,.0f}", f"{k[0] / c[0]:.2f} / {k[2] / c[2]:.2f}",
               " / ".join(f"{b[7]:.2f}" for b in busy) + "; " + " / ".join(f"{b[8]:.2f}" for b in busy),
               " / ".join(f"{b[9]:.2f}" for b in busy) + "; " + " / ".join(f"{b[10]:.2f}" for b in busy),
               f"{k[5]:.2f} / {k[6]:.2f}"]
        if kafka:
            row += [f"{a[0] / c[0]:.2f} / {a[2] / c[2]:.2f}", f"{c[0] / a[0]:.2f}x / {c[2] / a[2]:.2f}x",
                    f"{a[5]:.2f} / {a[6]:.2f}",
                    f"{(k[1] + k[5]) / (a[1] + a[5]):.2f}x / {(k[3] + k[6]) / (a[3] + a[6]):.2f}x"]
        rows.append(row)
    return _table(columns, "rrlrrrrr" + ("rrrr" if kafka else ""), rows)


# -- --cores: the broker on one core vs two (taskset), compressed and uncompressed -------------------

CORE_CASES = (   # (name, batch codec, topic configs, keyed)
    ("none", "none", {}, False),
    ("lz4", "lz4", {}, False),
    ("zstd", "zstd", {}, False),
    ("zstd, compacted", "zstd", {"cleanup.policy": "compact"}, True),
    ("lz4 -> topic zstd", "lz4", {"compression.type": "zstd"}, False),
)
CORE_CONNECTIONS = 4            # producer connections, one partition each
CORE_WINDOW = 4                 # requests in flight per connection


def compressible_values(size: int, count: int) -> list[bytes]:
    """`count` distinct values of `size` bytes that compress about 3x (a quarter random hex, the
    rest repetitive text), as application payloads do; random values would not compress at all."""
    text = b'{"customer": "c-0042", "status": "shipped", "note": "ok"} ' * (size // 40 + 1)
    return [(os.urandom(size // 8).hex().encode() + text)[:size] for _ in range(count)]


def _batch_request(topic: str, partition: int, codec: str, keyed: bool, values: list[bytes]) -> bytes:
    """One framed Produce v9 request (acks=1): one batch of `values` to `partition`, compressed
    with `codec` by Kompakt's own encoder (the same bytes a client's batch would be)."""
    from kafka.protocol.producer.produce import ProduceRequest
    sys.path.insert(0, str(HERE.parent))
    from kompakt.protocol.records import CODEC_BY_NAME, build_batch
    now = int(time.time() * 1000)
    batch = build_batch([(b"key-%06d" % i if keyed else None, v, None, now) for i, v in enumerate(values)],
                        compression=CODEC_BY_NAME[codec])
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(version=9, transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])])
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(header=True, framed=True))


def _produce_parallel(port: int, requests: list[bytes], n: int) -> float:
    """Each request of `requests` sent n times on a connection of its own (CORE_WINDOW in flight),
    all connections at once; seconds until the last answer."""
    threads = [threading.Thread(target=_pipeline_run, args=(port, r, n, CORE_WINDOW)) for r in requests]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def cores(args) -> None:
    """--cores: see the module docstring."""
    per_batch, size = 1000, 1024
    n = 10 if args.quick else 50          # requests per connection: 4 x 50 x 1000 x 1 KiB = 200 MB (a multiple of
                                          # the 10,000 records fetch() consumes at a time: no tail wait)
    total = n * CORE_CONNECTIONS * per_batch
    values = compressible_values(size, per_batch)
    everything = sorted(os.sched_getaffinity(0))
    if len(everything) < 2:
        raise SystemExit("--cores needs a machine with two CPUs")
    layouts = {"1": (everything[:1], everything[1:2]), "2": (everything[:2], everything[:2])}
    load0 = os.getloadavg()[0]
    res: dict = {}
    try:
        for rnd in range(args.rounds):
            for layout in (("1", "2") if rnd % 2 == 0 else ("2", "1")):
                broker_cpus, client_cpus = layouts[layout]
                os.sched_setaffinity(0, client_cpus)      # the client's threads start from here
                broker = Broker(None, tuple(args.override), ("taskset", "-c", ",".join(map(str, broker_cpus))))
                try:
                    create_topic(broker.bootstrap, "warm-up", 1)
                    produce(broker.bootstrap, "warm-up", 20_000, size, "1")
                    fetch(broker.bootstrap, "warm-up", 1, 20_000, SHORT_QUEUE_BACKOFF)
                    for case, (name, codec, configs, keyed_case) in enumerate(CORE_CASES):
                        topic = f"cores-{layout}-{case}-{rnd}"
                        create_topic(broker.bootstrap, topic, CORE_CONNECTIONS, configs)
                        requests = [_batch_request(topic, p, codec, keyed_case, values) for p in range(CORE_CONNECTIONS)]
                        gb = total * size / 1e9
                        c0 = tree_cpu_s(broker.proc.pid)
                        pt = _produce_parallel(broker.port, requests, n)
                        c1 = tree_cpu_s(broker.proc.pid)
                        ft = fetch(broker.bootstrap, topic, CORE_CONNECTIONS, total, SHORT_QUEUE_BACKOFF)
                        c2 = tree_cpu_s(broker.proc.pid)
                        row = (total / pt, (c1 - c0) / gb, (c1 - c0) / pt, total / ft, (c2 - c1) / gb)
                        res.setdefault((layout, name), []).append(row)
                        print(f"round {rnd} broker on {layout} core(s) {name:18} produce {row[0]:>9,.0f} rec/s "
                              f"{row[1]:5.2f} CPU-s/GB ({row[2]:.2f} cores)   fetch {row[3]:>8,.0f} rec/s "
                              f"{row[4]:5.2f} CPU-s/GB (load {os.getloadavg()[0]:.1f})", flush=True)
                finally:
                    broker.stop()
    finally:
        os.sched_setaffinity(0, everything)
    load1 = os.getloadavg()[0]
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in res.items()}
    rows = []
    for name, *_ in CORE_CASES:
        for layout in ("1", "2"):
            r = med[(layout, name)]
            gain = f"{med[('2', name)][0] / med[('1', name)][0]:.2f}x" if layout == "2" else ""
            rows.append([name, layout, f"{r[0]:,.0f}", f"{r[1]:.2f}", f"{r[2]:.2f}", f"{r[3]:,.0f}", f"{r[4]:.2f}",
                         gain])
    table = _table(["batches, topic", "broker CPUs", "produce rec/s", "produce CPU-s/GB", "broker cores busy",
                    "fetch rec/s", "fetch CPU-s/GB", "produce rate 2 CPUs / 1"], "lrrrrrrr", rows)
    print("\n".join(table))
    _write_results(args, _results_section(
        f"The broker on one CPU vs two ({_command('--cores', args)})",
        f"load average {load0:.1f} at the start, {load1:.1f} at the end; shared with other work. "
        f"Produce: raw Produce v9 requests, acks=1, each one batch of {per_batch:,} records of 1 KiB "
        f"(compressible: distinct values, ~3x) built once, {CORE_CONNECTIONS} connections (one partition "
        f"each) with {CORE_WINDOW} requests in flight, {total:,} records per case; fetch: confluent-kafka "
        f"{ck.version()} reading the {CORE_CONNECTIONS} partitions back. The broker under `taskset` on CPU "
        f"{everything[0]} (1) or on both (2), the client on the other CPU (1) or on both (2). CPU-s/GB: the "
        f"broker process tree's CPU per GB of values; cores busy: broker CPU-s per second of produce. "
        f"Medians of {args.rounds} round(s)."
        f"{' Kompakt settings: ' + ', '.join(args.override) + '.' if args.override else ''}", table))


def _group_commit_figures(metrics_port: int) -> dict[str, float]:
    """The broker's kompakt_log_group_commit_*_total counters ({} without a metrics port)."""
    if not metrics_port:
        return {}
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = "kompakt_log_group_commit_"
    return {line.split()[0][len(prefix):-len("_total")]: float(line.split()[1])
            for line in text.splitlines() if line.startswith(prefix) and line.split()[0].endswith("_total")}


def _cases(text: str) -> list[tuple[int, int, str]]:
    """`--only`: "1024:1:all,100:4:1" -> [(1024, 1, "all"), (100, 4, "1")]."""
    cases = []
    for item in text.split(","):
        try:
            size, partitions, acks = item.strip().split(":")
            if acks not in ("0", "1", "all", "-1"):
                raise ValueError(acks)
            cases.append((int(size), int(partitions), "all" if acks == "-1" else acks))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not SIZE:PARTITIONS:ACKS (e.g. 1024:1:all)") from None
    return cases


def _only_summary(args, rows, load0: float) -> None:
    """`--only`: the ratio of every round (each acks=all case over the acks=1 case of its size and
    partitions in the same round), their medians, and the machine's load."""
    per_round = len(args.only)
    ratios: dict[tuple[int, int], list[float]] = {}
    for r in range(0, len(rows), per_round):
        for key, ratio in durable_ratios(rows[r:r + per_round]).items():
            ratios.setdefault(key, []).append(ratio)
    for (size, partitions), values in ratios.items():
        print(f"durable acks=all / acks=1 produce: {size} B, {partitions} partition(s): "
              + ", ".join(f"{v:.2f}x" for v in values) + f" (median {statistics.median(values):.2f}x)")
    by_case: dict[tuple, list[float]] = {}
    for row in rows:
        by_case.setdefault(row[:3], []).append(row[4])
    for (size, partitions, acks), rates in by_case.items():
        print(f"{size} B p={partitions} acks={acks}: produce median {statistics.median(rates):,.0f} rec/s "
              f"({min(rates):,.0f}-{max(rates):,.0f})")
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    table = _table(["record", "partitions", "acks", "produce rec/s (each round)", "broker CPU (each round)"], "rrlll",
                   [[f"{size} B", partitions, acks, ", ".join(f"{r:,.0f}" for r in rates),
                     ", ".join(f"{row[6]:.0f}%" for row in rows if row[:3] == (size, partitions, acks))]
                    for (size, partitions, acks), rates in by_case.items()])
    notes = ["", *(f"- acks=all / acks=1, {size} B, {partitions} partition(s): " + ", ".join(f"{v:.2f}x" for v in values)
                   for (size, partitions), values in ratios.items()), ""]
    _write_results(args, _results_section(
        f"Produce cases `--only {','.join(f'{s}:{p}:{a}' for s, p, a in args.only)}`",
        f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {args.rounds} rounds"
        f"{''.join(' --override ' + o for o in args.override)}.", table, notes, python=False))


def durable_ratios(rows) -> dict:
    """{(record size, partitions): acks=all rec/s / acks=1 rec/s} of the runs in `rows`."""
    rate = {(r[0], r[1], r[2]): r[4] for r in rows}
    return {(size, parts): rate[(size, parts, "all")] / rate[(size, parts, "1")]
            for size, parts, acks in rate if acks == "1" and (size, parts, "all") in rate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer records (a smoke run)")
    ap.add_argument("--profile", metavar="OUT.prof", help="run the broker under cProfile")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--keyed", action="store_true", help="keyed produce: compact vs delete topics")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--keyed: rounds of every codec; --startup: broker starts; --contention: rounds; "
                         "--pipelined: runs")
    ap.add_argument("--startup", action="store_true", help="only start-up time and idle RSS (admin listener on)")
    ap.add_argument("--codecs", default="none,lz4,zstd", help="--keyed: producer compression types")
    ap.add_argument("--contention", action="store_true",
                    help="under a busy process pinned per core: rates and broker CPU-s per GB (Kafka too with KAFKA_HOME)")
    ap.add_argument("--no-busy-load", action="store_true",
                    help="--contention without the busy processes: the same table on an otherwise idle machine")
    ap.add_argument("--warm-passes", type=int, default=1,
                    help="--contention: unmeasured passes of the whole matrix per broker before its rounds")
    ap.add_argument("--warm-seconds", type=float, default=12.0,
                    help="--latency: seconds of the same load, unmeasured, before the rounds")
    ap.add_argument("--py-spy", metavar="DIR", help="--contention: sample the Kompakt broker with py-spy into DIR")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker key for the default and --contention runs (e.g. kompakt.durable.acks.enable=false)")
    ap.add_argument("--cores", action="store_true",
                    help="the broker under taskset on one core vs two: compressed and uncompressed produce, fetch")
    ap.add_argument("--pipelined", action="store_true", help="raw produce requests pipelined on one connection")
    ap.add_argument("--requests", type=int, default=20_000, help="--pipelined: requests per run")
    ap.add_argument("--window", type=int, default=16, help="--pipelined: requests in flight")
    ap.add_argument("--flood", action="store_true",
                    help="acks=all latency alone and beside an acks=1 flood of another topic in the same log dir")
    ap.add_argument("--latency", action="store_true",
                    help="only the acks=all latency run at 5,000 msg/s, --rounds times, with group-commit figures")
    ap.add_argument("--only", metavar="SIZE:PARTITIONS:ACKS,...", type=_cases,
                    help="only these produce/fetch cases (e.g. 1024:1:1,1024:1:all), --rounds times, no latency run")
    args = ap.parse_args()
    if args.contention:
        return contention(args)
    if args.cores:
        return cores(args)
    if args.keyed:
        return keyed(args)
    if args.startup:
        return startup(args)
    if args.pipelined:
        args.rounds = max(args.rounds, 1)
        return pipelined(args)
    if args.flood:
        return flood(args)
    if args.latency:
        return latency_only(args)
    scale = 0.1 if args.quick else 1.0

    metrics_port = free_port() if args.only else 0      # --only reports where acks=all waits went
    broker = Broker(args.profile, tuple(args.override) + ((f"metrics.port={metrics_port}",) if metrics_port else ()))
    time.sleep(2.0)
    idle_rss = rss_mib(broker.proc.pid)
    print(f"startup to first Metadata: {broker.startup_s:.2f} s; idle RSS {idle_rss:.0f} MiB", flush=True)
    rows = []
    if args.only:
        counts = {100: 1_000_000, 1024: 300_000}
        cases = [(size, int(counts.get(size, 300_000) * scale), partitions, acks)
                 for _ in range(max(args.rounds, 1)) for size, partitions, acks in args.only]
    else:
        cases = [(size, int(n * scale), partitions, acks)
                 for size, n in ((100, 1_000_000), (1024, 300_000)) for partitions in (1, 4) for acks in ("1", "all")]
    load0 = os.getloadavg()[0]
    try:
        for i, (size, n, partitions, acks) in enumerate(cases):
            topic = f"b{size}-p{partitions}-a{acks}" + (f"-{i}" if args.only else "")
            create_topic(broker.bootstrap, topic, partitions)
            g0 = _group_commit_figures(metrics_port)
            c0 = cpu_s(broker.proc.pid)
            pt = produce(broker.bootstrap, topic, n, size, acks)
            c1 = cpu_s(broker.proc.pid)
            g1 = _group_commit_figures(metrics_port)
            ft = fetch(broker.bootstrap, topic, partitions, n)
            c2 = cpu_s(broker.proc.pid)
            ft_short = fetch(broker.bootstrap, topic, partitions, n, SHORT_QUEUE_BACKOFF, "-short")
            drop_topic(broker, topic)
            row = (size, partitions, acks, n, n / pt, n * size / pt / 1e6, (c1 - c0) / pt * 100,
                   n / ft, n * size / ft / 1e6, (c2 - c1) / ft * 100, n / ft_short)
            rows.append(row)
            print("{:>5} B  p={}  acks={:<3}  {:>8} recs  produce {:>9,.0f} rec/s {:>7.1f} MB/s "
                  "(broker CPU {:>3.0f}%)   fetch {:>9,.0f} rec/s {:>7.1f} MB/s (broker CPU {:>3.0f}%)  "
                  "fetch.queue.backoff.ms=10: {:>9,.0f} rec/s"
                  .format(*row), flush=True)
            acks_answered = g1.get("acks", 0) - g0.get("acks", 0)
            if acks_answered and "answer_lag_seconds" in g1:      # (a broker from before these figures has none)
                rounds = g1["rounds"] - g0["rounds"]
                wait_ms = (g1["wait_seconds"] - g0["wait_seconds"]) / acks_answered * 1000
                lag_ms = (g1["answer_lag_seconds"] - g0["answer_lag_seconds"]) / acks_answered * 1000
                print(f"      group commit: {rounds:,.0f} rounds, {acks_answered / max(rounds, 1):.1f} waits a round, "
                      f"{(g1['round_seconds'] - g0['round_seconds']) / max(rounds, 1) * 1000:.2f} "
                      f"ms a round; a wait: {wait_ms:.2f} ms until its sync ended + {lag_ms:.2f} ms until the "
                      f"event loop ran its answer (means)", flush=True)
        if not args.only:
            create_topic(broker.bootstrap, "latency", 1)
            p50, p99, count = latency(broker.bootstrap, "latency", 5000, 6 * max(scale, 0.5))
            print(f"acks=all latency at 5,000 msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({count} msgs)", flush=True)
        busy_rss = rss_mib(broker.proc.pid)
    finally:
        broker.stop()
    if args.only:
        return _only_summary(args, rows, load0)
    ratios = durable_ratios(rows)
    for (size, partitions), ratio in ratios.items():
        print(f"durable acks=all / acks=1 produce: {size} B, {partitions} partition(s): {ratio:.2f}x")
    lo = loopback_mb_s()
    dw, dr = disk_mb_s(tempfile.gettempdir())     # the file system the broker wrote to
    print(f"machine: loopback TCP {lo:,.0f} MB/s (one Python stream); disk write+fsync {dw:,.0f} MB/s, "
          f"read (page cache) {dr:,.0f} MB/s")
    if args.profile:
        print(f"profile written to {args.profile} (python -m pstats {args.profile})")
    table = _table(["record", "partitions", "acks", "records", "produce rec/s", "produce MB/s", "broker CPU",
                    "fetch rec/s", "fetch MB/s", "broker CPU", "fetch rec/s, `fetch.queue.backoff.ms=10`"],
                   "rrlrrrrrrrr",
                   [[f"{r[0]} B", r[1], r[2], f"{r[3]:,}", f"{r[4]:,.0f}", f"{r[5]:.1f}", f"{r[6]:.0f}%", f"{r[7]:,.0f}",
                     f"{r[8]:.1f}", f"{r[9]:.0f}%", f"{r[10]:,.0f}"] for r in rows])
    notes = ["",
              f"- acks=all produce latency at 5,000 msg/s (linger.ms=0, 100 B): p50 {p50:.2f} ms, p99 {p99:.2f} ms",
              "- durable acks=all (synced before the answer) / acks=1 produce: " + ", ".join(
                  f"{size} B {partitions}p {ratio:.2f}x" for (size, partitions), ratio in ratios.items()),
              f"- start-up to first Metadata answer: {broker.startup_s:.2f} s; idle RSS {idle_rss:.0f} MiB "
              f"(after the runs: {busy_rss:.0f} MiB)",
              f"- for scale: loopback TCP {lo:,.0f} MB/s (one Python stream), disk sequential write+fsync "
              f"{dw:,.0f} MB/s, read from page cache {dr:,.0f} MB/s",
              "- Kafka 4.0 on this machine (the bar): 627 K rec/s produce of 100 B, 186 MB/s with 1 KiB, fetch "
              "831 K rec/s, acks=all p99 9 ms at 5 K msg/s, first Metadata 3.8 s after start, 337 MiB idle RSS.", ""]
    _write_results(args, _results_section(
        "Produce/fetch through `kompakt serve` (protocol-server)",
        f"shared with other work while measured. `python bench/bench_produce_fetch.py{' --quick' if args.quick else ''}"
        f"{''.join(' --override ' + o for o in args.override)}`; load average {os.getloadavg()[0]:.1f} at the end; "
        f"confluent-kafka {ck.version()} / librdkafka {ck.libversion()[0]}, no compression, "
        f"linger.ms=5, idempotence off.", table, notes))


# -- bench/RESULTS.md: every mode appends one dated section of the same shape -----------------------

def _results_section(title: str, about: str, table: list[str], notes: list[str] = ("",), python: bool = True) -> str:
    """A section for bench/RESULTS.md: `## title — date (UTC)`, a paragraph opening with the machine
    (platform, CPU, cpus, Python) and going on with `about` (load, settings), the table lines,
    then `notes` (lines; the default ends the table with a newline)."""
    machine = f"Machine: {platform.platform()}, {_cpu()}, {os.cpu_count()} cpus"
    if python:          # (--only's sections never named it)
        machine += f", Python {platform.python_version()}"
    return "\n".join([f"\n## {title} — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
                      f"{machine}; {about}\n", *table, *notes])


def _command(mode: str, args) -> str:
    """The command line of a mode that takes --quick and --rounds, in backquotes."""
    return f"`python bench/bench_produce_fetch.py {mode}{' --quick' if args.quick else ''} --rounds {args.rounds}`"


def _table(columns: list[str], align: str, rows: list[list]) -> list[str]:
    """A Markdown table's lines; `align` has one letter a column: l (left) or r (right)."""
    def line(cells) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"
    return [line(columns), "|" + "".join("---|" if a == "l" else "---:|" for a in align), *map(line, rows)]


def _write_results(args, section: str) -> None:
    """Append `section` to bench/RESULTS.md, unless --no-write."""
    if args.no_write:
        return
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write(section)
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
