"""kompakt.broker.admin.record_count over a real log on disk: each segment is counted once, a poll
reads only what changed, and the count stays exact through appends, rolls, a truncation that
rewrites the tail, and a log start offset moved into a batch."""
from __future__ import annotations

from kompakt.broker.admin.record_count import count_records
from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.storage import Log


def _batch(n: int, tag: bytes = b"v") -> bytes:
    return R.build_batch([(b"k%d" % i, tag + b"%d" % i) for i in range(n)])


def test_a_second_count_reads_nothing_and_a_later_one_only_the_new_batches(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_overrides({}))
    for n in (3, 4, 5):
        lg.append_as_leader(_batch(n))
    first = count_records(lg)
    assert (first["records"], first["batches"], first["headers_read"]) == (12, 3, 3)
    again = count_records(lg)
    assert (again["records"], again["batches"], again["headers_read"]) == (12, 3, 0)
    lg.roll()
    lg.append_as_leader(_batch(2))
    lg.append_as_leader(_batch(1))
    later = count_records(lg)
    assert (later["records"], later["batches"], later["headers_read"]) == (15, 5, 2)
    lg.close()


def test_a_rewritten_tail_and_a_moved_log_start_are_counted_again(tmp_path):
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_overrides({}))
    lg.append_as_leader(_batch(4))
    lg.append_as_leader(_batch(4))
    assert count_records(lg)["records"] == 8
    # truncated back to offset 4 and written again with another batch: the file is longer than what
    # was counted, but the last batch counted is not there any more
    lg.truncate_to(4)
    lg.append_as_leader(_batch(6, b"w"))
    recount = count_records(lg)
    assert (recount["records"], recount["batches"]) == (10, 2)
    # the log start moves into the second batch (DeleteRecords): only the records above it count
    lg.maybe_increment_log_start_offset(6)
    cut = count_records(lg)
    assert (cut["records"], cut["batches"]) == (4, 1)
    assert count_records(lg)["headers_read"] == 0
    lg.close()
