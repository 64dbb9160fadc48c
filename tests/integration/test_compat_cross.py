"""Cross-client compatibility: what one real client writes, every other real client reads the same.

Writers: confluent-kafka, kafka-python, aiokafka, kcat (every codec each supports), kafkajs (none,
gzip) and @platformatic/kafka (none, gzip, snappy, lz4). Readers: the same six; the two Node.js
clients read the codecs they have, and are compared on what they can report (compat_support.comparable). The reference is the broker's own disk: each partition's batches are
decoded with kompakt.protocol.records and must hold exactly what the writer sent (and in the codec
it was asked for); then every reader must report exactly that - partition, offset, key, value (None
kept apart from b""), headers in order (repeated keys, null values), timestamp and its type.

Three topics (one broker, one read per client over all of them, so the whole file stays quick):
- `x-<writer>-<codec>`: records with a null key, empty and long values, repeated header keys, a
  null header value, explicit CreateTime timestamps where the client can set them (kcat cannot).
  A topic per codec because kafkajs, lacking snappy/lz4/zstd, must be able to skip those.
- `x-logappend`: message.timestamp.type=LogAppendTime; each writer sends timestamps an hour old;
  every reader must see the broker's append time of that batch instead, marked log-append.
- `x-compacted`: cleanup.policy=compact with null-value tombstones from several writers, compacted
  through the admin API; every reader sees the gaps, each key's latest record, tombstones as None.
- `x-nulls`: null and empty keys and values, which no reader may confuse.
"""
from __future__ import annotations

import json
import time
import urllib.request

import pytest

from compat_support import (CODEC_IDS, KCAT, comparable, NODE, NPM, PRODUCERS, READERS, Read, Rec, by_partition,
                            end_offsets, ensure_node_modules, produce_many, running_broker, stored_batches)
from kompakt.protocol.records import record_timestamp

CODECS = {"confluent": ["none", "gzip", "snappy", "lz4", "zstd"],
          "kafka-python": ["none", "gzip", "snappy", "lz4", "zstd"],
          "aiokafka": ["none", "gzip", "snappy", "lz4", "zstd"],
          "kcat": ["none", "gzip", "snappy", "lz4", "zstd"],
          "kafkajs": ["none", "gzip"],
          # zstd needs node:zlib's zstd (Node >= 22.15); this image has Node 20
          "platformatic": ["none", "gzip", "snappy", "lz4"]}
NODE_CLIENTS = {"kafkajs", "platformatic"}
CLIENTS = [c for c in CODECS if (c != "kcat" or KCAT) and (c not in NODE_CLIENTS or (NODE and NPM))]
SETS_TIMESTAMPS = {"confluent", "kafka-python", "aiokafka", "kafkajs", "platformatic"}
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def cross_broker(tmp_path_factory):
    if NODE_CLIENTS & set(CLIENTS):
        ensure_node_modules()
    # no initial rebalance delay: kafkajs can only read through a group, one member per read
    with running_broker(tmp_path_factory.mktemp("compat-broker"),
                        {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}) as proc:
        yield proc


def create_topics(broker, specs: dict[str, tuple[int, dict]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1, config=c) for t, (n, c) in specs.items()])
    for f in futures.values():
        f.result(30)


def codec_records(writer: str, codec: str, partition: int, base_ts: int) -> list[Rec]:
    out = []
    for i in range(8):
        key = None if i == 0 else f"{writer}/{codec}/k{i % 5}".encode()
        # kcat maps an empty value to null (-Z), so only the others send b""
        value = b"" if i == 1 and writer != "kcat" else f"{writer}|{codec}|{i}|".encode() + b"xy" * (i * 40)
        headers = [("codec", codec.encode())]
        if writer != "kcat":                    # kcat: one header set per run
            headers.append(("i", str(i).encode()))
        if writer != "platformatic":            # its headers are a Map: no repeated key
            headers += [("dup", b"first"), ("dup", b"second")]
        if writer == "confluent":
            headers.append(("nul", None))       # a header with a null value
        ts = base_ts + i * 1000 if writer in SETS_TIMESTAMPS else None
        out.append(Rec(partition, key, value, tuple(headers), ts))
    return out


def disk_view(broker, topic: str) -> dict:
    """{partition: [Read]} decoded from the segment files, as a consumer should see them."""
    out = {}
    for p in range(len(end_offsets(broker, [topic])[topic])):
        rows = []
        for h, recs in stored_batches(broker.log_dir, topic, p):
            for r in recs:
                rows.append(Read(p, h.base_offset + r.offset_delta, r.key, r.value, tuple(r.headers),
                                 record_timestamp(h, r), "logappend" if h.timestamp_type == 1 else "create"))
        if rows:
            out[p] = rows
    return out


def admin_post(broker, path: str) -> dict:
    req = urllib.request.Request(f"{broker.metrics_url}{path}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_every_client_reads_what_every_client_wrote(cross_broker):
    b = cross_broker
    now = int(time.time() * 1000)
    codec_topics = {f"x-{w}-{c}": (1, {}) for w in CLIENTS for c in CODECS[w]}
    create_topics(b, {**codec_topics,
                      "x-logappend": (1, {"message.timestamp.type": "LogAppendTime"}),
                      "x-compacted": (1, {"cleanup.policy": "compact", "internal.segment.bytes": "1024"}),
                      "x-nulls": (1, {})})     # delete policy: a compacted topic refuses null keys
    # a null value (tombstone) and an empty value, a null key and an empty key are four different things
    nulls = [(b"a", None), (b"b", b""), (None, b"c"), (b"", b"d")]
    PRODUCERS["confluent"](b, "x-nulls", "none", [Rec(0, k, v) for k, v in nulls])

    # -- the compacted topic's first values (confluent-kafka), before anyone writes a tombstone
    latest = {f"k{i}".encode(): f"v1-{i}".encode() for i in range(10)}
    PRODUCERS["confluent"](b, "x-compacted", "none", [Rec(0, k, v) for k, v in latest.items()])

    # -- each writer in one go (one process for a Node.js client): a topic per codec; one batch to
    #    the LogAppendTime topic stamped an hour ago (with the wall clock noted around the writer's
    #    run); and, but for confluent-kafka, a tombstone and a newer value to the compacted topic
    sent, windows = {}, []
    for n, w in enumerate(CLIENTS):
        jobs = [(f"x-{w}-{codec}", codec, codec_records(w, codec, 0, now - 10 * HOUR_MS + i * 60_000))
                for i, codec in enumerate(CODECS[w])]
        sent.update({topic: (codec, recs) for topic, codec, recs in jobs})
        ts = now - HOUR_MS if w in SETS_TIMESTAMPS else None
        jobs.append(("x-logappend", "none", [Rec(0, f"{w}-{i}".encode(), b"v", (), ts) for i in range(3)]))
        if w != "confluent":
            tomb, fresh = f"k{2 * n - 2}".encode(), f"k{2 * n - 1}".encode()
            jobs.append(("x-compacted", "none", [Rec(0, tomb, None), Rec(0, fresh, f"v2-{w}".encode())]))
            latest[tomb], latest[fresh] = None, f"v2-{w}".encode()
        before = int(time.time() * 1000)
        produce_many(w, b, jobs)
        windows.append((w, before, int(time.time() * 1000)))

    # -- filler batches, so that all of the above lands in segments the cleaner may clean (never
    #    the active one); then compact through the admin API
    for n in range(3):
        PRODUCERS["confluent"](b, "x-compacted", "none", [Rec(0, b"filler", b"f" * 900)])
    done = admin_post(b, "/v1/partitions/x-compacted/0/compact?wait=30")
    assert done["state"] == "done", done

    # -- the disk holds what was sent: keys, values, headers, offsets, codecs, timestamps
    topics = [*codec_topics, "x-logappend", "x-compacted", "x-nulls"]
    ends = end_offsets(b, topics)
    disk = {t: disk_view(b, t) for t in topics}
    for topic, (codec, recs) in sent.items():
        batches = stored_batches(b.log_dir, topic, 0)
        codecs = {h.compression for h, _ in batches}
        if topic.startswith("x-confluent-"):
            # librdkafka may split these records into several batches under load and sends a batch
            # uncompressed when the codec would not make it smaller (a one-record batch)
            assert CODEC_IDS[codec] in codecs and codecs <= {CODEC_IDS[codec], 0}, (topic, codecs)
        else:
            assert batches and codecs == {CODEC_IDS[codec]}, topic
        rows = disk[topic][0]
        assert [(r.offset, r.key, r.value, r.headers) for r in rows] == \
               [(i, s.key, s.value, tuple(s.headers)) for i, s in enumerate(recs)], (topic, codec)
        assert {r.timestamp_type for r in rows} == {"create"}
        if recs[0].timestamp is not None:
            assert [r.timestamp for r in rows] == [s.timestamp for s in recs]
        else:
            assert all(abs(r.timestamp - now) < 600_000 for r in rows)

    lat = disk["x-logappend"][0]
    assert len(lat) == 3 * len(CLIENTS) and {r.timestamp_type for r in lat} == {"logappend"}
    for n, (w, before, after) in enumerate(windows):
        # (a client may split its three records into more than one batch, each stamped on its own)
        for r in lat[3 * n:3 * n + 3]:
            assert r.key.startswith(w.encode()) and before - 5 <= r.timestamp <= after + 5, (w, before, after, r)

    compacted = disk["x-compacted"][0]
    kept = [r for r in compacted if r.key != b"filler"]
    assert {r.key: r.value for r in kept} == latest
    assert len(kept) == len(latest), "a superseded record survived the compaction"
    assert sum(1 for r in kept if r.value is None) == len(CLIENTS) - 1
    assert compacted[-1].offset == ends["x-compacted"][0] - 1

    # -- every reader sees exactly the disk (kafkajs: the codecs it has)
    for reader in CLIENTS:
        readable = {t: e for t, e in ends.items() if t not in sent or sent[t][0] in CODECS[reader]}
        if reader == "platformatic":   # its wasm snappy reads raw blocks only, not the xerial framing
            readable = {t: e for t, e in readable.items() if not (t.endswith("-snappy") and (
                t.startswith("x-kafka-python") or t.startswith("x-aiokafka")))}
        got = READERS[reader](b, readable)
        for topic in readable:
            lat = topic == "x-logappend"
            assert {p: comparable(reader, rows, log_append=lat) for p, rows in by_partition(got[topic]).items()} \
                == {p: comparable(reader, rows, log_append=lat) for p, rows in disk[topic].items()}, \
                f"{reader} read {topic} differently from the log"
        assert [(r.key, r.value) for r in got["x-nulls"]] == nulls, reader
