"""Helpers of the consumer-group integration tests: member processes, producing, polling.

Members run as separate processes (groups_consumer.py) so that a crash is a real SIGKILL: no
LeaveGroup, the broker must notice through the session timeout.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
WAIT_S = 45.0

# Broker settings that keep group tests quick: no initial rebalance delay, short sessions allowed.
GROUP_BROKER = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
                "offsets.topic.num.partitions": "5", "offsets.retention.check.interval.ms": "600000"}


class Member:
    """One consumer process; its JSON events are collected by a reader thread."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, log_dir: Path,
                 instance_id: str | None = None, session_ms: int = 2000, protocol: str = "classic",
                 wait_for_go: bool = False):
        self.client = client
        cmd = [sys.executable, str(HERE / "groups_consumer.py"), client, bootstrap, group, topic,
               "--session-ms", str(session_ms), "--protocol", protocol]
        if wait_for_go:
            cmd.append("--wait-for-go")          # joins after go(); count("ready") says it is loaded
        if instance_id:
            cmd += ["--instance-id", instance_id]
        self.stderr_path = Path(log_dir) / f"member-{client}-{instance_id or 'dyn'}-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> set[int] | None:
        """The partitions owned now: the last "assigned" unless a "revoked" followed it."""
        current = None
        for e in self.snapshot():
            if e["event"] == "assigned":
                current = set(e["partitions"])
            elif e["event"] == "revoked" and current is not None:
                current -= set(e["partitions"])
        return current

    def values(self) -> list[str]:
        return [r[2] for e in self.snapshot() if e["event"] == "records" for r in e["records"]]

    def in_doubt(self) -> list[str]:
        """The values of a batch whose commit had no answer when the member stopped: a member
        killed while its commit was on the wire may or may not have committed them (the broker
        can append the commit after the kill), so nobody may read them again."""
        pending: list[str] = []
        for e in self.snapshot():
            if e["event"] == "committing":
                pending = [r[2] for r in e["records"]]
            elif e["event"] in ("records", "commit_failed"):
                pending = []
        return pending

    def count(self, event: str) -> int:
        return sum(1 for e in self.snapshot() if e["event"] == event)

    def go(self) -> None:
        """Let a member started with wait_for_go subscribe (it has emitted "ready")."""
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def begin_close(self) -> None:
        """Ask the member to close gracefully, without waiting for it (see close())."""
        try:
            self.proc.stdin.write(b"close\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass

    def close(self, timeout: float = 30.0) -> None:
        """Graceful close (the consumer sends LeaveGroup unless static)."""
        if self.proc.poll() is None:
            self.begin_close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.client} member did not close:\n{self.stderr()}")
        self._reader.join(5)
        self._stderr.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._reader.join(5)
        self._stderr.close()

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-3000:]
        except FileNotFoundError:
            return ""


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}})
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    """Values spread round-robin over the partitions; returns when all are acknowledged."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list = []
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0, "producer did not deliver everything"
    assert not errors, errors


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """partition -> committed offset of `group`, read with kafka-python's admin client."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items()}


def listed_groups(bootstrap: str) -> dict[str, dict]:
    """group id -> ListGroups entry, with kafka-python's admin client."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        return {g["group_id"]: g for g in admin.list_groups()}
    finally:
        admin.close()


def rebalances_logged(broker) -> int:
    """How many join phases the coordinator has started (its log line per PreparingRebalance)."""
    return broker.log_text().count("preparing to rebalance")


class SteadyProducer:
    """Writes `<prefix>-n` round-robin over `partitions` partitions every `interval` s, from a
    thread, until stopped (records flowing while a group changes)."""

    def __init__(self, bootstrap: str, topic: str, prefix: str, partitions: int, interval: float = 0.005):
        from confluent_kafka import Producer
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.topic, self.prefix, self.partitions, self.interval = topic, prefix, partitions, interval
        self.sent: list[str] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        n = 0
        while not self._stop.is_set():
            value = f"{self.prefix}-{n}"
            self.producer.produce(self.topic, value.encode(), partition=n % self.partitions,
                                  on_delivery=lambda err, msg: self.errors.append(err) if err else None)
            self.sent.append(value)
            n += 1
            self.producer.poll(0)
            time.sleep(self.interval)

    def stop(self) -> list[str]:
        """Stop, wait for every record's acknowledgement; the values sent, in order."""
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0 and not self.errors, self.errors
        return self.sent


def consumed(members) -> Counter:
    """How many times the members reported (committed) each value."""
    return Counter(v for m in members for v in m.values())


def unconsumed(members, sent, in_doubt=()) -> str:
    """For a failed wait: the values sent but neither reported nor `in_doubt` (a killed member's
    last unanswered batch), with each member's commit failures and rebalances (what a lost
    record's story needs)."""
    seen = set(consumed(members)) | set(in_doubt)
    missing = [v for v in sent if v not in seen]
    lines = [f"{len(missing)} of {len(sent)} unconsumed, first {missing[:10]}"]
    for i, m in enumerate(members):
        story = [(e["event"], e.get("partitions") or e.get("error") or len(e.get("records", ())))
                 for e in m.snapshot() if e["event"] not in ("records", "committing")]
        lines.append(f"member {i}: in doubt {m.in_doubt()[:5]}, events {story[-20:]}")
    return "\n".join(lines)


def disjoint(members) -> bool:
    """No partition owned by two members now."""
    owned = [m.assignment() or set() for m in members]
    return sum(len(o) for o in owned) == len(set().union(*owned))
