"""kompakt.testing: a real Kompakt broker for your application's tests, from pytest, no Docker.

Installing Kompakt registers a pytest plugin (entry point `pytest11`, module `kompakt.testing.plugin`)
with these fixtures:

    kompakt_broker          a fresh broker for one test (own port, own temporary log dir)
    kompakt_session_broker  one broker shared by the whole test session
    kompakt_broker_factory  start brokers with your own config or mode: factory(config={...}, mode=...)

Each is a `KompaktBroker` (kompakt.testing.broker): `.bootstrap` ("127.0.0.1:PORT", what every
client takes as bootstrap servers), `.create_topic(name, partitions=1, config=None,
compacted=False)`, `.compact(topic, partition=0)` (roll the active segment, clean now, wait,
return the cleaner's figures), `.records(topic, partition=0)` (what the partition's segment files
hold, decoded), `.segment_files(topic, partition=0)`, `.log_dir`, `.stop()`. Async tests can await
`acreate_topic` / `acompact`.

Modes: `inprocess` (default: the broker runs on its own thread with its own event loop inside the
test process, so it never shares or blocks a pytest-asyncio test's loop) or `subprocess`
(`python -m kompakt serve`). Choose with `--kompakt-mode` or the ini option `kompakt_mode`, or per
broker with the factory.

Importing this package or the plugin imports no broker code; a broker is built on first use.
"""
from __future__ import annotations

__all__ = ["KompaktBroker", "StoredRecord", "start_broker", "TEST_DEFAULTS"]


def __getattr__(name: str):
    # lazy: `import kompakt.testing` (and pytest loading the plugin) must stay cheap
    if name in __all__:
        from kompakt.testing import broker
        return getattr(broker, name)
    raise AttributeError(f"module 'kompakt.testing' has no attribute {name!r}")
