"""Metrics: hot-path helpers count what they are told, names follow Prometheus conventions, every
help text names its Kafka twin, registries are private, and promtool accepts the exposition."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kompakt.broker.observability import names as M
from kompakt.broker.observability.metrics import Metrics


def samples(m: Metrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_request_helpers_count_time_and_errors():
    m = Metrics(process_metrics=False)
    m.observe_request("Produce", 0.002, request_bytes=120, response_bytes=40)
    m.observe_request("Produce", 0.004)
    m.observe_request("Fetch", 0.3, error_code=3)
    m.record_error("Produce", 10, count=2)
    s = samples(m)
    assert s[("kompakt_requests_total", (("api", "Produce"),))] == 2
    assert s[("kompakt_request_duration_seconds_count", (("api", "Produce"),))] == 2
    assert s[("kompakt_request_duration_seconds_sum", (("api", "Produce"),))] == pytest.approx(0.006)
    assert s[("kompakt_request_duration_seconds_bucket", (("api", "Fetch"), ("le", "0.25")))] == 0
    assert s[("kompakt_request_duration_seconds_bucket", (("api", "Fetch"), ("le", "0.5")))] == 1
    assert s[("kompakt_request_errors_total", (("api", "Fetch"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")))] == 1
    assert s[("kompakt_request_errors_total", (("api", "Produce"), ("error", "MESSAGE_TOO_LARGE")))] == 2
    assert s[("kompakt_request_bytes_total", (("api", "Produce"),))] == 120
    assert not any(name.endswith("_created") for name, _ in s)


def test_topic_and_connection_helpers():
    m = Metrics(process_metrics=False)
    m.record_produce("orders", 1000, 10)
    m.record_produce("orders", 500, 5)
    m.record_fetch("orders", 700)
    m.record_fetch("orders", 100, 2)
    m.connection_opened()
    m.connection_opened()
    m.connection_closed()
    s = samples(m)
    assert s[("kompakt_topic_bytes_in_total", (("topic", "orders"),))] == 1500
    assert s[("kompakt_topic_messages_in_total", (("topic", "orders"),))] == 15
    assert s[("kompakt_topic_bytes_out_total", (("topic", "orders"),))] == 800
    assert s[("kompakt_topic_messages_out_total", (("topic", "orders"),))] == 2
    assert s[("kompakt_broker_connections", ())] == 1
    assert s[("kompakt_broker_connections_created_total", ())] == 2
    m.forget_topic("orders")
    assert not any(dict(labels).get("topic") == "orders" for _, labels in samples(m))


def test_info_uptime_and_private_registries():
    ticks = iter([100.0, 107.5])
    a = Metrics(process_metrics=False, clock=lambda: next(ticks))
    a.set_info(node_id=3, cluster_id="c1")
    b = Metrics(process_metrics=False)
    a.record_produce("t", 1, 1)
    s = samples(a)
    assert s[("kompakt_broker_info", (("cluster_id", "c1"), ("node_id", "3"), ("version", "0.1.0")))] == 1
    assert s[("kompakt_broker_uptime_seconds", ())] == 7.5
    assert ("kompakt_topic_bytes_in_total", (("topic", "t"),)) not in samples(b)


def test_names_and_help_texts_follow_conventions():
    names = [v for k, v in vars(M).items() if k.isupper() and isinstance(v, str) and v.startswith("kompakt")]
    assert len(names) == len(set(names)), "a metric name is defined twice"
    for name in names:
        assert name.startswith("kompakt_"), name
        assert "_ms" not in name and "percent" not in name and "_secs" not in name, f"{name}: use base units"
    m = Metrics(process_metrics=False)
    for fam in m.registry.collect():
        assert "Kafka" in fam.documentation, f"{fam.name}: help text must name the Kafka metric"
        if fam.type == "counter":
            assert all(s.name.endswith(("_total",)) for s in fam.samples), fam.name


def test_promtool_accepts_exposition(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/test.sh does)"
    m = Metrics()
    m.set_info(node_id=1, cluster_id="x")
    m.observe_request("Produce", 0.001, error_code=87)
    m.record_produce("t", 10, 1)
    m.record_fetch("t", 10, 1)
    result = subprocess.run([promtool, "check", "metrics"], input=m.render(), capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_histogram_buckets_are_cumulative_and_inclusive():
    m = Metrics(process_metrics=False)
    for seconds in (0.001, 0.001, 0.0011, 45.0):  # on a bound, just above it, beyond the last one
        m.observe_request("Metadata", seconds)
    s = samples(m)
    bucket = lambda le: s[("kompakt_request_duration_seconds_bucket", (("api", "Metadata"), ("le", le)))]
    assert bucket("0.0005") == 0
    assert bucket("0.001") == 2          # le is inclusive
    assert bucket("0.0025") == 3
    assert bucket("30.0") == 3 and bucket("+Inf") == 4
    assert s[("kompakt_request_duration_seconds_count", (("api", "Metadata"),))] == 4
    assert s[("kompakt_requests_total", (("api", "Metadata"),))] == 4
