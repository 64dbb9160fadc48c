"""Rebalance pause: how long a consumer that keeps its partitions stops while another member
joins and then leaves - classic protocol (eager and cooperative-sticky) against KIP-848's
consumer protocol.

    python bench/bench_group_pause.py [--rounds 3] [--heartbeat-ms 3000] [--slow-revoke-ms 1000]

Starts `python -m kompakt serve` on free ports in a temp dir (group.initial.rebalance.delay.ms=0;
the consumer protocol's heartbeat interval is --heartbeat-ms, the classic clients' heartbeat
interval the same). A producer writes to all 6 partitions of a topic every 2 ms. Members A and
C (confluent-kafka consumers in this process) share the topic; member B joins, runs until it has
consumed records, then leaves. Each round reports the longest gap between two records A received
from the partitions it owned before, during and after B's visit ("kept" partitions), over the
whole visit, and B's join-to-first-record time. The classic eager protocol revokes everything
from every member and hands nothing out until all of them rejoined - A waits for C, which learns
of the rebalance only at its next heartbeat; cooperative rebalancing and KIP-848 leave the kept
partitions flowing, so their gap stays near the fetch cadence. C's on_revoke callback takes
--slow-revoke-ms (finishing in-flight work before giving partitions up, as applications do);
A's is instant: under the eager protocol A waits for C's revocation, under the incremental ones
it does not. Numbers go to bench/RESULTS.md by hand (with `date`, the machine, and whether other work ran).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_groups import Broker  # noqa: E402  (the same broker harness)

PARTITIONS = 6


class Producer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as P
        self.p = P({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.topic, self.stop = topic, threading.Event()

    def run(self):
        n = 0
        while not self.stop.is_set():
            self.p.produce(self.topic, b"x", partition=n % PARTITIONS)
            self.p.poll(0)
            n += 1
            time.sleep(0.002)
        self.p.flush(10)


class Member(threading.Thread):
    """Consumes and timestamps every record (partition, receive time)."""

    def __init__(self, bootstrap: str, topic: str, group: str, mode: str, heartbeat_ms: int,
                 revoke_s: float = 0.0):
        super().__init__(daemon=True)
        self.revoke_s = revoke_s   # time its on_revoke takes (finishing in-flight work, say)
        from confluent_kafka import Consumer
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                "enable.auto.commit": True}
        if mode == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": heartbeat_ms})
            if mode == "cooperative":
                conf["partition.assignment.strategy"] = "cooperative-sticky"
        self.c = Consumer(conf)
        self.mode, self.topic = mode, topic
        self.got: list[tuple[int, float]] = []
        self.assignment: set[int] = set()
        self.stop = threading.Event()

    def run(self):
        incremental = self.mode != "eager"

        def on_assign(c, ps):
            if incremental:
                c.incremental_assign(ps)
                self.assignment |= {p.partition for p in ps}
            else:
                self.assignment = {p.partition for p in ps}

        def on_revoke(c, ps):
            if ps and self.revoke_s:
                time.sleep(self.revoke_s)
            if incremental:
                c.incremental_unassign(ps)
            self.assignment -= {p.partition for p in ps}

        self.c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        while not self.stop.is_set():
            for m in self.c.consume(num_messages=500, timeout=0.05):
                if m.error() is None:
                    self.got.append((m.partition(), time.monotonic()))
        self.c.close()


def wait(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def longest_gap(times: list[float]) -> float:
    times = sorted(times)
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def one_round(bootstrap: str, mode: str, heartbeat_ms: int, n: int, slow_s: float) -> tuple[float, float]:
    """A and C share the topic; B joins, consumes, leaves. Returns (A's longest gap on the
    partitions it owns before, during and after B's visit; B's join-to-first-record time)."""
    topic, group = f"pause-{mode}-{n}", f"pause-{mode}-{n}"
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer(bootstrap, topic)
    producer.start()
    a = Member(bootstrap, topic, group, mode, heartbeat_ms)
    c = Member(bootstrap, topic, group, mode, heartbeat_ms, revoke_s=slow_s)
    a.start()
    c.start()
    wait(lambda: len(a.assignment) == len(c.assignment) == PARTITIONS // 2 and len(a.got) > 200,
         "A and C to share the topic")
    time.sleep(1.0)
    before = set(a.assignment)
    joined = time.monotonic()
    b = Member(bootstrap, topic, group, mode, heartbeat_ms)
    b.start()
    wait(lambda: len(b.got) > 50 and len(a.assignment) == PARTITIONS // 3, "B to consume")
    window = b.got[0][1] - joined
    kept = before & a.assignment
    b.stop.set()
    b.join(60)
    wait(lambda: len(a.assignment) == PARTITIONS // 2, "A to get back to half")
    kept &= a.assignment
    time.sleep(1.0)
    for m in (a, c):
        m.stop.set()
    producer.stop.set()
    for t in (a, c, producer):
        t.join(60)
    gap = longest_gap([t for p, t in a.got if p in kept and t >= joined - 0.5])
    return gap, window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--heartbeat-ms", type=int, default=3000)
    ap.add_argument("--slow-revoke-ms", type=int, default=1000,
                    help="how long member C's on_revoke takes (A's is instant)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pause-") as base:
        broker = Broker(base, {"group.initial.rebalance.delay.ms": "0",
                               "group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
                               "group.consumer.min.heartbeat.interval.ms": str(min(args.heartbeat_ms, 5000)),
                               "offsets.topic.num.partitions": "1"})
        broker.start()
        try:
            print(f"heartbeat interval {args.heartbeat_ms} ms, C's on_revoke {args.slow_revoke_ms} ms, "
                  f"{args.rounds} rounds, producer every 2 ms")
            for mode in ("eager", "cooperative", "consumer"):
                gaps, windows = [], []
                for n in range(args.rounds):
                    gap, window = one_round(broker.bootstrap, mode, args.heartbeat_ms, n,
                                            args.slow_revoke_ms / 1000)
                    gaps.append(gap)
                    windows.append(window)
                print(f"{mode:12s} longest gap of A's kept partitions: median {statistics.median(gaps) * 1000:7.0f} ms"
                      f" (max {max(gaps) * 1000:.0f}); B's join-to-first-record: median "
                      f"{statistics.median(windows) * 1000:.0f} ms", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
