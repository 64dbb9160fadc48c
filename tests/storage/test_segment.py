"""LogSegment: append/read/translate, index cadence, recover (torn write, flipped byte), truncate,
suffix renames, timestamp lookup, roll decisions."""
from __future__ import annotations

import os

import pytest

from kompakt.protocol import records as R
from kompakt.storage.segment import LogSegment, log_file


def mk(tmp_path, base=0, interval=100, index_size=4096):
    return LogSegment(str(tmp_path), base, index_interval_bytes=interval, max_index_size=index_size)


def add(seg, offset, n=1, ts=1000, value=b"v" * 40):
    b = R.build_batch([(b"k%d" % i, value, None, ts + i) for i in range(n)], base_offset=offset)
    h = R.read_header(b)
    seg.append(h.last_offset, h.max_timestamp, h.last_offset, b)
    return h


def test_file_name_is_20_digit_base_offset(tmp_path):
    seg = mk(tmp_path, base=1234)
    assert os.path.basename(seg.log_path) == "00000000000000001234.log"
    assert os.path.exists(str(tmp_path / "00000000000000001234.index"))
    assert os.path.exists(str(tmp_path / "00000000000000001234.timeindex"))


def test_append_read_and_index_cadence(tmp_path):
    seg = mk(tmp_path)
    positions, heads = [], []
    for i in range(20):
        positions.append(seg.size)
        heads.append(add(seg, i * 2, n=2, ts=1000 + i))
    # an entry every time more than 100 bytes were appended since the previous one
    assert seg.offset_index.entries > 3
    for n in range(seg.offset_index.entries):
        off, pos = seg.offset_index.entry(n)
        k = positions.index(pos)
        assert heads[k].last_offset == off
    for target in range(40):
        pos, size = seg.translate_offset(target)
        k = positions.index(pos)
        assert heads[k].base_offset <= target <= heads[k].last_offset and size == heads[k].size
    assert seg.translate_offset(40) is None
    pos, data = seg.read(7, 250)
    got = [h for _, h in R.iter_batches(data)]
    assert got[0].base_offset == 6 and sum(h.size for h in got) == len(data) <= 250
    assert seg.read_next_offset() == 40


def test_recover_rebuilds_the_same_indexes_and_cuts_a_torn_tail(tmp_path):
    seg = mk(tmp_path)
    for i in range(30):
        add(seg, i, ts=5000 + i)
    built = [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)]
    ts_built = [seg.time_index.entry(n) for n in range(seg.time_index.entries)]
    good = seg.size
    os.pwrite(seg._fd, b"\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x01\x00partial", good)
    seg.size = good + 19
    assert seg.recover() == 19
    assert seg.size == good == os.path.getsize(seg.log_path)
    assert [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)] == built
    assert [seg.time_index.entry(n) for n in range(seg.time_index.entries)][:len(ts_built)] == ts_built
    assert seg.max_timestamp_so_far == 5029 and seg.read_next_offset() == 30


def test_recover_truncates_at_a_flipped_byte(tmp_path):
    seg = mk(tmp_path)
    starts = []
    for i in range(10):
        starts.append(seg.size)
        add(seg, i)
    with open(seg.log_path, "r+b") as f:
        f.seek(starts[6] + 70)
        byte = f.read(1)
        f.seek(starts[6] + 70)
        f.write(bytes([byte[0] ^ 0x40]))
    size = seg.size
    assert seg.recover() == size - starts[6]
    assert seg.size == starts[6]
    assert seg.read_next_offset() == 6


def test_recover_rejects_offsets_going_backwards(tmp_path):
    seg = mk(tmp_path)
    add(seg, 0)
    add(seg, 5)
    keep = seg.size
    raw = R.build_batch([(b"k", b"v")], base_offset=3)  # written raw by a buggy writer
    os.pwrite(seg._fd, raw, keep)
    seg.size += len(raw)
    assert seg.recover() == len(raw)
    assert seg.size == keep and seg.read_next_offset() == 6


def test_truncate_to_and_timestamp_reload(tmp_path):
    seg = mk(tmp_path, interval=1)
    for i in range(10):
        add(seg, i, ts=100 + i)
    assert seg.truncate_to(4) > 0
    assert seg.read_next_offset() == 4
    assert seg.max_timestamp_so_far == 103
    assert seg.offset_index.lookup(100)[0] < 4


def test_find_offset_by_timestamp(tmp_path):
    seg = mk(tmp_path, interval=1)
    add(seg, 0, n=3, ts=100)   # 100, 101, 102
    add(seg, 3, n=3, ts=200)   # 200, 201, 202
    assert seg.find_offset_by_timestamp(101, 0) == (101, 1)
    assert seg.find_offset_by_timestamp(150, 0) == (200, 3)
    assert seg.find_offset_by_timestamp(202, 0) == (202, 5)
    assert seg.find_offset_by_timestamp(203, 0) is None
    assert seg.find_offset_by_timestamp(100, 4) == (201, 4)


def test_suffix_renames_and_delete(tmp_path):
    seg = mk(tmp_path, base=10)
    add(seg, 10)
    seg.change_file_suffixes("", ".deleted")
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000010.index.deleted",
                                            "00000000000000000010.log.deleted",
                                            "00000000000000000010.timeindex.deleted"]
    assert seg.read(10, 1000)[1]  # still readable through the open descriptor
    seg.delete()
    assert os.listdir(tmp_path) == []


def test_close_trims_indexes_and_reopen_knows_max_timestamp(tmp_path):
    seg = mk(tmp_path, interval=10_000, index_size=4096)
    for i in range(5):
        add(seg, i, ts=900 + i)
    seg.close()
    assert os.path.getsize(str(tmp_path / "00000000000000000000.index")) == 0
    assert os.path.getsize(str(tmp_path / "00000000000000000000.timeindex")) == 12
    again = mk(tmp_path, interval=10_000)
    assert again.max_timestamp_so_far == 904 and again.offset_of_max_timestamp_so_far == 4
    assert again.largest_timestamp == 904


def test_should_roll(tmp_path):
    seg = mk(tmp_path)
    kw = dict(segment_bytes=1000, max_segment_ms=10_000, max_timestamp_in_messages=5000,
              max_offset_in_messages=1, now_ms=5000)
    assert not seg.should_roll(messages_size=100, **kw)
    add(seg, 0, ts=5000)
    assert seg.should_roll(messages_size=1000, **kw)                                    # size
    assert seg.should_roll(messages_size=10, **{**kw, "max_timestamp_in_messages": 15_001})  # time
    assert seg.should_roll(messages_size=10, **{**kw, "max_offset_in_messages": 2**31})   # overflow
    seg.roll_jitter_ms = 5000
    assert seg.should_roll(messages_size=10, **{**kw, "max_timestamp_in_messages": 10_001})  # jitter
    assert log_file(str(tmp_path), 0).endswith("00000000000000000000.log")


def test_multi_batch_append_indexes_like_separate_appends(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = mk(tmp_path / "a")
    many = mk(tmp_path / "b")
    raws = [R.build_batch([(b"k", b"v" * 60, None, 10 + (i * 7) % 5)], base_offset=i) for i in range(12)]
    for i, raw in enumerate(raws):
        h = R.read_header(raw)
        one.append(h.last_offset, h.max_timestamp, h.last_offset, raw)
    many.append(11, max(R.read_header(r).max_timestamp for r in raws), 0, b"".join(raws))
    entries = lambda s: [s.offset_index.entry(n) for n in range(s.offset_index.entries)]  # noqa: E731
    assert entries(one) == entries(many) and len(entries(one)) > 2
    assert (one.max_timestamp_so_far, one.offset_of_max_timestamp_so_far) == \
        (many.max_timestamp_so_far, many.offset_of_max_timestamp_so_far) == (14, 2)


def test_recover_and_scan_with_batches_larger_than_the_read_chunk(tmp_path, monkeypatch):
    import kompakt.storage.segment as S
    seg = mk(tmp_path)
    for i in range(8):
        add(seg, i * 3, n=3, value=b"z" * 150)
    expected = [(h.base_offset, h.size) for _, h, _, _ in seg.iter_batches()]
    assert [(h.base_offset, h.size) for _, h, _, _ in seg.iter_batches(chunk=64)] == expected
    monkeypatch.setattr(S, "RECOVER_CHUNK", 100)
    entries = [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)]
    assert seg.recover() == 0
    assert [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)] == entries
    assert seg.read_next_offset() == 24


@pytest.mark.parametrize("window", [50, 100, 16 * 1024])
def test_translate_and_read_across_scan_windows(tmp_path, monkeypatch, window):
    import kompakt.storage.segment as S
    monkeypatch.setattr(S, "SCAN_WINDOW", window)
    seg = mk(tmp_path, interval=10_000)         # no index entries: every lookup scans from 0
    heads, starts = [], []
    for i in range(15):
        starts.append(seg.size)
        heads.append(add(seg, i * 2, n=2, value=b"q" * (20 + 37 * i)))
    for target in range(30):
        k = target // 2
        assert seg.translate_offset(target) == (starts[k], heads[k].size)
        pos, data = seg.read(target, 300, min_one=True)
        got = [h for _, h in R.iter_batches(data)]
        assert pos == starts[k] and got[0].base_offset == heads[k].base_offset
        assert sum(h.size for h in got) == len(data)
        assert len(data) <= 300 or len(got) == 1
    assert seg.translate_offset(30) is None


@pytest.mark.parametrize("interval", [0, 150, 1_000_000])   # dense index, sparse, none at all
def test_large_reads_return_exactly_the_whole_batches_that_fit(tmp_path, monkeypatch, interval):
    # Reads beyond the scan window find their end from the index and pread exactly; compare every
    # budget and max_position with a plain walk over the file's batches.
    import kompakt.storage.segment as S
    monkeypatch.setattr(S, "SCAN_WINDOW", 64)
    seg = mk(tmp_path, interval=interval, index_size=1 << 16)
    starts, off = [], 0
    for i in range(40):
        starts.append((seg.size, off))
        n = 1 + i % 3
        add(seg, off, n=n, value=b"w" * (10 + (i * 53) % 700))
        off += n
    with open(seg.log_path, "rb") as fh:
        raw = fh.read()
    bounds = [p for p, _ in starts] + [len(raw)]
    for k, (pos, first_offset) in enumerate(starts):
        for budget in (0, 200, 999, 1500, 4000, len(raw)):
            for max_position in (None, (pos + len(raw)) // 2):
                for min_one in (False, True):
                    limit = len(raw) if max_position is None else min(max_position, len(raw))
                    cap = max(budget, bounds[k + 1] - pos) if min_one else budget
                    end = max([b for b in bounds if b <= min(limit, pos + cap)] + [pos])
                    got = seg.read(first_offset, budget, max_position, min_one)
                    assert got == (pos, raw[pos:end]), (k, budget, max_position, min_one)


def test_a_first_batch_without_timestamp_is_read_once_for_roll_checks(tmp_path, monkeypatch):
    # segment.ms rolls measure from the first batch's max timestamp; a reopened segment reads it
    # lazily. A first batch without one (-1) was re-read on every append's roll check.
    seg = mk(tmp_path)
    add(seg, 0, ts=-1)
    seg.close()
    seg = mk(tmp_path)
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, pos: reads.append(pos) or real_pread(fd, n, pos))
    kw = dict(segment_bytes=1 << 20, max_segment_ms=1000, messages_size=10,
              max_timestamp_in_messages=5000, max_offset_in_messages=1, now_ms=seg.created + 10)
    assert [seg.should_roll(**kw) for _ in range(5)] == [False] * 5   # measured from creation
    assert reads == [0]
    seg.close()


def _reserving(tmp_path) -> bool:
    """Whether this file system takes a block reservation past a file's end (ext4, xfs, tmpfs do)."""
    from kompakt.storage import files
    fd = os.open(str(tmp_path / "probe"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        return files.reserve(fd, 0, 1 << 20)
    finally:
        os.close(fd)
        os.unlink(str(tmp_path / "probe"))


def _blocks_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_large_appends_reserve_blocks_ahead_without_changing_the_file(tmp_path):
    from kompakt.storage import segment as S
    reserving = _reserving(tmp_path)
    seg = mk(tmp_path, interval=4096, index_size=1 << 20)
    written = []
    for i in range(3):
        b = R.build_batch([(None, os.urandom(1000), None, 1000 + i) for _ in range(100)], base_offset=i * 100)
        h = R.read_header(b)
        seg.append(h.last_offset, h.max_timestamp, h.last_offset, b)
        written.append(b)
    data = b"".join(written)
    # size and bytes exactly what was appended, reservation or not
    assert os.path.getsize(seg.log_path) == seg.size == len(data)
    with open(seg.log_path, "rb") as f:
        assert f.read() == data
    if reserving:     # the first append reserved room for four more of its size: one call for all three
        assert seg._reserved_end == 5 * len(written[0])
        assert _blocks_bytes(seg.log_path) >= seg._reserved_end
    elif reserving is False:   # the file system cannot: appends allocate as they go, never asked again
        assert seg._reserved_end == S._NO_RESERVE
    else:                      # near full (the floor): nothing held ahead, asked again later
        assert seg._reserved_end == 0
    seg.on_become_inactive()          # roll: what is left past the end is freed, bytes untouched
    assert _blocks_bytes(seg.log_path) <= seg.size + 64 * 1024
    assert os.path.getsize(seg.log_path) == len(data)
    with open(seg.log_path, "rb") as f:
        assert f.read() == data


def test_no_reservation_near_a_full_disk_and_one_again_once_there_is_room(tmp_path, monkeypatch):
    """Below the free-space floor a large append reserves nothing (each reserved block is one
    another partition's append could not have) and the next large append asks again."""
    from kompakt.storage import files
    if _reserving(tmp_path) is not True:
        pytest.skip("this file system takes no reservation past a file's end (or is near full)")
    monkeypatch.setattr(files, "RESERVE_FLOOR_BYTES", 1 << 62)
    monkeypatch.setattr(files, "RESERVE_FLOOR_SHARE", 1.0)     # every file system is "near full"
    seg = mk(tmp_path, interval=4096, index_size=1 << 20)

    def large(i):
        b = R.build_batch([(None, os.urandom(1000), None, 1000 + i) for _ in range(100)], base_offset=i * 100)
        h = R.read_header(b)
        seg.append(h.last_offset, h.max_timestamp, h.last_offset, b)
        return len(b)
    n = large(0)
    assert seg._reserved_end == 0
    assert _blocks_bytes(seg.log_path) <= seg.size + 64 * 1024
    monkeypatch.undo()                                          # room again
    large(1)
    assert seg._reserved_end == 2 * n + 4 * n                    # this append and four more of its size
    assert _blocks_bytes(seg.log_path) >= seg._reserved_end


def test_small_appends_reserve_nothing(tmp_path):
    seg = mk(tmp_path)
    for i in range(50):
        add(seg, i)
    assert seg._reserved_end == 0
    assert _blocks_bytes(seg.log_path) <= seg.size + 64 * 1024


def test_a_reservation_a_crash_left_is_freed_at_close_and_truncation_frees_its_own(tmp_path):
    from kompakt.storage import files
    seg = mk(tmp_path)
    add(seg, 0)
    big = R.build_batch([(None, os.urandom(1000), None, 2000) for _ in range(100)], base_offset=1)
    h = R.read_header(big)
    seg.append(h.last_offset, h.max_timestamp, h.last_offset, big)
    seg.truncate_to(1)                # cuts the large batch and whatever was reserved past it
    assert seg._reserved_end == 0
    assert _blocks_bytes(seg.log_path) <= seg.size + 64 * 1024
    seg.close()
    fd = os.open(seg.log_path, os.O_RDWR)
    reserved = files.reserve(fd, os.path.getsize(seg.log_path), 4 << 20)   # as a run that crashed left it
    os.close(fd)
    size = os.path.getsize(seg.log_path)
    assert not reserved or _blocks_bytes(seg.log_path) >= 4 << 20
    again = mk(tmp_path)              # reopened: knows nothing of it
    add(again, 1)                     # opens the .log
    again.close()
    assert os.path.getsize(again.log_path) > size
    assert _blocks_bytes(again.log_path) <= again.size + 64 * 1024


def test_without_fallocate_appends_allocate_as_they_go(tmp_path, monkeypatch):
    from kompakt.storage import files, segment as S
    monkeypatch.setattr(files, "_fallocate", None)      # a system without fallocate(2)
    seg = mk(tmp_path)
    b = R.build_batch([(None, os.urandom(1000), None, 1000) for _ in range(100)])
    h = R.read_header(b)
    seg.append(h.last_offset, h.max_timestamp, h.last_offset, b)
    assert seg._reserved_end == S._NO_RESERVE
    assert seg.read(0, 1 << 20)[1] == b
