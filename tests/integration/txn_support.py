"""Helpers of the transaction integration tests: a broker tuned for them, readers at both isolation
levels (confluent-kafka, independent of the client under test), and checks on the partition files."""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
from broker_process import BrokerProcess

from kompakt.protocol import records as R
from kompakt.protocol import txn_records as T

DEADLINE_S = 30.0
# small state topic, quick timeout checks; everything else Kafka's defaults
TXN_BROKER_CONFIG = {"num.partitions": "2", "offsets.topic.num.partitions": "1",
                     "transaction.state.log.num.partitions": "3",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def txn_broker(base_dir, **extra) -> BrokerProcess:
    return BrokerProcess(base_dir, {**TXN_BROKER_CONFIG, **extra}).start()


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for f in futures.values():
        f.result(DEADLINE_S)


def read_values(bootstrap: str, tps: list[tuple[str, int]], *, committed: bool, idle_s: float = 0.6,
                expect: int | None = None) -> dict[tuple[str, int], list[bytes]]:
    """Every record value of `tps` from offset 0 at one isolation level: until `expect` records
    arrived (if given), then until `idle_s` passes with nothing new, or DEADLINE_S."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                     "isolation.level": "read_committed" if committed else "read_uncommitted",
                     "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([ck.TopicPartition(t, p, 0) for t, p in tps])
    got: dict = {tp: [] for tp in tps}
    n = 0
    deadline = time.monotonic() + DEADLINE_S
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if (expect is None or n >= expect) and time.monotonic() - last_new > idle_s:
                    break
                continue
            assert m.error() is None, m.error()
            got[(m.topic(), m.partition())].append(m.value())
            n += 1
            last_new = time.monotonic()
    finally:
        c.close()
    return got


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([ck.TopicPartition(topic, partition)], timeout=DEADLINE_S)
        return tp.offset
    finally:
        c.close()


def batches(log_dir: str, topic: str, partition: int):
    """(header, records) of every batch of one partition, from its segment files."""
    out = []
    d = os.path.join(log_dir, f"{topic}-{partition}")
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            data = open(os.path.join(d, name), "rb").read()
            for pos, h in R.iter_batches(data):
                out.append((h, data, pos))
    return out


def marker_kinds(log_dir: str, topic: str, partition: int) -> list[str]:
    return ["COMMIT" if T.decode_marker(data, pos, h)[0] == T.COMMIT else "ABORT"
            for h, data, pos in batches(log_dir, topic, partition) if h.is_control]
