"""Broker logs around admin actions: `kompakt serve --log-format json` writes one JSON object per
line for the whole life of a real broker (start, a compact-now with the cleaner's Kafka-style
multi-line summary, pause/resume, shutdown). The text format's one-line rule is unit-tested in
tests/broker/observability/test_logging_setup.py."""
from __future__ import annotations

import json

from confluent_kafka.admin import NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.test_admin_api import PAD, create_topics, http, produce


class FormatBroker(BrokerProcess):
    def __init__(self, base_dir, config, fmt: str):
        super().__init__(base_dir, config)
        self.fmt = fmt

    def command(self) -> list[str]:
        return super().command() + ["--log-format", self.fmt]


def run_broker_through_admin_actions(tmp_path, fmt: str) -> list[str]:
    """Start, compact a partition, pause/resume it, stop; the broker's own output lines."""
    broker = FormatBroker(tmp_path / fmt, {"log.segment.bytes": "1024", "log.cleaner.backoff.ms": "600000",
                                                  "offsets.topic.num.partitions": "1"}, fmt)
    try:
        broker.start()
        create_topics(broker.bootstrap, NewTopic("logs", 1, 1, config={"cleanup.policy": "compact"}))
        produce(broker.bootstrap, "logs", [(b"k%d" % (i % 3), b"v%d-" % i + PAD) for i in range(60)])
        status, body = http(broker.metrics_url, "POST", "/v1/partitions/logs/0/compact?wait=60")
        assert status == 200, body
        assert http(broker.metrics_url, "POST", "/v1/partitions/logs/0/pause")[0] == 200
        assert http(broker.metrics_url, "POST", "/v1/partitions/logs/0/resume")[0] == 200
        assert broker.stop() == 0
    finally:
        broker.kill()
    # the fixture writes a "===== start" header before each start; everything else is the broker's
    return [line for line in broker.log_text().splitlines() if line and not line.startswith("===== start")]


def test_json_logs_one_object_per_line(tmp_path):
    lines = run_broker_through_admin_actions(tmp_path, "json")
    events = []
    for line in lines:
        event = json.loads(line)  # every line is one whole JSON object
        assert {"ts", "level", "logger", "msg"} <= set(event), event
        events.append(event)
    messages = [e["msg"] for e in events]
    assert any("ready" in m for m in messages)
    # the cleaner's Kafka-style summary spans several lines; it stays one event, one JSON string
    summary = [e for e in events if e["logger"].startswith("kompakt.cleaner") and "logs-0" in e["msg"]
               and "\n" in e["msg"]]
    assert summary, [e["msg"] for e in events if e["logger"].startswith("kompakt.cleaner")]
    assert any("paused through the admin API" in m for m in messages)
    assert any("resumed through the admin API" in m for m in messages)

