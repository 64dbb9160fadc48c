"""The live compaction-guarantee check: what a clean wrote, checked against its input before the swap.

Role: seed 004's guarantees ("the offset for a message never changes", "ordering of messages is
always maintained", "a consumer progressing from the start sees at least the final state of all
records", "delete markers are seen by a consumer that reaches the head within
delete.retention.ms"), checked in the worker on the `.cleaned` files read back from disk, against
the input segments and the clean's own offset map, after the clean and before anything is
swapped in. A violation makes the broker refuse the swap (log_cleaner.py: ERROR line, metric
kompakt_compaction_guarantee_violations_total{topic}, partition marked uncleanable). The same
check names are reported by `kompakt pipeline verify` over a whole topic (pipeline/jobs/verify.py).

Checks (CHECKS below, one name per kind of violation):
  order      offsets strictly increase across the output, batch after batch (every batch) and
             record after record (sampled batches); no torn batch at the end of a file
  range      the output replaces only segments of the job below the clean's end offset, in order,
             each group named after its first segment
  latest     a record that is the latest of its key in the cleaned input is in the output at the
             same offset; "latest" comes from the offset map, itself checked: for a superseded
             record, the map's offset for its key must hold that key (in the output, or in the
             input as a tombstone the clean was allowed to remove)
  changed    a kept record is unchanged (offset, timestamp, key, value, headers): above all the
             records past the range the map covered, which a clean never touches
  tombstone  a tombstone whose delete horizon has not passed, or that a consumer group holds back
             (kompakt.tombstone.retention.groups), is kept
What a record's fate should be is `rules.record_fate` with `rules.tombstones_removable`, the
cleaner's own rules (rules.py): the check catches output that does not follow them, not rules
that are wrong.

Sampling: order and range cover the whole output (batch headers; walked in C by km_batch_walk
when the compiled seam is loaded); the record checks cover `ratio` of the input's batches
(`kompakt.cleaner.guarantee.check.ratio`, at least one batch per clean when ratio > 0), chosen by a
random generator seeded from the partition, first dirty offset and clock (the seed is in the report,
so a violation can be replayed). Control batches and aborted transactional data are not sampled
(their own rules are transaction rules).

Invariant: reads only; never writes, renames or deletes a file.
"""
from __future__ import annotations

import array
import bisect
import ctypes
import hashlib
import mmap
import os
import random
import struct
import sys
import time as _time
import zlib
from dataclasses import dataclass, field

from kompakt.cleaner import batch_ops, rules
from kompakt.cleaner.batch_ops import (CONTROL_MASK, DELETE_HORIZON_MASK, H_ATTRS, H_BASE_OFFSET, H_BASE_TS,
                                       H_COUNT, H_LAST_DELTA, H_LENGTH, H_MAX_TS, HEADER, HEADER_SIZE,
                                       TIMESTAMP_TYPE_MASK)

CHECKS = {
    "order": "offsets strictly increase, batch after batch and record after record",
    "range": "a clean replaces only segments below its end offset, in order",
    "latest": "the latest record of each key is kept, at the same offset",
    "changed": "a kept record is unchanged (offset, timestamp, key, value, headers)",
    "tombstone": "a tombstone younger than its delete horizon (or held back by a consumer group) is kept",
}
HONESTY_PER_BATCH = 1      # superseded records per sampled batch whose map entry is followed
WALK_CAP = 1 << 16
INDEX_ENTRY = struct.Struct(">ii")    # kompakt.storage.offset_index: relative offset, position
assert INDEX_ENTRY.size == 8
RC_FLUSH = 4               # km_batch_walk: the arrays are full, call again from io[0]


@dataclass
class Violation:
    kind: str
    offset: int | None
    detail: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "offset": self.offset, "detail": self.detail}


@dataclass
class CheckReport:
    ratio: float
    seed: int
    input_batches: int = 0
    sampled_batches: int = 0
    records_checked: int = 0
    output_batches: int = 0
    seconds: float = 0.0
    violations: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["violations"] = [v.as_dict() for v in self.violations]
        return d


class _File:
    """A read-only view of a segment file's first `size` bytes and its batch boundaries (a private
    copy-on-write mapping when the compiled walk needs an address: the file is never written)."""

    def __init__(self, path: str, size: int):
        self.path = path
        self.mm, self._anchor = b"", None
        lib = batch_ops._LIB
        with open(path, "rb") as f:
            self.size = min(size, os.fstat(f.fileno()).st_size)
            if self.size > 0:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY if lib else mmap.ACCESS_READ)
        if lib is not None and self.size > 0:
            self._anchor = ctypes.c_char.from_buffer(self.mm)
            self.positions, self.bases, self.lasts, self.end = _native_batch_bounds(
                lib, ctypes.addressof(self._anchor), self.size)
        else:
            self.positions, self.bases, self.lasts, self.end = _py_batch_bounds(self.mm, self.size)

    def batch(self, i: int):
        pos = self.positions[i]
        h = HEADER.unpack_from(self.mm, pos)
        return self.mm[pos:pos + h[H_LENGTH] + 12], h

    def close(self) -> None:
        self._anchor = None
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()


def _native_batch_bounds(lib, address: int, size: int) -> tuple[list, list, list, int]:
    """(positions, base offsets, last offsets) of the complete batches at address[0, size), and
    where the walk stopped (size when the file ends on a batch boundary)."""
    cap = WALK_CAP
    pos_a, base_a, last_a = (ctypes.c_int64 * cap)(), (ctypes.c_int64 * cap)(), (ctypes.c_int64 * cap)()
    io = (ctypes.c_int64 * 2)()
    positions, bases, lasts = [], [], []
    while True:
        rc = lib.km_batch_walk(address, size, pos_a, base_a, last_a, cap, io)
        n = io[1]
        positions += pos_a[:n]
        bases += base_a[:n]
        lasts += last_a[:n]
        if rc != RC_FLUSH:
            return positions, bases, lasts, io[0]


def _py_batch_bounds(buf, size: int) -> tuple[list, list, list, int]:
    positions, bases, lasts = [], [], []
    end = 0
    for pos, h in batch_ops.walk_headers(buf, 0, size):
        positions.append(pos)
        bases.append(h[H_BASE_OFFSET])
        lasts.append(h[H_BASE_OFFSET] + h[H_LAST_DELTA])
        end = pos + h[H_LENGTH] + 12
    return positions, bases, lasts, end


class _Input:
    """An input segment, read where the check samples it: batch positions come from its offset
    index (one entry per index.interval.bytes, each the start of a batch; a segment without one is
    walked), so a check does not touch every page of a large segment."""

    def __init__(self, seg):
        self.path = seg.log_path
        self.base = seg.base_offset
        with open(seg.log_path, "rb") as f:
            self.size = min(seg.size, os.fstat(f.fileno()).st_size)
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size > 0 else b""
        self.index_lasts, self.index_positions = _read_index(seg.log_path[:-4] + ".index", self.base, self.size)
        if self.index_positions:
            self.positions = [0] + list(self.index_positions)
        else:
            self.positions = _py_batch_bounds(self.mm, self.size)[0]

    def batch_at(self, pos: int):
        h = HEADER.unpack_from(self.mm, pos)
        n = h[H_LENGTH] + 12
        if n < HEADER_SIZE or pos + n > self.size:
            raise batch_ops.CorruptBatchError(f"no whole batch at position {pos} of {self.path}")
        return self.mm[pos:pos + n], h

    def find(self, offset: int):
        """(raw, header) of the batch holding `offset`, or None."""
        i = bisect.bisect_left(self.index_lasts, offset) - 1   # the last entry ending before it
        pos = self.index_positions[i] if i >= 0 else 0
        while self.size - pos >= HEADER_SIZE:
            raw, h = self.batch_at(pos)
            if h[H_BASE_OFFSET] + h[H_LAST_DELTA] >= offset:
                return (raw, h) if h[H_BASE_OFFSET] <= offset else None
            pos += len(raw)
        return None

    def close(self) -> None:
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()


def _read_index(path: str, base: int, size: int) -> tuple[list, list]:
    """(absolute last offsets, positions) of the valid entries of an offset index (storage's format:
    8-byte entries, relative offset int32 then position int32; a zero tail ends it)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return [], []
    cols = array.array("i", raw[:len(raw) - len(raw) % 8])
    if sys.byteorder == "little":
        cols.byteswap()
    rels, positions = cols[0::2].tolist(), cols[1::2].tolist()
    while rels and rels[-1] == 0 and positions[-1] == 0:     # a preallocated zero tail
        rels.pop()
        positions.pop()
    if not _strictly_increasing(rels) or not _strictly_increasing(positions) or \
            (positions and (positions[0] <= 0 or positions[-1] >= size)):
        n = 0        # a damaged index: keep its valid prefix (entries checked one by one)
        while (n < len(rels) and 0 < positions[n] < size
               and (n == 0 or (rels[n] > rels[n - 1] and positions[n] > positions[n - 1]))):
            n += 1
        rels, positions = rels[:n], positions[:n]
    return [base + r for r in rels], positions


def _strictly_increasing(xs: list) -> bool:
    return xs == sorted(set(xs))


def parse_records(raw, h) -> list:
    """[(offset, timestamp, key or None, tombstone, tail)] of a data batch, tail being the record's
    bytes from its offsetDelta on (key, value and headers: what a clean copies as is, also when it
    stamps a delete horizon and rewrites the timestamp delta). One-byte varints (nearly all of the
    lengths and deltas of small records) are read inline."""
    data = batch_ops.records_of(raw, h)
    p = HEADER_SIZE if data is raw else 0
    varint = batch_ops._varint_slow
    base, base_ts = h[H_BASE_OFFSET], h[H_BASE_TS]
    log_append = bool(h[H_ATTRS] & TIMESTAMP_TYPE_MASK)
    max_ts = h[H_MAX_TS]
    out = []
    append = out.append
    for _ in range(h[H_COUNT]):
        b = data[p]
        if b < 0x80:
            ln, p = b >> 1, p + 1          # a record length is never negative
        elif data[p + 1] < 0x80:
            ln, p = ((b & 0x7F) | (data[p + 1] << 7)) >> 1, p + 2
        else:
            ln, p = varint(data, p)
        end = p + ln
        b = data[p + 1]
        if b < 0x80:
            td, q = (b >> 1) ^ -(b & 1), p + 2
        else:
            td, q = varint(data, p + 1)
        tail_at = q
        b = data[q]
        if b < 0x80:
            od, q = (b >> 1) ^ -(b & 1), q + 1
        elif data[q + 1] < 0x80:
            od = (b & 0x7F) | (data[q + 1] << 7)
            od, q = (od >> 1) ^ -(od & 1), q + 2
        else:
            od, q = varint(data, q)
        b = data[q]
        if b < 0x80:
            kl, q = (b >> 1) ^ -(b & 1), q + 1
        else:
            kl, q = varint(data, q)
        if kl >= 0:
            key = bytes(data[q:q + kl])
            q += kl
        else:
            key = None
        append((base + od, max_ts if log_append else base_ts + td, key, data[q] & 1 == 1,
                bytes(data[tail_at:end])))
        p = end
    return out


def _seed(job) -> int:
    return zlib.crc32(f"{job.tp[0]}-{job.tp[1]}:{job.first_dirty_offset}:{job.now_ms}".encode())


def check_clean(job, result, offset_map, ratio: float, *, is_aborted=lambda h: False,
                check_done=lambda: None, seed: int | None = None, monotonic=_time.monotonic) -> CheckReport:
    """Check the output `result` of clean `job` (see the module docstring); never raises for a
    violation, returns them. `is_aborted(header)` names aborted transactional data."""
    t0 = monotonic()
    rep = CheckReport(ratio, _seed(job) if seed is None else seed)
    probes = offset_map.probes
    inputs, outputs = [], []
    try:
        replaced = _check_range(job, result, rep)
        outputs = [_File(g.log_path, g.size) for g in result.groups]
        out = _check_output_order(result, outputs, rep)
        inputs = [_Input(s) for s in replaced]
        _check_records(job, offset_map, inputs, out, ratio, rep, is_aborted, check_done)
    finally:
        for f in inputs + outputs:
            f.close()
        offset_map.probes = probes
    rep.seconds = monotonic() - t0
    return rep


def _check_range(job, result, rep) -> list:
    by_base = {s.base_offset: s for s in job.segments}
    replaced = []
    prev = -1
    for g in result.groups:
        if not g.replaces or g.replaces[0] != g.base_offset:
            rep.violations.append(Violation("range", g.base_offset, f"group {g.base_offset} replaces {g.replaces}"))
        for base in g.replaces:
            seg = by_base.get(base)
            if seg is None or base >= result.end_offset or base <= prev:
                rep.violations.append(Violation("range", base, f"segment {base} is not a cleanable segment below "
                                                f"end offset {result.end_offset} in order"))
                continue
            prev = base
            replaced.append(seg)
    return replaced


class _Output:
    """Every output batch in offset order: (file, batch index) by base offset, records on demand."""

    def __init__(self):
        self.bases, self.lasts, self.where = [], [], []
        self._cache: dict = {}

    def find(self, offset: int):
        i = bisect.bisect_right(self.bases, offset) - 1
        if i < 0 or offset > self.lasts[i]:
            return None
        recs = self._cache.get(i)
        if recs is None:
            f, j = self.where[i]
            raw, h = f.batch(j)
            recs = {} if h[H_ATTRS] & CONTROL_MASK else {r[0]: r for r in parse_records(raw, h)}
            self._cache[i] = recs
        return recs.get(offset)


def _check_output_order(result, files, rep) -> _Output:
    out = _Output()
    prev = -1
    for g, f in zip(result.groups, files):
        if f.end != f.size:
            rep.violations.append(Violation("order", None, f"{f.path}: no whole batch at position {f.end}"))
        for j, (base, last) in enumerate(zip(f.bases, f.lasts)):
            if base <= prev or last < base or base < g.base_offset:
                rep.violations.append(Violation("order", base, f"batch [{base}, {last}] of {f.path} after offset {prev}"))
            prev = max(prev, last)
            out.bases.append(base)
            out.lasts.append(last)
            out.where.append((f, j))
    rep.output_batches = len(out.bases)
    return out


def _check_records(job, omap, inputs, out: _Output, ratio: float, rep, is_aborted, check_done) -> None:
    index = [(f, pos) for f in inputs for pos in f.positions]
    rep.input_batches = len(index)
    if ratio <= 0 or not index:
        return
    rng = random.Random(rep.seed)
    k = min(len(index), max(1, int(round(ratio * len(index)))))
    latest = omap.latest_offset
    for n, i in enumerate(sorted(rng.sample(range(len(index)), k))):
        if n % 16 == 15:
            check_done()
        f, pos = index[i]
        raw, h = f.batch_at(pos)
        if h[H_ATTRS] & CONTROL_MASK or is_aborted(h):
            continue
        rep.sampled_batches += 1
        last = h[H_BASE_OFFSET] + h[H_LAST_DELTA]
        removable = rules.tombstones_removable(bool(h[H_ATTRS] & DELETE_HORIZON_MASK), h[H_BASE_TS], last,
                                               job.now_ms, job.group_horizon_offset)
        recs = parse_records(raw, h)
        found = omap.get_many([hashlib.md5(r[2]).digest() for r in recs if r[2] is not None])
        fi = 0
        budget = HONESTY_PER_BATCH
        prev = -1
        for r in recs:
            off, _, key, tomb, _ = r
            m = -1
            if key is not None:
                m = found[fi]
                fi += 1
            rep.records_checked += 1
            if off <= prev:
                rep.violations.append(Violation("order", off, f"input record {off} after {prev} in {f.path}"))
            prev = off
            fate = rules.record_fate(off, latest, key is not None, m, tomb, removable)
            if fate == rules.KEEP:
                _expect_kept(r, out.find(off), latest, rep)
            elif fate == rules.DROP_SUPERSEDED and budget:
                budget -= 1
                _expect_map_honest(job, key, m, out, inputs, rep)


def _expect_kept(r, got, latest: int, rep) -> None:
    off, ts, key, tomb, tail = r
    if got is None:
        kind = "tombstone" if tomb else "changed" if off > latest else "latest"
        what = "tombstone" if tomb else "record past the mapped range" if off > latest else "latest record"
        rep.violations.append(Violation(kind, off, f"{what} of key {_show(key)} at {off} is missing from the output"))
    elif got[1:] != r[1:]:
        rep.violations.append(Violation("changed", off, f"record at {off} (key {_show(key)}) was rewritten: "
                                        f"timestamp {ts} -> {got[1]}, "
                                        f"{'same' if got[4] == tail else 'different'} key/value/headers"))


def _expect_map_honest(job, key, m: int, out: _Output, inputs, rep) -> None:
    got = out.find(m)
    if got is not None and got[2] == key:
        return
    # not in the output: only right if the input holds this key's tombstone there, removable now
    i = bisect.bisect_right([f.base for f in inputs], m) - 1
    found = inputs[i].find(m) if i >= 0 else None
    if found is not None and not found[1][H_ATTRS] & CONTROL_MASK:
        raw, h = found
        last = h[H_BASE_OFFSET] + h[H_LAST_DELTA]
        removable = rules.tombstones_removable(bool(h[H_ATTRS] & DELETE_HORIZON_MASK), h[H_BASE_TS], last,
                                               job.now_ms, job.group_horizon_offset)
        for off, _, k, tomb, _ in parse_records(raw, h):
            if off == m and k == key and tomb and removable:
                return
    rep.violations.append(Violation("latest", m, f"the offset map names offset {m} as the latest of key "
                                    f"{_show(key)}, but the output holds no record of that key there"))


def _show(key) -> str:
    if key is None:
        return "(none)"
    text = key[:40].decode("utf-8", "replace")
    return repr(text) + ("..." if len(key) > 40 else "")
