"""Transactional vs idempotent produce on the same broker, as a ratio measured in one run.

    python bench/bench_transactions.py [--records 200000] [--rounds 3] [--per-txn 100]
                                       [--producers 1,4] [--no-write]

Against one `kompakt serve` subprocess (fresh log dir), confluent-kafka (librdkafka) producers
write `--records` records of 100 B in total to a one-partition topic, split evenly over P
producers running at once (one thread each; librdkafka releases the GIL while it waits):
  * idempotent: `enable.idempotence=true` (acks=all), produce everything, flush;
  * transactional: `transactional.id` set, the records in transactions of `--per-txn` (100):
    begin, produce, commit: per transaction an AddPartitionsToTxn, the Produce, an EndTxn (three
    `__transaction_state` records and a COMMIT marker on the broker), three round trips in a row.
Producers are created (and `init_transactions` done) before the clock starts. Both use
librdkafka's defaults otherwise (linger.ms 5, batches up to 1 MB, no compression). For each P,
each round runs both kinds back to back (order alternating), so load from other work hits both
alike; the figure is transactional / idempotent records/s, median of rounds (goal: at least 0.8).

What bounds what: one idempotent producer pipelines 1 MB batches and costs the broker ~0.1 us per
record; one transactional producer waits for three round trips per transaction, so with
P = 1 the ratio measures librdkafka's round-trip latency, not the broker (the broker's own time per
transaction is printed: request durations from its metrics). An exactly-once application runs one
transactional producer per input partition (or instance); P > 1 is that case.
Results go to stdout and, unless --no-write, a dated section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

import confluent_kafka as ck

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_produce_fetch import Broker, _cpu, cpu_s, create_topic, free_port  # noqa: E402

VALUE = b"x" * 100
ERRORS: list = []


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


def _producer(bootstrap: str, kind: str, tid: str):
    conf = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000}
    if kind == "idempotent":
        return ck.Producer({**conf, "enable.idempotence": True})
    p = ck.Producer({**conf, "transactional.id": tid})
    p.init_transactions(30)
    return p


def _work(p, kind: str, topic: str, n: int, per_txn: int) -> None:
    if kind == "idempotent":
        _send(p, topic, n)
        assert p.flush(120) == 0
        return
    for start in range(0, n, per_txn):
        p.begin_transaction()
        _send(p, topic, min(per_txn, n - start))
        p.commit_transaction(60)


def run(bootstrap: str, kind: str, topic: str, n: int, producers: int, per_txn: int, tag: str) -> float:
    """Seconds for `producers` producers of `kind` to write n records between them."""
    ps = [_producer(bootstrap, kind, f"bench-{tag}-{i}") for i in range(producers)]
    start = threading.Barrier(producers + 1)
    threads = [threading.Thread(target=lambda p=p: (start.wait(), _work(p, kind, topic, n // producers, per_txn)))
               for p in ps]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    assert not ERRORS, f"{len(ERRORS)} records failed: {ERRORS[0]}"
    return secs


def request_ms(metrics_url: str) -> dict[str, tuple[float, float]]:
    """{api: (count, total ms)} from the broker's request duration histogram."""
    text = urllib.request.urlopen(metrics_url + "/metrics", timeout=30).read().decode()
    out: dict = {}
    for line in text.splitlines():
        for suffix, i in (("_sum{", 1), ("_count{", 0)):
            if line.startswith("kompakt_request_duration_seconds" + suffix):
                api = line.split('api="')[1].split('"')[0]
                acc = out.setdefault(api, [0.0, 0.0])
                acc[i] = float(line.rsplit(" ", 1)[1]) * (1000.0 if i else 1.0)
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-txn", type=int, default=100)
    ap.add_argument("--producers", default="1,4", help="comma-separated producer counts, each measured")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    n = args.records
    counts = [int(x) for x in args.producers.split(",")]
    mport = free_port()
    broker = Broker(None, ("transaction.state.log.num.partitions=3", f"metrics.port={mport}",
                           "metrics.host=127.0.0.1"))
    load0 = os.getloadavg()[0]
    res: dict = {}
    before = request_ms(f"http://127.0.0.1:{mport}")
    try:
        for rnd in range(args.rounds):
            for producers in counts:
                for kind in ("idempotent", "transactional") if rnd % 2 == 0 else ("transactional", "idempotent"):
                    topic = f"{kind}-{producers}-{rnd}"
                    create_topic(broker.bootstrap, topic, 1)
                    c0 = cpu_s(broker.proc.pid)
                    secs = run(broker.bootstrap, kind, topic, n, producers, args.per_txn, f"{producers}-{rnd}")
                    cpu = cpu_s(broker.proc.pid) - c0
                    res.setdefault((producers, kind), []).append((n / secs, cpu / n * 1e6))
                    print(f"round {rnd} producers {producers} {kind:13} {n / secs:>10,.0f} rec/s  "
                          f"broker {cpu / n * 1e6:.2f} CPU-us/record", flush=True)
        after = request_ms(f"http://127.0.0.1:{mport}")
    finally:
        broker.stop()
    load1 = os.getloadavg()[0]
    txns = (after.get("EndTxn", (0, 0))[0] - before.get("EndTxn", (0, 0))[0]) or 1
    per_txn_ms = sum(after.get(api, (0, 0))[1] - before.get(api, (0, 0))[1] for api in ("AddPartitionsToTxn", "EndTxn"))
    text = ["| producers at once | idempotent rec/s | transactional rec/s | transactional / idempotent "
            "(median, min-max of rounds) | broker CPU-us per record idempotent / transactional |",
            "|---:|---:|---:|---:|---:|"]
    for producers in counts:
        idem, txn = res[(producers, "idempotent")], res[(producers, "transactional")]
        ratios = [t / i for (t, _), (i, _) in zip(txn, idem)]
        text.append(f"| {producers} | {statistics.median(r for r, _ in idem):,.0f} "
                    f"| {statistics.median(r for r, _ in txn):,.0f} | **{statistics.median(ratios):.2f}x** "
                    f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(c for _, c in idem):.2f} / "
                    f"{statistics.median(c for _, c in txn):.2f} |")
    text.append(f"\nBroker time per transaction, AddPartitionsToTxn + EndTxn (3 state records and the marker "
                f"included), from its request metrics: {per_txn_ms / txns:.3f} ms over {txns:,.0f} transactions "
                f"(the Produce of the transaction's records aside).")
    print("\n".join(text))
    if args.no_write:
        return
    head = [f"\n## Transactional vs idempotent produce (`python bench/bench_transactions.py --records {n} "
            f"--rounds {args.rounds} --per-txn {args.per_txn} --producers {args.producers}`) — "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
            f"Machine: {platform.platform()}, {_cpu()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
            f"load average {load0:.1f} at the start, {load1:.1f} at the end (other work was running on the "
            f"machine). confluent-kafka {ck.version()} / librdkafka {ck.libversion()[0]}: {n:,} records of 100 B "
            f"per run into one partition, split over the producers, acks=all, linger.ms=5, {args.per_txn} records "
            f"per transaction; each round runs both kinds back to back (order alternating), {args.rounds} rounds.\n"]
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write("\n".join(head + text) + "\n")
    print(f"appended to {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
