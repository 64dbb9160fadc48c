"""The record browser's pages (kompakt/console/records.py) over a real log on disk: paging through
a batch cut by the limit loses no record, and a page of big records stays bounded in bytes."""
from __future__ import annotations

from kompakt.config.topic_config import LogConfig
from kompakt.console import records as browser
from kompakt.protocol import records as R
from kompakt.storage import Log


def _log(tmp_path) -> Log:
    return Log.open(str(tmp_path / "orders-0"), LogConfig.from_overrides({"max.message.bytes": str(64 << 20)}))


def test_a_batch_cut_by_the_limit_continues_on_the_next_page(tmp_path):
    lg = _log(tmp_path)
    lg.append_as_leader(R.build_batch([(b"k%d" % i, b"v%d" % i) for i in range(10)]))
    lg.append_as_leader(R.build_batch([(b"k10", b"v10")]))
    seen, offset = [], None
    for _ in range(6):
        page = browser.browse(lg, offset=offset, limit=3)
        seen += [r["offset"] for r in page["records"]]
        offset = page["next_offset"]
        if offset >= lg.high_watermark:
            break
    assert seen == list(range(11))
    lg.close()


def test_a_page_of_big_records_is_bounded_in_bytes(tmp_path):
    lg = _log(tmp_path)
    size = 3 << 20
    for _ in range(6):
        lg.append_as_leader(R.build_batch([(None, b"x" * size)]))
    page = browser.browse(lg, limit=browser.MAX_LIMIT)
    shown = sum(len(r["value"]) for r in page["records"])
    assert 1 <= len(page["records"]) < 6
    assert shown <= browser.MAX_BYTES + size
    # the next page starts after the last one shown: nothing skipped
    assert page["next_offset"] == page["records"][-1]["offset"] + 1
    # one record bigger than a page still shows, cut to MAX_FIELD with what was left out said
    lg.append_as_leader(R.build_batch([(None, b"y" * (3 * browser.MAX_BYTES))]))
    last = browser.browse(lg, offset=6, limit=1)["records"][0]
    assert len(last["value"]) < browser.MAX_FIELD + 100
    assert last["value"].startswith("yyy") and f"{3 * browser.MAX_BYTES - browser.MAX_FIELD:,} more bytes" in last["value"]
    lg.close()
