"""Cleaner (worker side): the two passes over real segment files, partial passes, grouping, abort."""
import os

import pytest

from kompakt.cleaner import cleaner as C
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.protocol import records as R
from kompakt.storage.txn_index import AbortedTxn

from .segfiles import job_for, read_all, segment_offsets, swap_files, write_segment

NOW = 1_700_000_000_000
DAY = 86_400_000


def b(recs, base, **kw):
    return R.build_batch([(k, v, [], NOW) for k, v in recs], base_offset=base, base_timestamp=NOW, **kw)


def test_fruit_prices_walkthrough_at_file_level(tmp_path):
    d = str(tmp_path)
    write_segment(d, 0, [b([(b"grape", b"$2.69")], 0), b([(b"lime", b"$0.49")], 1),
                         b([(b"grape", None)], 2), b([(b"lime", b"$1.59")], 3)])
    write_segment(d, 4, [b([(b"lime", b"$1.99")], 4)])
    cl = C.Cleaner(0, SkimpyOffsetMap(24 * 1000))
    res = cl.clean(job_for(d, 0, NOW))
    assert res.end_offset == 4 and [g.replaces for g in res.groups] == [[0]]
    swap_files(d, res)
    # grape's tombstone (2) and lime@3 stay; lime@3 is kept because lime@4 is in the active segment
    assert segment_offsets(d) == {0: [2, 3], 4: [4]}
    assert res.stats.tombstones_retained == 1 and res.stats.messages_read == 4
    with open(C.segment_file(d, 4, ".log"), "ab") as f:
        for i, (k, v) in enumerate([(b"guava", b"1"), (b"guava", b"2"), (b"kiwi", b"3")]):
            f.write(b([(k, v)], 5 + i))
    write_segment(d, 8, [b([(b"guava", b"4")], 8)])
    # before delete.retention.ms the tombstone survives the second clean
    res2 = C.Cleaner(0, SkimpyOffsetMap(24 * 1000)).clean(job_for(d, 4, NOW + 1000, segment_bytes=10**9))
    assert res2.end_offset == 8
    swap_files(d, res2)
    assert segment_offsets(d) == {0: [2, 4, 6, 7], 8: [8]}
    # after it, the next clean drops it (and nothing else: the dirty range is empty of duplicates)
    write_segment(d, 9, [b([(b"kiwi", b"5")], 9)])
    res3 = C.Cleaner(0, SkimpyOffsetMap(24 * 1000)).clean(job_for(d, 8, NOW + DAY + 2000))
    swap_files(d, res3)
    # guava@6 goes too: guava@8 was in the dirty segment 8
    assert [o for o, _, _ in read_all(d)] == [4, 7, 8, 9]


def test_partial_passes_with_tiny_map(tmp_path):
    d = str(tmp_path)
    recs = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(60)]
    for s in range(6):
        write_segment(d, s * 10, [b([recs[s * 10 + j]], s * 10 + j) for j in range(10)])
    write_segment(d, 60, [])
    first_dirty = 0
    passes = 0
    while first_dirty < 60:
        cl = C.Cleaner(0, SkimpyOffsetMap(24 * 5, 0.9))   # 5 slots -> 4 keys per pass
        res = cl.clean(job_for(d, first_dirty, NOW, segment_bytes=10**9))
        assert res.end_offset > first_dirty
        swap_files(d, res)
        first_dirty = res.end_offset
        passes += 1
    assert passes > 1
    latest = {}
    for i, (k, v) in enumerate(recs):
        latest[k] = (i, v)
    got = read_all(d)
    assert {k: (o, v) for o, k, v in got} == latest
    assert len(got) == 7


def test_groups_respect_segment_bytes(tmp_path):
    d = str(tmp_path)
    for s in range(4):
        write_segment(d, s * 2, [b([(b"a%d" % s, b"x" * 100)], s * 2), b([(b"b%d" % s, b"y" * 100)], s * 2 + 1)])
    write_segment(d, 8, [])
    size = os.path.getsize(C.segment_file(d, 0, ".log"))
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW, segment_bytes=2 * size))
    assert [g.replaces for g in res.groups] == [[0, 2], [4, 6]]
    swap_files(d, res)
    assert len(read_all(d)) == 8


def test_index_files_are_written(tmp_path):
    d = str(tmp_path)
    write_segment(d, 0, [b([(b"k%d" % i, b"v" * 300)], i) for i in range(50)])
    write_segment(d, 50, [])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW, index_interval_bytes=1000))
    idx = open(C.segment_file(d, 0, ".index", ".cleaned"), "rb").read()
    tim = open(C.segment_file(d, 0, ".timeindex", ".cleaned"), "rb").read()
    entries = [C.OFFSET_ENTRY.unpack_from(idx, i) for i in range(0, len(idx), 8)]
    assert len(entries) > 5
    data = open(C.segment_file(d, 0, ".log", ".cleaned"), "rb").read()
    for rel, pos in entries:
        h = R.read_header(data, pos)
        assert h.last_offset == rel
    assert len(tim) == 12 and C.TIME_ENTRY.unpack(tim) == (NOW, 0)  # first offset reaching the max timestamp


def test_abort_deletes_partial_output(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "RANGE_BUDGET", 500)      # abort checks every 500 bytes in the native loops
    d = str(tmp_path)
    write_segment(d, 0, [b([(b"k%d" % i, b"v")], i) for i in range(500)])
    write_segment(d, 500, [])
    calls = []

    def check_done():
        calls.append(1)
        if len(calls) > 5:
            raise C.CleaningAbortedError()

    with pytest.raises(C.CleaningAbortedError):
        C.Cleaner(0, SkimpyOffsetMap(24 * 1000), check_done=check_done).clean(job_for(d, 0, NOW))
    assert not [n for n in os.listdir(d) if n.endswith(".cleaned")]


def test_keyless_dropped_and_counted(tmp_path):
    d = str(tmp_path)
    write_segment(d, 0, [b([(None, b"x"), (b"a", b"1")], 0)])
    write_segment(d, 2, [])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW))
    swap_files(d, res)
    assert read_all(d) == [(1, b"a", b"1")] and res.stats.invalid_messages == 1


def test_transactions_aborted_data_dropped_markers_kept_then_removed(tmp_path):
    d = str(tmp_path)

    def marker(kind, base, pid):
        return R.build_batch([(b"\x00\x00" + kind.to_bytes(2, "big"), b"\x00\x00\x00\x00\x00\x00", [], NOW)],
                             base_offset=base, is_control=True, is_transactional=True,
                             producer_id=pid, producer_epoch=0, base_timestamp=NOW)
    write_segment(d, 0, [
        b([(b"a", b"committed")], 0, producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True),
        b([(b"b", b"aborted")], 1, producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True),
        marker(1, 2, 1), marker(0, 3, 2),
        b([(b"a", b"plain")], 4),
    ])
    write_segment(d, 5, [b([(b"z", b"1")], 5, producer_id=1, producer_epoch=0, base_sequence=1)])
    # producer state as after a snapshot that holds no batch of pid 2, only its epoch
    producers = {1: (5, 0), 2: (-1, 0)}

    def clean(now):
        swap_files(d, C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now, active_producers=producers)))
        data = open(C.segment_file(d, 0, ".log"), "rb").read()
        return [(h.base_offset, h.records_count, h.has_delete_horizon) for _, h in R.iter_batches(data) if h.is_control]

    # pass 1 reads a batch of each transaction (pid 1's, superseded by offset 4, and pid 2's aborted
    # one, dropped): both markers stay, unstamped (Kafka's CleanedTransactionMetadata), and the
    # ABORT that still covers a batch of this pass keeps its .txnindex entry
    assert clean(NOW) == [(2, 1, False), (3, 1, False)]
    assert read_all(d) == [(4, b"a", b"plain"), (5, b"z", b"1")]
    entries = open(C.segment_file(d, 0, ".txnindex"), "rb").read()
    assert entries == AbortedTxn(2, 1, 3, 4).encode()
    # pass 2 reads no batch of either: both may go, once their delete horizon (stamped now) passes
    assert clean(NOW + 1) == [(2, 1, True), (3, 1, True)]
    assert not os.path.exists(C.segment_file(d, 0, ".txnindex"))
    # pass 3, past the horizon: pid 1's marker is gone; pid 2's marker is that producer's last
    # batch: kept, emptied (epoch fencing)
    assert clean(NOW + 1 + DAY + 1) == [(3, 0, True)]


def test_emptied_marker_survives_later_cleans(tmp_path):
    """A marker emptied but kept as its producer's last batch (count 0) is read by every later
    clean's prescan; Kafka treats an empty control batch as already cleaned. The third clean here
    used to fail parsing the missing control record (partition marked uncleanable)."""
    d = str(tmp_path)
    write_segment(d, 0, [
        b([(b"b", b"aborted")], 0, producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True),
        R.build_batch([(b"\x00\x00\x00\x00", b"\x00" * 6, [], NOW)], base_offset=1, is_control=True,
                      is_transactional=True, producer_id=2, producer_epoch=0, base_timestamp=NOW),
        b([(b"a", b"plain")], 2),
    ])
    write_segment(d, 3, [b([(b"z", b"1")], 3)])

    def markers():
        data = open(C.segment_file(d, 0, ".log"), "rb").read()
        return [(h.base_offset, h.records_count) for _, h in R.iter_batches(data) if h.is_control]
    for now in (NOW, NOW + DAY + 1, NOW + 2 * DAY + 2, NOW + 3 * DAY + 3):
        # producer state with pid 2's epoch but no data batch (Kafka's case 3: the marker is kept)
        res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now, active_producers={2: (-1, 0)}))
        swap_files(d, res)
        assert read_all(d) == [(2, b"a", b"plain"), (3, b"z", b"1")]
    assert markers() == [(1, 0)]     # pid 2's last batch: kept, empty


@pytest.mark.parametrize("kind", [0, 1], ids=["abort", "commit"])
def test_marker_stays_while_an_empty_batch_of_its_transaction_remains(tmp_path, kind):
    """A transactional batch kept empty as its producer's last batch still belongs to its
    transaction: Kafka observes it on every pass and keeps the marker (onBatchRead), otherwise a
    transactional batch without its marker would reopen the transaction when producer state is
    rebuilt from the log (the last stable offset stuck there)."""
    d = str(tmp_path)
    write_segment(d, 0, [
        b([(b"a", b"in-txn")], 0, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True),
        R.build_batch([(b"\x00\x00" + kind.to_bytes(2, "big"), b"\x00" * 6, [], NOW)], base_offset=1,
                      is_control=True, is_transactional=True, producer_id=5, producer_epoch=0, base_timestamp=NOW),
        b([(b"a", b"plain")], 2),
    ])
    write_segment(d, 3, [b([(b"z", b"1")], 3)])
    for now in (NOW, NOW + DAY + 1, NOW + 2 * DAY + 2):
        res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now, active_producers={5: (0, 0)}))
        swap_files(d, res)
    data = open(C.segment_file(d, 0, ".log"), "rb").read()
    batches = [(h.base_offset, h.is_control, h.records_count) for _, h in R.iter_batches(data)]
    assert batches[0] == (0, False, 0)            # pid 5's last data batch, emptied
    assert (1, True, 1) in batches                # and its transaction's marker
    assert read_all(d) == [(2, b"a", b"plain"), (3, b"z", b"1")]


@pytest.mark.parametrize("codec", [R.COMPRESSION_GZIP, R.COMPRESSION_LZ4])
def test_emptied_compressed_batch_is_written_uncompressed_and_cleans_again(tmp_path, codec):
    """A compressed producer batch kept empty (its producer's last batch) has no records to
    compress: like Kafka's writeEmptyHeader it is written with compression none. Keeping the codec
    bit with an empty payload made every later clean (and every client) fail to decompress it."""
    d = str(tmp_path)
    write_segment(d, 0, [b([(b"a", b"old")], 0, producer_id=5, producer_epoch=0, base_sequence=0,
                           compression=codec),
                         b([(b"a", b"new")], 1)])
    write_segment(d, 2, [b([(b"z", b"1")], 2)])
    for now in (NOW, NOW + 1):
        res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now, active_producers={5: (0, 0)}))
        swap_files(d, res)
    data = open(C.segment_file(d, 0, ".log"), "rb").read()
    first = next(R.iter_batches(data))[1]
    assert (first.base_offset, first.records_count, first.producer_id) == (0, 0, 5)
    assert first.compression == R.COMPRESSION_NONE
    assert read_all(d) == [(1, b"a", b"new"), (2, b"z", b"1")]


def test_empty_batch_with_a_codec_bit_still_cleans(tmp_path):
    """Logs cleaned before the fix above hold empty batches with the codec bit set: the cleaner
    reads them (no payload to decompress) instead of failing the partition."""
    from kompakt.cleaner import batch_ops
    d = str(tmp_path)
    empty_gzip = batch_ops.build_header_bytes(0, 0, R.COMPRESSION_GZIP, 0, NOW, NOW, 5, 0, 0, 0, b"")
    write_segment(d, 0, [empty_gzip, b([(b"a", b"new")], 1)])
    write_segment(d, 2, [b([(b"z", b"1")], 2)])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW, active_producers={5: (0, 0)}))
    assert (res.stats.messages_read, res.stats.messages_written) == (1, 1)
    swap_files(d, res)
    data = open(C.segment_file(d, 0, ".log"), "rb").read()
    assert [(h.base_offset, h.records_count) for _, h in R.iter_batches(data)] == [(0, 0), (1, 1)]


def test_prescan_keeps_a_producers_last_data_batch_behind_its_marker(tmp_path):
    """Without the log's producer state the prescan stands in for it, as Kafka's
    lastRecordsOfActiveProducers: a marker moves the producer's epoch, not its last data offset,
    so the data batch holding its last sequence stays (empty) behind a COMMIT, and the marker with
    it; dropping it made an idempotent producer's next sequence out of order after a rebuild."""
    d = str(tmp_path)
    write_segment(d, 0, [
        b([(b"a", b"in-txn")], 0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True),
        R.build_batch([(b"\x00\x00\x00\x01", b"\x00" * 6, [], NOW)], base_offset=1, is_control=True,
                      is_transactional=True, producer_id=7, producer_epoch=0, base_timestamp=NOW),
        b([(b"a", b"plain")], 2),
    ])
    write_segment(d, 3, [b([(b"z", b"1")], 3)])
    assert C.prescan([C.SegmentInfo(0, C.segment_file(d, 0, ".log"), 10**6)])[1] == {7: (0, 0)}
    for now in (NOW, NOW + DAY + 1):
        res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, now))
        swap_files(d, res)
    data = open(C.segment_file(d, 0, ".log"), "rb").read()
    assert [(h.base_offset, h.records_count) for _, h in R.iter_batches(data)] == [(0, 0), (1, 1), (2, 1)]


@pytest.mark.parametrize("impl", ["native", "python"])
def test_an_empty_batch_no_longer_needed_is_removed(tmp_path, monkeypatch, impl):
    """Kafka keeps an emptied batch only while it is needed (RETAIN_EMPTY: its producer's last batch,
    or the batch ending right before the first uncleanable offset); once neither holds, the next
    clean drops it (DELETE_EMPTY: no records retained, nothing written). Copying it byte for byte
    ("nothing removed") kept every such batch forever, one more per clean and per producer."""
    from kompakt.cleaner import batch_ops, native
    if impl == "native" and native.LIB is None:
        pytest.skip("the compiled seam is not available")
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl == "native" else None)
    d = str(tmp_path)
    write_segment(d, 0, [b([(b"a", b"old")], 0, producer_id=5, producer_epoch=0, base_sequence=0),
                         b([(b"a", b"new")], 1),
                         b([(None, b"keyless")], 2)])
    write_segment(d, 3, [b([(b"c", b"y")], 3)])

    def batches():
        data = open(C.segment_file(d, 0, ".log"), "rb").read()
        return [(h.base_offset, h.records_count) for _, h in R.iter_batches(data)]

    # pass 1: pid 5's batch is its last (emptied, kept); offset 2 ends right before the first
    # uncleanable offset 3 (kept, emptied: a keyless record is dropped)
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 0, NOW, active_producers={5: (0, 0)}))
    swap_files(d, res)
    assert batches() == [(0, 0), (1, 1), (2, 0)]
    # the producer wrote again past this range and the log rolled on: neither empty batch is needed
    write_segment(d, 4, [b([(b"z", b"1")], 4, producer_id=5, producer_epoch=0, base_sequence=1)])
    res = C.Cleaner(0, SkimpyOffsetMap(24 * 100)).clean(job_for(d, 3, NOW + 1, active_producers={5: (4, 0)}))
    swap_files(d, res)
    assert batches() == [(1, 1), (3, 1)]      # segments 0 and 3 cleaned into one
    assert res.stats.messages_written == 2
    assert read_all(d) == [(1, b"a", b"new"), (3, b"c", b"y"), (4, b"z", b"1")]
