"""Why a 100 B-record produce request costs the event loop more than a 1 KiB one of the same size.

    python bench/bench_request_spacing.py [--requests 150] [--rounds 3] [--pauses 0,5] [--flood] [--pin]

Three measurements against the same two request shapes, the ones librdkafka sends in a
confluent-kafka flood (acks=1, linger.ms=5, one partition): one ~1 MB batch per request, i.e.
8,051 records of 100 B (~886 KB) or 967 records of 1 KiB (~1 MB):
  * in-process: `Dispatcher.prepare` + `run` of one Produce v9 request (thread CPU time per
    request, and the profiler's call counts, which tell whether any Python runs per record);
  * over TCP from a raw client, one request at a time, the event loop's CPU per request (its
    thread's schedstat), sent back to back or with a 5 ms pause between an answer and the next
    request (what a client that spends milliseconds building each request does: the flood's
    client process, its Python `produce` loop and librdkafka, spends ~5-8 ms of CPU on a
    request of 100 B records, ~1.5-2 ms on one of 1 KiB records);
    `--pauses` lists the pauses (ms; 0 = back to back); `--pin` adds the 5 ms case with the broker and the client on one CPU and on two;
  * `--flood`: the confluent-kafka flood itself (2,000,000 x 100 B, 300,000 x 1 KiB): requests
    (= batches on disk), bytes and records per request, loop and client CPU per request, the
    loop's wake-ups per request.
Cases alternate in order each round; medians. Prints the figures; writes nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import glob
import os
import pstats
import resource
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_produce_fetch as B  # noqa: E402  (the broker process, topics, loop-thread CPU)

SHAPES = {100: 8051, 1024: 967}   # record size -> records per request in librdkafka's flood batches


def request(topic: str, size: int, count: int, framed: bool = True) -> bytes:
    from kafka.protocol.producer.produce import ProduceRequest
    sys.path.insert(0, str(HERE.parent))
    from kompakt.protocol.records import build_batch
    T = ProduceRequest.TopicProduceData
    r = ProduceRequest(version=9, transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(
            index=0, records=build_batch([(None, os.urandom(size))] * count))])])
    r.with_header(correlation_id=1, client_id="bench")
    return bytes(r.encode(header=True, framed=framed))


def in_process(rounds: int, n: int) -> None:
    sys.path.insert(0, str(HERE.parent))
    from kompakt.broker.server import Broker
    from kompakt.config.broker_config import BrokerConfig

    async def main():
        d = tempfile.mkdtemp(prefix="kompakt-bench-spacing-")
        broker = Broker(BrokerConfig({"log.dirs": d, "log.cleaner.enable": "false", "metrics.port": "0",
                                      "listeners": "PLAINTEXT://127.0.0.1:0", "log.segment.bytes": str(1 << 30)}))
        broker.log_manager.startup()
        frames = {}
        for size, count in SHAPES.items():
            broker.log_manager.create_topic(f"t{size}", 1, {})
            frames[size] = request(f"t{size}", size, count, framed=False)
        disp, res, calls = broker.dispatcher, {}, {}
        for rnd in range(rounds + 1):                 # round 0 is the profiled one, not timed
            for size in (SHAPES if rnd % 2 else list(SHAPES)[::-1]):
                prof = cProfile.Profile() if rnd == 0 else None
                t0 = time.thread_time()
                if prof:
                    prof.enable()
                for _ in range(n):
                    ctx, module, req = disp.prepare(bytearray(frames[size]))
                    await disp.run(ctx, module, req)
                if prof:
                    prof.disable()
                    st = pstats.Stats(prof).stats
                    calls[size] = (sum(v[1] for v in st.values()) / n,
                                   {k[2]: v[2] / n * 1e6 for k, v in st.items()})
                else:
                    res.setdefault(size, []).append((time.thread_time() - t0) / n * 1e6)
        for size, count in SHAPES.items():
            per_call, own = calls[size]
            walk = own.get("structure", 0.0)
            print(f"in-process  {size:5} B x {count:,} ({len(frames[size]):,} B): {statistics.median(res[size]):.0f} us/request "
                  f"(runs {[round(x) for x in res[size]]}); {per_call:.0f} profiled calls/request; compiled record "
                  f"walk {walk:.0f} us (profiled)", flush=True)
        broker.log_manager.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    asyncio.run(main())


def one_at_a_time(port: int, frame: bytes, n: int, pause: float) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            sock.sendall(frame)
            (size,) = struct.unpack(">i", B._read_exactly(sock, 4))
            B._read_exactly(sock, size)
            if pause:
                time.sleep(pause)


def over_tcp(rounds: int, n: int, pin: bool, pauses: list[float]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    cases = [(f"{ms:g} ms pause" if ms else "back to back", ms / 1000, None) for ms in pauses]
    if pin and len(cpus) >= 2:
        cases += [("5 ms pause, client on the broker's CPU", 0.005, cpus[0]),
                  ("5 ms pause, client on the other CPU", 0.005, cpus[1])]
    broker = B.Broker(None, (), ("taskset", "-c", str(cpus[0])) if pin else ())
    res = {}
    try:
        frames = {}
        for size, count in SHAPES.items():
            B.create_topic(broker.bootstrap, f"t{size}", 1)
            frames[size] = request(f"t{size}", size, count)
            one_at_a_time(broker.port, frames[size], 30, 0)            # warm-up
        for rnd in range(rounds):
            for label, pause, cpu in (cases if rnd % 2 == 0 else cases[::-1]):
                for size in (SHAPES if rnd % 2 == 0 else list(SHAPES)[::-1]):
                    os.sched_setaffinity(0, {cpu} if cpu is not None else cpus)
                    c0 = B.loop_thread_cpu_s(broker.proc.pid)
                    one_at_a_time(broker.port, frames[size], n, pause)
                    res.setdefault((label, size), []).append((B.loop_thread_cpu_s(broker.proc.pid) - c0) / n * 1e6)
            os.sched_setaffinity(0, cpus)
    finally:
        broker.stop()
    for (label, size), runs in res.items():
        print(f"over TCP    {size:5} B, {label:40}: loop {statistics.median(runs):5.0f} us/request "
              f"(runs {[round(x) for x in runs]})", flush=True)


def _switches(pid: int) -> int:
    for line in open(f"/proc/{pid}/task/{pid}/status"):
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split(":")[1])
    return 0


def flood(rounds: int) -> None:
    for rnd in range(rounds):
        for size, n in ((100, 2_000_000), (1024, 300_000))[:: 1 if rnd % 2 == 0 else -1]:
            broker = B.Broker(None)
            try:
                B.create_topic(broker.bootstrap, "warm-up", 1)
                B.produce(broker.bootstrap, "warm-up", 20_000, size, "1")
                B.create_topic(broker.bootstrap, "t", 1)
                pid = broker.proc.pid
                c0, w0 = B.loop_thread_cpu_s(pid), _switches(pid)
                r0 = resource.getrusage(resource.RUSAGE_SELF)       # librdkafka's threads are ours
                secs = B.produce(broker.bootstrap, "t", n, size, "1")
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                loop, wakes = B.loop_thread_cpu_s(pid) - c0, _switches(pid) - w0
                client = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
                batches = []                                         # one partition: a batch per request
                for path in sorted(glob.glob(f"{broker.dir}/data/t-0/*.log")):
                    data, pos = Path(path).read_bytes(), 0
                    while pos + 61 <= len(data):
                        (length,) = struct.unpack_from(">i", data, pos + 8)
                        (count,) = struct.unpack_from(">i", data, pos + 57)
                        batches.append((length + 12, count))
                        pos += length + 12
            finally:
                broker.stop()
            k = len(batches)
            gb = sum(b for b, _ in batches) / 1e9
            print(f"flood       {size:5} B x {n:,}: {secs:.1f} s, {k} requests of {statistics.median(b for b, _ in batches):,.0f} B, "
                  f"{statistics.median(c for _, c in batches):,.0f} records; loop {loop / k * 1e6:.0f} us/request "
                  f"({loop / gb:.2f} CPU-s/GB), {wakes / k:.1f} wake-ups/request; client {client / k * 1e3:.1f} ms "
                  f"CPU/request (load {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=150, help="requests per case and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flood", action="store_true", help="also the confluent-kafka flood")
    ap.add_argument("--pauses", default="0,5", help="client pauses between requests, ms (comma-separated)")
    ap.add_argument("--pin", action="store_true", help="broker on one CPU; the pause case with the client on each")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    in_process(args.rounds, args.requests)
    over_tcp(args.rounds, args.requests, args.pin, [float(x) for x in args.pauses.split(",")])
    if args.flood:
        flood(args.rounds)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
