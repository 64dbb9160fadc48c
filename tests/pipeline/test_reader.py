"""The pure-Python segment reader: discovery, split planning at index boundaries, CRC handling,
read_committed and bounds. No Spark here."""
from __future__ import annotations

import os
import struct

import pytest

from kompakt.pipeline import reader as rd
from kompakt.protocol import records as R

from .conftest import keyed_batches, txn_batches, write_partition


def _all_offsets(splits, **kw):
    out = []
    for s in splits:
        out += [r.offset for r in rd.iter_split_records(s, **kw)]
    return out


def test_find_partitions_accepts_log_dir_partition_dir_and_topic(tmp_path):
    write_partition(str(tmp_path), "orders", 0, keyed_batches(20, 5))
    write_partition(str(tmp_path), "orders", 1, keyed_batches(20, 5))
    write_partition(str(tmp_path), "users-x", 3, keyed_batches(20, 5))
    os.makedirs(tmp_path / "orders-9.abc-delete")
    assert [(p.topic, p.partition) for p in rd.find_partitions(str(tmp_path))] == [
        ("orders", 0), ("orders", 1), ("users-x", 3)]
    assert [(p.topic, p.partition) for p in rd.find_partitions(str(tmp_path / "orders"))] == [("orders", 0), ("orders", 1)]
    assert [p.partition for p in rd.find_partitions(str(tmp_path / "users-x-3"))] == [3]
    assert rd.find_partitions(str(tmp_path), topics={"orders"}, partitions={1})[0].partition == 1
    with pytest.raises(FileNotFoundError) as e:
        rd.find_partitions(str(tmp_path / "nope"))
    # a mistyped log dir reads as one: the message names the path as given first
    assert str(e.value) == (f"{tmp_path}/nope does not exist, nor is it <log dir>/<topic>: "
                            f"{tmp_path} holds no partition dir of a topic 'nope'")


def test_splits_cut_at_index_boundaries_cover_every_record_once(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(2000, 50, codec=1), segment_bytes=16000)
    part = rd.find_partitions(pdir)[0]
    segs = rd.list_segments(pdir)
    assert len(segs) > 2
    splits = rd.plan_splits([part], split_bytes=3000)
    assert len(splits) > len(segs)  # large segments are cut inside, at index entries
    for s in splits:
        for ch in s.chunks:
            seg = next(x for x in segs if x.log_path == ch.log_path)
            assert ch.start == 0 or ch.start in rd.read_offset_index(seg)[1]
    assert _all_offsets(splits) == list(range(2000))


def test_offset_and_timestamp_bounds_prune_and_filter_exactly(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(2000, 50), segment_bytes=16000)
    part = rd.find_partitions(pdir)[0]
    full = rd.plan_splits([part], split_bytes=3000)
    b = rd.Bounds(min_offset=1500, max_offset=1600)
    pruned = rd.plan_splits([part], b, split_bytes=3000)
    assert sum(s.bytes for s in pruned) < sum(s.bytes for s in full) / 4
    assert _all_offsets(pruned, bounds=b) == list(range(1500, 1601))
    base_ts = 1_700_000_000_000
    tb = rd.Bounds(min_timestamp=base_ts + 1900)
    pruned = rd.plan_splits([part], tb, split_bytes=3000)
    assert sum(s.bytes for s in pruned) < sum(s.bytes for s in full) / 4
    assert _all_offsets(pruned, bounds=tb) == list(range(1900, 2000))
    assert rd.plan_splits([part], rd.Bounds(min_offset=10, max_offset=5)) == []


def _corrupt_byte(pdir: str, batch_no: int) -> tuple[str, int]:
    seg = rd.list_segments(pdir)[0]
    with open(seg.log_path, "r+b") as f:
        data = f.read()
        pos = [p for p, _ in R.iter_batches(data)][batch_no]
        f.seek(pos + R.RECORDS_POS + 3)
        f.write(bytes([data[pos + R.RECORDS_POS + 3] ^ 0xFF]))
    return seg.log_path, pos


def test_corrupt_batch_is_an_error_naming_file_and_position(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(200, 10), segment_bytes=100000)
    path, pos = _corrupt_byte(pdir, 5)
    part = rd.find_partitions(pdir)[0]
    with pytest.raises(rd.CorruptSegmentError) as e:
        rd.read_partition(part)
    assert path in str(e.value) and f"position {pos}" in str(e.value) and "CRC" in str(e.value)
    assert e.value.code == 2  # CORRUPT_MESSAGE
    stats = rd.ReadStats()
    rows = rd.read_partition(part, corrupt="skip", stats=stats)
    assert stats.corrupt_batches == 1 and stats.corrupt_positions == [(path, pos)]
    assert [r.offset for r in rows] == [o for o in range(200) if not 50 <= o < 60]


def test_bad_length_skips_to_next_index_boundary(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(400, 10), segment_bytes=100000,
                           index_interval_bytes=100)
    seg = rd.list_segments(pdir)[0]
    with open(seg.log_path, "r+b") as f:
        f.seek(R.BATCH_LENGTH_POS)
        f.write(struct.pack(">i", 7))  # below the header size: nothing after it can be located
    part = rd.find_partitions(pdir)[0]
    with pytest.raises(rd.CorruptSegmentError, match="position 0"):
        rd.read_partition(part)
    stats = rd.ReadStats()
    offsets = [r.offset for r in rd.read_partition(part, corrupt="skip", stats=stats)]
    assert stats.corrupt_batches == 1
    assert offsets and offsets == list(range(offsets[0], 400)) and offsets[0] <= 40


def test_torn_tail_of_last_segment_is_a_write_in_progress(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(100, 10), segment_bytes=100000)
    seg = rd.list_segments(pdir)[-1]
    with open(seg.log_path, "ab") as f:
        f.write(R.build_batch([(b"k", b"v")], base_offset=100)[:40])
    assert [r.offset for r in rd.read_partition(rd.find_partitions(pdir)[0])] == list(range(100))


def test_read_committed_drops_aborted_and_control_batches(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, txn_batches())
    part = rd.find_partitions(pdir)[0]
    rows = rd.read_partition(part)
    assert [r.offset for r in rows] == list(range(10))
    assert [r.offset for r in rows if r.is_control] == [6, 7]
    committed = rd.read_partition(part, read_committed=True)
    assert [(r.offset, r.key, r.value) for r in committed] == [
        (0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"2"), (8, b"e", b"3"), (9, None, b"3")]
    split = rd.plan_splits([part], read_committed=True)[0]
    marked = list(rd.iter_split_records(split))
    assert [r.offset for r in marked if r.is_aborted] == [4, 5]


def test_control_records_are_rows_only_when_asked(tmp_path):
    part = rd.find_partitions(write_partition(str(tmp_path), "t", 0, txn_batches()))[0]
    split = rd.plan_splits([part], read_committed=True)[0]
    for read_committed, control, want in [(False, False, [0, 1, 2, 3, 4, 5, 8, 9]),
                                          (True, False, [0, 1, 2, 3, 8, 9]),
                                          (False, True, list(range(10))),
                                          (True, True, [0, 1, 2, 3, 6, 7, 8, 9])]:
        for light in (False, True):
            rows = list(rd.iter_split_records(split, read_committed=read_committed, control=control, light=light))
            assert [r.offset for r in rows] == want, (read_committed, control, light)
            assert [r.offset for r in rows if r.is_control] == ([6, 7] if control else [])


def test_open_transaction_bounds_read_committed_at_the_lso(tmp_path):
    batches = txn_batches()[:3] + [dict(records=[(b"z", b"9")])]  # no markers: both txns open
    pdir = write_partition(str(tmp_path), "t", 0, batches)
    committed = rd.read_partition(rd.find_partitions(pdir)[0], read_committed=True)
    assert [r.offset for r in committed] == [0, 1]


def test_log_append_time_and_headers_and_tombstones(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, [
        dict(records=[(b"k", None, [("h1", b"x"), ("h2", None)], 5)], timestamp_type=1, max_timestamp=99),
        dict(records=[(b"k", b"v", [], 7)]),
    ])
    rows = rd.read_partition(rd.find_partitions(pdir)[0])
    assert rows[0].timestamp == 99 and rows[0].timestamp_type == 1 and rows[0].is_tombstone
    assert rows[0].headers == [("h1", b"x"), ("h2", None)]
    assert rows[1].timestamp == 7 and not rows[1].is_tombstone


def test_light_path_agrees_with_full_decode(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(300, 20, codec=3, tombstone_every=4, keyless_every=9)
                           + txn_batches(), segment_bytes=3000)
    split_all = rd.plan_splits(rd.find_partitions(pdir), read_committed=True)
    cols = sorted(rd.LIGHT_COLUMNS)
    for s in split_all:
        full = [tuple(getattr(r, c) for c in cols) for r in rd.iter_split_records(s)]
        light = [tuple(getattr(r, c) for c in cols) for r in rd.iter_split_records(s, light=True)]
        assert light == full and full


def test_a_job_without_pyspark_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    # `pip install .` leaves the spark extra out; the job must say so instead of a traceback
    import sys

    from kompakt.cli import main
    write_partition(str(tmp_path), "orders", 0, keyed_batches(5, 5))
    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    assert main(["pipeline", "audit", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kompakt pipeline audit: needs PySpark (") and "pip install 'kompakt[spark]'" in err


def test_a_tail_torn_when_planned_and_whole_when_read_is_a_write_in_progress(tmp_path):
    # a reader plans while the broker is mid-write (fewer bytes than a batch header on disk), then
    # reads after the write completed: the chunk ends inside that batch; it was an error
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(20, 5))
    log = rd.list_segments(pdir)[-1].log_path
    nxt = R.build_batch([(b"k", b"late", [], 1_700_000_000_100)], base_offset=20)
    with open(log, "ab") as f:
        f.write(nxt[:30])
    splits = rd.plan_splits(rd.find_partitions(pdir))
    with open(log, "ab") as f:
        f.write(nxt[30:])
    assert _all_offsets(splits) in (list(range(20)), list(range(21)))
    # still torn when read: the same
    with open(log, "r+b") as f:
        f.truncate(os.path.getsize(log) - 10)
    assert _all_offsets(splits) == list(range(20))


def test_records_below_the_checkpointed_log_start_offset_are_not_read(tmp_path):
    # DeleteRecords / retention move the log start into a segment that stays: the broker's
    # log-start-offset-checkpoint says where a consumer starts; the records below are gone
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(60, 5), segment_bytes=1024)
    write_partition(str(tmp_path), "u", 0, keyed_batches(10, 5))
    with open(tmp_path / rd.LOG_START_CHECKPOINT, "w") as f:
        f.write("0\n2\nt 0 33\nu 0 0\n")
    part = rd.find_partitions(pdir)[0]
    assert [r.offset for r in rd.read_partition(part)] == list(range(33, 60))
    assert [r.offset for r in rd.read_partition(part, light=True)] == list(range(33, 60))
    assert [r.offset for r in rd.read_partition(part, bounds=rd.Bounds(40, 45))] == list(range(40, 46))
    assert rd.read_partition(part, bounds=rd.Bounds(max_offset=32)) == []
    assert [r.offset for r in rd.read_partition(part, log_start=False)] == list(range(60))
    assert len(rd.read_partition(rd.find_partitions(str(tmp_path), {"u"})[0])) == 10


def _cleaned_copy(tmp_path, rows_kept, suffix):
    """The kept records of offsets 0-59 as one cleaned segment (base 0) in the partition dir `t-0`
    under the given suffix (.swap / .cleaned), as the cleaner writes it before the swap."""
    other = write_partition(str(tmp_path / "cleaned"), "t", 0,
                            [dict(records=[(b"k%d" % (o % 5), b"v%d" % o, [("i", str(o).encode())],
                                            1_700_000_000_000 + o)], base_offset=o) for o in rows_kept],
                            segment_bytes=1 << 20)
    for name in os.listdir(other):
        os.rename(os.path.join(other, name), str(tmp_path / "t-0" / name) + suffix)


def _swap_fixture(tmp_path):
    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(80, 5), segment_bytes=500)
    bases = [s.base_offset for s in rd.list_segments(pdir)]
    cleaned_end = bases[2]  # the cleaner replaced the first two segments
    kept = list(range(cleaned_end - 5, cleaned_end))  # the latest of each of the 5 keys
    return pdir, bases, cleaned_end, kept


def test_a_cleaner_swap_in_progress_reads_as_the_log_the_broker_loads(tmp_path):
    # crash (or a reader) between the swap's steps: old segments renamed .deleted, the cleaned one
    # still .swap. The loader rolls the swap forward; the reader missed those records entirely
    pdir, bases, end, kept = _swap_fixture(tmp_path)
    _cleaned_copy(tmp_path, kept, ".swap")
    part = rd.find_partitions(pdir)[0]
    want = kept + list(range(end, 80))
    assert [r.offset for r in rd.read_partition(part)] == want  # .swap and old .log side by side
    for base in bases[:2]:
        for ext in (".log", ".index", ".timeindex"):
            os.rename(os.path.join(pdir, f"{base:020d}{ext}"), os.path.join(pdir, f"{base:020d}{ext}.deleted"))
    assert [r.offset for r in rd.read_partition(part)] == want
    # an interrupted step 2 (a .cleaned left at or below the .swap) rolls back: the old segments
    for name in os.listdir(pdir):
        if name.endswith(".deleted"):
            os.rename(os.path.join(pdir, name), os.path.join(pdir, name[:-len(".deleted")]))
    os.rename(os.path.join(pdir, f"{0:020d}.log.swap"), os.path.join(pdir, f"{0:020d}.log.cleaned"))
    assert [r.offset for r in rd.read_partition(part)] == list(range(80))
    # so does one stopped inside the segment's own renames: .log already .swap, an index still
    # .cleaned (the loader counts every kind, as Kafka's minCleanedFileOffset)
    os.rename(os.path.join(pdir, f"{0:020d}.log.cleaned"), os.path.join(pdir, f"{0:020d}.log.swap"))
    open(os.path.join(pdir, f"{0:020d}.txnindex.cleaned"), "wb").close()
    assert [r.offset for r in rd.read_partition(part)] == list(range(80))


def test_segments_replaced_after_planning_are_read_as_planned(tmp_path):
    # Spark plans on the driver, reads later: a cleaner swap in between renames the planned
    # segments .deleted and puts a cleaned segment under the first one's name. Reading the planned
    # positions in the new file, or not finding the old one, was wrong or an error
    pdir, bases, end, kept = _swap_fixture(tmp_path)
    splits = rd.plan_splits(rd.find_partitions(pdir), split_bytes=600)
    for base in bases[:2]:
        for ext in (".log", ".index", ".timeindex"):
            os.rename(os.path.join(pdir, f"{base:020d}{ext}"), os.path.join(pdir, f"{base:020d}{ext}.deleted"))
    _cleaned_copy(tmp_path, kept, "")
    assert _all_offsets(splits) == list(range(80))
    # once the old files are unlinked, reading says so
    for base in bases[:2]:
        os.unlink(os.path.join(pdir, f"{base:020d}.log.deleted"))
    with pytest.raises(rd.SegmentGoneError, match="read again"):
        _all_offsets(splits)
    assert [r.offset for r in rd.read_partition(rd.find_partitions(pdir)[0])] == kept + list(range(end, 80))


def test_the_zero_tail_of_a_preallocated_active_segment_ends_the_data(tmp_path):
    # preallocate=true: the active .log is segment.bytes long, zeros after the written batches,
    # while the broker runs and after a crash; the reader called the zeros a corrupt batch
    from kompakt.storage.segment import LogSegment

    pdir = write_partition(str(tmp_path), "t", 0, keyed_batches(30, 5), segment_bytes=600)
    last = rd.list_segments(pdir)[-1]
    part = rd.find_partitions(pdir)[0]
    with open(last.log_path, "ab") as f:
        f.write(b"\0" * 4096)  # the active segment's unwritten, preallocated rest
    assert [r.offset for r in rd.read_partition(part)] == list(range(30))
    assert [r.offset for r in rd.read_partition(part, light=True)] == list(range(30))
    os.truncate(last.log_path, last.size)  # rolled: trimmed, and a new preallocated active one
    LogSegment(pdir, 30).preallocate(4096)
    assert [r.offset for r in rd.read_partition(part)] == list(range(30))
