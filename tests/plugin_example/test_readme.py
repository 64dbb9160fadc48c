"""The example of README.md's "Testing your application", verbatim (so the README stays true)."""
from confluent_kafka import Producer


def test_orders_are_compacted(kompakt_broker):          # a fresh broker for this test
    kompakt_broker.create_topic("orders", partitions=1, compacted=True)
    p = Producer({"bootstrap.servers": kompakt_broker.bootstrap})
    for status in ("new", "paid", "shipped"):
        p.produce("orders", key=b"o-1", value=status.encode())
    p.flush()
    kompakt_broker.compact("orders")                    # roll, clean now, wait
    assert [r.value for r in kompakt_broker.records("orders")] == [b"shipped"]   # read from the files
