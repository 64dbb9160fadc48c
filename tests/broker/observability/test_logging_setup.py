"""logging_setup: one line per event in both formats, JSON fields, extras, idempotent configure."""
from __future__ import annotations

import io
import json
import logging

import pytest

from kompakt.broker.observability import logging_setup


def test_json_one_object_per_line_with_extras_and_traceback(restore_root_logging):
    out = io.StringIO()
    logging_setup.configure("INFO", "json", stream=out)
    lg = logging.getLogger("kompakt.cleaner")
    lg.info("Cleaner 0: cleaned %s", "t-0", extra={"topic": "t", "partition": 0, "records": 12, "level": "x"})
    lg.debug("hidden")
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        lg.exception("clean failed\nbadly")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "kompakt.cleaner"
    assert first["msg"] == "Cleaner 0: cleaned t-0"
    assert first["records"] == 12 and first["topic"] == "t" and first["partition"] == 0
    assert first["extra_level"] == "x"
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert second["level"] == "ERROR" and "ValueError: bad\nthing" in second["exc"]
    assert second["msg"] == "clean failed\nbadly"


def test_text_one_line_per_event(restore_root_logging):
    out = io.StringIO()
    logging_setup.configure("debug", "text", stream=out)
    lg = logging.getLogger("kompakt.test")
    lg.debug("two\nlines", extra={"k": "v"})
    try:
        1 / 0
    except ZeroDivisionError:
        lg.exception("boom")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "DEBUG kompakt.test: two\\nlines k=v" in lines[0]
    assert "ERROR kompakt.test: boom exc=Traceback" in lines[1] and "ZeroDivisionError" in lines[1]


def test_text_multiline_message_keeps_its_breaks_tab_indented(restore_root_logging):
    out = io.StringIO()
    logging_setup.configure("INFO", "text", stream=out)
    lg = logging.getLogger("kompakt.cleaner")
    lg.info("\n\tLog cleaner thread 0 cleaned log t-0\n\tStart size: 1.0 MB\nunindented\\x\n",
            extra={"_multiline": True, "k": "a\nb"})
    lg.info("plain\nline")
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines
    assert lines[0].endswith("INFO  kompakt.cleaner: ")
    # every continuation line starts with a tab; extras stay escaped on the last line
    assert lines[1] == "\tLog cleaner thread 0 cleaned log t-0"
    assert lines[2] == "\tStart size: 1.0 MB"
    assert lines[3] == "\tunindented\\\\x k=a\\nb"
    assert lines[4].endswith("kompakt.cleaner: plain\\nline")


def test_json_ignores_the_multiline_mark(restore_root_logging):
    out = io.StringIO()
    logging_setup.configure("INFO", "json", stream=out)
    logging.getLogger("kompakt.cleaner").info("\n\tLog cleaner\n\tEnd", extra={"_multiline": True})
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["msg"] == "\n\tLog cleaner\n\tEnd" and "_multiline" not in event


def test_configure_twice_replaces_its_handler(restore_root_logging):
    a, b = io.StringIO(), io.StringIO()
    logging_setup.configure("INFO", "text", stream=a)
    logging_setup.configure("INFO", "json", stream=b)
    logging.getLogger("kompakt.x").warning("once")
    assert a.getvalue() == ""
    assert len(b.getvalue().splitlines()) == 1


def test_bad_level_or_format_is_a_clear_error(restore_root_logging):
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logging_setup.configure("INFO", "xml")
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        logging_setup.configure("LOUD", "text")
