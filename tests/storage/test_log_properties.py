"""Property test: a Log driven by random appends, reads, truncations, rolls, segment deletions,
cleaner-style segment swaps and reopens (clean and unclean) behaves like a plain list of batches."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import OffsetOutOfRangeError
from kompakt.storage import Log
from kompakt.storage import segment as S

CFG = LogConfig.from_overrides({"internal.segment.bytes": "1500", "index.interval.bytes": "150",
                                "segment.index.bytes": "96"})


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.dir = self.tmp + "/m-0"
        self.log = Log.open(self.dir, CFG)
        self.batches: list[tuple[int, int, bytes]] = []   # (base, last, raw bytes after append)
        self.start = 0
        self.end = 0
        self.counter = 0
        # Reads of up to 2000 bytes then take both segment read paths: served from the header
        # scan window, and (beyond it) an exact pread whose end is found from the offset index.
        self.scan_window, S.SCAN_WINDOW = S.SCAN_WINDOW, 512

    def teardown(self):
        S.SCAN_WINDOW = self.scan_window
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(n=st.integers(1, 4), size=st.integers(0, 300))
    def append(self, n, size):
        self.counter += 1
        recs = [(b"k%d-%d" % (self.counter, i), b"x" * size) for i in range(n)]
        info = self.log.append_as_leader(R.build_batch(recs))
        assert info.first_offset == self.end and info.last_offset == self.end + n - 1
        raw = self.log.read(self.end, 1, min_one=True).records
        self.batches.append((self.end, self.end + n - 1, raw))
        self.end += n

    @rule(data=st.data(), max_bytes=st.integers(0, 2000), min_one=st.booleans())
    def read(self, data, max_bytes, min_one):
        offset = data.draw(st.integers(self.start - 2, self.end + 2))
        if offset < self.start or offset > self.end:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes, min_one=min_one)
            return
        got = self.log.read(offset, max_bytes, min_one=min_one).records
        if offset == self.end:
            assert got == b""
            return
        i = next(k for k, b in enumerate(self.batches) if b[1] >= offset)
        expected = b""
        for base, last, raw in self.batches[i:]:
            if got.startswith(expected + raw):
                expected += raw
            else:
                break
        assert got == expected
        if got:
            assert len(got) <= max_bytes or got == self.batches[i][2]
        elif min_one:
            raise AssertionError(f"min_one read at {offset} returned nothing")
        else:
            assert len(self.batches[i][2]) > max_bytes

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, self.end + 1))
        first_base = self.log.segments[0].base_offset
        self.log.truncate_to(offset)
        if offset >= self.end:
            return
        if offset <= first_base:
            self.batches, self.start, self.end = [], offset, offset
            return
        self.batches = [b for b in self.batches if b[1] < offset]
        self.end = self.batches[-1][1] + 1 if self.batches else self.log.segments[-1].base_offset
        self.start = min(self.start, self.end)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        assert self.log.delete_records(offset) == max(self.start, offset)
        self.start = max(self.start, offset)

    @precondition(lambda self: self.log.num_segments > 1)
    @rule()
    def delete_oldest_segment(self):
        nxt = self.log.segments[1].base_offset
        assert self.log.delete_segments([self.log.segments[0]], "retention") == 1
        self.start = max(self.start, nxt)
        self.batches = [b for b in self.batches if b[0] >= nxt]

    @precondition(lambda self: self.log.num_segments > 2)
    @rule(build_indexes=st.booleans())
    def swap_in_a_copy_of_the_oldest_segments(self, build_indexes):
        """A cleaner that keeps every batch: two old segments become one through replace_segments."""
        olds = self.log.segments[:2]
        new = S.LogSegment(self.dir, olds[0].base_offset, index_interval_bytes=150,
                           max_index_size=4096, suffix=S.CLEANED_SUFFIX)
        for old in olds:
            for _, h, buf, p in old.iter_batches():
                raw = buf[p:p + h.size]
                if build_indexes:
                    new.append(h.last_offset, h.max_timestamp, h.last_offset, raw)
                else:   # a writer that leaves the indexes to replace_segments
                    os.pwrite(new._fd, raw, new.size)
                    new.size += len(raw)
        new.flush()
        self.log.replace_segments([new], olds)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
            self.log = Log.open(self.dir, CFG, log_start_offset=self.start)
        else:
            self.log.flush()
            rp = self.log.recovery_point
            self.log.close_handlers()
            self.log = Log.open(self.dir, CFG, log_start_offset=self.start, recovery_point=rp,
                                had_clean_shutdown=False)

    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start
        segs = self.log.segments
        assert [s.base_offset for s in segs] == sorted(s.base_offset for s in segs)


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestLogAgainstModel = LogMachine.TestCase
