"""kcat (librdkafka) edge cases beyond test_kcat.py: offsets by timestamp, start/stop by timestamp,
relative offsets, and librdkafka's own CRC check over every batch the broker rewrote.

- `-Q` (ListOffsets by timestamp): the first offset whose timestamp is >= the target, -1 past the
  newest, and the logical -1/-2 (latest/earliest) after DeleteRecords moved the log start.
- `-o s@T -o e@T`, `-o -N`, `-c N`: the consumer positions librdkafka derives from ListOffsets.
- `check.crcs=true` makes librdkafka verify the CRC-32C of every fetched batch: it must hold for
  the batches the broker patched (LogAppendTime), rebuilt (topic compression.type differs from the
  producer's) and the cleaner rewrote (compaction), not only for batches stored as produced.
"""
from __future__ import annotations

import json
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_support import KCAT, by_partition, end_offsets, read_confluent, read_kcat, stored_batches

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")
TIMEOUT = 60
T0 = 1_700_000_000_000


def kcat(broker, *args) -> str:
    import subprocess
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, "-X", "fetch.wait.max.ms=10", *args],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    assert "CRC" not in proc.stderr and "ERROR" not in proc.stderr.upper(), proc.stderr
    return proc.stdout


def create(broker, topics: dict[str, tuple[int, dict]]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1, config=c) for t, (n, c) in topics.items()]).values():
        f.result(30)


def produce(broker, topic, records, **conf) -> None:
    """records: (partition, key, value, timestamp or 0); one flush."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, **conf})
    for partition, key, value, ts in records:
        p.produce(topic, key=key, value=value, partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def test_kcat_offsets_by_timestamp(module_broker):
    b = module_broker
    create(b, {"kq": (2, {})})
    # partition 0: timestamps T0, T0+1s, ... T0+9s; partition 1: T0+100s.. in reverse order
    produce(b, "kq", [(0, b"k%d" % i, b"v%d" % i, T0 + i * 1000) for i in range(10)]
            + [(1, b"r%d" % i, b"w%d" % i, T0 + 100_000 - i * 1000) for i in range(5)])

    def query(*targets) -> dict:
        out = json.loads(kcat(b, "-Q", "-J", *[f"-tkq:{p}:{ts}" for p, ts in targets]))
        return {int(k): v["offset"] for k, v in out["kq"].items() if k != "topic"}

    assert query((0, T0 + 5500), (1, T0 + 97_000)) == {0: 6, 1: 0}   # p1: the very first is newer
    assert query((0, T0), (1, T0 + 100_001)) == {0: 0, 1: -1}          # past the newest: -1
    assert query((0, T0 + 9000), (1, T0 + 96_500)) == {0: 9, 1: 0}
    assert query((0, -1), (1, -1)) == {0: 10, 1: 5}                     # latest = end offset
    assert query((0, -2), (1, -2)) == {0: 0, 1: 0}

    # start and stop by timestamp, relative to the end, and a count
    window = kcat(b, "-C", "-t", "kq", "-p", "0", "-o", f"s@{T0 + 3000}", "-o", f"e@{T0 + 6000}", "-e",
                  "-f", "%o %T %k\n")
    assert window.splitlines() == [f"{i} {T0 + i * 1000} k{i}" for i in (3, 4, 5)]
    assert kcat(b, "-C", "-t", "kq", "-p", "0", "-o", "-3", "-e", "-f", "%o\n").split() == ["7", "8", "9"]
    assert kcat(b, "-C", "-t", "kq", "-p", "1", "-o", "beginning", "-c", "2", "-f", "%s\n").split() == ["w0", "w1"]

    # after DeleteRecords the earliest offset is the new log start, and earlier timestamps map to it
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    from confluent_kafka import TopicPartition
    for f in admin.delete_records([TopicPartition("kq", 0, 4)]).values():
        f.result(30)
    assert query((0, -2), (1, -2)) == {0: 4, 1: 0}
    assert query((0, T0), (1, T0 + 100_000)) == {0: 4, 1: 0}


def admin_post(broker, path: str) -> dict:
    req = urllib.request.Request(f"{broker.metrics_url}{path}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_kcat_checks_crcs_of_batches_the_broker_rewrote(module_broker):
    b = module_broker
    create(b, {"kc-lat": (1, {"message.timestamp.type": "LogAppendTime"}),
               "kc-recompressed": (1, {"compression.type": "zstd"}),
               "kc-compacted": (1, {"cleanup.policy": "compact", "internal.segment.bytes": "1024"})})
    # LogAppendTime: the broker patches attributes, maxTimestamp and the CRC of each batch in place
    for codec in ("none", "gzip", "lz4"):
        produce(b, "kc-lat", [(0, b"k%d" % i, b"%s-%d" % (codec.encode(), i), T0) for i in range(20)],
                **{"compression.type": codec})
    # compression.type=zstd on the topic: the broker rebuilds the producer's gzip/snappy batches
    for codec in ("gzip", "snappy", "none"):
        produce(b, "kc-recompressed", [(0, b"k%d" % i, b"%s-%d" % (codec.encode(), i) * 10, 0) for i in range(20)],
                **{"compression.type": codec})
    # compaction: the cleaner writes new batches (and keeps tombstones) below the active segment
    for n in range(6):
        produce(b, "kc-compacted", [(0, b"k%d" % (i % 8), b"v%d-%d" % (n, i) if (n, i % 8) != (5, 3) else None, 0)
                                    for i in range(16)], **{"compression.type": "lz4" if n % 2 else "none"})
    produce(b, "kc-compacted", [(0, b"filler", b"f" * 900, 0)])
    produce(b, "kc-compacted", [(0, b"filler", b"f" * 900, 0)])
    assert admin_post(b, "/v1/partitions/kc-compacted/0/compact?wait=30")["state"] == "done"

    lat = stored_batches(b.log_dir, "kc-lat", 0)
    assert {h.timestamp_type for h, _ in lat} == {1} and {h.compression for h, _ in lat} == {0, 1, 3}
    assert {h.compression for h, _ in stored_batches(b.log_dir, "kc-recompressed", 0)} == {4}
    compacted = [r for _, recs in stored_batches(b.log_dir, "kc-compacted", 0) for r in recs]
    assert len(compacted) < 6 * 16, "nothing was compacted"

    topics = ["kc-lat", "kc-recompressed", "kc-compacted"]
    ends = end_offsets(b, topics)
    # librdkafka with CRC checks on (kcat's simple consumer, a run per topic) against confluent-kafka
    checked = read_kcat(b, ends, extra=("-X", "check.crcs=true"), group=False)
    reference = read_confluent(b, ends)
    for topic in topics:
        assert by_partition(checked[topic]) == by_partition(reference[topic]), topic
    assert len(checked["kc-lat"]) == 60 and {r.timestamp_type for r in checked["kc-lat"]} == {"logappend"}
    assert sorted(r.value for r in checked["kc-recompressed"]) == sorted(
        b"%s-%d" % (c.encode(), i) * 10 for c in ("gzip", "snappy", "none") for i in range(20))
    latest = {r.key: r.value for r in checked["kc-compacted"]}
    assert latest[b"k3"] is None and latest[b"k0"] == b"v5-8"
