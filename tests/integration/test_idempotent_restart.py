"""Idempotent producers: exactly once per partition, in order, across a frozen broker and restarts.

Each test drives a real idempotent producer through three phases of a numbered stream:
  1. normal sends;
  2. the broker is frozen (SIGSTOP) until the client reports a request timeout, then thawed
     (SIGCONT): the broker now reads and appends the requests the client gave up on, and the
     client resends the same batches (same producer id, epoch and sequence numbers) on a new
     connection. Without the broker's duplicate detection these land twice (checked once by
     disabling it: ~200-300 duplicates of 2000);
  3. the broker is restarted (SIGTERM, or SIGKILL with requests in flight): the producer state
     must come back from snapshots and the log tail, so the retried batches are answered with their
     original offsets and the stream continues in sequence.
Afterwards every partition holds each number exactly once, in order, and every send was
acknowledged. Polling has deadlines; nothing depends on timing beyond them.

Also covers InitProducerId end to end: producer ids are never reused after SIGKILL
(broker/txn/producer_ids.py), KIP-360 epoch bumps, a transactional id's first id.
"""
import json
import os
import signal
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

TIMEOUT = 60
PARTITIONS = 2
PHASE = 500           # records per phase; 4 phases
TOTAL = 4 * PHASE


def create_topic(broker, name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=TIMEOUT)


def wait_until(condition, what: str, poll=lambda: time.sleep(0.05)) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        poll()


def read_all(broker, topic) -> dict[int, list[int]]:
    """Every record of every partition, from offset 0 to the high watermark."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
                for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        seen = 0
        while seen < sum(ends.values()):
            msg = consumer.poll(TIMEOUT)
            assert msg is not None, f"timed out reading back: have {seen} of {ends}"
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(int(msg.value()))
            seen += 1
        return got
    finally:
        consumer.close()


def check_exactly_once(got: dict[int, list[int]]) -> None:
    for partition, values in got.items():
        expected = list(range(partition, TOTAL, PARTITIONS))
        duplicates = len(values) - len(set(values))
        missing = sorted(set(expected) - set(values))[:10]
        assert duplicates == 0, f"partition {partition}: {duplicates} duplicates"
        assert not missing, f"partition {partition}: missing {missing}..."
        assert values == expected, f"partition {partition}: out of order"


def frozen_send(broker, send, condition, what: str, poll=lambda: time.sleep(0.05)) -> None:
    """SIGSTOP the broker, `send()` (the requests reach its socket and get no answer), wait until the
    client shows `condition` (it gave up on a request and will resend it), then SIGCONT."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        send()
        wait_until(condition, what, poll)
    finally:
        os.kill(broker.pid, signal.SIGCONT)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_confluent_idempotent_producer(start_broker, kill):
    broker = start_broker()
    create_topic(broker, "idem")
    request_timeouts = [0]

    def on_stats(stats_json):
        stats = json.loads(stats_json)
        request_timeouts[0] = sum(b.get("req_timeouts", 0) for b in stats["brokers"].values())

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "batch.num.messages": 100, "message.timeout.ms": TIMEOUT * 1000,
        "request.timeout.ms": 1000, "socket.timeout.ms": 1000,
        "retry.backoff.ms": 20, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
        "statistics.interval.ms": 100, "stats_cb": on_stats,
    })
    acked, errors = [0], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[0] += 1

    def send(start, stop):
        for i in range(start, stop):
            producer.produce("idem", value=str(i).encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
            producer.poll(0)

    send(0, PHASE)
    assert producer.flush(TIMEOUT) == 0
    frozen_send(broker, lambda: send(PHASE, 2 * PHASE), lambda: request_timeouts[0] > 0, "a request timeout",
                poll=lambda: producer.poll(0.05))
    assert producer.flush(TIMEOUT) == 0
    send(2 * PHASE, 3 * PHASE)
    broker.restart(kill=kill)      # requests in flight: the client retries them after the restart
    send(3 * PHASE, TOTAL)
    assert producer.flush(TIMEOUT) == 0
    assert errors == [] and acked[0] == TOTAL

    check_exactly_once(read_all(broker, "idem"))


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_kafka_python_default_producer_and_producer_ids(start_broker, kill):
    """kafka-python 3.x is idempotent by default; restart; producer ids across the restart."""
    from kafka import KafkaProducer
    broker = start_broker()
    create_topic(broker, "kp-idem")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2, request_timeout_ms=1000,
                             retry_backoff_ms=20, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
                             delivery_timeout_ms=TIMEOUT * 1000)
    assert producer.config["enable_idempotence"]        # kafka-python 3.x default

    def send(start, stop):
        return [producer.send("kp-idem", value=str(i).encode(), partition=i % PARTITIONS)
                for i in range(start, stop)]

    def retries():
        return producer.metrics()["producer-metrics"]["record-retry-rate"]

    futures = send(0, PHASE)
    producer.flush(TIMEOUT)
    frozen_send(broker, lambda: futures.extend(send(PHASE, 2 * PHASE)), lambda: retries() > 0, "a retried send")
    producer.flush(TIMEOUT)
    futures += send(2 * PHASE, 3 * PHASE)
    before = [init_producer_id(broker).producer_id for _ in range(2)]
    broker.restart(kill=kill)
    futures += send(3 * PHASE, TOTAL)
    producer.flush(TIMEOUT)
    for f in futures:
        f.get(TIMEOUT)
    producer.close(TIMEOUT)
    check_exactly_once(read_all(broker, "kp-idem"))

    # InitProducerId after the restart: a fresh id above every id handed out before it
    after = init_producer_id(broker)
    assert after.error_code == 0 and after.producer_epoch == 0
    assert before == sorted(set(before)) and after.producer_id > max(before)
    # KIP-360: the same id with the next epoch
    bumped = init_producer_id(broker, producer_id=after.producer_id, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, after.producer_id, 1)
    # a transactional id gets its own fresh id from the transaction coordinator, epoch 0
    txn = init_producer_id(broker, transactional_id="txn-1")
    assert txn.error_code == 0 and txn.producer_epoch == 0 and txn.producer_id > bumped.producer_id


def init_producer_id(broker, version=4, **fields) -> InitProducerIdResponse:
    """One InitProducerId round trip on a raw socket (kafka-python's schema classes for the bytes)."""
    values = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
              "producer_epoch": -1, **fields}
    request = InitProducerIdRequest(**values)
    request.API_VERSION = version
    request.with_header(correlation_id=7, client_id="pid-test")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    response = InitProducerIdResponse.decode(body, version=version, header=True)
    assert response.header.correlation_id == 7
    return response
