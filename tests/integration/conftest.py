"""Integration-test harness: real `python -m kompakt serve` processes on free ports.

Contract (docs/contracts.md, "Test harness"):
- `start_broker(**overrides) -> BrokerProcess` starts a broker subprocess with a fresh log dir
  under the test's tmp_path, a free Kafka port and a free metrics port, and returns once it answers
  ApiVersions (and /ready on the metrics port). Overrides are broker keys with `_` for `.`
  (`log_segment_bytes=1000`) and/or `config={"log.segment.bytes": "1000"}`.
- `BrokerProcess`: `.bootstrap` ("127.0.0.1:PORT"), `.port`, `.ports` (listener name -> port, for
  listeners a test adds as `NAME://127.0.0.1:0`), `.metrics_port`, `.metrics_url`,
  `.log_dir`, `.pid`, `.stop()` (SIGTERM, wait, returns the exit code), `.kill()` (SIGKILL),
  `.restart()` (same dirs and ports), `.start()`, `.log_text()` (the broker's stderr so far).
- `broker`: `start_broker()` with defaults.
- Power cuts (kompakt/storage/power_cut.py): `start_broker(power=True, ...)` runs the broker with
  the page-cache model (TEST_KOMPAKT_POWER_JOURNAL=<base>/power-journal, the log dir recorded as
  durable before each start); `.cut()` cuts the power under the running broker (its workers too) and
  leaves the log dir as a power cut would; `.restore_after_crash()` does the same after the broker
  died at a crash point (TEST_KOMPAKT_CRASH_AT); then `.start()` on the same files.
- `module_broker`: one broker (num.partitions=3, offsets.topic.num.partitions=1) shared by a test module, for tests that
  only add topics of their own; it saves a start-up per test. Do not stop or restart it.
Every broker started is stopped at teardown. Never port 9092, never ./kompakt-data.
"""
from __future__ import annotations

import pytest

from broker_process import BrokerProcess


def _keys(overrides: dict) -> dict[str, str]:
    config = dict(overrides.pop("config", None) or {})
    for key, value in overrides.items():
        config[key.replace("_", ".")] = value
    return config


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def factory(*, power: bool = False, **overrides) -> BrokerProcess:
        base = tmp_path / f"broker{len(started)}"
        proc = BrokerProcess(base, _keys(overrides), power=power)
        started.append(proc)
        return proc.start()

    yield factory
    for proc in started:
        try:
            proc.stop()
        except RuntimeError:
            proc.kill()


@pytest.fixture
def broker(start_broker) -> BrokerProcess:
    return start_broker()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("module-broker"),
                         {"num.partitions": "3", "offsets.topic.num.partitions": "1"})
    proc.start()
    yield proc
    try:
        proc.stop()
    except RuntimeError:
        proc.kill()
