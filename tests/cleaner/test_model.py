"""Model-based property test: random keyed workloads with tombstones, random segment sizes and map
capacities (tiny ones force many partial passes), a clock that jumps past delete.retention.ms; the
cleaned log must agree with a dict model. A consumer group reads now and then and commits what it
read; the group-safe horizon (kompakt.tombstone.retention.groups) is its committed offset, so the
group, coming back after any number of days, still sees the final state, deletes included."""
import shutil
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kompakt.cleaner import LogCleaner
from kompakt.cleaner.cleaner import Cleaner
from kompakt.cleaner.manager import log_dir_of
from kompakt.cleaner.offset_map import SkimpyOffsetMap

from .conftest import Clock, Logs, append, read_log

DAY = 86_400_000

op = st.one_of(
    st.tuples(st.just("batch"), st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.integers(0, 99)),
                                         min_size=1, max_size=6)),
    st.tuples(st.just("clean"), st.integers(2, 40)),
    st.tuples(st.just("roll"), st.just(0)),
    st.tuples(st.just("consume"), st.just(0)),
    st.tuples(st.just("tick"), st.just(0)),
)


def clean_once(cleaner, lg, slots):
    tp = lg.tp
    ltc = cleaner.manager.grab_for_clean_now(tp)
    if ltc is None:
        return None
    try:
        job = cleaner.build_job(ltc)
        result = Cleaner(0, SkimpyOffsetMap(24 * slots, 0.9)).clean(job)
        # the live guarantee check reads back every batch of every clean: never a false alarm
        assert result.guarantee.ok, result.guarantee.violations
        cleaner.swap_in(lg, result)
    except BaseException:
        cleaner.manager.done_cleaning(tp, None, None)
        raise
    cleaner.manager.done_cleaning(tp, log_dir_of(lg), result.end_offset)
    return result


def apply(view, recs):
    for _, k, v in recs:
        if v is None:
            view.pop(k, None)
        else:
            view[k] = v


# the delete the group has not read: stamped by one clean, past its horizon at the next
UNREAD_DELETE = [("batch", [(1, False, 0)]), ("batch", [(1, True, 0)]), ("roll", 0), ("clean", 10),
                 ("tick", 0), ("batch", [(2, False, 0)]), ("roll", 0), ("clean", 10)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=3, max_size=40), seg_bytes=st.integers(150, 2000))
@example(ops=UNREAD_DELETE, seg_bytes=2000)
@example(ops=[("consume", 0)] + UNREAD_DELETE + [("consume", 0), ("tick", 0), ("batch", [(3, False, 0)]),
              ("roll", 0), ("clean", 10)], seg_bytes=2000)
def test_cleaned_log_matches_model(ops, seg_bytes):
    tmp = tempfile.mkdtemp()
    clock = Clock()
    logs = Logs(tmp, clock)
    try:
        lg = logs.create("m", internal_segment_bytes=seg_bytes, min_cleanable_dirty_ratio="0.01")
        cleaner = LogCleaner(logs.config, logs.manager, time=clock)
        logs.manager.cleaner = cleaner
        originals = {}                # offset -> (key, value)
        latest = {}                   # key -> offset of its latest record
        consumer_view, consumer_pos = {}, 0
        # the group commits where its consumer got to; the cleaner learns only this number
        cleaner.group_horizon = lambda tp, cfg: consumer_pos
        cleaner.guarantee_check_ratio = 1.0
        for kind, arg in ops:
            if kind == "batch":
                recs = [(b"k%d" % k, None if tomb else b"v%d-%d" % (k, v)) for k, tomb, v in arg]
                base = append(lg, recs)
                for i, (k, v) in enumerate(recs):
                    originals[base + i] = (k, v)
                    latest[k] = base + i
            elif kind == "roll":
                if lg.active_segment.size:
                    lg.roll()
            elif kind == "consume":
                got = [r for r in read_log(lg) if r[0] >= consumer_pos]
                apply(consumer_view, got)
                consumer_pos = lg.log_end_offset
            elif kind == "tick":
                clock.ms += DAY + 1       # every stamped delete horizon passes
            else:
                clean_once(cleaner, lg, arg)
            # invariants after every step
            got = read_log(lg)
            for off, k, v in got:
                assert originals[off] == (k, v), f"record at {off} changed"
            for k, off in latest.items():
                if originals[off][1] is not None:
                    assert (off, k, originals[off][1]) in got, f"latest of {k} at {off} lost"
                elif off >= consumer_pos:
                    # the group has not read this delete yet: whatever the clock, it stays
                    assert (off, k, None) in got, f"tombstone of {k} at {off} removed before the group read it"
        # the group, back after any number of ticks, continues from its commit: the final state
        apply(consumer_view, [r for r in read_log(lg) if r[0] >= consumer_pos])
        model = {k: originals[o][1] for k, o in latest.items() if originals[o][1] is not None}
        assert consumer_view == model
        consumer_pos = lg.log_end_offset
        # a consumer from zero after cleaning too
        fresh = {}
        apply(fresh, read_log(lg))
        assert fresh == model
        # clean to the end with a roomy map: below the cleaner point every key appears once
        if lg.active_segment.size:
            lg.roll()
        for _ in range(50):
            r = clean_once(cleaner, lg, 1000)
            if r is None or r.end_offset >= lg.active_segment.base_offset:
                break
        point = cleaner.manager.all_cleaner_checkpoints().get(("m", 0), 0)
        keys = [k for o, k, _ in read_log(lg) if o < point]
        assert len(keys) == len(set(keys))
        # after delete.retention.ms and two cleans the tombstones are gone from the cleaned range
        clock.ms += DAY + 1
        append(lg, [(b"tick", b"1")])
        lg.roll()
        for _ in range(2):
            clean_once(cleaner, lg, 1000)
        point = cleaner.manager.all_cleaner_checkpoints().get(("m", 0), 0)
        assert all(v is not None for o, k, v in read_log(lg) if o < point)
        fresh = {}
        apply(fresh, read_log(lg))
        model[b"tick"] = b"1"
        assert fresh == model
    finally:
        logs.close()
        shutil.rmtree(tmp, ignore_errors=True)
