"""Broker lifecycle and `kompakt serve`: start/stop order, clean-shutdown marker, config errors,
the listener parser, and the real command with SIGTERM."""
import os
import signal
import subprocess
import sys
from argparse import ArgumentParser
from pathlib import Path

import pytest

from kompakt.broker import serve_cmd
from kompakt.broker.server import Broker, parse_listener
from kompakt.config.broker_config import BrokerConfig, ConfigError
from kompakt.testing.broker import ready_ports
from kompakt.testing.poll import wait_until

# serve_cmd.run installs its log handler on this process's root logger at INFO (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("restore_root_logging")


def serve(*argv: str) -> int:
    """`kompakt serve ARGV` in this process; its exit code."""
    parser = ArgumentParser()
    serve_cmd.add_arguments(parser)
    return serve_cmd.run(parser.parse_args(list(argv)))


def config(tmp_path, **extra):
    props = {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
             "metrics.port": "0", "log.cleaner.enable": "false"}
    props.update(extra)
    return BrokerConfig(props)


def test_parse_listener():
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("plaintext://:9093") == ("PLAINTEXT", "", 9093)
    assert parse_listener("PLAINTEXT://[::1]:9094") == ("PLAINTEXT", "::1", 9094)
    for bad in ("127.0.0.1:9092", "PLAINTEXT://host", "PLAINTEXT://host:port"):
        with pytest.raises(ConfigError, match="NAME://host:port"):
            parse_listener(bad)
    with pytest.raises(ConfigError, match="port 70000 is out of range"):   # not bound as 70000 % 65536
        parse_listener("PLAINTEXT://127.0.0.1:70000")
    assert parse_listener("PLAINTEXT://127.0.0.1:65535")[2] == 65535


async def test_start_stop_writes_the_clean_shutdown_marker(tmp_path):
    b = Broker(config(tmp_path))
    await b.start()
    assert b.ready and b.bound[0][2] > 0 and b.advertised == ("127.0.0.1", b.bound[0][2])
    assert b.cluster_id and b.log_manager.cluster_id == b.cluster_id
    b.log_manager.create_topic("t", 2, {})
    await b.stop()
    assert not b.ready
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    await b.stop()                                   # idempotent


async def test_the_start_line_names_every_listeners_advertised_address(tmp_path, caplog):
    caplog.set_level("INFO", logger="kompakt.broker.server")
    b = Broker(config(tmp_path, listeners="PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                      **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
                         "advertised.listeners": "PLAINTEXT://a.example:9092,OTHER://b.example:9093"}))
    await b.start()
    await b.stop()
    (line,) = [r.getMessage() for r in caplog.records if " ready in " in r.getMessage()]
    assert "advertising PLAINTEXT a.example:9092, OTHER b.example:9093, cluster id" in line


def test_the_brokers_own_state_files_are_not_foreign_to_the_log_dir_scan(tmp_path, caplog):
    # no "foreign file" warning at every start for files the broker itself keeps in the log dir
    # (ACLs, SCRAM credentials, the producer id block, ...), and still one for a file nobody owns
    from kompakt.broker.server import root_files
    b = Broker(config(tmp_path))
    assert root_files() <= b.log_manager.owned_root_files
    assert {"producer-id-block", "kompakt-acls.json", "kompakt-scram-credentials.json"} <= root_files()
    data = tmp_path / "data"
    data.mkdir()
    for name in root_files() | {"producer-id-block.tmp", "notes.txt"}:
        (data / name).write_text("x")
    with caplog.at_level("WARNING", logger="kompakt.storage.log_manager"):
        b.log_manager.startup()
    b.log_manager.shutdown()
    foreign = [r.getMessage() for r in caplog.records if "foreign file" in r.getMessage()]
    assert len(foreign) == 1 and "notes.txt" in foreign[0], foreign


async def test_cluster_id_survives_restarts(tmp_path):
    first = Broker(config(tmp_path))
    await first.start()
    await first.stop()
    second = Broker(config(tmp_path))
    await second.start()
    await second.stop()
    assert first.cluster_id == second.cluster_id


def test_serve_rejects_a_bad_value_with_exit_code_1(capsys):
    assert serve("--override", "socket.request.max.bytes=lots") == 1
    assert "socket.request.max.bytes" in capsys.readouterr().err


def test_serve_reports_a_port_in_use(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert serve("--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     "--override", f"log.dirs={tmp_path}/d", "--override", "metrics.port=0",
                     "--override", "log.cleaner.enable=false") == 1


def test_serve_with_a_log_dir_that_is_a_file(tmp_path, capsys):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("")
    assert serve("--override", f"log.dirs={not_a_dir}", "--override", "metrics.port=0",
                 "--override", "listeners=PLAINTEXT://127.0.0.1:0") == 1
    err = capsys.readouterr().err
    assert f"log dir {not_a_dir} is unusable" in err and "None of the specified log dirs" in err
    assert "kompakt-broker-configs.json" not in err          # not an error about a file inside it


def serving(proc: subprocess.Popen, log: Path) -> int:
    """The port a `kompakt serve` on port 0 bound, read from its ready line in `log` (its
    listeners open once the logs are loaded), after one connection to it."""
    import socket

    def ready():
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        ports = ready_ports(log.read_text(errors="replace"))
        return ports and next(iter(ports.values()))
    port = wait_until(ready, "kompakt serve's ready line", timeout=60)
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    return port


def test_kompakt_serve_with_properties_file_env_and_sigterm(tmp_path):
    """The real command: a server.properties file, a KOMPAKT_* variable over it, an --override over
    both; SIGTERM exits 0 after a clean shutdown."""
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path}/from-file\n"
                     "metrics.port=0\nnum.partitions=7\nprocess.roles=broker,controller\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
    env["KOMPAKT_LOG_DIRS"] = str(tmp_path / "from-env")
    log = tmp_path / "stderr.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kompakt", "serve", "--config", str(props),
                                 "--override", "log.cleaner.enable=false", "--log-format", "json"],
                                env=env, cwd=tmp_path, stderr=out)
    try:
        serving(proc, log)
        assert (tmp_path / "from-env" / "meta.properties").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    err = log.read_text(errors="replace")
    assert proc.returncode == 0, err
    assert not (tmp_path / "from-file").exists()     # the environment won over the file
    assert (tmp_path / "from-env" / ".kafka_cleanshutdown").exists()
    lines = [ln for ln in err.splitlines() if ln.startswith("{")]
    assert any('"process.roles' in ln or "process.roles" in ln for ln in lines)   # ignored key logged
    assert any("shutting down gracefully" in ln for ln in lines)


def test_second_broker_on_the_same_log_dir_refuses_to_start(tmp_path, capsys):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
    log = tmp_path / "first.log"
    with open(log, "wb") as out:
        first = subprocess.Popen([sys.executable, "-m", "kompakt", "serve", "--override",
                                  "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path}/d",
                                  "--override", "metrics.port=0", "--override", "log.cleaner.enable=false"],
                                 env=env, stderr=out)
    try:
        serving(first, log)
        assert serve("--override", "listeners=PLAINTEXT://127.0.0.1:0",
                     "--override", f"log.dirs={tmp_path}/d", "--override", "metrics.port=0",
                     "--override", "log.cleaner.enable=false") == 1     # the dir lock is held by the first broker
        assert first.poll() is None                     # and the first one is unharmed
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
