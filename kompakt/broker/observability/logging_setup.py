"""Process-wide logging: one line per event, as text or JSON (`kompakt serve --log-format json`).

Role: `configure(level, fmt)` installs one stderr handler on the root logger (replacing any handler
a previous `configure` installed, so calling it twice never doubles lines).

Invariants:
- every event is exactly one line: newlines inside a message or a traceback are escaped (`\\n`),
  so `grep`, `journalctl` and log shippers see one event per line; one exception in the text
  format: a message its caller marks multi-line (`extra={"_multiline": True}`: the cleaner's
  summary, which Kafka prints as several tab-indented lines) keeps its line breaks, and every
  continuation line starts with a tab, so a line that does not is always the start of an event
  (extras and tracebacks stay escaped; the JSON format is unaffected);
- text:  `2026-11-22T06:22:18.123Z INFO  kompakt.cleaner: Cleaner 0: ... key=value ...`
- json:  `{"ts": "2026-11-22T06:22:18.123Z", "level": "INFO", "logger": "kompakt.cleaner",
  "msg": "...", <extra fields>..., "exc": "Traceback ..."}` where extra fields are whatever the
  caller passed as `logger.info(..., extra={...})` (the cleaner's summary lines pass their stats
  this way, so a log shipper gets them as fields). Values that JSON cannot encode are `repr()`ed.
- times are UTC with millisecond precision.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime",
                                                                                    "taskName"}


def _utc(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The `extra=` fields a caller attached to a record."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def _tab_lines(text: str) -> str:
    """A multi-line message: each line escaped on its own, continuation lines tab-indented."""
    lines = text.rstrip("\n").split("\n")
    out = [_one_line(lines[0])]
    out += ["\t" + _one_line(ln.lstrip("\t")) if ln else "\t" for ln in lines[1:]]
    return "\n".join(out)


class TextFormatter(logging.Formatter):
    """`<ts> <LEVEL> <logger>: <message> k=v ...` on one line (see the multi-line exception above)."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        multiline = getattr(record, "_multiline", False)
        parts = [f"{_utc(record)} {record.levelname:<5} {record.name}: "
                 f"{_tab_lines(msg) if multiline else _one_line(msg)}"]
        for key, value in extra_fields(record).items():
            parts.append(f"{key}={value}")
        if record.exc_info:
            parts.append("exc=" + self.formatException(record.exc_info))
        elif record.exc_text:
            parts.append("exc=" + record.exc_text)
        if record.stack_info:
            parts.append("stack=" + record.stack_info)
        return parts[0] + "".join(" " + _one_line(p) for p in parts[1:])


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {"ts": _utc(record), "level": record.levelname, "logger": record.name,
                                 "msg": record.getMessage()}
        for key, value in extra_fields(record).items():
            # extras never shadow the four fixed fields
            event["extra_" + key if key in event else key] = value
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exc"] = record.exc_text
        if record.stack_info:
            event["stack"] = record.stack_info
        # json.dumps escapes newlines inside strings, so the event stays on one line.
        return json.dumps(event, default=repr, ensure_ascii=False, separators=(", ", ": "))


class _KompaktHandler(logging.StreamHandler):
    """Marker class so a second configure() replaces our handler and leaves others alone."""


def configure(level: str | int = "INFO", fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Install the one-line-per-event handler on the root logger; returns it."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; choose from {', '.join(FORMATS)}")
    if isinstance(level, str):
        numeric = logging.getLevelName(level.strip().upper())
        if not isinstance(numeric, int):
            raise ValueError(f"unknown log level {level!r}; choose from DEBUG, INFO, WARNING, ERROR, CRITICAL")
        level = numeric
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _KompaktHandler):
            root.removeHandler(handler)
    handler = _KompaktHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    # aiohttp's access log is one line per HTTP request: keep it out of INFO-level broker logs.
    logging.getLogger("aiohttp.access").setLevel(max(level, logging.WARNING))
    return handler
