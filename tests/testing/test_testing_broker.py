"""kompakt.testing's in-process broker directly (the installed plugin and both modes are run by
tests/integration/test_testing_plugin.py): it lives on a thread of its own and leaves nothing
behind, it answers Kafka clients at once, and it stops cleanly; a subprocess broker keeps its
ports across a restart and gets another admin port when its first was taken."""
import asyncio
import subprocess
import sys
import threading

import pytest
from confluent_kafka.admin import AdminClient

from kompakt.storage.log_dirs import CLEAN_SHUTDOWN_FILE
from kompakt.testing.broker import start_broker


def broker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("kompakt-broker-")]


def test_inprocess_broker_has_its_own_loop_thread_and_stops_cleanly(tmp_path):
    before = broker_threads()
    broker = start_broker(tmp_path / "b")
    try:
        assert len(broker_threads()) == len(before) + 1 and broker.running
        broker.create_topic("t", partitions=2, config={"retention.ms": "60000"})
        meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert len(meta.topics["t"].partitions) == 2
        with pytest.raises(RuntimeError, match="cannot create topic t: error 36"):
            broker.create_topic("t")                       # TOPIC_ALREADY_EXISTS, with the message
        with pytest.raises(RuntimeError, match="only compacted topics are cleaned"):
            broker.compact("t")
    finally:
        broker.stop()
    assert broker_threads() == before and not broker.running
    assert (tmp_path / "b" / "data" / CLEAN_SHUTDOWN_FILE).exists()
    broker.stop()                                          # twice is harmless


async def test_async_helpers_leave_the_callers_loop_free(tmp_path):
    broker = await asyncio.to_thread(start_broker, tmp_path / "b")
    try:
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        await broker.acreate_topic("kv", compacted=True)
        ticker.cancel()
        assert ticks > 1                                   # the test's loop ran while the helper waited
        assert broker.records("kv") == []
    finally:
        await asyncio.to_thread(broker.stop)


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown kompakt mode 'docker'"):
        start_broker(tmp_path, mode="docker")


def test_two_brokers_in_one_process_answer_side_by_side(tmp_path):
    """Each broker's loop thread encodes with a buffer of its own (codec's per-thread buffer): many
    generic answers from two brokers at once all decode."""
    from concurrent.futures import ThreadPoolExecutor

    from kompakt.protocol import codec
    mine = codec._encode_buffer()
    with ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(codec._encode_buffer).result()
    assert theirs is not mine and codec._encode_buffer() is mine
    a, b = start_broker(tmp_path / "a"), start_broker(tmp_path / "b")
    try:
        def describe(broker, n):
            for i in range(n):
                broker.create_topic(f"t{i}", config={"retention.ms": str(1000 + i)})
            return n
        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(describe, [a, b, a, b], [5, 5, 0, 0])) == 10
    finally:
        a.stop()
        b.stop()


def test_records_carry_the_timestamp_a_consumer_sees(tmp_path):
    """`records()` reports each record's timestamp as a consumer gets it: the producer's on a
    CreateTime topic, the broker's append time (the batch's maxTimestamp) on a LogAppendTime one."""
    import time

    from confluent_kafka import Producer

    broker = start_broker(tmp_path / "b")
    try:
        broker.create_topic("created")
        broker.create_topic("appended", config={"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for topic in ("created", "appended"):
            p.produce(topic, key=b"k", value=b"v", timestamp=before - 3_600_000)   # an hour old
        assert p.flush(15) == 0
        del p                                   # no reconnection noise once the broker stops
        assert [r.timestamp for r in broker.records("created")] == [before - 3_600_000]
        (appended,) = broker.records("appended")
        assert before <= appended.timestamp <= int(time.time() * 1000)
    finally:
        broker.stop()


def test_subprocess_mode_puts_no_deprecation_warning_in_the_users_report(tmp_path):
    # kafka-python's schema classes warn at import on Python 3.11+; the helpers that import them
    # in the test process (create_topic, records) must keep that out of a user's test report
    script = (
        "from kompakt.testing.broker import start_broker\n"
        f"b = start_broker({str(tmp_path)!r}, mode='subprocess')\n"
        "try:\n"
        "    b.create_topic('t', compacted=True)\n"
        "    print(len(b.records('t')))\n"
        "finally:\n"
        "    b.stop()\n")
    proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_a_subprocess_broker_comes_back_on_its_ports_after_a_kill(tmp_path):
    broker = start_broker(tmp_path, mode="subprocess")
    try:
        port, admin = broker.port, broker.metrics_port
        broker.create_topic("kept")
        broker.kill()
        broker.start()
        assert (broker.port, broker.metrics_port) == (port, admin)       # its clients find it again
        meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert "kept" in meta.topics
    finally:
        broker.stop()


def test_an_admin_port_taken_before_the_broker_binds_it_is_replaced(tmp_path, monkeypatch):
    import kompakt.testing.broker as harness
    from kompakt.testing.ports import closed_port, free_port
    with closed_port() as taken:
        offered = iter([taken])
        monkeypatch.setattr(harness, "free_port", lambda: next(offered, None) or free_port())
        broker = start_broker(tmp_path, mode="subprocess")
        try:
            assert broker.metrics_port != taken
            broker.create_topic("c", compacted=True)
            broker.compact("c")                                            # through the admin API
        finally:
            broker.stop()
