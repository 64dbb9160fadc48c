"""A real Prometheus server (Debian's `prometheus`) scraping a real broker: produce and compact with
real clients and the admin API, then watch the figures move through Prometheus's HTTP query API.
Also: `promtool check metrics` on that broker's /metrics (every family present), the Grafana
dashboard's queries evaluated by that Prometheus, and `metrics.partition.labels=false` dropping the
partition label end to end."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from kompakt.testing.ports import PortTaken, free_port, retry_if_port_taken, says_port_taken
from tests.integration.test_admin_api import PAD, create_topics, http, produce, read_all

DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana" / "dashboards" / "kompakt.json"


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the Grafana dashboard, its variables bound as Grafana would."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return [e.replace("$__rate_interval", "1m").replace('"$job"', '"kompakt"').replace('"$topic"', '".*"')
            for e in exprs]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


class Prometheus:
    def __init__(self, tmp_path, target: str, scrape_interval: str = "1s"):
        binary = shutil.which("prometheus")
        assert binary, "prometheus missing: apt-get install prometheus (scripts/test.sh does)"
        config = tmp_path / "prometheus.yml"
        config.write_text(f"""global:
  scrape_interval: {scrape_interval}
  evaluation_interval: {scrape_interval}
scrape_configs:
  - job_name: kompakt
    static_configs:
      - targets: ["{target}"]
""")
        self.log_path = tmp_path / "prometheus.log"
        # it must be told its port: started again on another if that was taken before it bound it
        retry_if_port_taken(lambda: self._start([binary, f"--config.file={config}",
                                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--log.level=warn"]),
                            "prometheus")

    def _start(self, cmd: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd + [f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait(lambda: self._ready(), "prometheus to become ready", 60)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            text = self.log_path.read_text(errors="replace")
            message = f"prometheus exited {self.proc.returncode}:\n{text[-3000:]}"
            raise PortTaken(message) if says_port_taken(text) else AssertionError(message)
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    @staticmethod
    def _wait(check, what: str, deadline_s: float):
        deadline = time.monotonic() + deadline_s
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def query(self, expr: str) -> float | None:
        """The single value of an instant query, or None when it has no result yet."""
        body = get_json(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body["status"] == "success", body
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr: str, predicate, what: str, deadline_s: float = 30) -> float:
        def check():
            value = self.query(expr)
            return value if value is not None and predicate(value) else None
        return self._wait(check, f"{what}: {expr}", deadline_s)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def prometheus_for(tmp_path):
    started: list[Prometheus] = []

    def factory(target: str) -> Prometheus:
        prom = Prometheus(tmp_path, target)
        started.append(prom)
        return prom

    yield factory
    for prom in started:
        prom.stop()


def test_prometheus_sees_traffic_and_compaction(start_broker, prometheus_for):
    broker = start_broker(config={"log.segment.bytes": "1024", "log.cleaner.backoff.ms": "600000",
                                  "log.cleaner.min.cleanable.ratio": "0.99", "offsets.topic.num.partitions": "1"})
    prom = prometheus_for(f"127.0.0.1:{broker.metrics_port}")
    prom.wait_for('up{job="kompakt"}', lambda v: v == 1, "the broker to be scraped")
    assert prom.query("kompakt_broker_ready") == 1

    create_topics(broker.bootstrap, NewTopic("prom", 1, 1, config={"cleanup.policy": "compact"}))
    records = [(b"k%d" % (i % 5), b"v%d-" % i + PAD) for i in range(150)]
    produce(broker.bootstrap, "prom", records)
    prom.wait_for('kompakt_topic_messages_in_total{topic="prom"}', lambda v: v == 150, "messages in")
    prom.wait_for('kompakt_log_end_offset{topic="prom",partition="0"}', lambda v: v == 150, "log end offset")
    prom.wait_for('sum(kompakt_requests_total{api="Produce"})', lambda v: v >= 1, "produce requests")
    prom.wait_for('histogram_quantile(0.5, sum by (le) (kompakt_request_duration_seconds_bucket{api="Produce"}))',
                  lambda v: v > 0, "produce latency")
    size_before = prom.wait_for('kompakt_log_size_bytes{topic="prom",partition="0"}', lambda v: v > 150 * 100,
                                "log size")
    segments_before = prom.query('kompakt_log_segments{topic="prom",partition="0"}')
    assert segments_before > 3

    status, body = http(broker.metrics_url, "POST", "/v1/partitions/prom/0/compact?wait=60")
    assert status == 200, body
    prom.wait_for("kompakt_cleaner_cleanings_total", lambda v: v >= 1, "a clean counted")
    prom.wait_for('kompakt_log_size_bytes{topic="prom",partition="0"}', lambda v: v < size_before,
                  "the log to shrink")
    prom.wait_for('kompakt_cleaner_partition_last_clean_timestamp_seconds{topic="prom",partition="0"}',
                  lambda v: v > 1e9, "the last clean time")
    prom.wait_for("kompakt_cleaner_read_bytes_total", lambda v: v > 0, "cleaner bytes read")

    # The Grafana dashboard's queries are valid PromQL over metrics this broker really exports
    # (after a fetch, so the bytes-out series exists too), and promtool accepts that exposition
    # with every family present: logs, a cleaner after a clean, requests, topics, groups.
    assert len(read_all(broker.bootstrap, "prom", 0, 150)) > 0
    exported = urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=10).read().decode()
    for family in ("kompakt_log_size_bytes{", "kompakt_cleaner_partition_dirty_ratio{", "kompakt_cleaner_max_dirty_ratio",
                   "kompakt_request_duration_seconds_bucket{", "kompakt_topic_bytes_in_total{", "kompakt_broker_info{"):
        assert family in exported, family
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/test.sh does)"
    lint = subprocess.run([promtool, "check", "metrics"], input=exported.encode(), capture_output=True, timeout=30)
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    for expr in dashboard_queries():
        body = get_json(prom.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body["status"] == "success", (expr, body)
        for name in set(re.findall(r"\b((?:kompakt|process)_[a-z_]+)", expr)):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert re.search(rf"^# TYPE {family} ", exported, re.M), f"dashboard uses {name}, not exported: {expr}"


def test_partition_labels_can_be_dropped(start_broker):
    broker = start_broker(config={"metrics.partition.labels": "false", "offsets.topic.num.partitions": "1"})
    create_topics(broker.bootstrap, NewTopic("nolabels", 3, 1, config={"cleanup.policy": "compact"}))
    for p in range(3):
        produce(broker.bootstrap, "nolabels", [(b"k", b"v")] * (p + 1), partition=p)
    text = urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=10).read().decode()
    assert 'partition="' not in text
    assert 'kompakt_log_end_offset{topic="nolabels"} 6.0' in text  # summed over the 3 partitions
    assert 'kompakt_log_partitions{topic="nolabels"} 3.0' in text
