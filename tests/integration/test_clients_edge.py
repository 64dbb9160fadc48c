"""Edges real clients hit: a batch larger than the fetch limits, message.max.bytes, a consumer
parked on an empty partition, many producers and consumers at once."""
import threading
import time

import confluent_kafka as ck
import pytest

DEADLINE_S = 30.0


def consume_n(bootstrap, topic, partition, n, **conf):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"edge-{topic}", "enable.auto.commit": False,
                     **conf})
    c.assign([ck.TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


def test_batch_larger_than_fetch_limits_still_arrives(module_broker):
    """At-least-one-batch: a 300 KB message with max.partition.fetch.bytes and fetch.max.bytes of 64 KB."""
    big = bytes(range(256)) * 1200
    p = ck.Producer({"bootstrap.servers": module_broker.bootstrap})
    p.produce("edge-big", big, partition=0)
    p.produce("edge-big", b"small", partition=0)
    assert p.flush(DEADLINE_S) == 0
    got = consume_n(module_broker.bootstrap, "edge-big", 0, 2,
                    **{"max.partition.fetch.bytes": 65536, "fetch.max.bytes": 65536, "message.max.bytes": 65536})
    assert [m.value() for m in got] == [big, b"small"]


def test_message_max_bytes_is_enforced_by_the_broker(module_broker):
    errors = []
    p = ck.Producer({"bootstrap.servers": module_broker.bootstrap, "message.max.bytes": 4_000_000,
                     "batch.size": 4_000_000})
    p.produce("edge-limit", b"x" * 1_500_000, partition=0,          # above the 1048588-byte default
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(DEADLINE_S)                                  # its own batch: the broker refuses batches
    p.produce("edge-limit", b"fits", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(DEADLINE_S)
    codes = [e.code() if e is not None else None for e in errors]
    assert codes == [ck.KafkaError.MSG_SIZE_TOO_LARGE, None]
    got = consume_n(module_broker.bootstrap, "edge-limit", 0, 1)
    assert [m.value() for m in got] == [b"fits"]


def test_parked_consumer_gets_a_later_message(module_broker):
    """The consumer's fetch waits on an empty partition; a produce wakes it. fetch.wait.max.ms is
    100 s, beyond the 30 s deadline: without the wake-up "second" could not arrive in time."""
    p = ck.Producer({"bootstrap.servers": module_broker.bootstrap})
    p.produce("edge-park", b"first", partition=0)
    p.flush(DEADLINE_S)
    result = {}

    def consumer():
        result["msgs"] = consume_n(module_broker.bootstrap, "edge-park", 0, 2,
                                   **{"fetch.wait.max.ms": 100_000, "socket.timeout.ms": 300_000})

    t = threading.Thread(target=consumer)
    t.start()
    time.sleep(0.5)                                   # let it read "first" and park
    p.produce("edge-park", b"second", partition=0)
    p.flush(DEADLINE_S)
    t.join(DEADLINE_S + 5)
    assert [m.value() for m in result["msgs"]] == [b"first", b"second"]


def test_many_clients_at_once(module_broker):
    n_producers, per = 6, 500
    errors = []

    def producer(i):
        p = ck.Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 2,
                         "compression.type": ["none", "lz4", "zstd"][i % 3]})
        for j in range(per):
            p.produce("edge-many", f"{i}:{j}".encode(), key=str(i).encode(),
                      on_delivery=lambda err, msg: err and errors.append(err))
            p.poll(0)
        p.flush(DEADLINE_S)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(n_producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S * 2)
    assert errors == []
    seen = {}
    for partition in range(3):
        c = ck.Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "edge-many",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("edge-many", partition, 0)])
        lo, hi = c.get_watermark_offsets(ck.TopicPartition("edge-many", partition), timeout=10)
        deadline = time.monotonic() + DEADLINE_S
        count = 0
        while count < hi - lo and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            count += 1
            i, j = map(int, m.value().split(b":"))
            seen.setdefault(i, []).append(j)
        c.close()
    # every message exactly once, and each producer's messages in order (one key = one partition)
    assert {i: js for i, js in seen.items()} == {i: list(range(per)) for i in range(n_producers)}


def test_large_requests_back_to_back_keep_their_bytes(module_broker):
    """Many produce requests above framing.LARGE_FRAME on one connection: their read buffers are
    recycled from one request to the next, and every byte must still land where it belongs."""
    import os
    values = [os.urandom(150_000) + bytes([i]) for i in range(24)]
    p = ck.Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 20,
                     "batch.size": 700_000, "compression.type": "none"})
    for v in values:
        p.produce("edge-large", v, partition=1)
    assert p.flush(DEADLINE_S) == 0
    got = consume_n(module_broker.bootstrap, "edge-large", 1, len(values))
    assert [m.value() for m in got] == values
    assert [m.offset() for m in got] == list(range(len(values)))
