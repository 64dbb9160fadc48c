"""LogManager through a real broker and real clients: retention moves the earliest offset a
consumer sees, and topics, configs and data survive a SIGKILL and restart (storage-manager)."""
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

DEADLINE_S = 30.0


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _produce(broker, topic, n, start=0):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d-" % i + b"x" * 40, partition=0)
        p.poll(0)
    assert p.flush(20) == 0


def _watermarks(broker, topic):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def test_retention_raises_the_earliest_offset(start_broker):
    broker = start_broker(config={"log.retention.check.interval.ms": "50", "log.initial.task.delay.ms": "0",
                                  "log.segment.delete.delay.ms": "0"})
    admin = _admin(broker)
    fut = admin.create_topics([NewTopic("ret", 1, 1, config={"internal.segment.bytes": "500",
                                                             "retention.ms": "1"})])
    fut["ret"].result(20)
    _produce(broker, "ret", 30)
    deadline = time.monotonic() + DEADLINE_S
    low, high = _watermarks(broker, "ret")
    while low < 30 and time.monotonic() < deadline:
        time.sleep(0.1)
        low, high = _watermarks(broker, "ret")
    # every record expired: Kafka deletes the active segment too (UnifiedLog.deletableSegments,
    # after rolling a new empty one), so nothing of a topic nobody writes to outlives retention.ms
    assert (low, high) == (30, 30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "after-retention",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("ret", 0, 0)])   # below the log start: reset to 30, nothing to read
        assert c.poll(2.0) is None
    finally:
        c.close()
    _produce(broker, "ret", 2, start=30)          # the rolled segment takes new records
    assert _watermarks(broker, "ret")[1] == 32


def test_topics_configs_and_data_survive_sigkill(start_broker):
    broker = start_broker(config={"log.flush.interval.messages": "1"})
    admin = _admin(broker)
    admin.create_topics([NewTopic("keep", 2, 1, config={"cleanup.policy": "compact",
                                                        "min.cleanable.dirty.ratio": "0.2"})])["keep"].result(20)
    _produce(broker, "keep", 10)
    broker.restart(kill=True)
    admin = _admin(broker)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["keep"].partitions) == 2
    res = ConfigResource(ConfigResource.Type.TOPIC, "keep")
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.cleanable.dirty.ratio"].value == "0.2"
    assert _watermarks(broker, "keep") == (0, 10)
    _produce(broker, "keep", 5, start=10)  # and the recovered log takes new appends
    assert _watermarks(broker, "keep") == (0, 15)
