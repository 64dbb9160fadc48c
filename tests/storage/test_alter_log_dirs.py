"""AlterReplicaLogDirs in storage (kompakt/storage/alter_log_dirs.py): a LogManager over two real
dirs moves a partition while appends keep arriving between the copy's steps, swaps it in, and
start-up applies each step's recovery rule. The crash tests with a real killed broker are in
tests/integration/test_alter_replica_log_dirs.py."""
import os

import pytest

from kompakt.protocol import records as R
from kompakt.protocol.errors import (InvalidTopicExceptionError, KafkaStorageErrorError, LogDirNotFoundError,
                                     UnknownTopicOrPartitionError)
from kompakt.storage import TopicPartition
from kompakt.storage.alter_log_dirs import parse_future_dir
from kompakt.storage.checkpoint import OffsetCheckpointFile
from kompakt.storage.log_manager import LogManager
from kompakt.testing.poll import wait_until

from test_log_manager import make_config

TP = TopicPartition("moving", 0)


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "a"), str(tmp_path / "b")]


@pytest.fixture
def start(dirs):
    managers = []

    def go(**extra):
        m = LogManager(make_config(*dirs, **{"log_segment_bytes": 3000, **extra}))
        m.startup()
        managers.append(m)
        return m

    yield go
    for m in managers:
        m.shutdown()        # does nothing after a crash(): that stopped its threads already


def append(m, start_i, n):
    for i in range(start_i, start_i + n):
        m.append_as_leader(TP, R.build_batch([(b"k%d" % i, b"v%d" % i)]))


def topic_in_one_dir(start, dirs, n):
    """A started manager with `moving-0` holding n records; (manager, its dir, the other dir)."""
    m = start()
    m.create_topic("moving", 1)
    src = os.path.dirname(m.get_log(TP).dir)
    append(m, 0, n)
    return m, src, next(d for d in dirs if d != src)


def records(plog):
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        for _, hdr in R.iter_batches(data):
            for rec in R.decode_records(data, _, hdr):
                if hdr.base_offset + rec.offset_delta >= offset:
                    out.append((hdr.base_offset + rec.offset_delta, bytes(rec.value)))
            offset = hdr.last_offset + 1
    return out


def partition_dirs(d):
    return sorted(n for n in os.listdir(d) if n.startswith("moving-"))


def test_a_partition_moves_while_appends_arrive_between_copy_steps(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 200)
    plog = m.get_log(TP)
    assert plog.num_segments > 3
    m.alter_replica_log_dir(TP, dest)
    future = m.future_logs()[TP]
    assert parse_future_dir(os.path.basename(future.dir)) == TP and os.path.dirname(future.dir) == dest
    mover = m.alter_log_dirs
    i = 200
    while mover.moves():
        move = mover.moves()[TP]
        mover.step(move)
        append(m, i, 3)      # producers keep writing between steps
        i += 3
    assert m.get_log(TP) is plog                      # the handlers' object goes on
    assert os.path.dirname(plog.dir) == dest and partition_dirs(dest) == ["moving-0"]
    assert [n for n in partition_dirs(src) if n.endswith("-delete")] and "moving-0" not in partition_dirs(src)
    got = records(plog)
    assert got == [(o, b"v%d" % o) for o in range(i)]
    # checkpoints live in the new dir's files, not the old
    m.checkpoint_recovery_offsets()
    m.checkpoint_log_start_offsets()
    assert TP in OffsetCheckpointFile(os.path.join(dest, "recovery-point-offset-checkpoint")).read()
    assert TP not in OffsetCheckpointFile(os.path.join(src, "recovery-point-offset-checkpoint")).read()
    assert TP not in OffsetCheckpointFile(os.path.join(src, "log-start-offset-checkpoint")).read()
    m.shutdown()
    again = start()
    assert os.path.dirname(again.get_log(TP).dir) == dest
    assert records(again.get_log(TP)) == got


def test_the_future_follows_the_log_start_and_truncation(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 30)
    m.alter_replica_log_dir(TP, dest)
    move = m.alter_log_dirs.moves()[TP]
    m.alter_log_dirs._copy_step(move)
    # DeleteRecords may not pass the high watermark, which with durable acks is the synced
    # offset: wait for the group commit's round (the appends above asked for none)
    wait_until(lambda: m.get_log(TP).high_watermark == 30, "the appends synced",
               details=lambda: f"high watermark {m.get_log(TP).high_watermark}")
    m.get_log(TP).delete_records(17)                  # mid-copy DeleteRecords
    m.truncate_to(TP, 25)
    while m.alter_log_dirs.moves():
        m.alter_log_dirs.step_all()
    plog = m.get_log(TP)
    assert plog.log_start_offset == 17 and plog.log_end_offset == 25
    assert records(plog) == [(o, b"v%d" % o) for o in range(17, 25)]


def test_errors_and_the_dir_it_is_in(dirs, start, tmp_path):
    m = start()
    m.create_topic("moving", 1)
    src = os.path.dirname(m.get_log(TP).dir)
    with pytest.raises(LogDirNotFoundError):
        m.alter_replica_log_dir(TP, str(tmp_path / "elsewhere"))
    with pytest.raises(LogDirNotFoundError):          # Kafka compares absolute paths as configured
        m.alter_replica_log_dir(TP, os.path.relpath(src))
    with pytest.raises(UnknownTopicOrPartitionError):
        m.alter_replica_log_dir(TopicPartition("moving", 3), src)
    with pytest.raises(InvalidTopicExceptionError):
        m.alter_replica_log_dir(TopicPartition("x" * 249, 0), src)
    m.alter_replica_log_dir(TP, src)                  # where it is: nothing happens
    assert not m.future_logs()
    # moving back to its dir cancels a move in progress
    dest = next(d for d in dirs if d != src)
    m.alter_replica_log_dir(TP, dest)
    future_dir = m.future_logs()[TP].dir
    m.alter_replica_log_dir(TP, src)
    assert not m.future_logs() and not os.path.exists(future_dir)
    assert [n for n in partition_dirs(dest) if n.endswith("-delete")]


def test_offline_destination_is_a_storage_error(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 0)
    m.handle_io_error(dest, OSError(5, "EIO"), "testing")
    with pytest.raises(KafkaStorageErrorError):
        m.alter_replica_log_dir(TP, dest)


def test_a_future_beside_its_live_log_resumes_after_a_crash(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 40)
    m.flush_dirty_logs()
    m.get_log(TP).flush()
    m.alter_replica_log_dir(TP, dest)
    move = m.alter_log_dirs.moves()[TP]
    m.alter_log_dirs._copy_step(move)
    m.crash()                  # a killed process: no flush, no checkpoints, locks released
    again = start()
    assert TP in again.future_logs()                  # loaded as a future, the move goes on
    while again.alter_log_dirs.moves():
        again.alter_log_dirs.step_all()
    assert os.path.dirname(again.get_log(TP).dir) == dest
    assert records(again.get_log(TP)) == [(o, b"v%d" % o) for o in range(40)]


def test_a_future_without_a_live_log_is_renamed_live(dirs, start):
    """The crash came after step 4 (the current dir renamed `-delete`): the synced future is the log."""
    m, src, dest = topic_in_one_dir(start, dirs, 40)
    m.alter_replica_log_dir(TP, dest)
    move = m.alter_log_dirs.moves()[TP]
    while not m.alter_log_dirs._copy_step(move)[0]:
        pass
    move.future.needs_flush_dir = True
    move.future.flush()
    current = m.get_log(TP).dir
    m.crash()                  # a killed process: no flush, no checkpoints, locks released
    os.replace(current, current + ".0123456789abcdef0123456789abcdef-delete")
    again = start()
    assert not again.future_logs()
    assert os.path.dirname(again.get_log(TP).dir) == dest and partition_dirs(dest) == ["moving-0"]
    assert records(again.get_log(TP)) == [(o, b"v%d" % o) for o in range(40)]
    assert any("renamed the future log live" in r for r in again.repairs)


def test_deleting_the_topic_mid_move_drops_the_future(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 40)
    m.alter_replica_log_dir(TP, dest)
    m.alter_log_dirs._copy_step(m.alter_log_dirs.moves()[TP])
    m.delete_topic("moving")
    assert not m.future_logs() and m.get_log(TP) is None
    assert not [n for d in dirs for n in partition_dirs(d) if not n.endswith("-delete")]
    assert m.alter_log_dirs.step_all() == 0


def test_a_failing_destination_abandons_the_move_and_the_partition_serves_on(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 40)
    m.alter_replica_log_dir(TP, dest)
    m.alter_log_dirs._copy_step(m.alter_log_dirs.moves()[TP])
    m.handle_io_error(dest, OSError(5, "EIO"), "testing")
    m.alter_log_dirs.step_all()
    assert not m.future_logs()
    append(m, 40, 5)
    assert os.path.dirname(m.get_log(TP).dir) == src
    assert records(m.get_log(TP)) == [(o, b"v%d" % o) for o in range(45)]


def test_a_topic_config_change_reaches_the_future_log(dirs, start):
    m, src, dest = topic_in_one_dir(start, dirs, 10)
    m.alter_replica_log_dir(TP, dest)
    m.alter_topic_config("moving", {"segment.bytes": str(2 << 20)})
    assert m.future_logs()[TP].config.segment_bytes == 2 << 20


def test_transactions_cross_the_swap(dirs, start):
    """Aborted transactions are indexed in the copy (read_committed fetches are told of them), and
    a transactional append verified before the swap goes through after it (the log keeps its
    producer state, with the KIP-890 verification guard)."""
    from test_txn_log import end, send, tbatch
    m, src, dest = topic_in_one_dir(start, dirs, 2)                 # 0-1 plain
    plog = m.get_log(TP)
    send(plog, 9, 0, 0)                                             # 2
    end(plog, 9, 0, commit=True)                                    # 3: producer 9 known, no txn open
    send(plog, 7, 0, 0, n=3)                                        # 4-6
    send(plog, 8, 0, 0)                                             # 7 (open across the move)
    end(plog, 7, 0, commit=False)                                   # ABORT at 8
    m.alter_replica_log_dir(TP, dest)
    mover = m.alter_log_dirs
    guard = plog.start_verification(9, 0)                           # the coordinator is asked...
    assert guard is not None and TP in m.future_logs()
    while mover.moves():
        mover.step_all()
    assert os.path.dirname(plog.dir) == dest
    plog.append_as_leader(tbatch(9, 0, 1), verification_guard=guard)    # ...and answers after the swap: 9
    assert plog.last_stable_offset == 7
    end(plog, 8, 0, commit=True)                                    # 10
    end(plog, 9, 0, commit=False)                                   # 11
    assert plog.durable_offset == 9                                 # the swap synced the future
    plog.sync_data()                                                # the LSO stops at the durable offset
    assert plog.last_stable_offset == plog.log_end_offset == 12
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in plog.aborted_transactions(0, 12)]
    assert aborted == [(7, 4, 8), (9, 9, 11)]
    m.shutdown()
    again = start().get_log(TP)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again.aborted_transactions(0, 12)] == aborted


def test_a_future_without_a_live_log_waits_while_a_dir_is_offline(dirs, start, tmp_path):
    """The live copy may be on the offline dir: the future is left as it is, the partition offline."""
    m, src, dest = topic_in_one_dir(start, dirs, 20)
    m.alter_replica_log_dir(TP, dest)
    future_dir = m.future_logs()[TP].dir
    current = m.get_log(TP).dir
    m.crash()                  # a killed process: no flush, no checkpoints, locks released
    os.replace(current, current + ".0123456789abcdef0123456789abcdef-delete")
    offline = tmp_path / "offline"
    offline.write_text("not a dir")
    again = LogManager(make_config(*dirs, offline, log_segment_bytes=3000))
    again.startup()
    try:
        assert again.get_log(TP) is None and again.is_offline(TP) and not again.future_logs()
        assert os.path.isdir(future_dir)
    finally:
        again.shutdown()
