"""Suite-wide setup: every process a test starts runs the code of this checkout.

Tests start brokers, workers and CLIs as subprocesses (`python -m kompakt ...`). Putting the
repository root first on PYTHONPATH makes them import this checkout's `kompakt`, whatever an earlier
`pip install -e` of another clone points at, so a test never exercises stale code.
"""
import asyncio
import compileall
import logging
import os
import sys
from pathlib import Path

import pytest
import uvloop

REPO_ROOT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))

# Hundreds of processes import this checkout's `kompakt` (every broker start and restart, every CLI
# run, the cleaner's worker processes). With PYTHONDONTWRITEBYTECODE set, as in our CI shell, none
# of them writes its bytecode, so each compiled all ~250 modules again: 1-1.5 s of every broker
# start on a loaded 2-core machine (py-spy: a third of start-up in source_to_code). Python still
# reads bytecode it finds, so compile the package once here (only files whose .pyc is stale; the
# .pyc files go to the gitignored __pycache__ dirs, as any run without that variable would leave;
# a read-only checkout just compiles as before).
# Under pytest-xdist only the controller compiles, before it starts the workers.
if (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")) \
        and "PYTEST_XDIST_WORKER" not in os.environ:
    compileall.compile_dir(os.path.join(REPO_ROOT, "kompakt"), quiet=2)   # errors show on import

# Every test's event loop is uvloop's, as the broker's is (`kompakt serve` installs it): the first
# test that ran serve_cmd.run in this process used to switch the policy for all that came after,
# so with the tests spread over xdist workers which loop a test got depended on its neighbours.
asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

# py4j logs "Closing down clientserver connection" from an atexit hook after pytest has closed its
# log capture, which prints a "--- Logging error ---" traceback at the end of every run.
logging.getLogger("py4j").setLevel(logging.WARNING)

# tests/plugin_example is another project's test suite (it needs the kompakt.testing plugin
# installed); tests/integration/test_testing_plugin.py runs it in a fresh virtualenv.
collect_ignore = ["plugin_example"]

# No timed assertions (speed is the benchmarks' business): Hypothesis' default 200 ms deadline per
# example failed test_offset_checkpoint_round_trip on a loaded machine (an fsync took 257 ms), so
# every property test runs without one; tests that set their own settings keep them.
from hypothesis import settings as _hypothesis_settings   # noqa: E402

_hypothesis_settings.register_profile("kompakt", deadline=None)
_hypothesis_settings.load_profile("kompakt")


@pytest.fixture
def restore_root_logging():
    """For a test that runs `kompakt serve`'s code in this process (serve_cmd.run) or calls
    logging_setup.configure: afterwards the root logger has its handlers and level back. Left as
    they were, a handler on the test's stderr capture (closed once the test ends) and the root level
    INFO stay for the rest of the session: every later INFO line of any test, and of any thread,
    prints a "--- Logging error ---" traceback (ValueError: I/O operation on closed file)."""
    root = logging.getLogger()
    access = logging.getLogger("aiohttp.access")        # configure() sets its level too
    handlers, level, access_level = list(root.handlers), root.level, access.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    access.setLevel(access_level)


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """scripts/test.sh runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`): the
    suite spends most of its time waiting (brokers starting, JVMs, sessions timing out, fsyncs),
    not on the CPU. Each test file goes whole to one worker, so its module-scoped broker starts
    once; every file that uses the session's SparkSession goes to the same worker, so one JVM
    serves them all."""
    if not getattr(config.option, "loadgroup", False):    # set by xdist in its workers, which collect
        return
    spark_files = {item.path for item in items if "spark" in getattr(item, "fixturenames", ())}
    for item in items:
        group = "spark" if item.path in spark_files else \
            item.path.relative_to(config.rootpath).with_suffix("").as_posix()    # shows as `::test@<group>`
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole run (its JVM takes seconds to start): the pipeline tests and
    the interop test that snapshots a Debezium topic share it."""
    from kompakt.pipeline.spark import get_session   # pyspark: the spark extra (scripts/test.sh installs it)

    # tiny data: C1-only JIT and no whole-stage codegen halve session start and first-query time
    session = get_session("local[2]", {
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.sql.codegen.wholeStage": "false",
    })
    yield session
    session.stop()
