"""What the command-line tools print: aligned tables for people, JSON for programs.

Role: `print_table` (left-aligned columns, two spaces apart, upper-case headings as Kafka's tools
print them; None shows as "-") and `print_json` (indented, keys in insertion order). Used by
`kompakt topic`, `kompakt group` and `kompakt admin`.
"""
from __future__ import annotations

import json
import sys
from typing import Any


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def print_table(header: tuple, rows: list, out=None) -> None:
    # out=None, not sys.stdout: a default bound at import would outlive a redirected stdout
    out = out or sys.stdout
    rows = [tuple(header)] + [tuple(cell(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)


def print_json(data: Any, out=None) -> None:
    print(json.dumps(data, indent=2), file=out or sys.stdout)
