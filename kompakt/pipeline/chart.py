"""Charts as PNGs, drawn with zlib and struct (no plotting library in the image).

audit_chart: per partition two bars, the duplicate ratio (superseded keyed records) and the
projected byte savings of a perfect compaction, in percent, labelled `topic-partition`.
whatif_chart: per partition two panels over the replayed time, disk used and the age of the
oldest uncleaned record, one line for the current settings and one for the proposed ones.
Text is a 3x5 pixel font scaled up. PNG layout: signature, IHDR (width, height, 8-bit RGB), one
IDAT (zlib of rows, each prefixed with filter byte 0), IEND; every chunk is length, type, data,
CRC-32 of type+data.
"""
from __future__ import annotations

import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IHDR_FORMAT = ">IIBBBBB"
assert struct.calcsize(IHDR_FORMAT) == 13

# 3x5 glyphs, rows top to bottom, 3 bits each (bit 2 = left column)
_FONT = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1), "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 2, 2, 2),
    "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7), "A": (2, 5, 7, 5, 5), "B": (6, 5, 6, 5, 6),
    "C": (7, 4, 4, 4, 7), "D": (6, 5, 5, 5, 6), "E": (7, 4, 6, 4, 7), "F": (7, 4, 6, 4, 4),
    "G": (7, 4, 5, 5, 7), "H": (5, 5, 7, 5, 5), "I": (7, 2, 2, 2, 7), "J": (1, 1, 1, 5, 7),
    "K": (5, 5, 6, 5, 5), "L": (4, 4, 4, 4, 7), "M": (5, 7, 7, 5, 5), "N": (6, 5, 5, 5, 5),
    "O": (7, 5, 5, 5, 7), "P": (7, 5, 7, 4, 4), "Q": (7, 5, 5, 7, 1), "R": (7, 5, 6, 5, 5),
    "S": (7, 4, 7, 1, 7), "T": (7, 2, 2, 2, 2), "U": (5, 5, 5, 5, 7), "V": (5, 5, 5, 5, 2),
    "W": (5, 5, 7, 7, 5), "X": (5, 5, 2, 5, 5), "Y": (5, 5, 2, 2, 2), "Z": (7, 1, 2, 4, 7),
    "-": (0, 0, 7, 0, 0), "_": (0, 0, 0, 0, 7), ".": (0, 0, 0, 0, 2), "%": (5, 1, 2, 4, 5),
    " ": (0, 0, 0, 0, 0),
}
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (200, 200, 200)
DUP_COLOR, SAVE_COLOR = (214, 96, 77), (67, 147, 195)


class Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.w, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.h, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def line(self, x0: int, y0: int, x1: int, y1: int, color, width: int = 2) -> None:
        """A straight segment, drawn as squares of `width` pixels along its longer axis."""
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            x = x0 + (x1 - x0) * i // steps
            y = y0 + (y1 - y0) * i // steps
            self.rect(x, y, x + width, y + width, color)

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> None:
        for ch in s.upper():
            glyph = _FONT.get(ch, _FONT[" "])
            for r, bits in enumerate(glyph):
                for c in range(3):
                    if bits & (4 >> c):
                        self.rect(x + c * scale, y + r * scale, x + (c + 1) * scale, y + (r + 1) * scale, color)
            x += 4 * scale

    def png(self) -> bytes:
        raw = bytearray()
        stride = self.w * 3
        for y in range(self.h):
            raw.append(0)
            raw += self.px[y * stride:(y + 1) * stride]

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        ihdr = struct.pack(IHDR_FORMAT, self.w, self.h, 8, 2, 0, 0, 0)
        return PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")


def audit_chart(rows: list[dict]) -> bytes:
    """PNG bytes: per partition, duplicate ratio and projected byte savings in percent."""
    group, bar, top, plot_h = 56, 20, 40, 200
    width = max(320, 60 + group * max(1, len(rows)))
    height = top + plot_h + 80
    cv = Canvas(width, height)
    base_y = top + plot_h
    cv.text(10, 8, "DUPLICATES %", DUP_COLOR)
    cv.text(150, 8, "PROJECTED SAVINGS %", SAVE_COLOR)
    for pct in (0, 50, 100):
        y = base_y - pct * plot_h // 100
        cv.rect(40, y, width - 10, y + 1, GREY)
        cv.text(4, y - 4, str(pct))
    for i, r in enumerate(rows):
        x = 48 + i * group
        dup = max(0.0, min(1.0, float(r.get("duplicate_ratio", 0))))
        b = r.get("bytes") or 0
        save = max(0.0, min(1.0, 1 - (r.get("projected_bytes", 0) / b))) if b else 0.0
        cv.rect(x, base_y - int(dup * plot_h), x + bar, base_y, DUP_COLOR)
        cv.rect(x + bar + 2, base_y - int(save * plot_h), x + 2 * bar + 2, base_y, SAVE_COLOR)
        label = f"{r.get('topic', '')[:5]}-{r.get('partition', '')}"
        cv.text(x, base_y + 8 + (i % 2) * 14, label, scale=1 if len(label) > 6 else 2)
    return cv.png()


CURRENT_COLOR, PROPOSED_COLOR = (120, 120, 120), (214, 96, 77)
WHATIF_PANELS = (("DISK", "disk_bytes", (("GB", 2**30), ("MB", 2**20), ("KB", 2**10), ("B", 1))),
                 ("OLDEST UNCLEANED", "oldest_uncleaned_age_ms",
                  (("D", 86_400_000), ("H", 3_600_000), ("MIN", 60_000), ("S", 1000), ("MS", 1))))
MAX_CHART_PARTITIONS = 8


def whatif_chart(reports: list[dict]) -> bytes:
    """PNG bytes: per partition (at most MAX_CHART_PARTITIONS), disk used and the oldest uncleaned
    record's age over the replayed time, current settings grey, proposed red."""
    shown = reports[:MAX_CHART_PARTITIONS]
    panel_w, panel_h, left, gap, top = 300, 120, 48, 40, 44
    width = left + len(WHATIF_PANELS) * (panel_w + gap)
    row_h = panel_h + 50
    cv = Canvas(width, top + row_h * max(1, len(shown)))
    cv.text(10, 8, "CURRENT", CURRENT_COLOR)
    cv.text(90, 8, "PROPOSED", PROPOSED_COLOR)
    cv.text(190, 8, f"{len(reports)} PARTITIONS" + (f", FIRST {len(shown)} SHOWN" if len(shown) < len(reports) else ""),
            scale=1)
    for row, rep in enumerate(shown):
        y0 = top + row * row_h
        cv.text(10, y0, f"{rep.get('topic', '')[:24]}-{rep.get('partition', '')}", scale=1)
        for col, (title, key, units) in enumerate(WHATIF_PANELS):
            x0 = left + col * (panel_w + gap)
            raw = [[p[key] for p in rep[side]["timeline"]] for side in ("current", "proposed")]
            peak = max([v for s in raw for v in s] + [0])
            name, unit = next(((n, u) for n, u in units if peak >= u), units[-1])
            series = [[v / unit for v in s] for s in raw]
            top_value = max(peak / unit, 1e-9)
            base_y = y0 + 14 + panel_h
            cv.text(x0, y0 + 4, f"{title} {name} (PEAK PER INTERVAL)", scale=1)
            cv.rect(x0, base_y, x0 + panel_w, base_y + 1, GREY)
            cv.rect(x0, y0 + 14, x0 + 1, base_y, GREY)
            cv.text(x0 - 44, y0 + 14, _short(top_value), scale=1)
            cv.text(x0 - 12, base_y - 5, "0", scale=1)
            for values, color in zip(series, (CURRENT_COLOR, PROPOSED_COLOR)):
                n = len(values)
                pts = [(x0 + (panel_w - 2) * i // max(1, n - 1), base_y - 2 - int((panel_h - 4) * v / top_value))
                       for i, v in enumerate(values)]
                for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
                    cv.line(xa, ya, xb, yb, color)
    return cv.png()


def _short(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"
