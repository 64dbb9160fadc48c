"""Topic metadata store: round trip, atomicity, corruption detection, Kafka uuids and names."""
import json
import os
import uuid

import pytest

from kompakt.protocol.errors import ErrorCode, InvalidTopicExceptionError
from kompakt.storage.topic_store import (
    STORE_FILE, TopicMeta, TopicStore, TopicStoreCorruptError, colliding_topic, decode, encode,
    random_topic_id, read_partition_metadata, uuid_from_str, uuid_to_str, validate_topic_name,
    write_partition_metadata)


def test_kafka_uuid_text():
    u = uuid.UUID("00000000-0000-0000-0000-000000000001")
    assert uuid_to_str(u) == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's Uuid.ONE_UUID.toString()
    for _ in range(50):
        r = random_topic_id()
        assert uuid_from_str(uuid_to_str(r)) == r and len(uuid_to_str(r)) == 22
        assert not uuid_to_str(r).startswith("-")
    with pytest.raises(ValueError):
        uuid_from_str("short")


def test_partition_metadata_golden(tmp_path):
    u = uuid.UUID("00000000-0000-0000-0000-000000000001")
    write_partition_metadata(str(tmp_path), u)
    assert (tmp_path / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert read_partition_metadata(str(tmp_path)) == u
    (tmp_path / "partition.metadata").write_bytes(b"garbage\x00")
    assert read_partition_metadata(str(tmp_path)) is None
    assert read_partition_metadata(str(tmp_path / "missing")) is None


def test_round_trip_and_restart(tmp_path):
    store = TopicStore(str(tmp_path))
    assert store.load() == ({}, set(), True)
    topics = {"a": TopicMeta("a", random_topic_id(), 3, {"cleanup.policy": "compact"}),
              "b.c": TopicMeta("b.c", random_topic_id(), 1, {})}
    gone = {random_topic_id()}
    store.save(topics, gone)
    again = TopicStore(str(tmp_path)).load()
    assert again == (topics, gone, True)
    assert sorted(os.listdir(tmp_path)) == [STORE_FILE]


def test_flipped_byte_is_detected(tmp_path):
    store = TopicStore(str(tmp_path))
    store.save({"orders": TopicMeta("orders", random_topic_id(), 3, {})})
    data = bytearray((tmp_path / STORE_FILE).read_bytes())
    i = data.index(b'"partitions": 3')
    data[i + len('"partitions": ')] = ord("4")
    (tmp_path / STORE_FILE).write_bytes(bytes(data))
    with pytest.raises(TopicStoreCorruptError, match="checksum mismatch"):
        store.load_strict()
    assert store.load() == ({}, set(), False)


def test_torn_write_leaves_old_store(tmp_path):
    store = TopicStore(str(tmp_path))
    old = {"orders": TopicMeta("orders", random_topic_id(), 3, {})}
    store.save(old)
    # a crash mid-write: the temp file is half written, the rename never happened
    new = encode({**old, "x": TopicMeta("x", random_topic_id(), 1, {})})
    (tmp_path / (STORE_FILE + ".tmp")).write_bytes(new[: len(new) // 2])
    assert TopicStore(str(tmp_path)).load() == (old, set(), True)
    store.save(old)  # the next write overwrites the stale temp file
    assert sorted(os.listdir(tmp_path)) == [STORE_FILE]


@pytest.mark.parametrize("data,why", [
    (b"", "not a topic store"), (b"{}", "not a topic store"), (b"\xff", "not a topic store"),
    (json.dumps({"version": 9, "crc32c": 0, "topics": [], "deleted_topic_ids": []}).encode(), "version"),
])
def test_garbage(data, why):
    with pytest.raises(TopicStoreCorruptError, match=why):
        decode(data)


def test_topic_names():
    for ok in ["a", "A.b_c-9", "x" * 249, "__consumer_offsets"]:
        validate_topic_name(ok)
    for bad in ["", ".", "..", "x" * 250, "a b", "a/b", "é"]:
        with pytest.raises(InvalidTopicExceptionError) as info:
            validate_topic_name(bad)
        assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert colliding_topic("a.b", ["a_b", "c"]) == "a_b"
    assert colliding_topic("a.b", ["a.b", "c"]) is None


def test_topic_name_with_a_trailing_newline_is_invalid():
    from kompakt.protocol.errors import InvalidTopicExceptionError
    from kompakt.storage import topic_store
    import pytest as _pytest
    with _pytest.raises(InvalidTopicExceptionError):
        topic_store.validate_topic_name("orders\n")
    topic_store.validate_topic_name("orders")
