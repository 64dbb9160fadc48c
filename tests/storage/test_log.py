"""Log: append_as_leader, read, offsets, roll, truncate, reopen, delete/replace segments."""
from __future__ import annotations

import os

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import CorruptMessageError, InvalidRecordError, OffsetOutOfRangeError
from kompakt.storage import Log, TopicPartition
from kompakt.storage.log import ROLL_ELSEWHERE, ROLL_LATER, RollRequired


def cfg(**kw) -> LogConfig:
    overrides = {k.replace("_", "."): str(v) for k, v in kw.items()}
    return LogConfig.from_overrides(overrides)


def batch(n=1, key=b"k", value=b"v" * 20, ts=None, **kw) -> bytes:
    recs = [(key + b"%d" % i if key is not None else None, value, None, ts) for i in range(n)]
    return R.build_batch(recs, **kw)


def batches_of(data: bytes):
    return [h for _, h in R.iter_batches(data)]


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "orders-0")


def test_append_assigns_offsets_and_read_returns_whole_batches(logdir):
    lg = Log.open(logdir, cfg())
    assert lg.tp == TopicPartition("orders", 0)
    offsets = [lg.append_as_leader(batch(3)).first_offset for _ in range(5)]
    assert offsets == [0, 3, 6, 9, 12]
    assert lg.log_end_offset == lg.high_watermark == lg.last_stable_offset == 15
    data = lg.read(7, 10_000).records
    hs = batches_of(data)
    assert [h.base_offset for h in hs] == [6, 9, 12]
    assert sum(h.size for h in hs) == len(data)
    for off, h in [(h.base_offset, h) for h in hs]:
        assert R.valid_crc(data, sum(x.size for x in hs if x.base_offset < off), h)
    assert lg.read(15, 1000).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(16, 1000)
    lg.close()


def test_min_one_returns_a_batch_larger_than_the_budget(logdir):
    lg = Log.open(logdir, cfg())
    lg.append_as_leader(batch(1, value=b"x" * 5000))
    assert len(batches_of(lg.read(0, 100).records)) == 1
    assert lg.read(0, 100, min_one=False).records == b""
    lg.close()


def test_roll_on_segment_bytes_and_reopen_keeps_everything(logdir):
    c = cfg(internal_segment_bytes=2000, index_interval_bytes=100)
    lg = Log.open(logdir, c)
    for i in range(60):
        lg.append_as_leader(batch(2, key=b"k%d-" % i))
    assert lg.num_segments > 3
    names = sorted(os.listdir(logdir))
    assert "00000000000000000000.log" in names
    assert all(len(n.split(".")[0]) == 20 for n in names if n.endswith(".log"))
    before = [lg.read(o, 50).records for o in range(0, 120, 5)]
    lg.close()
    lg2 = Log.open(logdir, c)
    assert lg2.log_end_offset == 120 and lg2.num_segments == lg.num_segments
    assert [lg2.read(o, 50).records for o in range(0, 120, 5)] == before
    assert lg2.append_as_leader(batch(1)).first_offset == 120
    lg2.close()


def test_truncate_to_removes_whole_batches_and_later_segments(logdir):
    lg = Log.open(logdir, cfg(internal_segment_bytes=1000))
    for _ in range(40):
        lg.append_as_leader(batch(2))
    lg.truncate_to(31)  # batch 30..31 goes entirely
    assert lg.log_end_offset == 30
    assert all(s.base_offset <= 30 for s in lg.segments)
    assert lg.append_as_leader(batch(1)).first_offset == 30
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.num_segments == 1
    lg.close()


def test_delete_records_raises_log_start(logdir):
    lg = Log.open(logdir, cfg())
    for _ in range(5):
        lg.append_as_leader(batch(2))
    assert lg.delete_records(4) == 4
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(3, 100)
    assert batches_of(lg.read(4, 1000).records)[0].base_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records(11)
    assert lg.delete_records(-1) == 10
    lg.close()


def test_offset_for_timestamp_and_max_timestamp(logdir):
    lg = Log.open(logdir, cfg(internal_segment_bytes=600, index_interval_bytes=1))
    base = 1_700_000_000_000
    for i in range(30):
        lg.append_as_leader(batch(1, ts=base + i * 10))
    assert lg.offset_for_timestamp(base + 55) == (6, base + 60)
    assert lg.offset_for_timestamp(base) == (0, base)
    assert lg.offset_for_timestamp(base + 10_000) is None
    assert lg.offset_for_timestamp(-2) == (0, -1)
    assert lg.offset_for_timestamp(-1) == (30, -1)
    assert lg.max_timestamp_offset() == (29, base + 290)
    lg.close()


def test_client_batch_errors(logdir):
    lg = Log.open(logdir, cfg())
    good = bytearray(batch(2))
    good[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(bytes(good))
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(batch(1, base_offset=5))
    assert lg.log_end_offset == 0
    lg.close()


def test_replace_segments_rebuilds_indexes_of_a_bare_cleaned_log(logdir):
    from kompakt.storage import segment as S
    c = cfg(internal_segment_bytes=3000, index_interval_bytes=100)
    lg = Log.open(logdir, c)
    base_ts = 1_700_000_000_000
    for i in range(40):
        lg.append_as_leader(batch(1, key=b"k%d-" % i, ts=base_ts + i))
    old = lg.segments[0]
    kept = b"".join(lg.read(o, 1, min_one=True).records for o in range(0, lg.segments[1].base_offset, 2))
    with open(S.log_file(logdir, 0, S.CLEANED_SUFFIX), "wb") as f:   # a writer that made no indexes
        f.write(kept)
    new = S.LogSegment.open(logdir, 0, c, suffix=S.CLEANED_SUFFIX)
    lg.replace_segments([new], [old])
    seg = lg.segments[0]
    assert seg.offset_index.entries > 0 and seg.max_timestamp_so_far == base_ts + lg.segments[1].base_offset - 2
    assert os.path.getsize(S.index_file(logdir, 0)) == 8 * seg.offset_index.entries
    assert lg.offset_for_timestamp(base_ts + 3) == (4, base_ts + 4)
    lg.close()


class FakeTime:
    def __init__(self, ms: int):
        self.ms = ms

    def time(self) -> float:
        return self.ms / 1000


def test_segment_ms_rolls_by_record_time_and_clock(logdir):
    clock = FakeTime(1_700_000_000_000)
    lg = Log.open(logdir, cfg(segment_ms=60_000), time=clock)
    lg.append_as_leader(batch(1, ts=clock.ms))
    lg.append_as_leader(batch(1, ts=clock.ms + 59_000))
    assert lg.num_segments == 1
    lg.append_as_leader(batch(1, ts=clock.ms + 60_001))   # 60.001 s after the first batch
    assert lg.num_segments == 2 and lg.active_segment.base_offset == 2
    lg.close()


def test_flush_messages_moves_the_recovery_point(logdir):
    lg = Log.open(logdir, cfg(flush_messages=5))
    for _ in range(4):
        lg.append_as_leader(batch(1))
    assert lg.recovery_point == 0 and lg.unflushed_messages == 4
    lg.append_as_leader(batch(1))
    assert lg.recovery_point == 5 and lg.unflushed_messages == 0
    lg.close()


def test_update_config_applies_to_following_appends(logdir):
    lg = Log.open(logdir, cfg())
    lg.append_as_leader(batch(1, key=None))
    lg.update_config(cfg(cleanup_policy="compact", internal_segment_bytes=300))
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(batch(1, key=None))
    for _ in range(6):
        lg.append_as_leader(batch(1))
    assert lg.num_segments > 1
    lg.close()


def test_expired_producers_are_forgotten(logdir):
    clock = FakeTime(1_700_000_000_000)
    lg = Log.open(logdir, cfg(), time=clock, producer_id_expiration_ms=1000)
    lg.append_as_leader(R.build_batch([(b"k", b"v", None, clock.ms)], producer_id=4, producer_epoch=0,
                                      base_sequence=0))
    assert lg.remove_expired_producers(clock.ms + 999) == 0
    assert lg.remove_expired_producers(clock.ms + 1000) == 1
    # forgotten: a retry of sequence 0 is no longer recognised as a duplicate
    assert not lg.append_as_leader(R.build_batch([(b"k", b"v", None, clock.ms)], producer_id=4,
                                                 producer_epoch=0, base_sequence=0)).duplicate
    lg.close()


def test_flush_in_a_worker_thread_while_appending(logdir):
    import threading
    lg = Log.open(logdir, cfg(internal_segment_bytes=4000))
    stop = threading.Event()
    errors = []

    def flusher():
        while not stop.is_set():
            try:
                lg.flush()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            assert lg.append_as_leader(batch(1, key=b"k%d-" % i)).first_offset == i
    finally:
        stop.set()
        t.join()
    assert not errors
    lg.flush()
    assert lg.recovery_point == 300
    lg.close_handlers()
    again = Log.open(logdir, cfg(internal_segment_bytes=4000), had_clean_shutdown=False,
                     recovery_point=0)
    assert again.log_end_offset == 300 and again.repairs == []
    again.close()


def test_read_stops_before_max_offset(logdir):
    lg = Log.open(logdir, cfg())
    for _ in range(6):
        lg.append_as_leader(batch(2))
    hs = batches_of(lg.read(0, 10_000, max_offset=6).records)
    assert [h.base_offset for h in hs] == [0, 2, 4]
    assert lg.read(6, 10_000, max_offset=6).records == b""
    lg.close()


def test_segment_files_parse_with_an_independent_kafka_decoder(logdir):
    """kafka-python's own v2 reader walks our .log files: every batch valid, offsets as assigned."""
    from kafka.record import MemoryRecords
    lg = Log.open(logdir, cfg(internal_segment_bytes=2000, message_timestamp_type="LogAppendTime"))
    for i in range(30):
        lg.append_as_leader(batch(2, key=b"k%d-" % i, compression=R.COMPRESSION_GZIP if i % 3 else 0),
                            leader_epoch=4)
    lg.close()
    seen = []
    for name in sorted(n for n in os.listdir(logdir) if n.endswith(".log")):
        records = MemoryRecords(open(os.path.join(logdir, name), "rb").read())
        while records.has_next():
            b = records.next_batch()
            assert b.validate_crc() and b.leader_epoch == 4 and b.timestamp_type == 1
            assert b.base_offset >= int(name[:20])
            for r in b:
                seen.append((r.offset, r.key))
    assert [o for o, _ in seen] == list(range(60))
    assert seen[5][1] == b"k2-1"


def test_preallocate_reserves_the_segment_and_trims_on_roll_and_close(logdir):
    c = cfg(preallocate="true", segment_bytes=1024 * 1024)
    lg = Log.open(logdir, c)
    lg.append_as_leader(batch(1))
    assert os.path.getsize(lg.active_segment.log_path) == 1024 * 1024
    assert batches_of(lg.read(0, 10_000).records)[0].base_offset == 0
    lg.append_as_leader(batch(1))
    active = lg.active_segment
    lg.roll()
    assert os.path.getsize(active.log_path) == active.size
    assert os.path.getsize(lg.active_segment.log_path) == 1024 * 1024
    lg.append_as_leader(batch(1))
    lg.flush()
    lg.close_handlers()             # crash: the zero tail stays on disk
    again = Log.open(logdir, c, had_clean_shutdown=False, recovery_point=0)
    assert again.log_end_offset == 3
    assert again.append_as_leader(batch(1)).first_offset == 3
    again.close()
    assert os.path.getsize(again.active_segment.log_path) == again.active_segment.size


def test_large_appends_reserve_no_further_than_segment_bytes(logdir, tmp_path):
    """The blocks held ahead of large appends (storage/segment.py) stop at segment.bytes: the
    segment rolls there, so room past it would only be held (and counted by `du`) until the roll."""
    from kompakt.storage import files
    fd = os.open(str(tmp_path / "probe"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if files.reserve(fd, 0, 1 << 20) is not True:
            pytest.skip("this file system takes no reservation past a file's end (or is near full)")
    finally:
        os.close(fd)
    limit = 256 * 1024
    lg = Log.open(logdir, cfg(internal_segment_bytes=limit))
    big = batch(100, value=os.urandom(1000))             # ~100 KB: reserves ahead (64 KiB and more)
    for _ in range(2):
        lg.append_as_leader(big)
        active = lg.active_segment
        assert os.stat(active.log_path).st_blocks * 512 <= limit + 64 * 1024
        assert os.path.getsize(active.log_path) == active.size
    lg.close()


def test_a_full_index_rolls_the_segment(logdir):
    lg = Log.open(logdir, cfg(segment_index_bytes=48, index_interval_bytes=1))  # 6 offset / 4 time slots
    for i in range(20):
        lg.append_as_leader(batch(1, key=b"k%d-" % i, ts=1_700_000_000_000 + i))
    assert lg.num_segments >= 4
    for seg in lg.segments[:-1]:
        assert seg.time_index.entries <= seg.time_index.max_entries
    assert [h.base_offset for h in batches_of(lg.read(0, 1 << 20).records)][0] == 0
    lg.close()
    again = Log.open(logdir, cfg(segment_index_bytes=48, index_interval_bytes=1))
    assert again.offset_for_timestamp(1_700_000_000_000 + 17) == (17, 1_700_000_000_000 + 17)
    again.close()


def test_close_waits_for_a_flush_in_flight(logdir, monkeypatch):
    # A worker's flush clears a segment's dirty flag, then fdatasyncs outside the log lock. A
    # close() running meanwhile saw a clean segment, skipped its fsync and closed the descriptor,
    # so the worker's sync failed (EBADF, swallowed for a closed segment): the clean shutdown
    # marker would then cover bytes that never reached the disk. close() now waits for the flush.
    import threading
    lg = Log.open(logdir, cfg())
    lg.append_as_leader(batch(3))
    log_fd = lg.active_segment._fd
    in_sync, fd_closed = threading.Event(), threading.Event()
    synced = []                                  # fds whose fsync/fdatasync succeeded
    real_fdatasync, real_fsync, real_close = os.fdatasync, os.fsync, os.close

    def fdatasync(fd):
        if fd == log_fd and not in_sync.is_set():
            in_sync.set()
            fd_closed.wait(0.5)                  # without the fix close() closes the fd first
        real_fdatasync(fd)
        synced.append(fd)

    def fsync(fd):
        real_fsync(fd)
        synced.append(fd)

    def close(fd):
        if fd == log_fd:
            fd_closed.set()
        real_close(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "close", close)
    errors = []

    def flusher():
        try:
            lg.flush()
        except Exception as exc:  # pragma: no cover - asserted below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    assert in_sync.wait(30)
    lg.close()
    t.join()
    assert errors == [] and log_fd in synced


def test_roll_later_appends_into_the_due_segment_and_leaves_one_roll_to_the_hook(logdir):
    """ROLL_LATER (the loop's synchronous appends): no file is created in the append; the hook is
    asked once per due segment; roll_if_due rolls it once, and not a segment already rolled."""
    lg = Log.open(logdir, cfg(internal_segment_bytes=600))
    asked = []
    lg.on_roll_due = lambda _log, base: asked.append(base)
    while not asked:
        lg.append_as_leader(batch(2), roll=ROLL_LATER)
    assert lg.num_segments == 1 and lg.active_segment.size > 600
    lg.append_as_leader(batch(2), roll=ROLL_LATER)            # still due: not asked again
    assert asked == [0] and lg.num_segments == 1
    end = lg.log_end_offset
    assert lg.roll_if_due(0) and lg.num_segments == 2 and lg.active_segment.base_offset == end
    assert not lg.roll_if_due(0) and lg.num_segments == 2   # done already
    assert lg.append_as_leader(batch(1), roll=ROLL_LATER).first_offset == end
    lg.close()


def test_a_roll_left_for_later_does_nothing_once_the_log_is_closed(logdir):
    """A roll queued on the log writer for a log deleted (or whose dir failed) meanwhile creates no
    file in its directory."""
    lg = Log.open(logdir, cfg(internal_segment_bytes=600))
    asked = []
    lg.on_roll_due = lambda _log, base: asked.append(base)
    while not asked:
        lg.append_as_leader(batch(2), roll=ROLL_LATER)
    files = sorted(os.listdir(logdir))
    lg.close_handlers()                                       # what deletion and a failed dir do
    assert not lg.roll_if_due(asked[0])
    assert sorted(os.listdir(logdir)) == files


def test_roll_elsewhere_changes_nothing_and_the_same_bytes_append_afterwards(logdir):
    """ROLL_ELSEWHERE (the produce handler on the loop): RollRequired before anything changed,
    the client's batch header restored (validation patches offsets in place), so the same view
    appends as it came on the log writer."""
    lg = Log.open(logdir, cfg(internal_segment_bytes=600))
    while True:
        frame = bytearray(batch(2))
        original = bytes(frame)
        view = memoryview(frame)
        end, size = lg.log_end_offset, lg.active_segment.size
        try:
            lg.append_as_leader(view, roll=ROLL_ELSEWHERE)
        except RollRequired:
            break
    assert end > 0 and bytes(frame) == original
    assert lg.log_end_offset == end and lg.active_segment.size == size and lg.num_segments == 1
    info = lg.append_as_leader(view)                          # where the roll may happen
    assert info.first_offset == end and lg.num_segments == 2
    assert [h.base_offset for h in batches_of(lg.read(end, 10_000).records)] == [end]
    lg.close()


def test_a_large_read_as_file_is_the_range_of_the_same_bytes(logdir):
    """read(as_file=True): from FILE_RECORDS_MIN bytes up the records are a FileRecords (the
    segment range a plaintext Fetch sends with sendfile) holding exactly what a bytes read returns,
    whose last_offset is the last batch's; smaller reads, and reads that max_offset must cut, stay
    bytes; a read that max_offset (the high watermark, the last stable offset) bounds is the range
    of the batches below it, a batch that starts below and ends above it included, as the bytes
    path has it; the range still reads after the segment is deleted (it keeps its own descriptor)."""
    from kompakt.storage.file_records import FileRecords
    from kompakt.storage.segment import FILE_RECORDS_MIN
    lg = Log.open(logdir, cfg(index_interval_bytes=4096))
    for _ in range(40):
        lg.append_as_leader(batch(10, value=os.urandom(500)))          # ~5 KiB batches, 400 records
    plain = lg.read(3, 150_000).records
    ranged = lg.read(3, 150_000, as_file=True).records
    assert type(ranged) is FileRecords and len(ranged) == len(plain) >= FILE_RECORDS_MIN
    assert ranged.read() == plain
    assert ranged.first_base_offset() == 0
    assert ranged.last_offset() == batches_of(plain)[-1].last_offset
    assert type(lg.read(3, FILE_RECORDS_MIN // 2, as_file=True).records) is bytes
    cut = lg.read(0, 1 << 20, max_offset=350, as_file=True).records
    assert type(cut) is FileRecords and cut.last_base_offset() == 340
    assert cut.read() == lg.read(0, 1 << 20, max_offset=350).records
    straddled = lg.read(0, 1 << 20, max_offset=345, as_file=True).records   # batch 340-349 starts below
    assert type(straddled) is FileRecords and straddled.last_offset() == 349
    assert straddled.read() == lg.read(0, 1 << 20, max_offset=345).records
    assert batches_of(lg.read(0, 1 << 20, max_offset=345).records)[-1].base_offset == 340
    assert type(lg.read(0, 1 << 20, max_offset=10, as_file=True).records) is bytes    # one batch: small
    cut.close()
    straddled.close()
    whole = lg.read(0, 1 << 20, max_offset=400, as_file=True).records
    assert type(whole) is FileRecords and whole.last_offset() == 399
    lg.close()
    import shutil
    shutil.rmtree(logdir)
    assert ranged.read() == plain
    ranged.close()
    whole.close()


def test_a_bounded_read_across_segments_cuts_only_in_the_segment_holding_the_bound(logdir):
    """max_offset becomes a file position only in the segment that holds it: a read from an
    earlier segment is that segment's batches whole, a bound at a segment's base cuts nothing of
    the segment before, and every bounded range equals what the bytes path returns."""
    from kompakt.storage.file_records import FileRecords
    lg = Log.open(logdir, cfg(internal_segment_bytes=300_000, index_interval_bytes=4096))
    for _ in range(150):
        lg.append_as_leader(batch(10, value=os.urandom(500)))          # ~5 KiB batches of 10 records
    bases = [seg.base_offset for seg in lg.segments]
    assert len(bases) >= 3
    for start, bound in [(0, bases[2] + 95), (0, bases[1]), (bases[1] + 3, bases[2] + 100),
                         (bases[2], bases[2] + 205), (bases[2] + 1, bases[2] + 7)]:
        ranged = lg.read(start, 1 << 20, max_offset=bound, as_file=True).records
        plain = lg.read(start, 1 << 20, max_offset=bound).records
        got = ranged.read() if type(ranged) is FileRecords else ranged
        assert got == plain and batches_of(plain)[-1].base_offset < bound
        assert len(plain) < 64 * 1024 or type(ranged) is FileRecords
        if type(ranged) is FileRecords:
            ranged.close()
    lg.close()


def test_a_bounded_read_never_goes_past_the_bound_whatever_the_position_says(logdir, monkeypatch):
    """Should the bound's file position come out wrong (a damaged offset index), the range that
    reaches past the bound is not sent: the read falls back to the bytes and cuts them."""
    from kompakt.storage.segment import LogSegment
    lg = Log.open(logdir, cfg(index_interval_bytes=4096))
    for _ in range(40):
        lg.append_as_leader(batch(10, value=os.urandom(500)))
    monkeypatch.setattr(LogSegment, "position_below", lambda self, offset: self.size)
    cut = lg.read(0, 1 << 20, max_offset=350, as_file=True).records
    assert type(cut) is bytes and batches_of(cut)[-1].base_offset == 340
    lg.close()


def test_a_prepared_batch_is_appended_with_offsets_assigned_at_the_append(logdir):
    # Log.prepare (a validation-pool thread) checks the batch without the lock; appends that land
    # meanwhile move the log end, and the prepared batch still gets the offsets after them
    lg = Log.open(logdir, cfg())
    big = batch(5, compression=R.COMPRESSION_ZSTD)
    prepared = lg.prepare(big)
    lg.append_as_leader(batch(3))
    info = lg.append_as_leader(big, prepared=prepared)
    assert (info.first_offset, info.last_offset) == (3, 7)
    assert [h.base_offset for h in batches_of(lg.read(0, 100_000).records)] == [0, 3]
    lg.close()


def test_a_batch_prepared_before_a_config_change_is_validated_again(logdir):
    # the prepared answer holds for the config it was checked against: a topic made compacted
    # meanwhile refuses the keyless records at the append
    lg = Log.open(logdir, cfg())
    keyless = batch(2, key=None, compression=R.COMPRESSION_LZ4)
    prepared = lg.prepare(keyless)
    lg.update_config(cfg(cleanup_policy="compact"))
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(keyless, prepared=prepared)
    assert lg.log_end_offset == 0
    lg.close()
