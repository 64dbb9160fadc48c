"""kafka-python and aiokafka (under pytest-asyncio) against the plugin's brokers."""
import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer


def test_kafka_python_group_round_trip(kompakt_session_broker):
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    kompakt_session_broker.create_topic(topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kompakt_session_broker.bootstrap)
    for i in range(10):
        producer.send(topic, key=b"%d" % i, value=b"order-%d" % i)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=kompakt_session_broker.bootstrap, group_id="billing",
                             auto_offset_reset="earliest")
    values = []
    for _ in range(60):                      # up to ~30 s: join the group, then read
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
        if len(values) >= 10:
            break
    consumer.close()
    values.sort()
    assert values == sorted(b"order-%d" % i for i in range(10))


async def test_aiokafka_on_the_tests_own_event_loop(kompakt_session_broker):
    topic = f"events-{uuid.uuid4().hex[:8]}"
    await kompakt_session_broker.acreate_topic(topic)
    producer = AIOKafkaProducer(bootstrap_servers=kompakt_session_broker.bootstrap)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, b"event-%d" % i)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kompakt_session_broker.bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        got = []
        async with asyncio.timeout(15):
            while len(got) < 5:
                got.append((await consumer.getone()).value)
    finally:
        await consumer.stop()
    assert got == [b"event-%d" % i for i in range(5)]
    # the broker runs on its own loop: this test's loop was never blocked by it
    assert asyncio.get_running_loop().is_running()
