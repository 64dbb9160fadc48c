"""The pytest plugin of kompakt.testing (entry point `pytest11`: kompakt = kompakt.testing.plugin).

Fixtures (all names start with `kompakt_`, so they never shadow a project's own `broker`):

    kompakt_broker           function scope: a fresh broker per test
    kompakt_session_broker   session scope: one broker for the whole run
    kompakt_broker_factory   function scope: factory(config=None, mode=None) -> KompaktBroker;
                             every broker it started is stopped after the test

Mode: `--kompakt-mode inprocess|subprocess` on the command line, else the ini option
`kompakt_mode`, else in-process. Loading this module imports only pytest: brokers (and their
imports) are built when a test first asks for one.
"""
from __future__ import annotations

import pytest

INI_MODE = "kompakt_mode"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("kompakt", "Kompakt test broker (kompakt.testing)")
    group.addoption("--kompakt-mode", dest="kompakt_mode", default=None, choices=("inprocess", "subprocess"),
                    help="run kompakt_* brokers in this process (default) or as `kompakt serve` subprocesses")
    parser.addini(INI_MODE, "default mode of kompakt_* brokers: inprocess or subprocess", default="inprocess")


def _mode(config) -> str:
    return config.getoption("kompakt_mode") or config.getini(INI_MODE) or "inprocess"


def _start(base_dir, config, mode):
    from kompakt.testing.broker import start_broker
    return start_broker(base_dir, mode=mode, config=config)


@pytest.fixture
def kompakt_broker(tmp_path_factory, pytestconfig):
    """A Kompakt broker for this test only (fresh data dir, own port): `.bootstrap`,
    `.create_topic()`, `.compact()`, `.records()`."""
    broker = _start(tmp_path_factory.mktemp("kompakt"), None, _mode(pytestconfig))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kompakt_session_broker(tmp_path_factory, pytestconfig):
    """One Kompakt broker shared by every test of the session (use your own topic names)."""
    broker = _start(tmp_path_factory.mktemp("kompakt-session"), None, _mode(pytestconfig))
    yield broker
    broker.stop()


@pytest.fixture
def kompakt_broker_factory(tmp_path_factory, pytestconfig):
    """`factory(config=None, mode=None)`: brokers with your own settings (Kafka's keys, e.g.
    {"log.segment.bytes": "1048576"}) or mode; all stopped after the test."""
    started = []

    def factory(config: dict | None = None, mode: str | None = None):
        broker = _start(tmp_path_factory.mktemp("kompakt"), config, mode or _mode(pytestconfig))
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        broker.stop()
