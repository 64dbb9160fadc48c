"""LogLoader: partition.metadata, leftovers, .swap/.cleaned rules, index rebuild, crash recovery."""
from __future__ import annotations

import os
import shutil
import uuid

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.storage import Log
from kompakt.storage import segment as S
from kompakt.storage.loader import (format_partition_metadata, parse_partition_metadata,
                                    topic_id_from_string, topic_id_to_string)

CFG = LogConfig.from_overrides({"internal.segment.bytes": "1500", "index.interval.bytes": "200"})


def fill(d, n=40, config=CFG):
    lg = Log.open(d, config)
    for i in range(n):
        lg.append_as_leader(R.build_batch([(b"key-%d" % i, b"value-%d" % i + b"." * 40)]))
    return lg


def values(lg, start=None):
    out = []
    off = lg.log_start_offset if start is None else start
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).records
        for pos, h in R.iter_batches(data):
            for r in R.decode_records(data, pos, h):
                if h.base_offset + r.offset_delta >= off:
                    out.append((h.base_offset + r.offset_delta, r.key))
        off = out[-1][0] + 1
    return out


def test_partition_metadata_golden_and_round_trip(tmp_path):
    tid = uuid.UUID(bytes=bytes(range(16)))
    assert topic_id_to_string(tid) == "AAECAwQFBgcICQoLDA0ODw"
    assert format_partition_metadata(tid) == "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"
    assert parse_partition_metadata("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n") == tid
    assert topic_id_from_string(topic_id_to_string(tid)) == tid
    d = str(tmp_path / "t-0")
    lg = Log.open(d, CFG, topic_id=tid)
    lg.close()
    assert open(os.path.join(d, "partition.metadata")).read() == \
        "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"
    assert Log.open(d, CFG).topic_id == tid
    with pytest.raises(ValueError):
        parse_partition_metadata("version: 1\ntopic_id: AAECAwQFBgcICQoLDA0ODw")


def test_leftovers_deleted_foreign_files_kept(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 10).close()
    junk = ["00000000000000000003.log.deleted", "00000000000000000003.index.deleted",
            "leader-epoch-checkpoint.tmp", "00000000000000000005.log.cleaned",
            "00000000000000000005.index.cleaned", "00000000000000000099.index",
            "00000000000000000007.timeindex.swap"]
    for name in junk + ["notes.txt"]:
        open(os.path.join(d, name), "wb").write(b"junk")
    lg = Log.open(d, CFG)
    left = set(os.listdir(d))
    assert not left & set(junk)
    assert "notes.txt" in left and len(lg.repairs) == len(junk)
    assert [k for _, k in values(lg)] == [b"key-%d" % i for i in range(10)]
    lg.close()


def _even(key):
    return int(key.split(b"-")[1]) % 2 == 0


def _fill_and_clean(d, n_old, keep):
    """A 40-record log plus a closed .cleaned copy of its first n_old segments (keys kept by keep)."""
    lg = fill(d, 40)
    _cleaned_copy(lg, lg.segments[:n_old], keep).close()
    return lg


def _cleaned_copy(lg, olds, keep):
    """Cleaner stand-in: one .cleaned segment at the first old base holding batches whose key is kept."""
    new = S.LogSegment(lg.dir, olds[0].base_offset, index_interval_bytes=200,
                       max_index_size=4096, suffix=S.CLEANED_SUFFIX)
    for old in olds:
        for pos, h, buf, p in old.iter_batches():
            key = R.decode_records(buf, p, h)[0].key
            if keep(key):
                raw = buf[p:p + h.size]
                new.append(h.last_offset, h.max_timestamp, h.last_offset, raw)
    new.flush()
    return new


def test_replace_segments_swaps_cleaned_output_in(tmp_path):
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    olds = lg.segments[:2]
    new = _cleaned_copy(lg, olds, lambda k: int(k.split(b"-")[1]) % 2 == 0)
    deleted = []
    lg.on_segments_deleted = deleted.extend
    lg.replace_segments([new], olds)
    assert deleted == olds
    names = os.listdir(d)
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    assert S.filename_prefix(olds[0].base_offset) + ".log" in names
    assert S.filename_prefix(olds[1].base_offset) + ".log.deleted" in names
    got = values(lg)
    cut = lg.segments[1].base_offset
    assert [o for o, _ in got if o < cut] == [o for o in range(cut) if o % 2 == 0]
    assert [o for o, _ in got if o >= cut] == list(range(cut, 40))
    for s in deleted:
        s.delete()
    lg.close()
    assert values(Log.open(d, CFG)) == got


def test_crash_after_swap_renames_rolls_forward(tmp_path):
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    olds = lg.segments[:2]
    new = _cleaned_copy(lg, olds, lambda k: int(k.split(b"-")[1]) % 3 == 0)
    new.close()
    new.change_file_suffixes(S.CLEANED_SUFFIX, S.SWAP_SUFFIX)   # step 2 done, then crash
    lg.close()
    again = Log.open(d, CFG, had_clean_shutdown=False)
    cut = again.segments[1].base_offset
    got = [o for o, _ in values(again)]
    assert [o for o in got if o < cut] == [o for o in range(cut) if o % 3 == 0]
    assert [o for o in got if o >= cut] == list(range(cut, 40))
    assert not [n for n in os.listdir(d) if n.endswith(".swap")]
    again.close()


def test_crash_during_swap_renames_rolls_back(tmp_path):
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    olds = lg.segments[:3]
    a = _cleaned_copy(lg, olds[:1], lambda k: False)
    b = S.LogSegment(lg.dir, olds[1].base_offset, index_interval_bytes=200, max_index_size=4096,
                     suffix=S.CLEANED_SUFFIX)
    for s in (a, b):
        s.close()
    b.change_file_suffixes(S.CLEANED_SUFFIX, S.SWAP_SUFFIX)     # highest first, then crash
    before = values(lg)
    lg.close()
    again = Log.open(d, CFG, had_clean_shutdown=False)
    assert values(again) == before
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned"))]
    again.close()


@pytest.mark.parametrize("damage", ["missing", "short", "garbage"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path, damage):
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    before = values(lg)
    first = lg.segments[0]
    lg.close()
    path = S.index_file(d, first.base_offset)
    if damage == "missing":
        os.unlink(path)
    elif damage == "short":
        open(path, "r+b").truncate(5)
    else:
        open(path, "wb").write(b"\x7f\xff\xff\xff\x7f\xff\xff\xff")
    again = Log.open(d, CFG)
    assert again.repairs and values(again) == before
    assert os.path.getsize(path) % 8 == 0
    again.close()


def test_torn_write_at_the_end_is_truncated(tmp_path):
    d = str(tmp_path / "t-0")
    lg = fill(d, 20)
    active = lg.active_segment.log_path
    lg.close()
    with open(active, "ab") as f:
        f.write(R.build_batch([(b"torn", b"x" * 100)], base_offset=20)[:70])
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=0)
    assert again.log_end_offset == 20 and again.repairs
    assert [k for _, k in values(again)][-1] == b"key-19"
    assert again.append_as_leader(R.build_batch([(b"next", b"v")])).first_offset == 20
    again.close()


def test_flipped_byte_mid_log_truncates_and_drops_later_segments(tmp_path):
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    mid = lg.segments[1]
    bad_offset = mid.base_offset + 2
    pos, _ = mid.translate_offset(bad_offset)
    n_segments = lg.num_segments
    lg.close()
    with open(mid.log_path, "r+b") as f:
        f.seek(pos + R.RECORDS_POS + 3)
        b = f.read(1)
        f.seek(pos + R.RECORDS_POS + 3)
        f.write(bytes([b[0] ^ 0x01]))
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=0)
    assert n_segments > 2 and again.num_segments == 2
    assert again.log_end_offset == bad_offset
    assert [o for o, _ in values(again)] == list(range(bad_offset))
    again.close()


def test_garbage_segment_file_recovers_to_empty(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 5).close()
    open(os.path.join(d, "00000000000000000005.log"), "wb").write(os.urandom(3000))
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=5)
    assert again.log_end_offset == 5
    assert [k for _, k in values(again)] == [b"key-%d" % i for i in range(5)]
    again.close()


def test_clean_load_skips_recovery_and_keeps_recovery_point(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 30).close()
    lg = Log.open(d, CFG, recovery_point=3)
    assert lg.recovery_point == lg.log_end_offset == 30 and lg.repairs == []
    lg.close()
    lg = Log.open(d, CFG, recovery_point=3, had_clean_shutdown=False)
    assert lg.recovery_point == 3
    lg.close()


def test_log_start_checkpoint_is_honoured(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 10).close()
    lg = Log.open(d, CFG, log_start_offset=4)
    assert (lg.log_start_offset, lg.log_end_offset) == (4, 10)
    lg.close()


def test_log_end_below_the_log_start_checkpoint_restarts_the_log_there(tmp_path):
    # Kafka's deleteSegmentsIfLogStartGreaterThanLogEnd: offsets up to the checkpointed log start
    # were handed out (e.g. DeleteRecords to 99, then the unflushed tail was lost), so the log must
    # not assign them again: every segment goes and the log restarts empty at the log start.
    d = str(tmp_path / "t-0")
    fill(d, 10).close()
    lg = Log.open(d, CFG, log_start_offset=99, had_clean_shutdown=False)
    assert (lg.log_start_offset, lg.log_end_offset) == (99, 99)
    assert [s.base_offset for s in lg.segments] == [99]
    assert lg.read(99, 1 << 20).records == b""
    assert lg.append_as_leader(R.build_batch([(b"k", b"v")])).first_offset == 99
    assert any("restarts" in r for r in lg.repairs)
    lg.close()
    assert sorted(f for f in os.listdir(d) if f.endswith(".log")) == [f"{99:020d}.log"]


def test_dir_copy_is_a_valid_log(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 25).close()
    shutil.copytree(d, str(tmp_path / "u-3"))
    lg = Log.open(str(tmp_path / "u-3"), CFG)
    assert tuple(lg.tp) == ("u", 3) and lg.log_end_offset == 25
    lg.close()


@pytest.mark.parametrize("point", ["after_cleaned_written", "after_old_renamed_deleted",
                                   "after_swap_dropped"])
def test_replace_segments_crash_points(tmp_path, point):
    """The on-disk state a kill leaves at each step of Log.replace_segments, then a restart."""
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    olds = lg.segments[:2]
    cut = lg.segments[2].base_offset   # the cleaned segment covers both olds: [0, cut)
    keep = lambda k: int(k.split(b"-")[1]) % 2 == 0  # noqa: E731
    new = _cleaned_copy(lg, olds, keep)
    before = values(lg)
    new.close()
    if point != "after_cleaned_written":
        new.change_file_suffixes(S.CLEANED_SUFFIX, S.SWAP_SUFFIX)        # step 2
        for old in olds:                                                  # step 4
            old.change_file_suffixes("", S.DELETED_SUFFIX)
        if point == "after_swap_dropped":
            new.change_file_suffixes(S.SWAP_SUFFIX, "")                   # step 5
    lg.close_handlers()
    again = Log.open(d, CFG, had_clean_shutdown=False)
    got = values(again)
    if point == "after_cleaned_written":
        assert got == before                                              # rolled back
    else:
        assert [o for o, _ in got if o < cut] == [o for o in range(cut) if o % 2 == 0]
        assert [o for o, _ in got if o >= cut] == list(range(cut, 40))
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned", ".deleted"))]
    again.close()



def test_max_timestamp_of_an_active_segment_copied_from_a_live_log(tmp_path):
    d = str(tmp_path / "t-0")
    lg = Log.open(d, LogConfig.default())   # 4 KiB index interval: the 20 batches are not indexed
    base = 1_700_000_000_000
    for i in range(20):
        lg.append_as_leader(R.build_batch([(b"k%d" % i, b"v" * 50, None, base + i)]))
    lg.flush()
    shutil.copytree(d, str(tmp_path / "copy-0"))   # like a backup of a running broker
    lg.close()
    again = Log.open(str(tmp_path / "copy-0"), LogConfig.default())
    assert again.active_segment.max_timestamp_so_far == base + 19
    assert again.offset_for_timestamp(base + 19) == (19, base + 19)
    again.close()


def test_indexes_of_old_segments_load_lazily(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 40).close()
    lg = Log.open(d, CFG)
    old = lg.segments[:-1]
    assert len(old) > 2
    assert not any(s.offset_index.loaded or s.time_index.loaded for s in old)
    assert all(s.max_timestamp_so_far > 0 for s in old)        # from the last time-index entry
    lg.read(old[1].base_offset + 1, 100)
    assert old[1].offset_index.loaded and not old[0].offset_index.loaded
    lg.close()
    assert not old[0].offset_index.loaded and not old[0].time_index.loaded   # nor did closing


def test_untouched_indexes_hold_no_file_descriptor(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 120).close()
    before = len(os.listdir("/proc/self/fd"))
    lg = Log.open(d, CFG)
    opened = len(os.listdir("/proc/self/fd")) - before
    # one .log descriptor per segment (as Kafka keeps), index descriptors only for the active one
    assert lg.num_segments > 5 and opened <= lg.num_segments + 2
    lg.close()


def test_garbage_metadata_files_do_not_stop_the_load(tmp_path):
    d = str(tmp_path / "t-0")
    fill(d, 12).close()
    open(os.path.join(d, "leader-epoch-checkpoint"), "wb").write(b"\x00\xffnot a checkpoint")
    open(os.path.join(d, "partition.metadata"), "wb").write(b"version: 7\ntopic_id: ???")
    open(os.path.join(d, "00000000000000000012.snapshot"), "wb").write(b"\x00\x01short")
    time_index = S.time_index_file(d, 0)
    os.unlink(time_index)
    lg = Log.open(d, CFG)
    assert lg.log_end_offset == 12 and lg.topic_id is None
    assert any("partition.metadata" in r for r in lg.repairs)
    assert any("rebuilt indexes" in r for r in lg.repairs) and os.path.exists(time_index)
    assert not os.path.exists(os.path.join(d, "00000000000000000012.snapshot"))  # corrupt: dropped
    lg.append_as_leader(R.build_batch([(b"k", b"v")]), leader_epoch=2)
    text = open(os.path.join(d, "leader-epoch-checkpoint")).read()
    assert text.startswith("0\n") and text.endswith("\n2 12\n")   # rewritten in Kafka's format
    assert [k for _, k in values(lg)][:2] == [b"key-0", b"key-1"]
    lg.close()


def test_crash_recovery_rewrites_only_indexes_that_differ(tmp_path):
    # Recovery rebuilds every index of the segments past the recovery point; an index the crash
    # left intact is not written again, a damaged one is rewritten to exactly the rebuilt entries
    # (the active one keeps its preallocated length, an old one is trimmed).
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    before = values(lg)
    segs = lg.segments
    files = [S.index_file(d, s.base_offset) for s in segs] + [S.time_index_file(d, s.base_offset) for s in segs]
    lg.close()
    good = {p: open(p, "rb").read() for p in files}
    damaged = S.index_file(d, segs[1].base_offset)
    with open(damaged, "r+b") as f:          # a stale extra entry past the real ones, one wrong entry
        f.seek(0)
        f.write(b"\x00\x00\x00\x01\x00\x00\x00\x07")
        f.seek(0, os.SEEK_END)
        f.write(b"\x00\x00\x00\x09\x00\x00\x7f\x00")
    stamps = {p: os.stat(p).st_mtime_ns for p in files}
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=0)
    assert values(again) == before
    active = again.active_segment
    grown = {S.index_file(d, active.base_offset), S.time_index_file(d, active.base_offset)}
    for p in files:
        if p != damaged and p not in grown:
            assert os.stat(p).st_mtime_ns == stamps[p], p      # intact: untouched
    assert os.path.getsize(S.index_file(d, active.base_offset)) == CFG.segment_index_bytes // 8 * 8
    again.close()
    assert {p: open(p, "rb").read() for p in files} == good    # trimmed again at close, equal bytes


def test_crash_recovery_leaves_the_recovered_files_for_the_next_flush_to_sync(tmp_path, monkeypatch):
    # After a crash the files read back may be only in the page cache of the process that died
    # (kill -9): recovery validated them, but only a flush makes them durable. The next flush moves
    # the recovery point past them (and shutdown's flush precedes the clean-shutdown marker), so it
    # must fsync every recovered .log and index, changed or not, as Kafka's flush forces them.
    d = str(tmp_path / "t-0")
    fill(d, 40).close()
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=0)
    synced = set()
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def record(fd, real=real):
            synced.add(os.readlink(f"/proc/self/fd/{fd}"))
            return real(fd)
        monkeypatch.setattr(os, name, record)
    again.flush()
    monkeypatch.undo()
    assert again.recovery_point == again.log_end_offset
    for seg in again.segments:
        for path in (seg.log_path, S.index_file(d, seg.base_offset), S.time_index_file(d, seg.base_offset)):
            assert os.path.realpath(path) in synced, path
    again.close()


@pytest.mark.parametrize("clean", [False, True])
def test_a_segment_holding_offsets_below_its_name_is_split_not_dropped(tmp_path, clean):
    # Kafka's LogSegment.recover raises LogSegmentOffsetOverflowException for a batch whose offsets
    # do not fit the segment's relative offsets (here: below the base offset its file name says),
    # and LogLoader.retryOnOffsetOverflow splits the segment (LocalLog.splitOverflowedSegment) into
    # segments named after their batches, keeping every record. Recovery truncated the whole
    # segment at its first batch and deleted every later segment instead.
    d = str(tmp_path / "t-0")
    lg = fill(d, 40)
    before = values(lg)
    second = lg.segments[1].base_offset
    lg.close()
    for fn in (S.log_file, S.index_file, S.time_index_file, S.txn_index_file):
        if os.path.exists(fn(d, second)):
            os.rename(fn(d, second), fn(d, second + 2))
    if clean:      # the index no longer matches: rebuilt at load, which finds the overflow too
        os.unlink(S.index_file(d, second + 2))
    again = Log.open(d, CFG, had_clean_shutdown=clean, recovery_point=0)
    assert again.log_end_offset == 40
    assert values(again) == before
    assert second in [s.base_offset for s in again.segments]
    assert second + 2 not in [s.base_offset for s in again.segments]
    assert any("split" in r for r in again.repairs)
    assert again.append_as_leader(R.build_batch([(b"next", b"v")])).first_offset == 40
    again.close()
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned", ".deleted"))]
    reloaded = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=0)
    assert reloaded.log_end_offset == 41 and values(reloaded)[:40] == before
    reloaded.close()


@pytest.mark.parametrize("left", [S.TXN_INDEX_SUFFIX, S.TIME_INDEX_SUFFIX, S.INDEX_SUFFIX])
def test_a_swap_whose_index_is_still_cleaned_rolls_back(tmp_path, left):
    # Crash inside change_file_suffixes of the lowest new segment: its .log is .swap already, an
    # index (the .txnindex, renamed last, holding the aborted transactions) still .cleaned. Kafka's
    # LogLoader.removeTempFilesAndCollectSwapFiles takes the smallest offset of ANY .cleaned file
    # and deletes the .swap files from there: the swap rolls back. Only .log.cleaned counted, so
    # the swap rolled forward without its .txnindex (read_committed then served aborted records).
    d = str(tmp_path / "t-0")
    lg = _fill_and_clean(d, 1, _even)
    before = values(lg)
    lg.close()
    os.replace(S.log_file(d, 0, S.CLEANED_SUFFIX), S.log_file(d, 0, S.SWAP_SUFFIX))
    for fn in (S.index_file, S.time_index_file, S.txn_index_file):
        if fn(d, 0, S.CLEANED_SUFFIX).endswith(left + S.CLEANED_SUFFIX):
            open(fn(d, 0, S.CLEANED_SUFFIX), "ab").close()     # the one not renamed yet
        elif os.path.exists(fn(d, 0, S.CLEANED_SUFFIX)):
            os.replace(fn(d, 0, S.CLEANED_SUFFIX), fn(d, 0, S.SWAP_SUFFIX))
    again = Log.open(d, CFG, had_clean_shutdown=False)
    assert again.log_end_offset == 40
    assert values(again) == before
    assert any("rolled back" in r for r in again.repairs)
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned"))]
    again.close()


def test_index_swap_files_left_by_the_last_rename_step_are_renamed_live(tmp_path):
    # Crash inside step 5 (drop .swap): the new segment's .log is live already, its indexes still
    # .swap (the old segment's files are .deleted). Kafka's LogLoader renames every remaining
    # valid .swap file live ("Recovering file ... by renaming from .swap files"); they were deleted
    # as orphans, the .txnindex with them: its aborted transactions were lost.
    from kompakt.storage.txn_index import AbortedTxn, TransactionIndex
    d = str(tmp_path / "t-0")
    lg = _fill_and_clean(d, 1, _even)
    aborted = [AbortedTxn(producer_id=7, first_offset=2, last_offset=6, last_stable_offset=2)]
    TransactionIndex(S.txn_index_file(d, 0, S.CLEANED_SUFFIX), 0).write_all(aborted)
    want = [(o, k) for o, k in values(lg) if o >= 12 or _even(k)]
    lg.close()
    for fn in (S.log_file, S.index_file, S.time_index_file, S.txn_index_file):
        if os.path.exists(fn(d, 0)):
            os.replace(fn(d, 0), fn(d, 0) + S.DELETED_SUFFIX)       # step 4
        os.replace(fn(d, 0, S.CLEANED_SUFFIX), fn(d, 0, S.SWAP_SUFFIX))
    os.replace(S.log_file(d, 0, S.SWAP_SUFFIX), S.log_file(d, 0))   # step 5, then the crash
    again = Log.open(d, CFG, had_clean_shutdown=False, recovery_point=40)
    assert values(again) == want
    assert again.segments[0].txn_index.entries() == aborted
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned", ".deleted"))]
    again.close()


def test_a_truncating_recovery_says_in_one_line_where_the_log_ends_and_what_went(tmp_path):
    """After a cut the tail of a segment may hold a torn batch and later segments may survive
    (written back in another order): one repair line per log says the new end and the bytes cut."""
    d = str(tmp_path / "t-0")
    cfg = LogConfig.from_overrides({"internal.segment.bytes": "400"}, None)
    lg = Log.open(d, cfg)
    for i in range(6):
        lg.append_as_leader(R.build_batch([(b"k%d" % i, b"v" * 100)]))
    lg.close()
    logs = sorted(n for n in os.listdir(d) if n.endswith(".log"))
    assert len(logs) >= 3
    with open(os.path.join(d, logs[0]), "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07" + b"\xff" * 40)      # a torn batch header
    again = Log.open(d, cfg, recovery_point=0, had_clean_shutdown=False)
    lines = [r for r in again.repairs if "recovery truncated" in r]
    assert len(lines) == 1, again.repairs
    end = again.log_end_offset
    assert f"end at offset {end}:" in lines[0] and "48 bytes of segment" in lines[0]
    assert f"and {len(logs) - 1} later segment(s)" in lines[0]
