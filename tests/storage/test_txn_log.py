"""Transactions in the partition log: LSO, markers, `.txnindex` (golden bytes), snapshots, recovery,
KIP-890 verification guards, and the producer-state rules (Kafka's ProducerAppendInfo)."""
from __future__ import annotations

import os

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol import txn_records as T
from kompakt.protocol.errors import (InvalidProducerEpochError, InvalidTxnStateError,
                                     TransactionCoordinatorFencedError)
from kompakt.storage import Log
from kompakt.storage import segment as S
from kompakt.storage.txn_index import AbortedTxn, TransactionIndex


def cfg(**kw):
    return LogConfig.from_overrides({k.replace("_", "."): str(v) for k, v in kw.items()})


def tbatch(pid, epoch, seq, n=1, key=b"k"):
    return R.build_batch([(key + b"%d" % i, b"v") for i in range(n)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def send(lg, pid, epoch, seq, n=1):
    """A transactional produce as the broker does it: verification guard, then the append."""
    return lg.append_as_leader(tbatch(pid, epoch, seq, n), verification_guard=lg.start_verification(pid, epoch))


def end(lg, pid, epoch, commit, coordinator_epoch=0):
    ctype = T.COMMIT if commit else T.ABORT
    return lg.append_as_leader(T.marker_batch(pid, epoch, ctype, coordinator_epoch, 1_700_000_000_000),
                               origin="coordinator")


def test_lso_follows_the_oldest_open_transaction(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    lg.append_as_leader(R.build_batch([(b"a", b"1")]))                  # offset 0, plain
    assert lg.last_stable_offset == 1
    send(lg, 10, 0, 0, n=2)                                             # 1-2, txn of 10 opens at 1
    send(lg, 11, 0, 0)                                                  # 3, txn of 11 opens at 3
    assert (lg.last_stable_offset, lg.high_watermark) == (1, 4)
    assert lg.ongoing_transactions() == [(10, 1), (11, 3)]
    end(lg, 10, 0, commit=True)                                         # marker at 4
    assert lg.last_stable_offset == 3                                   # 11's txn still open
    end(lg, 11, 0, commit=False)                                        # marker at 5
    assert lg.last_stable_offset == lg.log_end_offset == 6
    assert lg.ongoing_transactions() == []
    lg.close()


def test_abort_writes_the_txnindex_in_kafkas_format(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    send(lg, 7, 1, 0, n=3)                                              # 0-2
    send(lg, 8, 0, 0)                                                   # 3 (stays open)
    end(lg, 7, 1, commit=False)                                         # ABORT at 4; LSO after = 3
    path = S.txn_index_file(lg.dir, 0)
    data = open(path, "rb").read()
    assert data == bytes.fromhex(
        "0000"                  # version 0
        "0000000000000007"      # producer id 7
        "0000000000000000"      # first offset 0
        "0000000000000004"      # last offset 4 (the marker)
        "0000000000000003")     # last stable offset 3 (producer 8's open transaction)
    assert lg.aborted_transactions(0, 5) == [AbortedTxn(7, 0, 4, 3)]
    assert lg.aborted_transactions(5, 9) == []                          # entirely before the fetch
    end(lg, 8, 0, commit=True)                                          # commits add no entry
    assert os.path.getsize(path) == 34
    lg.close()


def test_committed_and_empty_transactions_leave_no_index(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    send(lg, 3, 0, 0)
    end(lg, 3, 0, commit=True)
    end(lg, 3, 0, commit=False)                                         # an empty transaction's marker
    assert not os.path.exists(S.txn_index_file(lg.dir, 0))
    assert lg.last_stable_offset == 3
    lg.close()


def test_aborted_search_walks_segments_until_complete(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg(internal_segment_bytes=300))
    send(lg, 1, 0, 0)                                                   # 0
    for i in range(1, 6):                                               # plain data, rolls
        lg.append_as_leader(R.build_batch([(b"x%d" % i, b"y" * 60)]))
    end(lg, 1, 0, commit=False)                                         # ABORT lands in a later segment
    assert len(lg.segments) > 1
    assert lg.aborted_transactions(0, 2) == [AbortedTxn(1, 0, 6, 7)]
    lg.close()


def test_index_search_is_complete_once_an_entry_reaches_the_upper_bound(tmp_path):
    # Kafka's TransactionIndex.collectAbortedTxns: an entry whose LSO is at or past the upper bound
    # ends the search (later segments cannot hold an overlapping transaction); the walk over
    # segments stops there
    idx = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    for e in (AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 8, 9), AbortedTxn(3, 9, 12, 13)):
        idx.append(e)
    assert idx.collect(4, 7) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 8, 9)], True)
    assert idx.collect(10, 20) == ([AbortedTxn(3, 9, 12, 13)], False)    # the next segment may add some
    assert idx.collect(6, 9) == ([AbortedTxn(2, 3, 8, 9)], True)


def test_verification_guard_is_required_and_goes_stale(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(tbatch(5, 0, 0))                            # nobody verified it
    guard = lg.start_verification(5, 0)
    end(lg, 5, 0, commit=False)                                         # the transaction ended meanwhile
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(tbatch(5, 0, 0), verification_guard=guard)  # stale guard (ABA)
    send(lg, 5, 0, 0)
    assert lg.start_verification(5, 0) is None                             # open: no guard needed
    assert lg.start_verification(5, 1) is not None                         # open at epoch 0 only (Kafka 4)
    lg.append_as_leader(tbatch(5, 0, 1))
    assert lg.log_end_offset == 3
    lg.close()


def test_producer_state_rules_for_transactions(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    send(lg, 9, 2, 0)
    with pytest.raises(InvalidTxnStateError):                           # plain write inside a txn
        lg.append_as_leader(R.build_batch([(b"k", b"v")], producer_id=9, producer_epoch=2, base_sequence=1))
    with pytest.raises(InvalidProducerEpochError):                      # marker of a fenced epoch
        end(lg, 9, 1, commit=True)
    end(lg, 9, 3, commit=False, coordinator_epoch=4)                    # a bumped epoch fences (abort)
    send(lg, 9, 3, 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        end(lg, 9, 3, commit=True, coordinator_epoch=3)
    assert lg.last_stable_offset == 2
    lg.close()


def test_snapshot_carries_open_transactions(tmp_path):
    d = str(tmp_path / "t-0")
    lg = Log.open(d, cfg())
    lg.append_as_leader(R.build_batch([(b"a", b"1")]))
    send(lg, 4, 0, 0, n=2)                                              # open at 1
    lg.close()                                                          # snapshot at 3
    lg = Log.open(d, cfg())
    assert lg.last_stable_offset == 1 and lg.ongoing_transactions() == [(4, 1)]
    lg.append_as_leader(tbatch(4, 0, 2))                                # no new verification needed
    end(lg, 4, 0, commit=False)
    assert lg.aborted_transactions(0, 10) == [AbortedTxn(4, 1, 4, 5)]
    lg.close()


@pytest.mark.parametrize("how", ["delete-txnindex", "unclean"])
def test_recovery_rebuilds_the_txnindex(tmp_path, how):
    d = str(tmp_path / "t-0")
    lg = Log.open(d, cfg(internal_segment_bytes=400))
    for i in range(6):
        send(lg, 100 + i % 2, 0, i // 2)
        if i % 2:
            end(lg, 100, 0, commit=i % 4 == 1)
            end(lg, 101, 0, commit=False)
    lg.append_as_leader(R.build_batch([(b"z", b"z" * 100)]))
    send(lg, 102, 0, 0)                                                 # stays open
    expected = {s.base_offset: open(S.txn_index_file(d, s.base_offset), "rb").read()
                for s in lg.segments if os.path.exists(S.txn_index_file(d, s.base_offset))}
    assert expected, "the scenario must abort something"
    lso = lg.last_stable_offset
    lg.close()
    if how == "delete-txnindex":
        for base in expected:
            os.unlink(S.txn_index_file(d, base))
            os.unlink(S.index_file(d, base))                            # forces the segment's recovery
        lg = Log.open(d, cfg(internal_segment_bytes=400))
    else:
        lg = Log.open(d, cfg(internal_segment_bytes=400), recovery_point=0, had_clean_shutdown=False)
    got = {s.base_offset: open(S.txn_index_file(d, s.base_offset), "rb").read()
           for s in lg.segments if os.path.exists(S.txn_index_file(d, s.base_offset))}
    assert got == expected
    assert lg.last_stable_offset == lso
    lg.close()


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), cfg())
    send(lg, 1, 0, 0)                                                   # 0
    end(lg, 1, 0, commit=False)                                         # 1
    assert lg.aborted_transactions(0, 2)
    lg.truncate_to(1)
    assert lg.aborted_transactions(0, 2) == []
    assert lg.last_stable_offset == 0 and lg.ongoing_transactions() == [(1, 0)]
    lg.close()


def test_txnindex_sanity_check(tmp_path):
    idx = TransactionIndex(str(tmp_path / "00000000000000000100.txnindex"), 100)
    idx.append(AbortedTxn(1, 90, 120, 121))
    idx.sanity_check()
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(1, 90, 110, 121))                         # last offsets must increase
    idx.append(AbortedTxn(2, 10, 99 + 30, 130))
    bad = TransactionIndex(str(tmp_path / "00000000000000000200.txnindex"), 200)
    bad.append(AbortedTxn(1, 90, 120, 121))                             # ends before the segment
    from kompakt.storage.offset_index import CorruptIndexError
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    with open(idx.path, "ab") as f:
        f.write(b"\0" * 3)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
