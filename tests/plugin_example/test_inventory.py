"""The application's own tests: a function-scoped broker per test, compaction forced by the
plugin's helper, the partition's files inspected."""
from inventory import publish_stock, read_stock


def test_latest_level_wins_before_and_after_compaction(kompakt_broker):
    kompakt_broker.create_topic("stock", compacted=True)
    publish_stock(kompakt_broker.bootstrap, "stock", {"apple": 5, "pear": 2})
    publish_stock(kompakt_broker.bootstrap, "stock", {"apple": 4, "plum": 9})
    publish_stock(kompakt_broker.bootstrap, "stock", {"pear": None})
    assert read_stock(kompakt_broker.bootstrap, "stock") == {"apple": 4, "plum": 9}
    assert len(kompakt_broker.records("stock")) == 5

    stats = kompakt_broker.compact("stock")
    assert stats["cleaned"] is True
    stored = kompakt_broker.records("stock")
    # one record per SKU: the latest apple and plum, and pear's tombstone (kept for delete.retention.ms)
    assert [(r.key, r.value) for r in stored] == [(b"apple", b"4"), (b"plum", b"9"), (b"pear", None)]
    assert read_stock(kompakt_broker.bootstrap, "stock") == {"apple": 4, "plum": 9}
    assert kompakt_broker.segment_files("stock")


def test_every_test_gets_a_fresh_broker(kompakt_broker):
    kompakt_broker.create_topic("stock", compacted=True)     # would fail if "stock" were left over
    assert kompakt_broker.records("stock") == []
