"""Fixtures of the JVM test room (tests/interop/, see java_support.py for how programs are found,
built and run).

- `java` (session): every program in tests/interop/java/ compiled by one javac; `java.run(...)` /
  `java.start(...)`. JVMs a test starts with `java.start` are closed at the end of the session
  (close them yourself when a test is done with them to free memory sooner).
- `interop_broker` (module): one real broker (`kompakt serve` subprocess, free port) per test
  module, Kompakt's test defaults (one partition for __consumer_offsets and
  __transaction_state) plus the module's `BROKER_CONFIG` dict if it has one; tests use topic and
  group names of their own.
- `interop_broker_factory` (function): `factory(config={...})` for tests that need their own
  broker settings; all stopped after the test.
"""
from __future__ import annotations

import pytest

from java_support import compile_programs
from kompakt.testing.broker import SUBPROCESS, start_broker


@pytest.fixture(scope="session")
def java(tmp_path_factory):
    build = compile_programs(tmp_path_factory.mktemp("java"))
    yield build
    build.close()


@pytest.fixture(scope="module")
def interop_broker(tmp_path_factory, request):
    broker = start_broker(tmp_path_factory.mktemp("interop-broker"), mode=SUBPROCESS,
                          config=getattr(request.module, "BROKER_CONFIG", None))
    yield broker
    broker.stop()


@pytest.fixture
def interop_broker_factory(tmp_path_factory):
    started = []

    def factory(config: dict | None = None):
        broker = start_broker(tmp_path_factory.mktemp("interop-broker"), mode=SUBPROCESS, config=config)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        broker.stop()
