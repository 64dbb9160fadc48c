"""admin.views: JSON conversion of the objects the cleaner and storage hand out, and the mapping
of Kafka error codes to HTTP statuses."""
from __future__ import annotations

import dataclasses
import enum
import json
from collections import namedtuple
from pathlib import Path

from kompakt.broker.admin.views import ApiError, jsonable, kafka_error_of
from kompakt.protocol.errors import ErrorCode


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Stats:
    records: int
    color: Color


class Slotted:
    __slots__ = ("a", "_hidden")

    def __init__(self):
        self.a = {1, 3, 2}
        self._hidden = "x"


def test_jsonable_covers_the_shapes_status_objects_come_in():
    TP = namedtuple("TP", "topic partition")
    value = {
        "stats": Stats(5, Color.RED),
        ("t", 0): TP("t", 0),
        "slotted": Slotted(),
        "raw": b"caf\xc3\xa9",
        "path": Path("/var/lib/kompakt"),
        "nested": [frozenset({"b", "a"}), None, 1.5],
    }
    out = jsonable(value)
    assert out == {"stats": {"records": 5, "color": "RED"}, "t-0": {"topic": "t", "partition": 0},
                   "slotted": {"a": [1, 2, 3]}, "raw": "café", "path": "/var/lib/kompakt",
                   "nested": [["a", "b"], None, 1.5]}
    json.dumps(out)  # really JSON


def test_kafka_errors_map_to_http_statuses():
    class Unknown(Exception):
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    class Policy(Exception):
        code = ErrorCode.POLICY_VIOLATION

    err = kafka_error_of(Unknown("no such topic"))
    assert (err.status, err.kafka_error, err.message) == (404, "UNKNOWN_TOPIC_OR_PARTITION", "no such topic")
    assert kafka_error_of(Policy()).status == 409
    assert kafka_error_of(ValueError("plain")) is None
    assert ApiError(400, "bad", "why", "INVALID_REQUEST").body() == {
        "error": "bad", "message": "why", "status": 400, "kafka_error": "INVALID_REQUEST"}
