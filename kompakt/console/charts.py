"""The console's charts, as PNG bytes drawn by matplotlib (kompakt.pipeline.chart's Agg figures).

passes_chart: the timeline of cleaning passes (kompakt.cleaner.history): per pass, bytes read
and written (the gap is what the pass reclaimed), and below it the pass's duration and the
records it removed. dirty_chart: each compacted partition's dirty ratio over time, as sampled by
the cleaner's selection rounds, with its min.cleanable.dirty.ratio as a dashed line when given.
The what-if chart is the pipeline's own (`kompakt.pipeline.chart.whatif_chart`).

Invariant: matplotlib is imported only through kompakt.pipeline.chart's functions, when a chart is
drawn (the broker's start-up and idle memory do not pay for it); charts are drawn in worker
threads by the caller, one at a time (`serialized`: matplotlib's caches are shared).
"""
from __future__ import annotations

import datetime as _dt
from typing import Any

from kompakt.pipeline.chart import CURRENT_COLOR, DUP_COLOR, SAVE_COLOR, figure, render, serialized

READ_COLOR, WRITTEN_COLOR = CURRENT_COLOR, SAVE_COLOR
MAX_LINES = 12


def _when(ms: int) -> _dt.datetime:
    # UTC, as every time the console shows (render.ms_time), whatever the server's time zone
    return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777777")
    ax.set_xticks([])
    ax.set_yticks([])


@serialized
def passes_chart(passes: list[dict]) -> bytes:
    """PNG: bytes read/written per pass (top), duration and records removed per pass (bottom)."""
    fig = figure(8.0, 4.6)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    if not passes:
        _empty(top, "no cleaning pass since the broker started")
        bottom.set_visible(False)
        return render(fig)
    passes = sorted(passes, key=lambda p: p["time_ms"])
    xs = list(range(len(passes)))
    width = 0.4
    unit, name = next(((u, n) for u, n in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")) if
                       max(p["bytes_read"] for p in passes) >= u), (1, "B"))
    top.bar([x - width / 2 for x in xs], [p["bytes_read"] / unit for p in passes], width, color=READ_COLOR,
            label="bytes read")
    top.bar([x + width / 2 for x in xs], [p["bytes_written"] / unit for p in passes], width, color=WRITTEN_COLOR,
            label="bytes written")
    top.set_xlim(-0.6, max(len(xs), 8) - 0.4)   # a bar keeps its width when there are few passes
    top.set_ylabel(name)
    top.legend(fontsize=8, frameon=False, loc="upper left")
    top.set_title("Cleaning passes (oldest left)", fontsize=10)
    top.grid(axis="y", color="#eeeeee")
    bottom.bar(xs, [p["records_removed"] for p in passes], 0.6, color=DUP_COLOR, label="records removed")
    bottom.set_ylabel("records removed", fontsize=8)
    twin = bottom.twinx()
    twin.plot(xs, [p["duration_s"] * 1000 for p in passes], "o-", color="#333333", markersize=3, label="duration")
    twin.set_ylabel("duration (ms)", fontsize=8)
    twin.set_ylim(bottom=0)
    labels = [f"{p['topic']}-{p['partition']}\n{_when(p['time_ms']):%H:%M:%S} UTC" for p in passes]
    step = max(1, len(xs) // 10)
    bottom.set_xticks(xs[::step], labels[::step], fontsize=7)
    for ax in (top, bottom, twin):
        ax.tick_params(labelsize=7)
    return render(fig)


@serialized
def dirty_chart(samples: dict[str, list[tuple[int, float]]], thresholds: dict[str, float] | None = None) -> bytes:
    """PNG: dirty ratio over time, one line per partition (the MAX_LINES dirtiest now)."""
    fig = figure(8.0, 3.4)
    ax = fig.add_subplot()
    if not any(samples.values()):
        _empty(ax, "no dirty-ratio sample yet (the cleaner samples every log.cleaner.backoff.ms)")
        return render(fig)
    shown = sorted(samples.items(), key=lambda kv: (-(kv[1][-1][1] if kv[1] else 0), kv[0]))[:MAX_LINES]
    lines, names = [], []
    first = min(t for _, s in shown for t, _ in s)
    last = max(t for _, s in shown for t, _ in s)
    for name, series in shown:
        if not series:
            continue
        line, = ax.plot([_when(t) for t, _ in series], [r for _, r in series], marker="o", markersize=2,
                        linewidth=1.5)
        lines.append(line)
        names.append(name)   # given to legend() directly: matplotlib hides labels starting with "_"
        threshold = (thresholds or {}).get(name)
        if threshold is not None:
            ax.axhline(threshold, color=line.get_color(), linestyle="--", linewidth=0.8)
    if last - first < 30_000:   # a few samples close together: show half a minute around them
        mid = (first + last) / 2
        ax.set_xlim(_when(int(mid - 15_000)), _when(int(mid + 15_000)))
    ax.set_ylim(0, 1)
    ax.set_ylabel("dirty ratio", fontsize=8)
    ax.set_title("Dirty ratio over time (dashed: min.cleanable.dirty.ratio)", fontsize=10)
    ax.grid(color="#eeeeee")
    ax.legend(lines, names, fontsize=7, frameon=False, loc="upper left", ncols=3)
    ax.tick_params(labelsize=7)
    from matplotlib.dates import DateFormatter
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S", tz=_dt.timezone.utc))
    ax.set_xlabel("time (UTC)", fontsize=8)
    fig.autofmt_xdate()
    return render(fig)
