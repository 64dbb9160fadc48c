"""A tiny application: stock levels kept in a compacted topic (one record per SKU, the latest
wins), published with confluent-kafka and read back as a table."""
from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition


def publish_stock(bootstrap: str, topic: str, levels: dict[str, int | None]) -> None:
    """Write each SKU's level (None deletes the SKU: a tombstone)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for sku, level in levels.items():
        producer.produce(topic, key=sku.encode(), value=None if level is None else str(level).encode())
    if producer.flush(15):
        raise RuntimeError("stock updates not delivered")


def read_stock(bootstrap: str, topic: str) -> dict[str, int]:
    """The current table: every record from the start, the last value of each SKU."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inventory-reader", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        consumer.assign([TopicPartition(topic, 0, low)])
        table: dict[str, int] = {}
        position = low
        while position < high:
            msg = consumer.poll(15)
            if msg is None:
                raise RuntimeError(f"no record at offset {position} of {topic}")
            if msg.error():
                raise RuntimeError(str(msg.error()))
            sku = msg.key().decode()
            if msg.value() is None:
                table.pop(sku, None)
            else:
                table[sku] = int(msg.value())
            position = msg.offset() + 1
        return table
    finally:
        consumer.close()
