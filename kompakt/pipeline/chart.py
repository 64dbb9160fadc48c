"""Charts as PNG bytes, drawn with matplotlib's Agg backend.

audit_chart: per partition two bars, the duplicate ratio (superseded keyed records) and the
projected byte savings of a perfect compaction, in percent, labelled `topic-partition`.
whatif_chart: per partition two panels over the replayed time, disk used and the age of the
oldest uncleaned record, one line for the current settings and one for the proposed ones.

Also the one place that turns a matplotlib Figure into PNG or SVG bytes (`render`), used by the
web console's charts (kompakt/console/charts.py).

Invariants: matplotlib is imported inside the functions, never at module import, so importing
this module (the pipeline CLI, the admin API's what-if route) costs nothing until a chart is drawn;
figures are `matplotlib.figure.Figure` objects rendered through their own Agg canvas, never pyplot,
so there is no global figure state; matplotlib does not promise thread safety (its font and text
caches are shared), so every chart function is `serialized`: the broker draws in worker threads,
one chart at a time.
Colours are fixed (below) so a chart reads the same everywhere and tests can find the bars.
"""
from __future__ import annotations

import functools
import io
import threading
from typing import Any, Callable, TypeVar

DUP_COLOR, SAVE_COLOR = "#d6604d", "#4393c3"
CURRENT_COLOR, PROPOSED_COLOR = "#787878", "#d6604d"
MAX_CHART_PARTITIONS = 8
DPI = 100

WHATIF_PANELS = (("Disk", "disk_bytes", (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))),
                 ("Oldest uncleaned record", "oldest_uncleaned_age_ms",
                  (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1))))


_DRAWING = threading.Lock()
F = TypeVar("F", bound=Callable[..., Any])


def serialized(fn: F) -> F:
    """One chart drawn at a time in this process (see the module docstring)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _DRAWING:
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def figure(width_in: float, height_in: float) -> Any:
    """A new Figure on an Agg canvas (no pyplot, no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render(fig: Any, fmt: str = "png") -> bytes:
    """The figure as PNG or SVG bytes."""
    out = io.BytesIO()
    fig.savefig(out, format=fmt, dpi=DPI, metadata={"Software": None} if fmt == "png" else {"Date": None})
    return out.getvalue()


@serialized
def audit_chart(rows: list[dict]) -> bytes:
    """PNG bytes: per partition, duplicate ratio and projected byte savings in percent."""
    labels, dups, saves = [], [], []
    for r in rows:
        labels.append(f"{r.get('topic', '')}-{r.get('partition', '')}")
        dups.append(100 * max(0.0, min(1.0, float(r.get("duplicate_ratio", 0)))))
        b = r.get("bytes") or 0
        saves.append(100 * (max(0.0, min(1.0, 1 - (r.get("projected_bytes", 0) / b))) if b else 0.0))
    fig = figure(max(4.0, 1.0 + 0.6 * max(1, len(rows))), 3.6)
    ax = fig.add_subplot()
    xs = range(len(rows))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], dups, width, color=DUP_COLOR, label="duplicates %")
    ax.bar([x + width / 2 for x in xs], saves, width, color=SAVE_COLOR, label="projected savings %")
    ax.set_ylim(0, 100)
    ax.set_ylabel("percent")
    ax.set_xticks(list(xs), labels, rotation=45 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center",
                  fontsize=8)
    ax.grid(axis="y", color="#dddddd")
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_title("Duplicates and projected savings per partition", fontsize=10)
    return render(fig)


def _unit(peak: float, units) -> tuple[str, float]:
    return next(((n, u) for n, u in units if peak >= u), units[-1])


@serialized
def whatif_chart(reports: list[dict]) -> bytes:
    """PNG bytes: per partition (at most MAX_CHART_PARTITIONS), disk used and the oldest uncleaned
    record's age over the replayed time (peak per interval), current settings grey, proposed red."""
    shown = reports[:MAX_CHART_PARTITIONS]
    rows = max(1, len(shown))
    fig = figure(9.0, 0.6 + 2.4 * rows)
    axes = fig.subplots(rows, len(WHATIF_PANELS), squeeze=False)
    title = f"What if: {len(reports)} partition(s)"
    if len(shown) < len(reports):
        title += f", first {len(shown)} shown"
    fig.suptitle(title, fontsize=10)
    for row, rep in enumerate(shown):
        for col, (name, key, units) in enumerate(WHATIF_PANELS):
            ax = axes[row][col]
            series = {side: [p[key] for p in rep[side]["timeline"]] for side in ("current", "proposed")}
            peak = max([v for s in series.values() for v in s] + [0])
            unit_name, unit = _unit(peak, units)
            for side, color in (("current", CURRENT_COLOR), ("proposed", PROPOSED_COLOR)):
                values = [v / unit for v in series[side]]
                ax.plot(range(len(values)), values, color=color, linewidth=2, label=side,
                        marker="o" if len(values) < 3 else None)   # one point draws no line
            ax.set_ylim(bottom=0)
            ax.set_title(f"{rep.get('topic', '')}-{rep.get('partition', '')}: {name} ({unit_name})", fontsize=9)
            ax.set_xlabel("replayed interval", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(color="#eeeeee")
            if row == 0 and col == 0:
                ax.legend(fontsize=8, frameon=False)
    return render(fig)
