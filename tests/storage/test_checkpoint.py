"""Checkpoint files: Kafka's text format byte for byte, tolerant reads, atomic writes."""
import logging
import os

import pytest

from kompakt.storage import TopicPartition
from kompakt.storage.checkpoint import (
    CheckpointCorruptError, LeaderEpochCheckpointFile, OffsetCheckpointFile, OFFSET_FORMATTER, parse)


def test_golden_offset_checkpoint_bytes(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(str(path)).write({TopicPartition("orders", 1): 105640, ("orders", 0): 105823})
    # version line, entry-count line, then "topic partition offset" lines (sorted by topic, partition)
    assert path.read_bytes() == b"0\n2\norders 0 105823\norders 1 105640\n"
    assert OffsetCheckpointFile(str(path)).read() == {("orders", 0): 105823, ("orders", 1): 105640}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_golden_leader_epoch_bytes(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(str(path)).write([(0, 0), (3, 1200)])
    assert path.read_bytes() == b"0\n2\n0 0\n3 1200\n"
    assert LeaderEpochCheckpointFile(str(path)).read() == [(0, 0), (3, 1200)]


def test_empty_and_missing(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    assert OffsetCheckpointFile(str(path)).read() == {}
    OffsetCheckpointFile(str(path)).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(str(path)).read() == {}


def test_reads_kafka_written_file_with_topic_dots_and_dashes(tmp_path):
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n3\n__consumer_offsets 49 7\nmy.topic-x 0 0\nt 12 9223372036854775807\n")
    assert OffsetCheckpointFile(str(path)).read() == {
        ("__consumer_offsets", 49): 7, ("my.topic-x", 0): 0, ("t", 12): 2**63 - 1}


@pytest.mark.parametrize("content,why", [
    (b"", "version line"),
    (b"1\n0\n", "unrecognised version 1"),
    (b"0\n2\na 0 1\n", "expected 2 entries but found 1"),
    (b"0\n1\na 0\n", "malformed line 3"),
    (b"0\n1\na x 1\n", "malformed line 3"),
    (b"0\nzz\n", "malformed entry count"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"0\n2\na 0 1\nb 0", "malformed line 4"),  # torn final line: never half-read
])
def test_garbage_reads_as_empty_and_is_logged(tmp_path, caplog, content, why):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    f = OffsetCheckpointFile(str(path))
    with pytest.raises(CheckpointCorruptError, match=why):
        f.read_strict()
    with caplog.at_level(logging.WARNING):
        assert f.read() == {}
    assert "corrupt checkpoint" in caplog.text and str(path) in caplog.text


def test_write_replaces_atomically_and_overwrites_stale_tmp(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    (tmp_path / "recovery-point-offset-checkpoint.tmp").write_bytes(b"half a file")
    f = OffsetCheckpointFile(str(path))
    f.write({("a", 0): 1})
    inode = os.stat(path).st_ino
    f.write({("a", 0): 2})
    assert f.read() == {("a", 0): 2}
    assert os.stat(path).st_ino != inode  # replaced by rename, never rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["recovery-point-offset-checkpoint"]


def test_refuses_to_write_unparseable_entries(tmp_path):
    with pytest.raises(ValueError):
        OffsetCheckpointFile(str(tmp_path / "x")).write({("bad topic", 0): 1})
    assert not (tmp_path / "x").exists()


def test_parse_roundtrip_many():
    entries = [(TopicPartition(f"t{i}", i % 7), i * 1000) for i in range(100)]
    text = "0\n100\n" + "".join(f"{tp.topic} {tp.partition} {off}\n" for tp, off in entries)
    assert parse(text, OFFSET_FORMATTER) == entries


from hypothesis import given, strategies as st  # noqa: E402

_topic = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=30)


@given(st.dictionaries(st.tuples(_topic, st.integers(0, 2**31 - 1)), st.integers(0, 2**63 - 1), max_size=30))
def test_offset_checkpoint_round_trip(tmp_path_factory, offsets):
    path = tmp_path_factory.mktemp("ckpt") / "recovery-point-offset-checkpoint"
    f = OffsetCheckpointFile(str(path))
    f.write(offsets)
    assert f.read_strict() == {TopicPartition(*tp): o for tp, o in offsets.items()}
    lines = path.read_text().splitlines()
    assert lines[:2] == ["0", str(len(offsets))] and len(lines) == len(offsets) + 2


def test_concurrent_writers_of_one_checkpoint_never_tear_or_fail(tmp_path):
    # The recovery-point task (a worker thread) and a topic deletion can write the same file at
    # once; both go through `<name>.tmp`, so without serialising one writer's rename moved the
    # other's half-written temp file (a torn checkpoint) or found it gone (FileNotFoundError).
    import threading
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    errors = []
    contents = {k: {TopicPartition(f"t{k}", p): p * 1000 + k for p in range(200)} for k in range(2)}

    def writer(k):
        try:
            for _ in range(40):
                OffsetCheckpointFile(path).write(contents[k])
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert OffsetCheckpointFile(path).read_strict() in (contents[0], contents[1])
