"""Transactional vs idempotent produce on the same broker, as a ratio measured in one run.

    python bench/bench_transactions.py [--records 200000] [--rounds 5] [--per-txn 100]
                                       [--producers 1,8] [--no-write]
    python bench/bench_transactions.py --request-path [--tv2] [--transactions 3000] [--no-write]

Against one `kompakt serve` subprocess of this checkout (fresh log dir), confluent-kafka
(librdkafka) producers write `--records` records of 100 B per run to a one-partition topic, split
evenly over P producers running at once (one thread each; librdkafka releases the GIL while it
waits), P the same for both kinds:
  * idempotent: `enable.idempotence=true` (acks=all), produce everything, flush;
  * transactional: `transactional.id` set, the records in transactions of `--per-txn` (100):
    begin, produce, commit. librdkafka 2.16 uses transaction version 1: per transaction an
    AddPartitionsToTxn, the Produce and an EndTxn, three round trips in a row (the broker writes
    three `__transaction_state` records and a COMMIT marker).
Producers are created (and `init_transactions` done) before the clock starts; librdkafka's
defaults otherwise (linger.ms 5, batches up to 1 MB, no compression). After a warm-up run of each
kind (not counted: the broker compiles its codecs on first use), each round runs every
(P, records per transaction) pair for both kinds back to back, the order alternating between
rounds, so load from other work hits both alike; a ratio is transactional / idempotent records/s
of one round, and the figure is the median over rounds (goal: at least 0.8).

Reported besides, per kind (medians over rounds): the broker's CPU (its process, /proc) and the
client's (this process: the Python produce loop and librdkafka's threads, getrusage) per 100
records, i.e. per transaction; for transactions, a producer's wall time per transaction (begin to
commit returned) and the broker's own handling time of its three requests (from its request
duration metrics), the rest being round trips: client, loopback and waiting for a CPU.

`--request-path` times instead the broker's request path in-process (Dispatcher.prepare + run, no
sockets, CPU time): one transaction as librdkafka sends it (AddPartitionsToTxn v0, Produce v10 of
`--per-txn` records, EndTxn v1) over 8 transactional ids, per request; with `--tv2`, as the Java
client sends it with transaction version 2 (Produce v12 adding the partition itself, EndTxn v5
bumping the epoch: two requests, the next transaction at the new epoch from sequence 0). It measures this checkout
(the bench inserts its root first on sys.path), so a copy of this file in an older checkout's
bench/ measures that one. Results go to stdout and, unless --no-write, bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))             # this checkout's kompakt, in-process and in the broker
sys.path.insert(1, str(HERE))
from bench_produce_fetch import Broker, _cpu, create_topic, free_port  # noqa: E402

VALUE = b"x" * 100
ERRORS: list = []
TXN_APIS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def _failed(err, _msg) -> None:
    if err is not None:
        ERRORS.append(err)


def _send(p, topic: str, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0, on_delivery=_failed)
                break
            except BufferError:
                p.poll(0.01)


def _producer(ck, bootstrap: str, kind: str, tid: str):
    conf = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000}
    if kind == "idempotent":
        return ck.Producer({**conf, "enable.idempotence": True})
    p = ck.Producer({**conf, "transactional.id": tid})
    p.init_transactions(30)
    return p


def _work(p, kind: str, topic: str, n: int, per_txn: int, walls: list) -> None:
    if kind == "idempotent":
        _send(p, topic, n)
        assert p.flush(120) == 0
        return
    for start in range(0, n, per_txn):
        t0 = time.perf_counter()
        p.begin_transaction()
        _send(p, topic, min(per_txn, n - start))
        p.commit_transaction(60)
        walls.append(time.perf_counter() - t0)


@dataclass
class Run:
    kind: str
    records: int
    secs: float
    broker_cpu: float
    client_cpu: float
    txns: int = 0
    handling_ms: float = 0.0            # broker request durations of the transactions' requests
    walls: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.secs

    def per_100(self, cpu_s_: float) -> float:
        """CPU microseconds per 100 records (= per transaction of 100)."""
        return cpu_s_ / self.records * 100 * 1e6


def _client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_s(pid: int) -> float:
    """CPU seconds of the process's live threads, to the nanosecond (schedstat's run time; the
    clock-tick figures of /proc/<pid>/stat are 10 ms steps, a tenth of an idempotent run here)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass                              # a thread that ended meanwhile
    return total / 1e9


def run(ck, broker, mport: int, kind: str, topic: str, n: int, producers: int, per_txn: int, tag: str) -> Run:
    """`producers` producers of `kind` write n records between them, at once."""
    ps = [_producer(ck, broker.bootstrap, kind, f"bench-{tag}-{i}") for i in range(producers)]
    walls: list = []
    start = threading.Barrier(producers + 1)
    threads = [threading.Thread(target=lambda p=p: (start.wait(),
                                                    _work(p, kind, topic, n // producers, per_txn, walls)))
               for p in ps]
    for t in threads:
        t.start()
    before = request_ms(mport)
    c0, b0 = _client_cpu(), cpu_s(broker.proc.pid)
    start.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    c1, b1 = _client_cpu(), cpu_s(broker.proc.pid)
    after = request_ms(mport)
    assert not ERRORS, f"{len(ERRORS)} records failed: {ERRORS[0]}"
    txns = len(walls)
    handling = sum(after.get(a, (0, 0))[1] - before.get(a, (0, 0))[1] for a in TXN_APIS) if txns else 0.0
    return Run(kind, n, secs, b1 - b0, c1 - c0, txns, handling, walls)


def request_ms(mport: int) -> dict[str, tuple[float, float]]:
    """{api: (count, total ms)} from the broker's request duration histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=30).read().decode()
    out: dict = {}
    for line in text.splitlines():
        for suffix, i in (("_sum{", 1), ("_count{", 0)):
            if line.startswith("kompakt_request_duration_seconds" + suffix):
                api = line.split('api="')[1].split('"')[0]
                acc = out.setdefault(api, [0.0, 0.0])
                acc[i] = float(line.rsplit(" ", 1)[1]) * (1000.0 if i else 1.0)
    return {k: (v[0], v[1]) for k, v in out.items()}


def med(xs) -> float:
    return statistics.median(xs)


def throughput(args) -> tuple[list[str], str]:
    import confluent_kafka as ck
    counts = [int(x) for x in args.producers.split(",")]
    sizes = [int(x) for x in args.per_txn.split(",")]
    n = args.records
    mport = free_port()
    broker = Broker(None, ("transaction.state.log.num.partitions=3", f"metrics.port={mport}",
                           "metrics.host=127.0.0.1"))
    load0 = os.getloadavg()[0]
    res: dict = {}
    try:
        for kind in ("idempotent", "transactional"):    # warm-up, not counted: codecs, ids, topics
            create_topic(broker.bootstrap, f"warm-{kind}", 1)
            run(ck, broker, mport, kind, f"warm-{kind}", 20_000, 1, min(sizes), f"warm-{kind}")
        for rnd in range(args.rounds):
            for producers in counts:
                for per_txn in sizes:
                    kinds = ("idempotent", "transactional") if rnd % 2 == 0 else ("transactional", "idempotent")
                    for kind in kinds:
                        topic = f"{kind}-{producers}-{per_txn}-{rnd}"
                        create_topic(broker.bootstrap, topic, 1)
                        r = run(ck, broker, mport, kind, topic, n, producers, per_txn, f"{producers}-{per_txn}-{rnd}")
                        res.setdefault((producers, per_txn, kind), []).append(r)
                        extra = (f", {med(r.walls) * 1e3:.2f} ms per transaction, broker handling "
                                 f"{r.handling_ms / r.txns:.3f} ms" if r.txns else "")
                        print(f"round {rnd} P={producers} {per_txn}/txn {kind:13} {r.rate:>10,.0f} rec/s  "
                              f"CPU us per 100 records: broker {r.per_100(r.broker_cpu):6.1f} client "
                              f"{r.per_100(r.client_cpu):6.1f}{extra}", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(broker.dir, ignore_errors=True)   # gigabytes after a few rounds
    load1 = os.getloadavg()[0]
    ncpu = os.cpu_count() or 1
    rows = ["| producers at once | records per transaction | idempotent rec/s | transactional rec/s | "
            "transactional / idempotent (median, min-max of rounds) |", "|---:|---:|---:|---:|---:|"]
    cost = ["| producers | records per transaction | broker CPU us per 100 records, idempotent / transactional | "
            "client CPU us per 100 records, idempotent / transactional | CPU busy (broker + client, of "
            f"{ncpu} vCPUs), idempotent / transactional | a producer's wall time per transaction | broker "
            "handling per transaction (3 requests) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for producers in counts:
        for per_txn in sizes:
            idem, txn = res[(producers, per_txn, "idempotent")], res[(producers, per_txn, "transactional")]
            ratios = [t.rate / i.rate for t, i in zip(txn, idem)]
            rows.append(f"| {producers} | {per_txn} | {med(r.rate for r in idem):,.0f} | "
                        f"{med(r.rate for r in txn):,.0f} | **{med(ratios):.2f}x** "
                        f"({min(ratios):.2f}-{max(ratios):.2f}) |")

            def busy(rs):
                return med((r.broker_cpu + r.client_cpu) / r.secs / ncpu * 100 for r in rs)
            cost.append(f"| {producers} | {per_txn} | {med(r.per_100(r.broker_cpu) for r in idem):.0f} / "
                        f"{med(r.per_100(r.broker_cpu) for r in txn):.0f} | "
                        f"{med(r.per_100(r.client_cpu) for r in idem):.0f} / "
                        f"{med(r.per_100(r.client_cpu) for r in txn):.0f} | {busy(idem):.0f}% / {busy(txn):.0f}% | "
                        f"{med(med(r.walls) for r in txn) * 1e3:.2f} ms | "
                        f"{med(r.handling_ms / r.txns for r in txn):.3f} ms |")
    table = "\n".join(rows + [""] + cost)
    head = (f"\n## Transactional vs idempotent produce (`python bench/bench_transactions.py --records {n} "
            f"--rounds {args.rounds} --per-txn {args.per_txn} --producers {args.producers}`) — "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
            f"Machine: {platform.platform()}, {_cpu()}, {ncpu} vCPUs, Python {platform.python_version()}; "
            f"load average {load0:.1f} at the start, {load1:.1f} at the end (other work was running). "
            f"confluent-kafka {ck.version()} / librdkafka {ck.libversion()[0]}: {n:,} records of 100 B per run "
            f"into one partition, split over the producers, acks=all, linger.ms=5; {args.rounds} rounds, "
            f"both kinds back to back in each (order alternating); medians of rounds.\n")
    return [head, table], table


# ------------------------------------------------------------------ in-process request path

def request_path(args) -> tuple[list[str], str]:
    from kafka.protocol.producer.produce import ProduceRequest
    from kafka.protocol.producer.transaction import (AddPartitionsToTxnRequest, EndTxnRequest,
                                                     InitProducerIdRequest)

    from kompakt.broker.server import Broker as InProcessBroker
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.protocol.records import build_batch

    ids = 8
    td, pd = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
    apt = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

    def frame(req, version):
        req.with_header(correlation_id=1, client_id="rdkafka")
        return bytes(req.encode(version=version, header=True))

    async def call(d, data):
        ctx, module, request = d.prepare(bytearray(data))
        return await d.run(ctx, module, request)

    async def main():
        log_dir = tempfile.mkdtemp(prefix="kompakt-bench-txn-path-")
        broker = InProcessBroker(BrokerConfig({
            "log.dirs": log_dir, "log.cleaner.enable": "false",
            "metrics.port": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
            "transaction.state.log.num.partitions": "3"}))
        await broker.start()
        try:
            broker.log_manager.create_topic("t", 1, {})
            d = broker.dispatcher
            producers = []
            for i in range(ids):
                await call(d, frame(InitProducerIdRequest(transactional_id=f"tx-{i}", transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1), 4))
                meta = broker.txn.txns[f"tx-{i}"]
                producers.append([f"tx-{i}", meta.producer_id, meta.producer_epoch, 0])
            frames = []
            for k in range(args.transactions):                 # built before timing
                p = producers[k % ids]
                tid, pid, epoch, seq = p
                p[3] += args.per_txn_path
                if args.tv2:                                    # every end bumps the epoch
                    p[2], p[3] = epoch + 1, 0
                batch = build_batch([(None, VALUE)] * args.per_txn_path, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, is_transactional=True)
                if args.tv2:
                    frames.append((
                        frame(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[
                            td(name="t", partition_data=[pd(index=0, records=batch)])]), 12),
                        frame(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                            committed=True), 5)))
                    continue
                frames.append((
                    frame(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                                    v3_and_below_producer_epoch=epoch,
                                                    v3_and_below_topics=[apt(name="t", partitions=[0])]), 0),
                    frame(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[
                        td(name="t", partition_data=[pd(index=0, records=batch)])]), 10),
                    frame(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                        committed=True), 1)))
            apis = TXN_APIS[1:] if args.tv2 else TXN_APIS
            spent = dict.fromkeys(TXN_APIS, 0.0)
            for fs in frames:
                for api, data in zip(apis, fs):
                    t0 = time.process_time()
                    await call(d, data)
                    spent[api] += time.process_time() - t0
            assert broker.txn.counters["committed_total"] == args.transactions
            return spent
        finally:
            await broker.stop()
            shutil.rmtree(log_dir, ignore_errors=True)

    spent = asyncio.run(main())
    n = args.transactions
    total = sum(spent.values()) / n * 1e6
    apis = TXN_APIS[1:] if args.tv2 else TXN_APIS
    line = (f"| {ROOT.name} | {total:.0f} us | " + " | ".join(f"{spent[a] / n * 1e6:.0f} us" for a in apis) + " |")
    how = ("as the Java client sends it with transaction version 2" if args.tv2 else "as librdkafka 2.16 sends it")
    columns = ("Produce v12 | EndTxn v5 |\n|---|---:|---:|---:|" if args.tv2 else
               "AddPartitionsToTxn v0 | Produce v10 | EndTxn v1 |\n|---|---:|---:|---:|---:|")
    head = (f"\n### In-process request path of a transaction (`python bench/bench_transactions.py --request-path "
            f"{'--tv2 ' if args.tv2 else ''}--transactions {n}`) — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
            f"CPU time of Dispatcher.prepare + run (no sockets) per transaction of {args.per_txn_path} records, "
            f"{how}, over {ids} transactional ids; {platform.platform()}, {_cpu()}, "
            f"load average {os.getloadavg()[0]:.1f}.\n\n"
            f"| checkout | per transaction | {columns}")
    return [head, line], line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-txn", default="100", help="records per transaction, comma-separated to compare")
    ap.add_argument("--producers", default="1,8", help="comma-separated producer counts, each measured")
    ap.add_argument("--request-path", action="store_true", help="the in-process request path only")
    ap.add_argument("--transactions", type=int, default=3000, help="transactions for --request-path")
    ap.add_argument("--tv2", action="store_true", help="--request-path as a transaction version 2 client")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    args.per_txn_path = int(args.per_txn.split(",")[0])
    os.chdir(ROOT)                            # `python -m kompakt serve` of this checkout
    parts, text = request_path(args) if args.request_path else throughput(args)
    print(text)
    if not args.no_write:
        with open(HERE / "RESULTS.md", "a") as fh:
            fh.write("\n".join(parts) + "\n")
        print(f"appended to {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
