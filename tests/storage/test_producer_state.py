"""Idempotent producers: sequence rules, duplicates, fencing, snapshots (golden bytes), reload."""
from __future__ import annotations

import os

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from kompakt.storage import Log
from kompakt.storage.producer_state import (BatchMetadata, CorruptSnapshotError, ProducerStateEntry,
                                            ProducerStateManager, decode_snapshot, encode_snapshot,
                                            snapshot_file)


def cfg(**kw):
    return LogConfig.from_overrides({k.replace("_", "."): str(v) for k, v in kw.items()})


def pbatch(pid, epoch, seq, n=1):
    return R.build_batch([(b"k%d" % i, b"v") for i in range(n)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq)


def test_snapshot_golden_bytes():
    e = ProducerStateEntry(7, 2, [BatchMetadata(last_seq=9, last_offset=100, offset_delta=4,
                                                timestamp=1_700_000_000_000)], last_timestamp=1_700_000_000_000)
    data = encode_snapshot([e])
    body = bytes.fromhex(
        "00000001"             # one entry
        "0000000000000007"     # producer_id 7
        "0002"                 # epoch 2
        "00000009"             # last_sequence 9
        "0000000000000064"     # last_offset 100
        "00000004"             # offset_delta 4
        "0000018bcfe56800"     # timestamp
        "ffffffff"             # coordinator_epoch -1
        "ffffffffffffffff")    # current_txn_first_offset -1
    import crc32c
    assert data == bytes.fromhex("0001") + crc32c.crc32c(body).to_bytes(4, "big") + body
    [back] = decode_snapshot(data)
    assert (back.producer_id, back.producer_epoch, back.last_seq, back.first_seq) == (7, 2, 9, 5)
    broken = bytearray(data)
    broken[20] ^= 1
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(broken))


def test_sequences_duplicates_and_gaps(tmp_path):
    lg = Log.open(str(tmp_path / "p-0"), cfg())
    a = lg.append_as_leader(pbatch(1, 0, 0, n=2))
    b = lg.append_as_leader(pbatch(1, 0, 2, n=3))
    assert (a.first_offset, b.first_offset) == (0, 2)
    dup = lg.append_as_leader(pbatch(1, 0, 0, n=2))        # retry of the first batch
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert lg.log_end_offset == 5
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(1, 0, 7))               # gap: expected 5
    assert lg.log_end_offset == 5
    # an unknown producer may start anywhere (Kafka 4), a second one is independent
    assert lg.append_as_leader(pbatch(2, 0, 42)).first_offset == 5
    lg.close()


def test_epoch_rules(tmp_path):
    lg = Log.open(str(tmp_path / "p-0"), cfg())
    lg.append_as_leader(pbatch(1, 3, 0))
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(pbatch(1, 2, 1))
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(1, 4, 5))                # new epoch must start at 0
    assert lg.append_as_leader(pbatch(1, 4, 0)).first_offset == 1
    lg.close()


def test_only_the_last_five_batches_are_remembered(tmp_path):
    lg = Log.open(str(tmp_path / "p-0"), cfg())
    for seq in range(7):
        lg.append_as_leader(pbatch(9, 0, seq))
    assert lg.append_as_leader(pbatch(9, 0, 2)).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(9, 0, 1))                # too old to be recognised
    lg.close()


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_reopen_via_snapshot_and_replay(tmp_path, clean):
    d = str(tmp_path / "p-0")
    c = cfg(internal_segment_bytes=400)
    lg = Log.open(d, c)
    for seq in range(12):
        lg.append_as_leader(pbatch(5, 1, seq))
    assert any(n.endswith(".snapshot") for n in os.listdir(d))   # taken at roll
    if clean:
        lg.close()
    else:
        lg.flush()
        lg.close_handlers()
    again = Log.open(d, c, had_clean_shutdown=clean)
    assert again.append_as_leader(pbatch(5, 1, 11)).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        again.append_as_leader(pbatch(5, 1, 13))
    assert again.append_as_leader(pbatch(5, 1, 12)).first_offset == 12
    again.close()


def _closed_log(d, batches):
    """A log of `batches` one-record batches of producer 5 (epoch 0), closed: snapshot at its end."""
    lg = Log.open(d, cfg())
    for seq in range(batches):
        lg.append_as_leader(pbatch(5, 0, seq))
    lg.close()


def test_corrupt_snapshot_is_deleted_and_state_rebuilt_from_the_log(tmp_path):
    d = str(tmp_path / "p-0")
    _closed_log(d, 3)
    path = snapshot_file(d, 3)
    with open(path, "r+b") as f:
        f.seek(12)
        f.write(b"\xff\xff")
    again = Log.open(d, cfg())
    assert not os.path.exists(path)
    assert again.append_as_leader(pbatch(5, 0, 2)).duplicate
    again.close()


def test_expiration(tmp_path):
    psm = ProducerStateManager(str(tmp_path), producer_id_expiration_ms=1000)
    h = R.read_header(pbatch(3, 0, 0))
    staged, dup = psm.check_batches([(h, 0, 0, None)])[:2]
    psm.apply(staged, 1)
    last_ts = psm.producers[3].last_timestamp
    assert psm.remove_expired_producers(last_ts + 999) == 0
    assert psm.remove_expired_producers(last_ts + 1000) == 1 and not psm.producers


def test_known_epoch_without_batches_expects_sequence_zero(tmp_path):
    psm = ProducerStateManager(str(tmp_path))
    psm.producers[8] = ProducerStateEntry(8, producer_epoch=2)   # e.g. from a snapshot entry with no batch
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.check_batches([(R.read_header(pbatch(8, 2, 5)), 0, 0, None)])
    staged, dup, _ = psm.check_batches([(R.read_header(pbatch(8, 2, 0)), 0, 0, None)])
    assert dup is None and staged[8].last_seq == 0
    with pytest.raises(InvalidProducerEpochError):          # coordinator appends are fenced too
        psm.check_batches([(R.read_header(pbatch(8, 1, 0)), 0, 0, None)], origin="coordinator")


def _snapshots(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".snapshot"))


def test_snapshot_only_at_a_new_offset(tmp_path):
    # Kafka's takeSnapshot: nothing for an empty log, nothing when the state did not move since
    # the last snapshot taken or loaded (a close after a restart without appends writes nothing).
    d = str(tmp_path / "p-0")
    lg = Log.open(d, cfg())
    lg.close()
    assert _snapshots(d) == []
    lg = Log.open(d, cfg())
    lg.append_as_leader(pbatch(5, 0, 0, n=3))
    lg.close()
    assert _snapshots(d) == ["00000000000000000003.snapshot"]
    before = os.stat(snapshot_file(d, 3))
    lg = Log.open(d, cfg())
    assert lg.producer_state.take_snapshot() is None
    lg.close()
    after = os.stat(snapshot_file(d, 3))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)   # not rewritten


def test_snapshot_files_are_listed_once_and_tracked(tmp_path):
    d = str(tmp_path / "p-0")
    lg = Log.open(d, cfg(internal_segment_bytes=400))
    for seq in range(12):
        lg.append_as_leader(pbatch(5, 1, seq))
    psm = lg.producer_state
    assert [snapshot_file(d, o) for o in psm.snapshot_offsets()] == \
        [os.path.join(d, n) for n in _snapshots(d)]
    lg.delete_segments(lg.segments[:1])
    lg.close()
    assert [snapshot_file(d, o) for o in psm.snapshot_offsets()] == \
        [os.path.join(d, n) for n in _snapshots(d)]


@pytest.mark.parametrize("kept", ["intact", "stale"])
def test_crash_recovery_keeps_a_snapshot_of_the_same_state(tmp_path, kept):
    # After a crash the active segment is replayed from its start (its .txnindex is rebuilt); a
    # snapshot at the log end that holds that very state stays and counts as taken (the next close
    # writes none), one that differs is deleted and written again at close.
    d = str(tmp_path / "p-0")
    _closed_log(d, 4)
    path = snapshot_file(d, 4)
    if kept == "stale":
        with open(path, "wb") as f:
            f.write(encode_snapshot([ProducerStateEntry(9, 3)]))
    before = os.stat(path)
    again = Log.open(d, cfg(), had_clean_shutdown=False, recovery_point=4)
    assert again.append_as_leader(pbatch(5, 0, 3)).duplicate
    if kept == "intact":
        assert again.producer_state.last_snapshot_offset == 4 and os.path.exists(path)
    else:
        assert not os.path.exists(path)
    again.close()
    entries = decode_snapshot(open(path, "rb").read())
    assert [e.producer_id for e in entries] == [5] and entries[0].last_seq == 3
    if kept == "intact":
        assert os.stat(path).st_mtime_ns == before.st_mtime_ns


def test_a_snapshot_kept_after_a_crash_is_synced_before_a_clean_close_relies_on_it(tmp_path):
    # The snapshot at the log end kept at a crash start may be only in the page cache of the
    # process that died (written by a shutdown killed before its sync pass). The close that
    # skips writing it again must still hand it over to be synced before the clean marker.
    d = str(tmp_path / "p-0")
    _closed_log(d, 4)
    again = Log.open(d, cfg(), had_clean_shutdown=False, recovery_point=4)
    assert again.producer_state.last_snapshot_offset == 4
    assert again.close(sync_snapshot=False) == snapshot_file(d, 4)
    clean = Log.open(d, cfg())                              # vouched for by the marker: nothing to sync
    assert clean.close(sync_snapshot=False) is None


def test_sequences_wrap_at_int32_max(tmp_path):
    # ProducerAppendInfo.inSequence: after Integer.MAX_VALUE comes 0; a batch may span the wrap
    # (its last sequence is (base + lastOffsetDelta) mod 2^31) and be recognised as a duplicate
    lg = Log.open(str(tmp_path / "p-0"), cfg())
    top = 2**31 - 1
    lg.append_as_leader(pbatch(1, 0, top - 2, n=2))                 # top-2, top-1
    across = lg.append_as_leader(pbatch(1, 0, top, n=3))            # top, 0, 1
    assert lg.append_as_leader(pbatch(1, 0, top, n=3)).first_offset == across.first_offset
    lg.append_as_leader(pbatch(1, 0, 2))
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(1, 0, 0))                      # a sequence already passed
    assert lg.log_end_offset == 6
