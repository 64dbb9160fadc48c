"""Helpers of the client-compatibility tests (test_compat_*.py, test_kafkajs.py): one producer and
one reader function per real client, all speaking the same record shape, so a test can write with
any client and compare what every other client reads back.

Record shape (`Rec`): partition, key (bytes|None), value (bytes|None), headers (tuple of
(str, bytes|None), in wire order), timestamp (ms, or None = let the client stamp it). A reader
returns `Read` rows: the same fields plus offset and timestamp type ("create" | "logappend"), as the
client reported them. kafkajs folds headers into an object and @platformatic/kafka into a Map, and
the latter has no timestamp type: `comparable(reader, rows)` reduces rows to what a reader can tell.
Helpers also start module brokers (`running_broker`, `node_group_broker`), run the Node.js drivers
in js/ (`kafkajs`, `platformatic`, `ensure_node_modules`) and decode segment files
(`stored_batches`).
"""
from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import NamedTuple

JS_DIR = Path(__file__).resolve().parent / "js"
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
NODE = shutil.which("node")
NPM = shutil.which("npm")
TIMEOUT_S = 60.0
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class Rec(NamedTuple):
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    timestamp: int | None = None


class Read(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int
    timestamp_type: str


def comparable(reader: str, rows: list, *, log_append: bool = False) -> list:
    """Rows reduced to what `reader` can report. kafkajs folds headers into an object (a key's
    values stay in order, grouped at the key's first place). @platformatic/kafka 1.35 keeps them in
    a Map (a repeated key keeps its first place and its last value) and has no timestamp type: it
    always reports baseTimestamp + delta, so on a LogAppendTime topic its timestamps are not
    comparable."""
    if reader == "kafkajs":
        return [r._replace(headers=tuple((k, v) for k, vs in _group(r.headers).items() for v in vs))
                for r in rows]
    if reader != "platformatic":
        return rows
    return [r._replace(headers=tuple(dict(r.headers).items()), timestamp_type=None,
                       timestamp=None if log_append else r.timestamp) for r in rows]


def _group(headers) -> dict:
    out: dict = {}
    for k, v in headers:
        out.setdefault(k, []).append(v)
    return out


def _s(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


@contextlib.contextmanager
def running_broker(base_dir, config: dict):
    """A `kompakt serve` of the test harness with `config`, for a module-scoped fixture."""
    from broker_process import BrokerProcess
    proc = BrokerProcess(base_dir, config)
    proc.start()
    try:
        yield proc
    finally:
        try:
            proc.stop()
        except RuntimeError:
            proc.kill()


def node_group_broker(tmp_path_factory, name: str):
    """The broker of the Node.js client modules (context manager): node_modules installed first; a
    short, non-zero initial rebalance delay so that two members started together land in one
    generation (no rebalance in the middle of a read, so no legitimate redelivery to excuse)."""
    ensure_node_modules()
    return running_broker(tmp_path_factory.mktemp(name),
                          {"num.partitions": "3", "offsets.topic.num.partitions": "1",
                           "group.initial.rebalance.delay.ms": "500"})


# -- on disk -----------------------------------------------------------------------------------------

def stored_batches(log_dir: str, topic: str, partition: int):
    """(header, records) of every batch in one partition's segment files, in offset order."""
    from kompakt.protocol.records import decode_records, iter_batches
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log"))):
        data = Path(path).read_bytes()
        for pos, header in iter_batches(data):
            out.append((header, decode_records(data, pos, header)))
    return out


# -- kafkajs -----------------------------------------------------------------------------------------

def ensure_node_modules() -> None:
    """`npm ci` once: installs exactly the locked packages (kafkajs, @platformatic/kafka) into
    js/node_modules. The suite's two xdist workers may both get here first on a fresh checkout,
    and `npm ci` deletes node_modules before it installs: the check and the install run under an
    exclusive lock on a file beside them, so one installs while the other waits, then finds them."""
    import fcntl
    modules = JS_DIR / "node_modules"
    with open(JS_DIR / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((modules / name / "package.json").exists() for name in ("kafkajs", "@platformatic/kafka")):
            return
        proc = subprocess.run([NPM, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_DIR,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"npm ci failed in {JS_DIR}:\n{proc.stdout}\n{proc.stderr}"


def node_step(script: str, broker, step: str, args: dict) -> dict:
    """Run one step of a js/ driver; fail with the client's own error and log when it throws."""
    env = {**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    proc = subprocess.run([NODE, str(JS_DIR / script), broker.bootstrap, step, json.dumps(args)],
                          cwd=JS_DIR, env=env, capture_output=True, text=True, timeout=TIMEOUT_S * 1.5)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    assert proc.returncode == 0 and "error" not in result, (
        f"{script} {step} failed ({proc.returncode}): {result}\n--- client log ---\n{proc.stderr[-4000:]}"
        f"\n--- broker log ---\n{broker.log_text()[-3000:]}")
    return result


def kafkajs(broker, step: str, **args) -> dict:
    return node_step("kafkajs_client.js", broker, step, args)


def platformatic(broker, step: str, **args) -> dict:
    return node_step("platformatic_client.js", broker, step, args)


# -- producers: each sends `records` to `topic` with `codec`, one flush at the end -------------------

def produce_confluent(broker, topic, codec, records):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50,
                  "acks": "all"})
    errors = []
    for r in records:
        p.produce(topic, key=r.key, value=r.value, partition=r.partition, headers=list(r.headers),
                  timestamp=r.timestamp or 0, on_delivery=lambda err, _msg: err and errors.append(err))
    assert p.flush(TIMEOUT_S) == 0 and not errors, errors


def produce_kafka_python(broker, topic, codec, records):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=50, acks="all")
    try:
        futures = [p.send(topic, key=r.key, value=r.value, partition=r.partition, headers=list(r.headers),
                          timestamp_ms=r.timestamp) for r in records]
        p.flush(TIMEOUT_S)
        for f in futures:
            f.get(TIMEOUT_S)
    finally:
        p.close(5)


def produce_aiokafka(broker, topic, codec, records):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50, acks="all",
                             compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            futures = [await p.send(topic, key=r.key, value=r.value, partition=r.partition,
                                    headers=list(r.headers), timestamp_ms=r.timestamp) for r in records]
            await asyncio.gather(*futures)
        finally:
            await p.stop()
    asyncio.run(run())


def produce_kcat(broker, topic, codec, records):
    """kcat takes one partition and one header set per run, keys via -K, null values via -Z; it
    cannot set timestamps. Null keys are lines without the delimiter."""
    groups: dict = {}
    for r in records:
        assert r.timestamp is None, "kcat cannot set record timestamps"
        groups.setdefault((r.partition, r.headers), []).append(r)
    for (partition, headers), rs in groups.items():
        lines = "".join((_s(r.value) or "") + "\n" if r.key is None else f"{_s(r.key)}\t{_s(r.value) or ''}\n"
                        for r in rs)
        args = [KCAT, "-b", broker.bootstrap, "-P", "-t", topic, "-p", str(partition), "-K\t", "-Z",
                "-z", codec, "-X", "linger.ms=50"]
        for k, v in headers:
            args += ["-H", f"{k}={_s(v)}"]
        proc = subprocess.run(args, input=lines, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, f"kcat produce failed: {proc.stderr}"


def _js_jobs(jobs):
    return [{"topic": topic, "compression": codec,
             "batches": [[{"partition": r.partition, "key": _s(r.key), "value": _s(r.value),
                           "headers": [[k, _s(v)] for k, v in r.headers], "timestamp": r.timestamp}
                          for r in records]]}
            for topic, codec, records in jobs]


def produce_many_kafkajs(broker, jobs):
    assert all(codec in ("none", "gzip") for _, codec, _ in jobs), "kafkajs has only gzip built in"
    names = {"none": "None", "gzip": "GZIP"}
    out = kafkajs(broker, "send", jobs=[{**j, "compression": names[j["compression"]]} for j in _js_jobs(jobs)])
    assert all(a["errorCode"] == 0 for a in out["acks"]), out


def produce_many_platformatic(broker, jobs):
    """@platformatic/kafka: headers are a Map, so a record cannot repeat a header key."""
    for _, _, records in jobs:
        assert all(len({k for k, _ in r.headers}) == len(r.headers) for r in records), "repeated header key"
    out = platformatic(broker, "send", jobs=_js_jobs(jobs))
    assert out["offsets"], out


def produce_many(writer: str, broker, jobs) -> None:
    """jobs: [(topic, codec, records)], in order. The Node.js clients take them all in one process."""
    if writer == "kafkajs":
        produce_many_kafkajs(broker, jobs)
    elif writer == "platformatic":
        produce_many_platformatic(broker, jobs)
    else:
        for topic, codec, records in jobs:
            PRODUCERS[writer](broker, topic, codec, records)


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka, "kcat": produce_kcat,
             "kafkajs": lambda b, t, c, rs: produce_many_kafkajs(b, [(t, c, rs)]),
             "platformatic": lambda b, t, c, rs: produce_many_platformatic(b, [(t, c, rs)])}


# -- readers: every record of `ends` ({topic: {partition: end offset}}) from the beginning ----------

def _pending(ends):
    return {(t, p) for t, parts in ends.items() for p, end in parts.items() if end > 0}


def _done(pending, ends, topic, partition, offset):
    if offset >= ends[topic][partition] - 1:
        pending.discard((topic, partition))


def read_confluent(broker, ends) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"compat-{uuid.uuid4()}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    out = {t: [] for t in ends}
    pending = _pending(ends)
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in pending])
        deadline = time.monotonic() + TIMEOUT_S
        while pending and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            ts_type, ts = msg.timestamp()
            out[msg.topic()].append(Read(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                         tuple(msg.headers() or ()), ts,
                                         "logappend" if ts_type == TIMESTAMP_LOG_APPEND_TIME else "create"))
            _done(pending, ends, msg.topic(), msg.partition(), msg.offset())
    finally:
        c.close()
    assert not pending, f"confluent-kafka did not reach the end of {pending}"
    return out


def read_kafka_python(broker, ends) -> dict:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      fetch_max_wait_ms=10, auto_offset_reset="earliest")
    out = {t: [] for t in ends}
    pending = _pending(ends)
    try:
        c.assign([TopicPartition(t, p) for t, p in pending])
        c.seek_to_beginning()
        deadline = time.monotonic() + TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    out[tp.topic].append(Read(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                                              m.timestamp, "logappend" if m.timestamp_type == 1 else "create"))
                    _done(pending, ends, tp.topic, m.partition, m.offset)
    finally:
        c.close()
    assert not pending, f"kafka-python did not reach the end of {pending}"
    return out


def read_aiokafka(broker, ends) -> dict:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    out = {t: [] for t in ends}
    pending = _pending(ends)

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=10, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([TopicPartition(t, p) for t, p in pending])
            await c.seek_to_beginning()
            deadline = time.monotonic() + TIMEOUT_S
            while pending and time.monotonic() < deadline:
                for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                    for m in msgs:
                        out[tp.topic].append(Read(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                                                  m.timestamp, "logappend" if m.timestamp_type == 1 else "create"))
                        _done(pending, ends, tp.topic, m.partition, m.offset)
        finally:
            await c.stop()
    asyncio.run(run())
    assert not pending, f"aiokafka did not reach the end of {pending}"
    return out


def _kcat_rows(stdout: str, out: dict) -> None:
    for line in stdout.splitlines():
        m = json.loads(line)
        h = m.get("headers", [])
        headers = tuple((h[i], _b(h[i + 1])) for i in range(0, len(h), 2))
        out[m["topic"]].append(Read(m["partition"], m["offset"], _b(m["key"]), _b(m["payload"]), headers,
                                    m["ts"], {"create": "create", "logappend": "logappend"}[m["tstype"]]))


def read_kcat(broker, ends, extra=(), group=True) -> dict:
    """kcat as a balanced consumer (-G, librdkafka's KafkaConsumer) over all topics in one run, or
    (group=False) one simple-consumer run per topic, which needs no group join (a broker's initial
    rebalance delay); -e exits once every partition reached its end. `extra`: more kcat arguments
    (e.g. -X check.crcs=true); any error librdkafka reports fails the read."""
    topics = [t for t, parts in ends.items() if any(parts.values())]
    out = {t: [] for t in ends}
    common = ["-o", "beginning", "-e", "-J", "-X", "fetch.wait.max.ms=10", *extra]
    runs = ([["-G", f"compat-{uuid.uuid4()}", "-X", "enable.auto.commit=false", *common, *topics]] if group
            else [["-C", "-t", t, *common] for t in topics]) if topics else []
    for args in runs:
        proc = subprocess.run([KCAT, "-b", broker.bootstrap, *args], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        assert proc.returncode == 0 and "ERROR" not in proc.stderr.upper(), f"kcat {args} failed: {proc.stderr}"
        _kcat_rows(proc.stdout, out)
    return out


def read_kafkajs(broker, ends) -> dict:
    r = kafkajs(broker, "read", ends=ends, groupId=f"compat-{uuid.uuid4()}")
    assert r["outcome"] == "complete", f"kafkajs: {r['outcome']}; did not reach the end of {r['pending']}"
    out = {t: [] for t in ends}
    for m in r["records"]:
        # kafkajs gives headers as an object ({k: v | [v, ...]}); rebuild pairs grouped by key
        headers = tuple((k, _b(v)) for k, vs in m["headers"].items() for v in (vs if isinstance(vs, list) else [vs]))
        out[m["topic"]].append(Read(m["partition"], m["offset"], _b(m["key"]), _b(m["value"]), headers,
                                    m["timestamp"], "logappend" if m["timestampType"] == 1 else "create"))
    return out


def read_platformatic(broker, ends) -> dict:
    r = platformatic(broker, "read", ends=ends, groupId=f"compat-{uuid.uuid4()}")
    assert r["outcome"] == "complete", f"@platformatic/kafka: {r['outcome']}; did not reach the end of {r['pending']}"
    out = {t: [] for t in ends}
    for m in r["records"]:
        # no timestamp type in its messages: it always computes base timestamp + delta
        out[m["topic"]].append(Read(m["partition"], m["offset"], _b(m["key"]), _b(m["value"]),
                                    tuple((k, _b(v)) for k, v in m["headers"]), m["timestamp"], "create"))
    return out


READERS = {"confluent": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka,
           "kcat": read_kcat, "kafkajs": read_kafkajs, "platformatic": read_platformatic}


def end_offsets(broker, topics) -> dict:
    """{topic: {partition: log end offset}} through confluent-kafka's ListOffsets."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "compat-ends"})
    try:
        out = {}
        for topic in topics:
            meta = c.list_topics(topic, timeout=10).topics[topic]
            out[topic] = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                          for p in sorted(meta.partitions)}
        return out
    finally:
        c.close()


def by_partition(rows) -> dict:
    """{partition: [rows in offset order]} (readers interleave partitions differently)."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        out.setdefault(r.partition, []).append(r)
    return out
