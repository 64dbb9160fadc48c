"""End to end: a compacted topic compacts under continuous produce while consumers read it, and
__consumer_offsets stays small under many commits. Real broker process, confluent-kafka clients."""
from __future__ import annotations

import os
import re
import threading
import urllib.request

from confluent_kafka import Consumer, TopicPartition

from compaction_support import admin_get, check_against_model, cleaner_point, create_topic, produce, read_partition
from kompakt.testing.poll import wait_until

CLEANER = {"log.cleaner.backoff.ms": "100", "log.cleaner.dedupe.buffer.size": str(24 * 200_000)}


def test_compacts_under_continuous_produce(start_broker):
    b = start_broker(config=CLEANER)
    create_topic(b.bootstrap, "prices", {"cleanup.policy": "compact", "internal.segment.bytes": "4000",
                                         "min.cleanable.dirty.ratio": "0.3"})
    produced = []
    errors = []

    def producer_loop():
        try:
            for i in range(12):
                produced.extend(produce(b.bootstrap, "prices",
                                        [(b"k%d" % (j % 30), b"v%d-%d" % (i, j)) for j in range(100)]))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=producer_loop)
    t.start()
    # a consumer keeps reading from the start while the cleaner swaps segments under it
    rounds = 0
    while t.is_alive() or rounds == 0:
        got = read_partition(b.bootstrap, "prices")
        offs = [o for o, _, _ in got]
        assert offs == sorted(offs) and len(offs) == len(set(offs))
        rounds += 1
    t.join()
    assert not errors
    produced.sort()
    wait_until(lambda: cleaner_point(b, "prices") > len(produced) // 2, "the cleaner to catch up")
    # the cleaner may still be on the dirty tail once past half (a loaded machine): wait for the
    # outcome itself, checking every read against the model
    seen = {}

    def compacted():
        got = seen["got"] = read_partition(b.bootstrap, "prices")
        check_against_model(produced, got)
        return len(got) < len(produced) // 4
    try:
        wait_until(compacted, "the log to be compacted below a quarter of what was produced")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {len(seen['got'])} of {len(produced)} records left") from None
    status = admin_get(b, "/v1/cleaner")
    assert status.get("cleanings_total", 0) >= 1 and status.get("dead_thread_count", 0) == 0
    metrics = urllib.request.urlopen(f"{b.metrics_url}/metrics").read().decode()
    cleanings = re.search(r"^kompakt_cleaner_cleanings_total (\S+)$", metrics, re.M)
    assert cleanings and float(cleanings.group(1)) >= 1
    point = re.search(r'^kompakt_cleaner_partition_cleaner_point_offset\{[^}]*topic="prices"[^}]*\} (\S+)$',
                      metrics, re.M)
    assert point and float(point.group(1)) > len(produced) // 2
    # Kafka's multi-line summary, with real line breaks in the text log format
    assert re.search(r"kompakt\.cleaner: \n\tLog cleaner thread 0 cleaned log prices-0 \(dirty section = \[\d+, \d+\]\)\n"
                     r"\t[\d.,]+ MB of log processed in ", b.log_text()), b.log_text()[-3000:]


def test_consumer_offsets_stays_small(start_broker):
    b = start_broker(config=dict(CLEANER, **{"offsets.topic.num.partitions": "1",
                                             "offsets.topic.segment.bytes": "1048576"}))
    create_topic(b.bootstrap, "t", {})
    produce(b.bootstrap, "t", [(b"k", b"v")])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        meta = "m" * 3000          # large commit metadata rolls 1 MiB segments quickly
        for i in range(1000):
            c.commit(offsets=[TopicPartition("t", 0, i + 1, metadata=meta)], asynchronous=False)
    finally:
        c.close()
    d = os.path.join(b.log_dir, "__consumer_offsets-0")
    # ~3 MB of commits of one key roll three 1 MiB segments; the cleaner keeps one commit of the
    # cleaned range, so what stays is about the active segment
    def small():
        size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))
        return size < 1_200_000 and size
    wait_until(small, "__consumer_offsets to be compacted", timeout=90)
