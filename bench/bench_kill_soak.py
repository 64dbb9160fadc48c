"""Kill soak: SIGKILL a loaded broker at random moments, restart it on the same data, check Kafka's
promises after every restart.

    python bench/bench_kill_soak.py [--cycles 200] [--seed 1] [--run-s 2.5] [--dir DIR]

The broker runs as `python -m kompakt serve` in its own process; the load comes from real clients
(confluent-kafka) in threads of this process and keeps running across restarts, as applications do:
  * idempotent acks=all producers on a `delete` topic (small segments, retention.bytes: segments
    are deleted while we run) and on two `compact` topics (small segments, an aggressive cleaner,
    a tombstone now and then);
  * a consumer group reading the delete topic and committing synchronously, recreated every few
    seconds so the group rebalances while we kill;
  * a transactional producer (transactions of 1-8 records, one in five aborted) on a third topic.
Each writer has the same shape (produce, the acknowledged records, pause/flush, prune).

A cycle: start the broker (with `TEST_KOMPAKT_CRASH_AT=<point>:<n>` for a chosen moment, else
none), let the load run, SIGKILL it (uniform: after a random time; chosen: the broker kills itself
at a crash point inside a segment roll, a clean, a swap, a retention deletion, a checkpoint write,
a group rebalance or a transaction's commit, kompakt/storage/faults.py), restart on the same dirs and check, with the
producers paused and flushed:
  * every acknowledged record at or above its partition's log start offset is there, at its
    acknowledged offset, with its key and value (on a compact topic: unless a later record of the
    same key is there);
  * offsets strictly increase; a delete topic's offsets are contiguous from the log start to the
    high watermark; every record is one we produced (value names its key and a per-key sequence),
    per-key sequences increase with the offset; the latest acknowledged value of each key is there
    or superseded by a later one;
  * a read_committed reader sees every record of each committed transaction at its offset, none of
    an aborted one, and of a transaction whose outcome the kill hid all records or none;
  * no `.cleaned`, `.swap` or unknown file that was left from before the kill;
  * committed offsets never go back; the cleaner checkpoint never points past the log end.
The figures: cycles, records acknowledged and checked, records lost, violations, recovery time per
cycle (process start to /ready), the event loop's longest stall (kompakt_event_loop_lag_max_seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELETE_TOPIC = "soak-events"
TXN_TOPIC = "soak-txn"
COMPACT_TOPICS = ("soak-state-a", "soak-state-b")
GROUP = "soak-group"
PARTITIONS = 2
KEYS = 150
QUIET = {"log_level": 2}   # librdkafka: no "Connect ... refused" lines while the broker is down
# The producers find the restarted broker again at their next metadata refresh, and retries back
# off exponentially up to retry.backoff.max.ms (1 s by default): both short, a pause's flush ends
# ~0.1 s after the broker is ready instead of ~1.1 s (a refresh every second).
RECONNECT = {"retry.backoff.ms": 50, "retry.backoff.max.ms": 200, "reconnect.backoff.max.ms": 200,
             "topic.metadata.refresh.interval.ms": 200}
GROUP_SESSION_MS = 2000

BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.dedupe.buffer.size": str(24 * 50_000),
    "log.retention.check.interval.ms": "500",
    "log.flush.offset.checkpoint.interval.ms": "700",
    "log.flush.start.offset.checkpoint.interval.ms": "700",
    "log.segment.delete.delay.ms": "300",
    "group.initial.rebalance.delay.ms": "0",
    # A member that died with the broker (its LeaveGroup never arrived) is still in the group the
    # restarted broker loads; the next join waits for its session to lapse (GROUP_SESSION_MS).
    "group.min.session.timeout.ms": "2000",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.segment.bytes": "1048576",
}
# Small segments (rolls every few seconds, cleans and retention deletions all the time), but not so
# small that a log fallen behind has thousands of them: with 6 KB segments a compact log grew to
# 2,500 segments under repeated kills and its clean never finished between two kills again.
RETENTION_BYTES = 100_000
DELETE_CONFIG = {"cleanup.policy": "delete", "internal.segment.bytes": "32000", "retention.bytes": str(RETENTION_BYTES)}
COMPACT_CONFIG = {"cleanup.policy": "compact", "internal.segment.bytes": "32000",
                  "min.cleanable.dirty.ratio": "0.01", "segment.ms": "600000"}

# Moments a chosen kill lands in (kompakt/storage/faults.py): (point, highest n to pick).
CHOSEN = [("segment_roll", 6), ("before_swap", 2), ("swap_renamed", 2), ("swap_old_deleted", 2),
          ("after_first_group", 1), ("before_checkpoint", 2), ("after_checkpoint", 2),
          ("retention_delete", 2), ("checkpoint_write", 4), ("group_rebalance", 2),
          ("txn_prepare_written", 2), ("txn_marker_written", 2), ("txn_markers_written", 2)]
KNOWN_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
KNOWN_FILES = ("leader-epoch-checkpoint", "partition.metadata")
VALUE_RE = re.compile(rb"^(?P<topic>[^|]+)\|(?P<key>[^|]+)\|(?P<seq>\d+)\|")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ broker
class SoakBroker:
    """`python -m kompakt serve` on free loopback ports, restartable on the same dirs."""

    def __init__(self, base: str, extra: dict[str, str] | None = None):
        self.base = base
        self.port, self.mport = free_port(), free_port()
        self.log_dir = os.path.join(base, "data")
        self.config = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": self.log_dir,
                       "metrics.port": str(self.mport), "metrics.host": "127.0.0.1",
                       "log.initial.task.delay.ms": "0", **BROKER_CONFIG, **(extra or {})}
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(base, "broker.log")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, crash_at: str | None = None, timeout_s: float = 90.0) -> float:
        """Start and wait for /ready; returns the seconds it took (recovery included)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KOMPAKT_", "TEST_KOMPAKT_"))}
        if crash_at:
            env["TEST_KOMPAKT_CRASH_AT"] = crash_at
        env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])  # this checkout
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "INFO"]
        for k, v in self.config.items():
            cmd += ["--override", f"{k}={v}"]
        with open(self.log_path, "ab") as out:
            out.write(f"\n===== start (crash at {crash_at})\n".encode())
            out.flush()
            t0 = time.monotonic()
            self.proc = subprocess.Popen(cmd, cwd=self.base, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if crash_at:          # killed itself at its crash point during start-up: fine
                    return time.monotonic() - t0
                raise RuntimeError(f"broker exited with {self.proc.returncode} during start-up; see {self.log_path}")
            if self.metric_ok("/ready"):
                return time.monotonic() - t0
            time.sleep(0.02)
        raise RuntimeError(f"broker not ready after {timeout_s}s; see {self.log_path}")

    def metric_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}{path}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def scrape(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


# ------------------------------------------------------------------------------------------ load
class _Pausable(threading.Thread):
    """A load thread the soak pauses while it checks: `pause()` returns once the thread has
    settled (its `run` sets `_paused` when it sees `_run` cleared), `resume()` lets it go on."""

    what = "load thread"

    def __init__(self, name: str):
        super().__init__(daemon=True, name=name)
        self._run = threading.Event()
        self._run.set()
        self._paused = threading.Event()
        self._stopping = False

    def pause(self, timeout_s: float = 180) -> None:
        self._run.clear()
        if not self._paused.wait(timeout_s):
            raise RuntimeError(f"{self.name}: the {self.what} did not settle within {timeout_s}s")

    def resume(self) -> None:
        self._paused.clear()
        self._run.set()

    def stop(self) -> None:
        self._stopping = True
        self._run.set()
        self.join(30)


class Writer(_Pausable):
    """An idempotent acks=all producer writing `topic|key|seq|` values to one topic's partitions.

    `acked[(partition, offset)] = (key, value)` for every delivery report without error (pruned by
    `prune` to what later checks still need); `acked_count` counts them all. `pause()` returns once
    everything sent is acknowledged or failed; `resume()` goes on."""

    def __init__(self, bootstrap: str, topic: str, rng: random.Random, *, tombstones: bool = False,
                 rate: int = 400):
        super().__init__(f"writer-{topic}")
        self.what = "producer"
        self.bootstrap, self.topic, self.rng, self.tombstones, self.rate = bootstrap, topic, rng, tombstones, rate
        self.acked: dict[tuple[int, int], tuple[bytes, bytes | None]] = {}
        self.acked_count = 0
        self.errors: list[str] = []
        self.seq = 0
        self._lock = threading.Lock()
        self._fatal = False
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        self._fatal = False
        return Producer({**QUIET, "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.size": 4000, "message.timeout.ms": 120000, **RECONNECT,
                         "error_cb": self._error})

    def _error(self, err) -> None:
        if err.fatal():                     # e.g. an idempotence violation: the broker lost state
            with self._lock:
                self.errors.append(f"{self.topic}: fatal producer error {err}")
            self._fatal = True

    def _report(self, err, msg) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(f"{self.topic}: delivery failed: {err}")
                return
            self.acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
            self.acked_count += 1

    def run(self) -> None:
        tick = time.monotonic()
        while not self._stopping:
            if not self._run.is_set():
                self.producer.flush(150)
                self._paused.set()
                self._run.wait()
                tick = time.monotonic()
                continue
            tick += 0.05                      # `rate` records a second, in 20 slices
            time.sleep(max(0.0, tick - time.monotonic()))
            for _ in range(max(1, self.rate // 20)):
                key = b"k%d" % self.rng.randrange(KEYS)
                self.seq += 1
                value = None
                if not (self.tombstones and self.rng.random() < 0.03):
                    value = b"%s|%s|%d|" % (self.topic.encode(), key, self.seq) + b"x" * self.rng.randrange(10, 120)
                try:
                    self.producer.produce(self.topic, key=key, value=value,
                                          partition=self.rng.randrange(PARTITIONS), on_delivery=self._report)
                except BufferError:
                    break
            self.producer.poll(0)
            if self._fatal:
                self.producer = self._new_producer()

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self.acked)

    def prune(self, lows: dict[int, int], compact: bool) -> None:
        """Forget what no later check needs: records below the log start (retention never brings
        them back) and, on a compact topic, every acknowledged record of a key but the latest."""
        with self._lock:
            keep = {}
            latest: dict[tuple[int, bytes], int] = {}
            for (p, o), (k, v) in self.acked.items():
                if o < lows.get(p, 0):
                    continue
                if compact:
                    prev = latest.get((p, k))
                    if prev is not None and prev > o:
                        continue
                    if prev is not None:
                        keep.pop((p, prev), None)
                    latest[(p, k)] = o
                keep[(p, o)] = (k, v)
            self.acked = keep


class TxnWriter(_Pausable):
    """A transactional producer on TXN_TOPIC: transactions of a few records, about one in five
    aborted. `committed[(partition, offset)] = (key, value)` for the records of transactions whose
    commit_transaction returned; `aborted` the values of aborted ones; `unknown` the values of a
    transaction whose outcome the broker's death hid (all of it visible to read_committed, or none).
    Same pause/resume/prune shape as Writer."""

    def __init__(self, bootstrap: str, rng: random.Random):
        super().__init__("writer-txn")
        self.what = "transactional producer"
        self.bootstrap, self.topic, self.rng = bootstrap, TXN_TOPIC, rng
        self.committed: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.acked_count = 0
        self.aborted: set[bytes] = set()
        self.unknown: list[set[bytes]] = []
        self.errors: list[str] = []
        self.txns = {"committed": 0, "aborted": 0, "unknown": 0}
        self.seq = 0
        self._lock = threading.Lock()
        self.producer = None

    def _new_producer(self) -> Producer:
        p = Producer({**QUIET, "bootstrap.servers": self.bootstrap, "transactional.id": "soak-txn",
                      "message.timeout.ms": 60000, "transaction.timeout.ms": 60000, **RECONNECT})
        p.init_transactions(120)             # fences the previous incarnation, finishes its transaction
        return p

    def _one_transaction(self) -> None:
        offsets: dict[bytes, tuple[int, int]] = {}

        def report(err, msg):
            if err is None:
                offsets[msg.value()] = (msg.partition(), msg.offset())

        values = []
        self.producer.begin_transaction()
        for _ in range(self.rng.randint(1, 8)):
            self.seq += 1
            key = b"k%d" % self.rng.randrange(KEYS)
            value = b"%s|%s|%d|txn" % (self.topic.encode(), key, self.seq)
            values.append((key, value))
            self.producer.produce(self.topic, key=key, value=value, partition=self.rng.randrange(PARTITIONS),
                                  on_delivery=report)
        self.producer.poll(0)
        abort = self.rng.random() < 0.2
        try:
            if abort:
                self.producer.abort_transaction(60)
            else:
                self.producer.commit_transaction(60)
        except KafkaException as exc:
            err = exc.args[0]
            with self._lock:
                if not abort and err.txn_requires_abort():
                    try:
                        self.producer.abort_transaction(60)
                        self.aborted.update(v for _, v in values)
                        self.txns["aborted"] += 1
                        return
                    except KafkaException:
                        pass
                self.unknown.append({v for _, v in values})
                self.txns["unknown"] += 1
            self.producer = None                # a new incarnation settles the transaction
            return
        with self._lock:
            if abort:
                self.aborted.update(v for _, v in values)
                self.txns["aborted"] += 1
            else:
                for key, value in values:
                    if value not in offsets:
                        self.errors.append(f"{self.topic}: committed record {value!r} has no delivery report")
                        continue
                    self.committed[offsets[value]] = (key, value)
                    self.acked_count += 1
                self.txns["committed"] += 1

    def run(self) -> None:
        while not self._stopping:
            if not self._run.is_set():
                self._paused.set()
                self._run.wait()
                continue
            try:
                if self.producer is None:
                    self.producer = self._new_producer()
                self._one_transaction()
                time.sleep(0.05)                 # about 20 transactions a second
            except KafkaException as exc:        # init_transactions against a dead broker: again later
                if exc.args[0].fatal():
                    self.producer = None
                time.sleep(0.2)

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self.committed)

    def prune(self, lows: dict[int, int], compact: bool) -> None:
        with self._lock:
            self.committed = {k: v for k, v in self.committed.items() if k[1] >= lows.get(k[0], 0)}


def check_transactions(w: TxnWriter, records_by_partition: dict[int, list]) -> list[str]:
    """read_committed view of TXN_TOPIC: no aborted record, each unknown transaction all or none."""
    violations = []
    seen = {v for recs in records_by_partition.values() for _, _, v in recs}
    for v in sorted(w.aborted & seen):
        violations.append(f"{TXN_TOPIC}: a record of an aborted transaction is visible to read_committed: {v!r}")
    for txn in w.unknown:
        visible = len(txn & seen)
        if visible not in (0, len(txn)):
            violations.append(f"{TXN_TOPIC}: {visible} of the {len(txn)} records of one transaction are visible")
    return violations


class GroupMember(_Pausable):
    """A consumer in GROUP reading the delete topic and committing synchronously; recreated every
    `rejoin_s` seconds (leave + join: a rebalance). `commits` holds every acknowledged commit."""

    def __init__(self, bootstrap: str, rejoin_s: float = 3.0):
        super().__init__("group-member")
        self.what = "consumer"
        self.bootstrap, self.rejoin_s = bootstrap, rejoin_s
        self.commits: list[tuple[float, int, int]] = []     # (time, partition, offset)
        self.errors: list[str] = []

    def run(self) -> None:
        while not self._stopping:
            if not self._run.is_set():
                self._paused.set()
                self._run.wait()
                continue
            self._session()

    def _session(self) -> None:
        c = Consumer({**QUIET, "bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": GROUP_SESSION_MS,
                      "heartbeat.interval.ms": 500, "reconnect.backoff.max.ms": 200})
        try:
            c.subscribe([DELETE_TOPIC])
            until = time.monotonic() + self.rejoin_s
            n = 0
            while not self._stopping and self._run.is_set() and time.monotonic() < until:
                msg = c.poll(0.2)
                if msg is None or msg.error():
                    continue
                n += 1
                if n % 20 == 0:
                    try:
                        done = c.commit(message=msg, asynchronous=False)
                        for tp in done or []:
                            if tp.error is None and tp.offset >= 0:
                                self.commits.append((time.monotonic(), tp.partition, tp.offset))
                    except KafkaException:
                        pass   # the broker died mid-commit: not acknowledged, not counted
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a close against a dead broker
                pass

    def acked_commits(self) -> dict[int, int]:
        best: dict[int, int] = {}
        for _, p, off in list(self.commits):
            best[p] = max(best.get(p, -1), off)
        return best


# ------------------------------------------------------------------------------------------ checks
def read_all(bootstrap: str, topics: list[str], timeout_s: float = 120,
             committed_only: bool = False) -> tuple[dict, dict]:
    """({(topic, partition): [(offset, key, value)]}, {(topic, partition): (low, high)}); with
    committed_only a read_committed reader (high is then the last stable offset)."""
    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": f"soak-reader-{time.monotonic_ns()}",
                  "isolation.level": "read_committed" if committed_only else "read_uncommitted",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50,
                  "auto.offset.reset": "earliest"})
    try:
        marks, assign = {}, []
        for t in topics:
            for p in range(PARTITIONS):
                low, high = c.get_watermark_offsets(TopicPartition(t, p), timeout=30)
                marks[(t, p)] = (low, high)
                if high > low:
                    assign.append(TopicPartition(t, p, low))
        out = {tp: [] for tp in marks}
        todo = {(tp.topic, tp.partition) for tp in assign}
        c.assign(assign)
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == -191 and msg.offset() >= marks[tp][1]:
                    todo.discard(tp)
                continue
            out[tp].append((msg.offset(), msg.key(), msg.value()))
            if msg.offset() >= marks[tp][1] - 1:
                todo.discard(tp)
        if todo:
            raise RuntimeError(f"could not read {sorted(todo)} to their high watermarks in {timeout_s}s")
        return out, marks
    finally:
        c.close()


def committed(bootstrap: str) -> dict[int, int]:
    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(DELETE_TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def cleaner_checkpoint(log_dir: str) -> dict[tuple[str, int], int]:
    path = os.path.join(log_dir, "cleaner-offset-checkpoint")
    out = {}
    try:
        lines = open(path).read().split("\n")[2:]
    except FileNotFoundError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def leftovers(log_dir: str, before: float) -> list[str]:
    """Files in partition dirs that recovery should have removed and that predate `before`.

    By ctime, not mtime: the cleaner gives a cleaned segment its sources' mtime (time-based
    retention must not restart), so a fresh `.cleaned` file can look old by mtime; its ctime is
    when it was made (or last renamed), which no one can set back."""
    found = []
    for d in os.listdir(log_dir):
        full = os.path.join(log_dir, d)
        if not os.path.isdir(full) or not any(d.startswith(t + "-") for t in (DELETE_TOPIC, *COMPACT_TOPICS)):
            continue
        for name in os.listdir(full):
            path = os.path.join(full, name)
            try:
                old = os.stat(path).st_ctime < before
            except FileNotFoundError:
                continue
            unknown = not (name.endswith(KNOWN_SUFFIXES) or name in KNOWN_FILES
                           or name.endswith((".deleted", ".cleaned")))
            if old and (name.endswith((".cleaned", ".swap")) or unknown):
                found.append(f"{d}/{name}")
    return found


def retention_settled(log_dir: str, topic: str, retention_bytes: int) -> bool:
    """True when a retention.bytes pass would delete nothing from any partition of `topic`, read
    from the segment files (Kafka's rule: the oldest non-active segment goes while the log without
    it is still at least retention.bytes; a deleted segment is renamed `.deleted` at once)."""
    for p in range(PARTITIONS):
        d = os.path.join(log_dir, f"{topic}-{p}")
        try:
            sizes = sorted((name, os.stat(os.path.join(d, name)).st_size)
                           for name in os.listdir(d) if name.endswith(".log"))
        except FileNotFoundError:          # a segment renamed between listing and stat: look again
            return False
        if len(sizes) > 1 and sum(size for _, size in sizes) - sizes[0][1] >= retention_bytes:
            return False
    return True


def marks_topics(marks: dict) -> dict:
    return dict.fromkeys(t for t, _ in marks)


def low_watermarks(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": "soak-marks"})
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=30)[0]
                for t in topics for p in range(PARTITIONS)}
    finally:
        c.close()


def check_topic(topic: str, compact: bool, records: list, low: int, low_after: int, high: int,
                acked: dict, partition: int, contiguous: bool | None = None) -> tuple[int, int, list[str]]:
    """(acked records checked, lost, violations) for one partition read from `low` (the log start
    when reading began; `low_after` when it ended: retention may have moved it) to `high`."""
    violations: list[str] = []
    where = f"{topic}-{partition}"
    offsets = [o for o, _, _ in records]
    if offsets != sorted(set(offsets)):
        violations.append(f"{where}: offsets not strictly increasing")
    if records and (offsets[0] < low or offsets[-1] >= high):
        violations.append(f"{where}: records outside [{low}, {high})")
    contiguous = not compact if contiguous is None else contiguous   # transactions leave marker gaps
    if contiguous and offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
        violations.append(f"{where}: offsets not contiguous")
    if contiguous and records and offsets[0] not in (low, low_after):
        violations.append(f"{where}: first offset {offsets[0]} is not the log start {low}")
    by_offset = {o: (k, v) for o, k, v in records}
    last_seq: dict[bytes, int] = {}
    last_offset_of_key: dict[bytes, int] = {}
    for o, k, v in records:
        last_offset_of_key[k] = o
        if v is None:
            continue
        m = VALUE_RE.match(v)
        if m is None or m["topic"] != topic.encode() or m["key"] != k:
            violations.append(f"{where}: record at {o} is not one we produced: {k!r}={v[:40]!r}")
            continue
        seq = int(m["seq"])
        if seq <= last_seq.get(k, -1):
            violations.append(f"{where}: key {k!r} out of order at offset {o}")
        last_seq[k] = seq
    checked = lost = 0
    mine = {o: kv for (p, o), kv in acked.items() if p == partition}
    for o, (k, v) in mine.items():
        if o < low_after:
            continue                         # deleted by retention (or DeleteRecords): not a loss
        checked += 1
        if o >= high:
            lost += 1
            violations.append(f"{where}: acknowledged offset {o} is at or past the high watermark {high}")
            continue
        got = by_offset.get(o)
        if got == (k, v):
            continue
        if got is not None:
            violations.append(f"{where}: offset {o} holds {got[0]!r} but {k!r} was acknowledged there")
        if compact and got is None and last_offset_of_key.get(k, -1) > o:
            continue                         # superseded by a later record of the key: compacted away
        lost += 1
    return checked, lost, violations


# ------------------------------------------------------------------------------------------ soak
class Soak:
    def __init__(self, base: str, *, seed: int, run_s: float, chosen_share: float = 0.5,
                 out=sys.stdout, transactions: bool = True):
        self.rng = random.Random(seed)
        self.base, self.run_s, self.chosen_share, self.out = base, run_s, chosen_share, out
        self.broker = SoakBroker(base)
        self.writers: list[Writer] = []
        self.member: GroupMember | None = None
        self.txn: TxnWriter | None = None
        self.transactions = transactions
        self.cycles: list[dict] = []
        self.max_commits: dict[int, int] = {}
        self.max_loop_lag = 0.0
        self.cycle_lag = 0.0

    def setup(self) -> None:
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        topics = [NewTopic(DELETE_TOPIC, PARTITIONS, 1, config=DELETE_CONFIG)]
        topics += [NewTopic(t, PARTITIONS, 1, config=COMPACT_CONFIG) for t in COMPACT_TOPICS]
        if self.transactions:
            topics.append(NewTopic(TXN_TOPIC, PARTITIONS, 1, config={"internal.segment.bytes": "32000"}))
        for fut in admin.create_topics(topics).values():
            fut.result(30)
        b = self.broker.bootstrap
        self.writers = [Writer(b, DELETE_TOPIC, random.Random(self.rng.random()))]
        self.writers += [Writer(b, t, random.Random(self.rng.random()), tombstones=True) for t in COMPACT_TOPICS]
        if self.transactions:
            self.txn = TxnWriter(b, random.Random(self.rng.random()))
            self.writers.append(self.txn)
        self.member = GroupMember(b)
        for w in (*self.writers, self.member):
            w.start()

    def pause(self) -> None:
        for w in self.writers:
            w.pause()
        self.member.pause()

    def resume(self) -> None:
        for w in self.writers:
            w.resume()
        self.member.resume()

    def pick(self) -> str | None:
        """A random kill: None (uniform) or `<point>:<n>` (a chosen moment)."""
        if self.rng.random() >= self.chosen_share:
            return None
        point, top = self.rng.choice(CHOSEN)
        return f"{point}:{self.rng.randint(1, top)}"

    def cycle(self, n: int, crash_at: str | None) -> dict:
        self.cycle_lag = 0.0
        # 1. the broker from the last check is running with no crash point: restart it armed
        if crash_at:
            self.broker.kill()
            killed_at = time.time()
            recovery = self.broker.start(crash_at=crash_at)
            self.resume()
            deadline = time.monotonic() + max(20.0, self.run_s * 8)
            while self.broker.alive and time.monotonic() < deadline:
                self._watch_lag()
                time.sleep(0.1)
            reached = not self.broker.alive
            self.broker.kill()
            how = f"at {crash_at}" + ("" if reached else " (not reached; killed after the wait)")
            self.pause_quietly()
            first_recovery = recovery
        else:
            self.resume()
            end = time.monotonic() + self.rng.uniform(0.3, self.run_s * 2)
            while time.monotonic() < end:
                self._watch_lag()
                time.sleep(0.1)
            self.broker.kill()
            how = "uniform"
            self.pause_quietly()
            first_recovery = None
        killed_at = time.time()
        checkpoint = cleaner_checkpoint(self.broker.log_dir)
        # 2. restart unarmed on the same data, then check
        recovery = self.broker.start()
        result = self.check(killed_at, checkpoint)
        result.update(cycle=n, kill=how, recovery_s=round(recovery, 3), loop_stall_s=round(self.cycle_lag, 3),
                      armed_start_s=None if first_recovery is None else round(first_recovery, 3))
        self.cycles.append(result)
        print(f"cycle {n:3d} kill {how:42s} recovery {recovery:5.2f}s acked {result['acked']:7d} "
              f"checked {result['checked']:7d} lost {result['lost']} violations {len(result['violations'])}",
              file=self.out, flush=True)
        for v in result["violations"][:10]:
            print(f"    VIOLATION {v}", file=self.out, flush=True)
        return result

    def pause_quietly(self) -> None:
        """Stop the load while the broker is down; the producers flush after the restart."""
        for w in (*self.writers, self.member):
            w._run.clear()

    def _watch_lag(self) -> None:
        lag = self.broker.scrape("kompakt_event_loop_lag_max_seconds")
        if lag is not None:
            self.max_loop_lag = max(self.max_loop_lag, lag)
            self.cycle_lag = max(self.cycle_lag, lag)

    def check(self, killed_at: float, checkpoint: dict) -> dict:
        violations = [f"left over from before the kill: {f}" for f in leftovers(self.broker.log_dir, killed_at)]
        self.pause()                       # producers flush: their retries land on the new broker
        errors = [e for w in self.writers for e in w.errors]
        for w in self.writers:
            w.errors.clear()
        violations += [f"producer error: {e}" for e in errors]
        # Read only once retention has nothing left to delete from the delete topic (a pass every
        # 0.5 s): a log start moving under the reader would read as a gap.
        deadline = time.monotonic() + 30
        while not retention_settled(self.broker.log_dir, DELETE_TOPIC, RETENTION_BYTES):
            if time.monotonic() > deadline:
                violations.append(f"{DELETE_TOPIC}: retention.bytes left deletable segments for 30 s")
                break
            time.sleep(0.05)
        topics = [DELETE_TOPIC, *COMPACT_TOPICS]
        data, marks = read_all(self.broker.bootstrap, topics)
        if self.txn is not None:          # what read_committed consumers see of the transactions
            txn_data, txn_marks = read_all(self.broker.bootstrap, [TXN_TOPIC], committed_only=True)
            data.update(txn_data)
            marks.update(txn_marks)
            violations += check_transactions(self.txn, {p: txn_data[(TXN_TOPIC, p)] for p in range(PARTITIONS)})
        after = low_watermarks(self.broker.bootstrap, list(marks_topics(marks)))
        checked = lost = acked_total = 0
        for w in self.writers:
            acked = w.snapshot()
            acked_total += w.acked_count
            compact = w.topic in COMPACT_TOPICS
            lows = {}
            for p in range(PARTITIONS):
                low, high = marks[(w.topic, p)]
                lows[p] = max(low, after[(w.topic, p)])
                c, l, v = check_topic(w.topic, compact, data[(w.topic, p)], low, lows[p], high, acked, p,
                                      contiguous=w.topic == DELETE_TOPIC)
                checked, lost, violations = checked + c, lost + l, violations + v
            w.prune(lows, compact)
        for (t, p), cp in checkpoint.items():
            if (t, p) in marks and cp > marks[(t, p)][1]:
                violations.append(f"cleaner checkpoint of {t}-{p} at {cp} is past the log end {marks[(t, p)][1]}")
        now = committed(self.broker.bootstrap)
        for p, off in self.member.acked_commits().items():
            self.max_commits[p] = max(self.max_commits.get(p, -1), off)
        for p, off in self.max_commits.items():
            if now.get(p, -1) < off:
                violations.append(f"committed offset of {DELETE_TOPIC}-{p} went back: {now.get(p)} < {off}")
        return {"acked": acked_total, "checked": checked, "lost": lost, "violations": violations}

    def close(self) -> None:
        for w in (*self.writers, self.member):
            if w is not None:
                w.stop()
        self.broker.stop()

    def summary(self) -> dict:
        rec = [c["recovery_s"] for c in self.cycles]
        return {"cycles": len(self.cycles),
                "chosen_kills": sum(1 for c in self.cycles if c["kill"] != "uniform"),
                "chosen_reached": sum(1 for c in self.cycles if c["kill"].startswith("at ") and "not reached" not in c["kill"]),
                "acked": self.cycles[-1]["acked"] if self.cycles else 0,
                "checked_total": sum(c["checked"] for c in self.cycles),
                "lost": sum(c["lost"] for c in self.cycles),
                "violations": sum(len(c["violations"]) for c in self.cycles),
                "recovery_s_median": round(statistics.median(rec), 3) if rec else None,
                "recovery_s_max": round(max(rec), 3) if rec else None,
                "max_event_loop_stall_s": round(self.max_loop_lag, 3),
                "event_loop_stall_s_median": round(statistics.median(c["loop_stall_s"] for c in self.cycles), 3)
                if self.cycles else None,
                "transactions": dict(self.txn.txns) if self.txn is not None else None}


def run(cycles: int, base: str, seed: int = 1, run_s: float = 2.5, out=sys.stdout,
        plan: list[str | None] | None = None) -> dict:
    """`cycles` random kills, or the kills of `plan` in order (None: uniform, else `<point>:<n>`)."""
    soak = Soak(base, seed=seed, run_s=run_s, out=out)
    try:
        soak.setup()
        kills = plan if plan is not None else [soak.pick() for _ in range(cycles)]
        for n, crash_at in enumerate(kills, start=1):
            soak.cycle(n, crash_at)
        return soak.summary() | {"per_cycle": soak.cycles}
    finally:
        soak.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-s", type=float, default=2.5, help="mean seconds of load before a uniform kill")
    ap.add_argument("--dir", help="work dir (default: a temp dir, removed afterwards)")
    ap.add_argument("--json", help="write the summary and per-cycle figures here")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="kompakt-soak-")
    os.makedirs(base, exist_ok=True)
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # so the broker is stopped too
    result = run(args.cycles, base, args.seed, args.run_s)
    summary = {k: v for k, v in result.items() if k != "per_cycle"}
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    sys.exit(1 if summary["lost"] or summary["violations"] else 0)


if __name__ == "__main__":
    main()
