"""The factory: a broker with its own settings, and one run as a `kompakt serve` subprocess."""
from inventory import publish_stock, read_stock


def test_subprocess_broker_with_custom_config(kompakt_broker_factory):
    broker = kompakt_broker_factory(mode="subprocess", config={"num.partitions": "3"})
    assert broker.mode == "subprocess"
    publish_stock(broker.bootstrap, "auto-created", {"fig": 1})        # auto-created, 3 partitions
    assert len(list(broker.partition_dir("auto-created", 2).parent.glob("auto-created-*"))) == 3
    broker.create_topic("stock", compacted=True)
    publish_stock(broker.bootstrap, "stock", {"fig": 1})
    publish_stock(broker.bootstrap, "stock", {"fig": 2})
    assert broker.compact("stock")["cleaned"] is True
    assert [(r.key, r.value) for r in broker.records("stock")] == [(b"fig", b"2")]
    assert read_stock(broker.bootstrap, "stock") == {"fig": 2}
