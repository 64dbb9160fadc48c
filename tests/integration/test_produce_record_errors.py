"""Produce's per-record errors (v8+), over TCP to a real broker, as Kafka's LogValidator gives them:
a batch with records a compacted topic refuses (no key) or whose timestamps are out of range is
rejected whole, the partition answers INVALID_RECORD / INVALID_TIMESTAMP, `record_errors` names
every rejected record by its index in the batch with its reason, and `error_message` is Kafka's
summary ("One or more records have been rejected ..."). Nothing is appended.
"""
from __future__ import annotations

import time

import pytest

from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.records import COMPRESSION_NONE, COMPRESSION_ZSTD, build_batch
from wire_support import Wire, create_topics, end_offset, produce

NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    create_topics(w, {"rec-errors-compacted": {"cleanup.policy": "compact"},
                      "rec-errors-ts": {"message.timestamp.after.max.ms": "3600000"}})
    yield w
    w.close()


KEY_MESSAGE = "Compacted topic cannot accept message without key in topic partition rec-errors-compacted-0"


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_ZSTD], ids=["none", "zstd"])
@pytest.mark.parametrize("version", [8, 9, 11])
def test_null_keys_in_a_compacted_topic_are_listed_per_record(wire, version, codec):
    batch = build_batch([(b"a", b"1", None, NOW), (None, b"2", None, NOW), (b"c", b"3", None, NOW),
                         (None, b"4", None, NOW)], compression=codec)
    before = end_offset(wire, "rec-errors-compacted")
    p = produce(wire, "rec-errors-compacted", batch, version)
    assert p.error_code == EC.INVALID_RECORD and p.base_offset == -1
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (1, KEY_MESSAGE), (3, KEY_MESSAGE)]
    assert p.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the "
        f"first three errors at most: [RecordError(batchIndex=1, message='{KEY_MESSAGE}'), "
        f"RecordError(batchIndex=3, message='{KEY_MESSAGE}')]")
    assert end_offset(wire, "rec-errors-compacted") == before      # nothing appended


def test_out_of_range_timestamps_are_listed_per_record(wire):
    future = NOW + 24 * 3_600_000
    batch = build_batch([(b"a", b"1", None, NOW), (b"b", b"2", None, future), (b"c", b"3", None, future + 1)],
                        base_timestamp=NOW)
    p = produce(wire, "rec-errors-ts", batch, 9)
    assert p.error_code == EC.INVALID_TIMESTAMP
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    errors = [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
    assert [i for i, _ in errors] == [1, 2]
    assert errors[0][1].startswith(f"Timestamp {future} of message with offset ")
    assert errors[1][1].startswith(f"Timestamp {future + 1} of message with offset ")
    assert all("is out of range. The timestamp should be within [" in m for _, m in errors)
    assert end_offset(wire, "rec-errors-ts") == 0


def test_a_good_batch_has_no_record_errors(wire):
    p = produce(wire, "rec-errors-compacted", build_batch([(b"k", b"v", None, NOW)]), 9)
    assert p.error_code == 0 and p.record_errors == [] and p.error_message is None
