"""The audit chart is a well-formed PNG whose bars reflect the figures."""
from __future__ import annotations

import struct
import zlib

from kompakt.pipeline.chart import DUP_COLOR, SAVE_COLOR, audit_chart


def _decode(png: bytes):
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + data)
        chunks[kind] = data
        pos += 12 + n
    w, h = struct.unpack(">II", chunks[b"IHDR"][:8])
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == h * (1 + 3 * w)
    return w, h, raw


def _count(raw, w, color):
    rows = [raw[y * (1 + 3 * w) + 1:(y + 1) * (1 + 3 * w)] for y in range(len(raw) // (1 + 3 * w))]
    return sum(bytes(row).count(bytes(color)) for row in rows)


def test_png_bars_grow_with_duplicates_and_savings():
    small = [dict(topic="a", partition=0, duplicate_ratio=0.1, bytes=100, projected_bytes=90)]
    big = [dict(topic="a", partition=0, duplicate_ratio=0.9, bytes=100, projected_bytes=10)]
    w1, _, r1 = _decode(audit_chart(small))
    w2, _, r2 = _decode(audit_chart(big))
    assert _count(r2, w2, DUP_COLOR) > 3 * _count(r1, w1, DUP_COLOR) > 0
    assert _count(r2, w2, SAVE_COLOR) > 3 * _count(r1, w1, SAVE_COLOR) > 0
    w3, _, _ = _decode(audit_chart(small * 20))
    assert w3 > w1


def test_whatif_chart_draws_both_settings_per_partition():
    from kompakt.pipeline.chart import CURRENT_COLOR, MAX_CHART_PARTITIONS, PROPOSED_COLOR, whatif_chart

    def side(values):
        return {"timeline": [{"disk_bytes": v, "oldest_uncleaned_age_ms": 1000 * v} for v in values]}

    rep = {"topic": "t", "partition": 0, "current": side(range(0, 200, 2)), "proposed": side([5] * 100)}
    w, h, raw = _decode(whatif_chart([rep]))
    assert _count(raw, w, CURRENT_COLOR) > 0 and _count(raw, w, PROPOSED_COLOR) > 0
    _, h2, _ = _decode(whatif_chart([rep] * 3))
    _, h_max, _ = _decode(whatif_chart([rep] * (MAX_CHART_PARTITIONS + 5)))
    assert h < h2 < h_max == _decode(whatif_chart([rep] * MAX_CHART_PARTITIONS))[1]
