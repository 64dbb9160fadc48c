"""Idempotent producers keep exactly-once-per-partition delivery across broker restarts.

A producer sends a numbered stream while the broker is restarted underneath it (SIGTERM, or
SIGKILL with requests in flight). The client retries what it did not see acknowledged with the
same producer id and sequence numbers; the broker must answer batches it already has with their
original offsets (producer state restored from snapshots and the log tail at load) and accept the
rest in order. Afterwards every partition holds each number exactly once, in order: no
duplicates, no gaps, and every send was acknowledged.

Covers InitProducerId (ids from broker/producer_ids.py: the restarted broker must not hand the
same id to a new producer) and storage's producer state end to end.
"""
import socket
import struct
import threading

import pytest
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 60
PARTITIONS = 2
TOTAL = 4000
RESTART_AFTER = 1000   # acknowledged messages before the broker goes down


def create_topic(broker, name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=TIMEOUT)


def read_all(broker, topic) -> dict[int, list[int]]:
    """Every record of every partition, from the log start to the high watermark."""
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


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_confluent_idempotent_producer_across_restart(start_broker, kill):
    broker = start_broker()
    create_topic(broker, "idem")
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "batch.num.messages": 100, "message.timeout.ms": TIMEOUT * 1000,
        "retry.backoff.ms": 20, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
    })
    acked, errors = [0], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[0] += 1

    halfway = threading.Event()

    def send_all():
        for i in range(TOTAL):
            producer.produce("idem", value=str(i).encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
            producer.poll(0)
            if acked[0] >= RESTART_AFTER:
                halfway.set()
        halfway.set()

    sender = threading.Thread(target=send_all)
    sender.start()
    assert halfway.wait(TIMEOUT)
    broker.restart(kill=kill)      # requests are in flight: the client retries them
    sender.join(TIMEOUT)
    assert producer.flush(TIMEOUT) == 0
    assert errors == [] and acked[0] == TOTAL

    check_exactly_once(read_all(broker, "idem"))


def test_kafka_python_default_producer_across_sigkill(start_broker):
    """kafka-python 3.x is idempotent by default; also checks producer ids across the crash."""
    from kafka import KafkaProducer
    broker = start_broker()
    create_topic(broker, "kp-idem")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2, retry_backoff_ms=20,
                             reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
                             request_timeout_ms=10000, delivery_timeout_ms=TIMEOUT * 1000)
    assert producer.config["enable_idempotence"]        # kafka-python 3.x default
    futures = []
    for i in range(TOTAL):
        futures.append(producer.send("kp-idem", value=str(i).encode(), partition=i % PARTITIONS))
        if i == RESTART_AFTER:
            futures[RESTART_AFTER // 2].get(TIMEOUT)     # some acknowledged, more in flight
            before = [init_producer_id(broker).producer_id for _ in range(2)]
            broker.restart(kill=True)
    producer.flush(TIMEOUT)
    for f in futures:
        f.get(TIMEOUT)
    producer.close(TIMEOUT)
    check_exactly_once(read_all(broker, "kp-idem"))

    # InitProducerId after the crash: a fresh id above every id handed out before it
    after = init_producer_id(broker)
    assert after.error_code == 0 and after.producer_epoch == 0
    assert before == sorted(set(before)) and after.producer_id > max(before)
    # KIP-360: the same id with the next epoch
    bumped = init_producer_id(broker, producer_id=after.producer_id, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, after.producer_id, 1)
    # transactions are refused with an error, not a producer id, and the broker says why
    refused = init_producer_id(broker, transactional_id="txn-1")
    assert refused.error_code == 42 and refused.producer_id == -1
    assert "does not support transactions" in broker.log_text()


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

