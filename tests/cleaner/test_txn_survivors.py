"""The cleaner over a real partition log with interleaved committed and aborted transactions keeps
exactly the survivors seed 001's rules name (Kafka 4's Cleaner + CleanedTransactionMetadata),
batch by batch and record by record, over three passes:

  * never past the first unstable offset (an open transaction is left in the log): the first
    uncleanable offset is the base offset of the segment holding the LSO (Kafka's LogToClean), so
    only whole segments below it are cleaned and every later segment is byte-identical;
  * records of aborted transactions are dropped, whatever their keys;
  * other keyed records: only the latest offset of each key survives (tombstones until their
    delete horizon, stamped on the first clean, has passed);
  * a marker stays while any batch of its transaction was read in the pass; once none was, it is
    stamped with a delete horizon, and goes once the horizon has passed;
  * the last data batch of each producer (or, for a producer with none, its last marker at the
    current epoch) stays even when emptied; so does the batch ending right before the first
    uncleanable offset;
  * a cleaned segment's `.txnindex` holds the entries of the ABORT markers it keeps whose
    transaction still had batches in the pass.

The expected survivors come from the small declarative model below, not from the cleaner's code."""
from __future__ import annotations

import random

import pytest

from kompakt.cleaner import batch_ops, native
from kompakt.cleaner import cleaner as C
from kompakt.cleaner.log_cleaner import LogCleaner, _active_producers
from kompakt.cleaner.manager import log_to_clean
from kompakt.cleaner.offset_map import SkimpyOffsetMap
from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol import txn_records as T
from kompakt.storage import Log

NOW = 1_700_000_000_000
DAY = 86_400_000


class Batch:
    """The model of one batch: offsets, producer, kind, and which records it still holds."""

    def __init__(self, base, last, pid, epoch, kind, records, txn=None):
        self.base, self.last, self.pid, self.epoch = base, last, pid, epoch
        self.kind = kind              # "plain", "txn", "commit", "abort"
        self.records = records        # [(offset, key, value)]
        self.txn = txn                # (pid, marker offset) of the transaction (txn and markers)
        self.horizon = None           # delete horizon, once stamped

    @property
    def control(self):
        return self.kind in ("commit", "abort")


def build(tmp_path, seed: int):
    """A compacted log with 4 transactional producers interleaved with plain writes; the last
    transaction stays open. Returns (log, model batches)."""
    rnd = random.Random(seed)
    lg = Log.open(str(tmp_path / f"t-{seed}"), LogConfig.from_overrides(
        {"cleanup.policy": "compact", "internal.segment.bytes": "700"}))
    model: list[Batch] = []
    open_txn: dict[int, list[Batch]] = {}
    seqs = {pid: 0 for pid in range(1, 5)}
    keys = [b"k%d" % i for i in range(12)]

    def data(pid, n):
        recs = [(rnd.choice(keys), None if rnd.random() < 0.1 else b"v%d" % rnd.randrange(1000)) for _ in range(n)]
        if pid:
            batch = R.build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seqs[pid],
                                  is_transactional=True, base_timestamp=NOW)
            info = lg.append_as_leader(batch, verification_guard=lg.start_verification(pid, 0))
            seqs[pid] += n
        else:
            info = lg.append_as_leader(R.build_batch(recs, base_timestamp=NOW))
        b = Batch(info.first_offset, info.last_offset, pid or -1, 0, "txn" if pid else "plain",
                  [(info.first_offset + i, k, v) for i, (k, v) in enumerate(recs)])
        model.append(b)
        return b

    def end(pid, commit):
        info = lg.append_as_leader(T.marker_batch(pid, 0, T.COMMIT if commit else T.ABORT, 0, NOW),
                                   origin="coordinator")
        m = Batch(info.first_offset, info.first_offset, pid, 0, "commit" if commit else "abort", [])
        m.txn = (pid, info.first_offset)
        for b in open_txn.pop(pid):
            b.txn = m.txn
        model.append(m)

    for _ in range(60):
        pid = rnd.randrange(0, 5)
        if pid == 0:
            data(0, rnd.randint(1, 3))
        elif pid in open_txn and rnd.random() < 0.35:
            end(pid, rnd.random() < 0.5)
        else:
            open_txn.setdefault(pid, []).append(data(pid, rnd.randint(1, 3)))
    if not open_txn:
        open_txn[1] = [data(1, 2)]
    for pid in sorted(open_txn)[1:]:
        end(pid, rnd.random() < 0.5)
    for _ in range(4):
        data(0, 2)                  # after the open transaction: beyond the LSO
    lg.roll()
    return lg, model


def expect(model, upper, cleaned_end, now, drm=DAY):
    """One pass of seed 001's rules over the model (mutates it); returns the surviving batches.
    The pass reads the batches below `cleaned_end` (the segments below the first uncleanable
    offset `upper`); its offset map holds the keys below `upper`."""
    aborted = {b.txn for b in model if b.kind == "abort"}
    latest = {}
    for b in model:
        if b.last < upper and b.kind in ("plain", "txn") and b.txn not in aborted:
            for off, k, _ in b.records:
                latest[k] = off
    last_of = {}
    for b in model:                 # producer state at clean time: last data batch, else last marker
        if b.pid >= 0 and not b.control:
            last_of[b.pid] = ("data", b.last)
        elif b.pid >= 0 and last_of.get(b.pid, ("marker",))[0] == "marker":
            last_of[b.pid] = ("marker", b.epoch)
    read = {b.txn for b in model if b.base < cleaned_end and b.kind == "txn" and b.txn}
    out = []
    for b in model:
        if b.base >= cleaned_end:
            out.append(b)
            continue
        lp = last_of.get(b.pid)
        retain_empty = b.last + 1 == upper or (lp is not None and (
            (lp[0] == "data" and not b.control and b.last == lp[1]) or
            (lp[0] == "marker" and b.control and b.epoch == lp[1])))
        if b.control:
            may_go = b.txn not in read
            if may_go and b.horizon is not None and b.horizon <= now:
                if retain_empty:
                    b.records = None          # emptied
                    out.append(b)
                continue
            if may_go and b.horizon is None:
                b.horizon = now + drm
            out.append(b)
            continue
        if b.kind == "txn" and b.txn in aborted:
            b.records = []
        else:
            expired = b.horizon is not None and b.horizon <= now
            b.records = [(o, k, v) for o, k, v in b.records
                         if o >= upper or (latest.get(k) == o and not (v is None and expired))]
            if b.horizon is None and any(v is None for _, _, v in b.records):
                b.horizon = now + drm
        if b.records or retain_empty:
            out.append(b)
    model[:] = out
    return out, read


def clean(lg, now):
    ltc, _ = log_to_clean(lg.tp, lg, None, now)
    first_dirty, upper = ltc.first_dirty_offset, ltc.first_uncleanable_offset
    segs = list(lg.segments)
    cleaned_end = min(s.base_offset for s in segs if s.base_offset >= upper or s is segs[-1])
    infos = [C.SegmentInfo(s.base_offset, s.log_path, s.size, 0, 0, s.last_modified / 1000.0) for s in segs]
    cleanable = [i for i in infos[:-1] if i.base_offset < upper]
    job = C.CleanJob(lg.tp, lg.dir, cleanable, infos[len(cleanable):], first_dirty, upper, lg.log_start_offset,
                     now, DAY, segment_bytes=700, active_producers=_active_producers(lg))
    result = C.Cleaner(0, SkimpyOffsetMap(24 * 10_000)).clean(job)
    LogCleaner.swap_in(None, lg, result)
    return upper, cleaned_end


def actual(lg):
    out = []
    for seg in lg.segments:
        data = seg.read_bytes(0, seg.size)
        for pos, h in R.iter_batches(data):
            recs = [] if h.is_control else [(h.base_offset + r.offset_delta, r.key, r.value)
                                            for r in R.decode_records(data, pos, h)]
            out.append((h.base_offset, h.is_control, h.records_count if h.is_control else recs,
                        h.has_delete_horizon))
    return out


@pytest.mark.parametrize("impl", ["native", "python"])
def test_survivors_match_seed_001_rules_over_three_passes(tmp_path, monkeypatch, impl):
    if impl == "native" and native.LIB is None:
        pytest.skip("the compiled seam is not available")
    monkeypatch.setattr(batch_ops, "_LIB", native.LIB if impl == "native" else None)
    for seed in (1, 2, 3, 4):
        lg, model = build(tmp_path, seed)
        lso = lg.last_stable_offset
        assert lso < lg.log_end_offset, "the scenario leaves a transaction open"
        before = actual(lg)
        for now in (NOW, NOW + 1, NOW + 2 + DAY):
            upper, cleaned_end = clean(lg, now)
            # the segment holding the first unstable offset bounds it
            holder = max(s.base_offset for s in lg.segments[:-1] if s.base_offset <= lso)
            assert upper == holder and upper <= lso
            kept, read = expect(model, upper, cleaned_end, now)
            want = [(b.base, b.control, (0 if b.records is None else 1) if b.control else b.records,
                     b.horizon is not None) for b in kept]
            got = actual(lg)
            assert got == want, f"seed {seed}, pass at {now}"
            # .txnindex: a cleaned ABORT marker keeps its entry while its transaction had batches in
            # the pass; untouched segments keep theirs
            index = {(e.producer_id, e.last_offset) for seg in lg.segments for e in seg.txn_index.entries()}
            assert index == {b.txn for b in kept if b.kind == "abort" and (b.base >= cleaned_end or b.txn in read)}
            # every segment from the first uncleanable one on is untouched
            assert [b for b in got if b[0] >= cleaned_end] == [b for b in before if b[0] >= cleaned_end]
        # what read_committed readers see is what a reader of the uncleaned log would keep
        assert lg.last_stable_offset == lso
        lg.close()
