"""The pipeline's charts are PNGs whose bars and lines reflect the figures (drawn by matplotlib)."""
from __future__ import annotations

import io

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from kompakt.pipeline.chart import (CURRENT_COLOR, DUP_COLOR, MAX_CHART_PARTITIONS, PROPOSED_COLOR, SAVE_COLOR,
                                    audit_chart, whatif_chart)


def _decode(png: bytes) -> np.ndarray:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return imread(io.BytesIO(png), format="png")   # rows x columns x RGBA, floats 0..1


def _count(image: np.ndarray, color: str) -> int:
    """Pixels of exactly this colour (bar and line interiors; anti-aliased edges differ)."""
    want = np.round(np.array(to_rgb(color)) * 255)
    got = np.round(image[:, :, :3] * 255)
    return int(np.all(got == want, axis=2).sum())


def test_png_bars_grow_with_duplicates_and_savings():
    small = [dict(topic="a", partition=0, duplicate_ratio=0.1, bytes=100, projected_bytes=90)]
    big = [dict(topic="a", partition=0, duplicate_ratio=0.9, bytes=100, projected_bytes=10)]
    r1, r2 = _decode(audit_chart(small)), _decode(audit_chart(big))
    assert _count(r2, DUP_COLOR) > 3 * _count(r1, DUP_COLOR) > 0
    assert _count(r2, SAVE_COLOR) > 3 * _count(r1, SAVE_COLOR) > 0
    many = _decode(audit_chart(small * 20))
    assert many.shape[1] > r1.shape[1]   # one pair of bars per partition: a wider chart


def test_whatif_chart_draws_both_settings_per_partition():
    def side(values):
        return {"timeline": [{"disk_bytes": v, "oldest_uncleaned_age_ms": 1000 * v} for v in values]}

    rep = {"topic": "t", "partition": 0, "current": side(range(0, 200, 2)), "proposed": side([5] * 100)}
    one = _decode(whatif_chart([rep]))
    assert _count(one, CURRENT_COLOR) > 0 and _count(one, PROPOSED_COLOR) > 0
    h, h2 = one.shape[0], _decode(whatif_chart([rep] * 3)).shape[0]
    h_max = _decode(whatif_chart([rep] * (MAX_CHART_PARTITIONS + 5))).shape[0]
    assert h < h2 < h_max == _decode(whatif_chart([rep] * MAX_CHART_PARTITIONS)).shape[0]
    # drawn from the figures: when both settings give the same series the proposed line (drawn
    # second) covers the current one, and little grey is left (the legend's sample)
    same = _decode(whatif_chart([{**rep, "proposed": rep["current"]}]))
    assert _count(one, CURRENT_COLOR) > 3 * _count(same, CURRENT_COLOR)
