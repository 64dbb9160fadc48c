"""The admin HTTP API against a real broker process, over real HTTP, with real Kafka clients
producing and consuming: partition listing and detail, every error path (unknown topic, partition
out of range, bad input, compact on a delete-policy topic, resume when not paused), reentrant
pause/resume, compact-now actually compacting (checked by reading from offset 0 with
confluent-kafka), adopting a compacted staging dir (and refusing a stale one), and the
`kompakt admin` CLI wrapping it."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import BrokerProcess
from kompakt.testing.ports import closed_port

QUIET = {"log_level": 0}
PAD = b"x" * 100  # values large enough that a few dozen records roll 1 KiB segments


def http(base: str, method: str, path: str, body=None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def create_topics(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for name, fut in admin.create_topics(list(topics), operation_timeout=10).items():
        fut.result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]], partition: int = 0,
            linger_ms: int = 0) -> None:
    errors: list = []
    # batch.size under log.segment.bytes (1 KiB here): a batch larger than a segment is refused
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 700, **QUIET})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


def read_all(bootstrap: str, topic: str, partition: int, end_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from offset 0 up to end_offset, as (offset, key, value)."""
    # offset 0 below the log start offset (after DeleteRecords) resets to the earliest offset
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-api-test", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest", **QUIET})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191 and msg.offset() >= end_offset:  # _PARTITION_EOF at the end
                    break
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    """One broker for the module (each test works on its own topic): small segments so a few
    hundred records roll several; the background cleaner waits long so only the admin API's
    compact-now cleans here."""
    b = BrokerProcess(tmp_path_factory.mktemp("admin-api"), {
        "log.segment.bytes": "1024", "log.cleaner.backoff.ms": "600000",
        "log.cleaner.min.cleanable.ratio": "0.99", "offsets.topic.num.partitions": "1"})
    try:
        yield b.start()
    finally:
        try:
            b.stop()
        except RuntimeError:
            b.kill()


@pytest.fixture
def topic(kbroker, request) -> str:
    """A fresh compacted topic of 2 partitions named after the test."""
    name = request.node.name.removeprefix("test_")[:60]
    create_topics(kbroker.bootstrap, NewTopic(name, 2, 1, config={"cleanup.policy": "compact"}))
    return name


def test_partitions_list_detail_and_errors(kbroker, topic):
    base = kbroker.metrics_url
    plain = topic + "_plain"
    create_topics(kbroker.bootstrap, NewTopic(plain, 1, 1, config={"cleanup.policy": "delete"}))
    produce(kbroker.bootstrap, plain, [(b"k", b"v%d-" % i + PAD) for i in range(30)])

    status, body = http(base, "GET", "/v1/partitions")
    assert status == 200
    rows = {(p["topic"], p["partition"]): p for p in body["partitions"]}
    assert {(topic, 0), (topic, 1), (plain, 0)} <= set(rows)
    assert rows[(plain, 0)]["log_end_offset"] == 30 and rows[(plain, 0)]["size_bytes"] > 0
    assert rows[(plain, 0)]["cleanup_policy"] == ["delete"] and rows[(topic, 0)]["cleanup_policy"] == ["compact"]
    status, body = http(base, "GET", f"/v1/partitions?topic={topic}")
    assert status == 200 and {p["topic"] for p in body["partitions"]} == {topic}

    status, detail = http(base, "GET", f"/v1/partitions/{plain}/0")
    assert status == 200
    assert detail["log_end_offset"] == 30 and detail["segment_count"] == len(detail["segments"]) > 1
    assert sum(s["size_bytes"] for s in detail["segments"]) == detail["size_bytes"]
    assert [s["active"] for s in detail["segments"]].count(True) == 1 and detail["segments"][-1]["active"]
    assert detail["cleaner"]["enabled"] is True and detail["cleaner"]["state"] == "None"

    cases = [
        ("GET", "/v1/partitions/nosuch/0", 404, "unknown_topic"),
        ("GET", "/v1/partitions?topic=nosuch", 404, "unknown_topic"),
        ("GET", f"/v1/partitions/{topic}/2", 404, "unknown_partition"),
        ("GET", f"/v1/partitions/{topic}/x", 400, "bad_partition"),
        ("GET", f"/v1/partitions/{topic}/-1", 400, "bad_partition"),
        ("POST", "/v1/partitions/nosuch/0/compact", 404, "unknown_topic"),
        ("POST", f"/v1/partitions/{topic}/9/pause", 404, "unknown_partition"),
        ("POST", f"/v1/partitions/{plain}/0/compact", 409, "not_compacted"),
        ("POST", f"/v1/partitions/{topic}/0/compact?wait=soon", 400, "bad_wait"),
        ("POST", f"/v1/partitions/{topic}/0/compact?wait=9999", 400, "bad_wait"),
        ("POST", f"/v1/partitions/{topic}/0/resume", 409, "not_paused"),
        ("GET", "/v1/jobs/12345", 404, "unknown_job"),
        ("DELETE", f"/v1/partitions/{topic}/0", 405, "method_not_allowed"),
    ]
    for method, path, want_status, want_kind in cases:
        status, body = http(base, method, path)
        assert (status, body.get("error")) == (want_status, want_kind), (method, path, body)
        assert body["message"] and body["status"] == want_status
    status, body = http(base, "GET", f"/v1/partitions/{topic}/2")
    assert "has 2 partition(s), 0..1" in body["message"]
    status, body = http(base, "POST", f"/v1/partitions/{plain}/0/compact")
    assert "cleanup.policy=delete" in body["message"] and "compact" in body["message"]

    # adopt: bad bodies are refused before anything is touched
    for payload in ({}, {"staging_dir": 3}, {"staging_dir": "/nonexistent/staging"}):
        status, body = http(base, "POST", f"/v1/partitions/{topic}/0/adopt", payload)
        assert status == 400, (payload, body)
    req = urllib.request.Request(base + f"/v1/partitions/{topic}/0/adopt", data=b"not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400 and json.loads(info.value.read())["error"] == "bad_body"


def test_pause_twice_resume_twice(kbroker, topic):
    base = kbroker.metrics_url
    for expected in (1, 2):
        status, body = http(base, "POST", f"/v1/partitions/{topic}/1/pause")
        assert status == 200, body
        assert body["cleaner"]["paused_count"] == expected and body["cleaner"]["state"] == f"Paused({expected})"
    # a paused partition is not compacted on demand either; the other partition is untouched
    status, body = http(base, "POST", f"/v1/partitions/{topic}/1/compact")
    assert status == 409 and body["error"] == "paused" and "2 pause(s)" in body["message"]
    assert http(base, "GET", f"/v1/partitions/{topic}/0")[1]["cleaner"]["paused_count"] == 0
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert f'kompakt_cleaner_partition_paused{{partition="1",topic="{topic}"}} 1.0' in metrics
    for expected in (1, 0):
        status, body = http(base, "POST", f"/v1/partitions/{topic}/1/resume")
        assert status == 200, body
        assert body["cleaner"]["paused_count"] == expected
    assert body["cleaner"]["state"] == "None"
    status, body = http(base, "POST", f"/v1/partitions/{topic}/1/resume")
    assert status == 409 and body["error"] == "not_paused"


def test_compact_now_compacts(kbroker, topic):
    base = kbroker.metrics_url
    keys = [b"key-%d" % i for i in range(8)]
    records = [(keys[i % len(keys)], b"value-%d-" % i + PAD) for i in range(240)]
    records[-20] = (keys[3], None)  # a tombstone: kept (delete.retention.ms not passed), value None
    produce(kbroker.bootstrap, topic, records)
    before = http(base, "GET", f"/v1/partitions/{topic}/0")[1]
    assert before["log_end_offset"] == 240 and before["segment_count"] > 3

    status, body = http(base, "POST", f"/v1/partitions/{topic}/0/compact?wait=60")
    assert status == 200, body
    assert body["state"] == "done" and body["stats"]

    after = http(base, "GET", f"/v1/partitions/{topic}/0")[1]
    cleaner = after["cleaner"]
    active_base = after["segments"][-1]["base_offset"]
    assert cleaner["last_clean_time_ms"] > 0 and cleaner["cleans"] >= 1
    assert cleaner["cleaner_point"] == active_base  # cleaned up to, never into, the active segment
    assert after["size_bytes"] < before["size_bytes"]

    got = read_all(kbroker.bootstrap, topic, 0, 240)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(got) < len(records)
    cleaned = [(o, k) for o, k, _ in got if o < active_base]
    assert len({k for _, k in cleaned}) == len(cleaned), "a key survived twice in the cleaned part"
    latest = {}
    for key, value in records:
        latest[key] = value
    assert {k: v for _, k, v in got} == latest  # reading from 0 still ends at every key's last value
    assert got[-1][0] == 239  # the active segment's tail is untouched

    # the figures Kafka hides are on the metrics page too
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert f'kompakt_cleaner_partition_last_clean_timestamp_seconds{{partition="0",topic="{topic}"}}' in metrics
    assert float(re.search(r"^kompakt_cleaner_cleanings_total (\S+)$", metrics, re.M).group(1)) >= 1


def test_compact_answers_202_with_a_job_when_not_waiting(kbroker, topic):
    base = kbroker.metrics_url
    produce(kbroker.bootstrap, topic, [(b"k%d" % (i % 4), b"v%d-" % i + PAD) for i in range(120)], partition=1)
    status, job = http(base, "POST", f"/v1/partitions/{topic}/1/compact?wait=0")
    assert status == 202 and job["state"] == "running" and job["status_url"] == f"/v1/jobs/{job['id']}"
    cleaner = http(base, "GET", "/v1/cleaner")[1]
    assert {"workers", "io_max_bytes_per_second", "compact_jobs_running"} <= set(cleaner)
    deadline = time.monotonic() + 60
    while job["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
        status, job = http(base, "GET", job["status_url"])
        assert status == 200
    assert job["state"] == "done" and job["stats"], job


def kompakt_admin(url: str, *args: str) -> subprocess.CompletedProcess:
    """The real `kompakt` entry point in a subprocess (used once: the rest runs cli.main in-process)."""
    return subprocess.run([sys.executable, "-m", "kompakt", "admin", "--url", url, *args],
                          capture_output=True, text=True, timeout=120)


class CliRun:
    def __init__(self, capsys, url: str):
        self.capsys, self.url = capsys, url

    def __call__(self, *args: str, url: str | None = None) -> subprocess.CompletedProcess:
        from kompakt.cli import main
        self.capsys.readouterr()
        code = main(["admin", "--url", url or self.url, *args])
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)


def test_cli_wraps_the_api(kbroker, topic, capsys):
    url = kbroker.metrics_url
    admin = CliRun(capsys, url)
    produce(kbroker.bootstrap, topic, [(b"k%d" % (i % 3), b"v%d-" % i + PAD) for i in range(150)])
    r = admin("partitions")
    assert r.returncode == 0, r.stderr
    header, *lines = r.stdout.splitlines()
    assert header.split()[:4] == ["TOPIC", "PART", "POLICY", "START"]
    assert any(line.split()[:3] == [topic, "0", "compact"] for line in lines)

    r = admin("compact", topic, "0")
    assert r.returncode == 0, r.stderr
    assert "state: done" in r.stdout
    r = admin("--json", "partition", topic, "0")
    assert r.returncode == 0 and json.loads(r.stdout)["cleaner"]["cleans"] >= 1

    assert admin("pause", topic, "0").returncode == 0
    r = admin("compact", topic, "0")
    assert r.returncode == 1 and "is paused" in r.stderr
    assert admin("resume", topic, "0").returncode == 0
    r = admin("resume", topic, "0")
    assert r.returncode == 1 and "error 409" in r.stderr and f"{topic}-0: it is not paused" in r.stderr
    r = admin("partition", "nosuch", "0")
    assert r.returncode == 1 and "unknown topic 'nosuch'" in r.stderr
    r = admin("--json", "cleaner")
    assert r.returncode == 0 and json.loads(r.stdout)["enabled"] is True
    r = admin("adopt", topic, "0", "/nonexistent/staging")
    assert r.returncode == 1 and "is not a directory" in r.stderr

    with closed_port() as nobody:
        r = admin("partitions", url=f"http://127.0.0.1:{nobody}")
        assert r.returncode == 2 and "cannot reach the Kompakt admin API" in r.stderr
        # ready exits 1 (unhealthy) when unreachable too: Docker reserves a HEALTHCHECK's exit 2
        r = admin("ready", url=f"http://127.0.0.1:{nobody}")
        assert r.returncode == 1 and "cannot reach the Kompakt admin API" in r.stderr
    # the installed entry point, as the container HEALTHCHECK runs it
    r = kompakt_admin(url, "ready")
    assert r.returncode == 0, r.stderr


def test_cli_compact_roll_cleans_what_the_active_segment_held(kbroker, topic, capsys):
    # a few small records all in the active segment: without --roll nothing is cleanable
    produce(kbroker.bootstrap, topic, [(b"k%d" % (i % 2), b"v%d" % i) for i in range(6)])
    admin = CliRun(capsys, kbroker.metrics_url)
    r = admin("--json", "compact", topic, "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["cleaned"] is False        # the active segment is never cleaned
    r = admin("--json", "compact", "--roll", topic, "0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["end_offset"] == 6
    r = admin("count", topic, "0")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "total: 2 records"
    r = admin("partitions", "--topic", topic)     # an idle partition's STATE is "-", not "None"
    assert r.returncode == 0 and [line.split()[-1] for line in r.stdout.splitlines()[1:]] == ["-", "-"]
    assert admin("pause", topic, "1").returncode == 0
    r = admin("partitions", "--topic", topic)
    assert [line.split()[-1] for line in r.stdout.splitlines()[1:]] == ["-", "Paused(1)"]


def make_compacted_staging(partition_dir: str, staging: str, topic: str, partition: int,
                           closed: list[dict], end: int) -> dict:
    """What `kompakt pipeline compact` leaves behind, made without Spark: the closed segments'
    records deduplicated to each key's latest, written as one segment, plus the manifest that
    kompakt.pipeline.adopt reads. Returns {key: (offset, timestamp, value)} kept."""
    import os

    from kompakt.pipeline.adopt import MANIFEST
    from kompakt.protocol.records import build_batch, decode_records, iter_batches
    from kompakt.storage.segment import LogSegment

    latest: dict[bytes, tuple[int, int, bytes | None]] = {}
    for seg in closed:
        with open(os.path.join(partition_dir, f"{seg['base_offset']:020d}.log"), "rb") as f:
            buf = f.read()
        for pos, hdr in iter_batches(buf):
            for rec in decode_records(buf, pos, hdr):
                latest[rec.key] = (hdr.base_offset + rec.offset_delta, hdr.base_timestamp + rec.timestamp_delta,
                                   rec.value)
    os.makedirs(staging)
    out = LogSegment(staging, closed[0]["base_offset"])
    for key, (offset, ts, value) in sorted(latest.items(), key=lambda kv: kv[1][0]):
        out.append(offset, ts, offset, build_batch([(key, value, [], ts)], base_offset=offset))
    out.close()
    manifest = {"topic": topic, "partition": partition, "start": closed[0]["base_offset"], "end": end,
                "records_out": len(latest),
                "source_segments": [[s["base_offset"], s["size_bytes"]] for s in closed],
                "segments": [[closed[0]["base_offset"], out.size]]}
    with open(os.path.join(staging, MANIFEST), "w") as f:
        json.dump(manifest, f)
    return latest


def test_adopt_swaps_in_a_compacted_staging_dir(kbroker, topic, tmp_path):
    base = kbroker.metrics_url
    records = [(b"a%d" % (i % 6), b"v%d-" % i + PAD) for i in range(120)]
    produce(kbroker.bootstrap, topic, records)
    detail = http(base, "GET", f"/v1/partitions/{topic}/0")[1]
    closed = [s for s in detail["segments"] if not s["active"]]
    active_base = detail["segments"][-1]["base_offset"]
    assert len(closed) > 3

    staging = str(tmp_path / "staging")
    latest = make_compacted_staging(detail["dir"], staging, topic, 0, closed, end=active_base)

    # a staging dir made for another partition is refused and nothing changes
    status, body = http(base, "POST", f"/v1/partitions/{topic}/1/adopt", {"staging_dir": staging})
    assert status == 409 and body["error"] == "stale_staging", body
    assert http(base, "GET", f"/v1/partitions/{topic}/1")[1]["cleaner"]["paused_count"] == 0

    status, body = http(base, "POST", f"/v1/partitions/{topic}/0/adopt", {"staging_dir": staging})
    assert status == 200, body
    after = body["partition_state"]
    assert after["size_bytes"] < detail["size_bytes"] and after["log_end_offset"] == 120
    assert after["cleaner"]["paused_count"] == 0  # the pause taken for the swap was released
    assert after["cleaner"]["cleaner_point"] == active_base  # the adopted range counts as clean

    got = read_all(kbroker.bootstrap, topic, 0, 120)
    below = [(o, k, v) for o, k, v in got if o < active_base]
    assert sorted(below) == sorted((o, k, v) for k, (o, _, v) in latest.items())
    assert [o for o, _, _ in got if o >= active_base] == list(range(active_base, 120))

    # the same staging again: its source segments are gone, so it is stale
    status, body = http(base, "POST", f"/v1/partitions/{topic}/0/adopt", {"staging_dir": staging})
    assert status == 409 and "compact again" in body["message"]


def test_compact_now_respects_min_compaction_lag(kbroker, topic):
    """compact-now ignores the dirty ratio, never min.compaction.lag.ms: records younger than the
    lag stay, every one of them."""
    base = kbroker.metrics_url
    lagged = topic + "_lag"
    create_topics(kbroker.bootstrap, NewTopic(lagged, 1, 1, config={"cleanup.policy": "compact",
                                                                    "min.compaction.lag.ms": "3600000"}))
    produce(kbroker.bootstrap, lagged, [(b"same-key", b"v%d-" % i + PAD) for i in range(60)])
    before = http(base, "GET", f"/v1/partitions/{lagged}/0")[1]
    assert before["segment_count"] > 3
    assert before["cleaner"]["first_uncleanable_offset"] == 0  # the lag holds back every segment
    status, body = http(base, "POST", f"/v1/partitions/{lagged}/0/compact?wait=60")
    assert status == 200, body
    after = http(base, "GET", f"/v1/partitions/{lagged}/0")[1]
    assert after["size_bytes"] == before["size_bytes"] and after["cleaner"]["cleaner_point"] == 0
    assert len(read_all(kbroker.bootstrap, lagged, 0, 60)) == 60


def test_cleaner_disabled(start_broker):
    b = start_broker(config={"log.cleaner.enable": "false", "offsets.topic.num.partitions": "1"})
    create_topics(b.bootstrap, NewTopic("nocleaner", 1, 1, config={"cleanup.policy": "compact"}))
    base = b.metrics_url
    assert http(base, "GET", "/v1/cleaner") == (200, {"enabled": False})
    assert http(base, "GET", "/v1/partitions/nocleaner/0")[1]["cleaner"] == {"enabled": False}
    for action in ("compact", "pause", "resume"):
        status, body = http(base, "POST", f"/v1/partitions/nocleaner/0/{action}")
        assert status == 503 and body["error"] == "cleaner_disabled" and "log.cleaner.enable" in body["message"]
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert "kompakt_cleaner_" not in metrics and 'kompakt_log_size_bytes{partition="0",topic="nocleaner"}' in metrics


def test_scrapes_and_listing_survive_topic_churn(kbroker, topic):
    """Topics created and deleted while /metrics and /v1/partitions are read: every answer is 200
    and well-formed (the collectors read live objects without locks and skip what vanishes)."""
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    base = kbroker.metrics_url
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap, **QUIET})
    stop = threading.Event()
    failures: list = []
    reads = [0]

    def reader():
        while not stop.is_set():
            try:
                text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
                list(text_string_to_metric_families(text))
                status, body = http(base, "GET", "/v1/partitions")
                assert status == 200 and isinstance(body["partitions"], list)
                reads[0] += 1
            except Exception as exc:  # collected, asserted below
                failures.append(repr(exc))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for round_ in range(2):
            names = [f"{topic}_{round_}_{i}" for i in range(3)]
            for fut in admin.create_topics([NewTopic(n, 3, 1, config={"cleanup.policy": "compact"})
                                            for n in names]).values():
                fut.result(30)
            produce(kbroker.bootstrap, names[0], [(b"k", b"v")] * 5)
            for fut in admin.delete_topics(names, operation_timeout=30).values():
                fut.result(30)
    finally:
        stop.set()
        t.join(60)
    assert not failures, failures[:3]
    assert reads[0] > 0
    broker_log = kbroker.log_text()
    assert "metrics failed" not in broker_log and "admin request" not in broker_log
    # deleted topics' traffic series are gone, as Kafka removes a deleted topic's metrics
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    assert f'topic="{topic}_0_0"' not in text


def test_count_records_matches_what_a_consumer_reads(kbroker, topic, capsys):
    """count=true answers the FAQ's "how many records are on a topic" without iterating: after a
    clean, and after a DeleteRecords that cuts a batch in two, the count equals what a consumer
    reading from the start gets."""
    from confluent_kafka import TopicPartition as CTP

    base = kbroker.metrics_url
    produce(kbroker.bootstrap, topic, [(b"k%d" % (i % 5), b"v%d-" % i + PAD) for i in range(100)], partition=0,
            linger_ms=50)
    produce(kbroker.bootstrap, topic, [(b"x%d" % i, b"w" + PAD) for i in range(37)], partition=1, linger_ms=50)
    assert http(base, "POST", f"/v1/partitions/{topic}/0/compact?wait=60")[0] == 200

    status, body = http(base, "GET", f"/v1/partitions?topic={topic}&count=true")
    assert status == 200
    counted = {p["partition"]: p["records"]["records"] for p in body["partitions"]}
    consumed = {p: len(read_all(kbroker.bootstrap, topic, p, 100 if p == 0 else 37)) for p in (0, 1)}
    assert counted == consumed and consumed[1] == 37 and consumed[0] < 100
    assert body["total_records"] == sum(consumed.values())
    r = CliRun(capsys, base)("count", topic)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == f"total: {sum(consumed.values())} records"

    # DeleteRecords (delete-policy topics only) moves the log start offset into a batch of several
    # records (batch.size 700: about 4 per batch); only the records above it count
    deleted = topic + "_del"
    create_topics(kbroker.bootstrap, NewTopic(deleted, 1, 1, config={"cleanup.policy": "delete"}))
    produce(kbroker.bootstrap, deleted, [(b"x%d" % i, b"w" + PAD) for i in range(37)], linger_ms=50)
    assert http(base, "GET", f"/v1/partitions/{deleted}/0?count=true")[1]["records"]["batches"] < 37
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap, **QUIET})
    for fut in admin.delete_records([CTP(deleted, 0, 10)]).values():
        fut.result(30)
    detail = http(base, "GET", f"/v1/partitions/{deleted}/0?count=true")[1]
    assert detail["log_start_offset"] == 10
    assert detail["records"]["records"] == len(read_all(kbroker.bootstrap, deleted, 0, 37)) == 27

    assert http(base, "GET", "/v1/partitions?count=true")[0] == 400  # every topic: refused, name one
    assert http(base, "GET", f"/v1/partitions/{topic}/0?count=maybe")[0] == 400


def test_pause_aborts_a_running_compact(start_broker):
    """A pause while a compact-now job runs aborts the clean (Kafka's abortAndPauseCleaning): the
    pause answers once the worker has stopped, the job ends without swapping anything in, the log
    is untouched, and after resume a new compact-now cleans it."""
    # a throttled cleaner (150 KB/s over ~200 KB) keeps the clean running long enough to pause it
    b = start_broker(config={"log.segment.bytes": "16384", "log.cleaner.backoff.ms": "600000",
                             "log.cleaner.io.max.bytes.per.second": "150000",
                             "offsets.topic.num.partitions": "1"})
    create_topics(b.bootstrap, NewTopic("slow", 1, 1, config={"cleanup.policy": "compact"}))
    produce(b.bootstrap, "slow", [(b"k%d" % (i % 10), b"v%d-" % i + PAD * 3) for i in range(600)], linger_ms=20)
    base = b.metrics_url
    before = http(base, "GET", "/v1/partitions/slow/0")[1]

    status, job = http(base, "POST", "/v1/partitions/slow/0/compact?wait=0")
    assert status == 202, job
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and http(base, "GET", "/v1/cleaner")[1]["workers"][0]["cleaning"] is None:
        time.sleep(0.05)  # until the worker has picked the job up
    status, body = http(base, "POST", "/v1/partitions/slow/0/pause")
    assert status == 200 and body["cleaner"]["state"] == "Paused(1)", body
    deadline = time.monotonic() + 30
    while job["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
        job = http(base, "GET", job["status_url"])[1]
    assert job["state"] in ("done", "failed"), job
    if job["state"] == "done":  # the cleaner reports an aborted clean as not cleaned
        assert job["stats"].get("cleaned") is False and job["stats"].get("reason") == "aborted", job
    during = http(base, "GET", "/v1/partitions/slow/0")[1]
    assert during["size_bytes"] == before["size_bytes"] and during["cleaner"]["cleans"] == 0

    assert http(base, "POST", "/v1/partitions/slow/0/resume")[0] == 200
    status, body = http(base, "POST", "/v1/partitions/slow/0/compact?wait=120")
    assert status == 200 and body["stats"], body
    assert http(base, "GET", "/v1/partitions/slow/0")[1]["size_bytes"] < before["size_bytes"]


def test_whatif_replays_a_live_partition_without_touching_it(kbroker, topic, capsys, tmp_path):
    import hashlib
    import os
    base = kbroker.metrics_url
    producer = Producer({"bootstrap.servers": kbroker.bootstrap, "linger.ms": 0, "batch.size": 700, **QUIET})
    t0 = int(time.time() * 1000) - 300_000
    for i in range(300):      # one record a second, five minutes ago up to now
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d-" % i + PAD, partition=0, timestamp=t0 + i * 1000)
    assert producer.flush(30) == 0
    pdir = os.path.join(kbroker.log_dir, f"{topic}-0")

    def fingerprint():
        return {n: hashlib.sha256(open(os.path.join(pdir, n), "rb").read()).hexdigest() for n in sorted(os.listdir(pdir))}

    before = fingerprint()
    status, body = http(base, "GET", f"/v1/partitions/{topic}/0/whatif?set=min.cleanable.dirty.ratio=0.01"
                                     "&set=log.cleaner.backoff.ms=1000&max_records=250")
    assert status == 200, body
    assert fingerprint() == before
    cur, new = body["current"], body["proposed"]
    # current: this broker's defaults (log.segment.bytes=1024, ratio 0.99, backoff 600 s)
    assert cur["settings"]["segment.bytes"] == 1024 and cur["settings"]["min.cleanable.dirty.ratio"] == 0.99
    assert cur["settings"]["log.cleaner.backoff.ms"] == 600_000 and new["settings"]["log.cleaner.backoff.ms"] == 1000
    assert 200 <= body["records"] <= 250 and body["max_records"] == 250     # whole batches, at most 250
    assert new["summary"]["cleans"] > cur["summary"]["cleans"]
    assert new["summary"]["disk_bytes_end"] < cur["summary"]["disk_bytes_end"]
    assert new["summary"]["oldest_uncleaned_age_ms_max"] < cur["summary"]["oldest_uncleaned_age_ms_max"]
    req = urllib.request.urlopen(f"{base}/v1/partitions/{topic}/0/whatif?format=png&max_records=100", timeout=60)
    assert req.headers["Content-Type"] == "image/png" and req.read(8) == b"\x89PNG\r\n\x1a\n"
    for query, kind in (("set=retention.ms=1", "bad_setting"), ("set=segment.ms=0", "bad_setting"),
                        ("max_records=0", "bad_max_records"), ("format=svg", "bad_format")):
        status, err = http(base, "GET", f"/v1/partitions/{topic}/0/whatif?{query}")
        assert (status, err["error"]) == (400, kind), (query, err)
    assert http(base, "GET", f"/v1/partitions/{topic}/9/whatif")[0] == 404
    admin = CliRun(capsys, base)
    png = str(tmp_path / "w.png")
    r = admin("whatif", topic, "0", "--set", "segment.ms=60000", "--max-records", "100", "--chart", png)
    assert r.returncode == 0, r.stderr
    assert "proposed: segment.ms=60000" in r.stdout and f"{topic}-0" in r.stdout
    assert open(png, "rb").read(4) == b"\x89PNG"
    r = admin("whatif", topic, "0", "--set", "nonsense")
    assert r.returncode == 1 and "expected key=value" in r.stderr
