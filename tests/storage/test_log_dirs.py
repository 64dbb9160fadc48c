"""Log dir housekeeping: meta.properties, the .lock, the clean-shutdown marker, dir names."""
import os

import pytest

from kompakt.storage.log_dirs import (CLEAN_SHUTDOWN_FILE, LogDirError, LogDirLockedError,
                                      create_and_validate_dirs, load_meta_properties, lock_dir,
                                      parse_partition_dir, read_and_clear_clean_shutdown, unique_dir_name,
                                      unlock_dir, write_clean_shutdown)


def test_meta_properties_written_like_kafka(tmp_path):
    cluster, ids = load_meta_properties([str(tmp_path)], "MkU3OEVBNTcwNTJENDM2Qg", 3)
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    assert lines[2:] == ["cluster.id=MkU3OEVBNTcwNTJENDM2Qg", f"directory.id={ids[str(tmp_path)]}",
                         "node.id=3", "version=1"]
    again = load_meta_properties([str(tmp_path)], None, 3)  # read back, nothing rewritten
    assert again == (cluster, ids)


def test_lock_is_exclusive(tmp_path):
    fd = lock_dir(str(tmp_path))
    with pytest.raises(LogDirLockedError, match=str(tmp_path)):
        lock_dir(str(tmp_path))
    unlock_dir(fd)
    unlock_dir(lock_dir(str(tmp_path)))


def test_clean_shutdown_marker(tmp_path):
    assert read_and_clear_clean_shutdown(str(tmp_path)) is False
    write_clean_shutdown(str(tmp_path))
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version": 0, "brokerEpoch": -1}'
    assert read_and_clear_clean_shutdown(str(tmp_path)) is True
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_dir_names():
    assert parse_partition_dir("orders-12") == ("orders", 12)
    assert parse_partition_dir("my-topic-0") == ("my-topic", 0)
    for bad in ["orders", "orders-", "-1", "orders-01", "a b-1", "orders-0.abc-delete"]:
        assert parse_partition_dir(bad) is None, bad
    name = os.path.basename(unique_dir_name("/x/" + "t" * 249 + "-7", "-delete"))
    assert len(name) == 255 and name.endswith("-delete") and "-7." in name


def test_duplicate_and_unusable_dirs(tmp_path):
    with pytest.raises(LogDirError, match="Duplicate log directory"):
        create_and_validate_dirs([str(tmp_path / "a"), str(tmp_path / "a" / ".." / "a")])
    (tmp_path / "f").write_text("x")
    live, offline = create_and_validate_dirs([str(tmp_path / "b"), str(tmp_path / "f")])
    assert live == [str(tmp_path / "b")] and offline == [str(tmp_path / "f")]
