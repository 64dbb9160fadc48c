"""ProducerIdManager: ids are unique across restarts and crashes; the block file is crash-safe."""
import os
import subprocess
import sys

import pytest

from kompakt.broker.txn.producer_ids import (FILE_NAME, MAX_EPOCH, ProducerIdFileError, ProducerIdManager,
                                         read_block_file)


def test_ids_are_sequential_and_block_reserved_before_use(tmp_path):
    mgr = ProducerIdManager(str(tmp_path), block_size=10)
    assert mgr.needs_reservation()
    assert [mgr.generate() for _ in range(3)] == [0, 1, 2]
    # The whole first block is on disk before id 0 was returned.
    assert read_block_file(str(tmp_path / FILE_NAME)) == 10
    assert (tmp_path / FILE_NAME).read_text() == "0\n10\n"
    ids = [mgr.generate() for _ in range(10)]
    assert ids == list(range(3, 13))
    assert read_block_file(str(tmp_path / FILE_NAME)) == 20


def test_restart_never_reuses_an_id(tmp_path):
    first = ProducerIdManager(str(tmp_path), block_size=100)
    issued = {first.generate() for _ in range(5)}
    second = ProducerIdManager(str(tmp_path), block_size=100)   # a restart: same dir
    again = {second.generate() for _ in range(150)}
    assert not issued & again
    assert min(again) == 100


def test_sigkill_after_ids_handed_out_never_reuses(tmp_path):
    # A real process hands out ids, prints them, and is killed without any shutdown.
    code = ("import sys; from kompakt.broker.txn.producer_ids import ProducerIdManager;"
            "m = ProducerIdManager(sys.argv[1], block_size=7);"
            "print(','.join(str(m.generate()) for _ in range(9)), flush=True);"
            "import time; time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait()
    handed = {int(x) for x in line.strip().split(",")}
    assert handed == set(range(9))
    after = ProducerIdManager(str(tmp_path), block_size=7)
    assert after.generate() == 14   # the second block (7..13) was reserved before 7 was used


def test_leftover_tmp_file_is_ignored(tmp_path):
    (tmp_path / (FILE_NAME + ".tmp")).write_text("garbage")
    mgr = ProducerIdManager(str(tmp_path), block_size=5)
    assert mgr.generate() == 0
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_corrupt_file_is_a_clear_error(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\nnot-a-number\n")
    with pytest.raises(ProducerIdFileError, match="corrupt"):
        ProducerIdManager(str(tmp_path))


def test_floor_lifts_start_above_ids_found_in_logs(tmp_path):
    mgr = ProducerIdManager(str(tmp_path), block_size=10, floor=5000)
    assert mgr.generate() == 5000
    assert read_block_file(str(tmp_path / FILE_NAME)) == 5010


def test_epoch_bump_keeps_id_kip_360(tmp_path):
    mgr = ProducerIdManager(str(tmp_path), block_size=10)
    pid, epoch = mgr.init_producer()
    assert (pid, epoch) == (0, 0)
    assert mgr.init_producer(pid, 0) == (pid, 1)
    assert mgr.init_producer(pid, 1) == (pid, 2)
    # a stale epoch must not hand out an (id, epoch) pair twice: a fresh id instead
    assert mgr.init_producer(pid, 1) == (1, 0)
    # an id we never issued (or issued before a restart) is not bumped
    assert mgr.init_producer(10_000, 3) == (2, 0)
    assert ProducerIdManager(str(tmp_path), block_size=10).init_producer(pid, 2) == (10, 0)


def test_exhausted_epoch_gets_a_fresh_id(tmp_path):
    mgr = ProducerIdManager(str(tmp_path), block_size=10)
    pid, epoch = mgr.init_producer()
    while epoch < MAX_EPOCH - 2:
        pid, epoch = mgr.init_producer(pid, epoch)
    assert (pid, epoch) == (0, MAX_EPOCH - 2)
    assert mgr.init_producer(pid, epoch) == (0, MAX_EPOCH - 1)
    assert mgr.init_producer(0, MAX_EPOCH - 1) == (1, 0)


@pytest.mark.parametrize("crash_at", ["write", "rename", "dir-fsync"])
def test_crash_at_each_step_of_a_block_reservation(tmp_path, monkeypatch, crash_at):
    """Steps of write_block_file: (1) tmp + fsync, (2) rename, (3) dir fsync. A crash at any step
    happens before an id of the new block is returned, so after restart no handed-out id repeats."""
    from kompakt.storage import files
    mgr = ProducerIdManager(str(tmp_path), block_size=5)
    handed = [mgr.generate() for _ in range(5)]          # block 0..4 used up; file says 5

    class Crash(BaseException):
        pass

    def crash(*args, **kwargs):
        raise Crash()

    target = {"write": (files, "fsync"), "rename": (files, "replace"), "dir-fsync": (files, "fsync_dir")}[crash_at]
    monkeypatch.setattr(*target, crash)
    with pytest.raises(Crash):
        mgr.generate()                                    # the process "dies" reserving block 5..9
    monkeypatch.undo()

    after = ProducerIdManager(str(tmp_path), block_size=5)
    nxt = after.generate()
    assert nxt not in handed
    # before the rename the old file (5) stands; after it the new one (10): both are safe
    assert nxt == (10 if crash_at == "dir-fsync" else 5)
    assert read_block_file(str(tmp_path / FILE_NAME)) == nxt + 5
