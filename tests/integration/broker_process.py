"""The integration tests' broker harness: a real `python -m kompakt serve` process on free ports.

`BrokerProcess` lives here, not in conftest.py, so test modules import it by a name of their own
(`from broker_process import BrokerProcess`): every test room has a conftest.py, and `from
conftest import ...` gets whichever room's conftest pytest imported last (tests/interop's, since
that room exists). conftest.py documents the contract and builds the fixtures on this class.

Ports (kompakt.testing.ports says why): the Kafka listeners bind port 0 and the first start
reads the ports back from the broker's ready line (`.port`, `.bootstrap`, and `.ports` by
listener name, for a test that adds listeners as `NAME://127.0.0.1:0`); the admin API, which
must be told its port, gets a free one, and another if that was taken before the broker bound
it. A restart binds the same ports again (its clients keep the addresses), waiting a while for
one something else holds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kompakt.storage import power_cut
from kompakt.testing.broker import pin_listeners, ready_ports
from kompakt.testing.ports import PortTaken, free_port, retry_if_port_taken, retry_while_port_taken, says_port_taken

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class BrokerProcess:
    def __init__(self, base_dir: Path, config: dict[str, str], *, power: bool = False):
        self.base_dir = Path(base_dir)
        self.power_journal = str(self.base_dir / "power-journal") if power else None
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = str(self.base_dir / "kompakt-data")
        self.config = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": self.log_dir,
            "metrics.host": "127.0.0.1",
            # tests expect a quick, deterministic broker: no 30 s background delay
            "log.initial.task.delay.ms": "0",
        }
        self.config.update({k: str(v) for k, v in config.items()})
        # the admin API's port: the test's (0 disables it), or a free one picked at the first start
        self._pick_metrics_port = "metrics.port" not in self.config
        self.metrics_port = int(self.config.get("metrics.port", 0))
        self.ports: dict[str, int] = {}      # listener name -> bound port, known once started
        self.port = 0                         # the first listener's
        self.stderr_path = self.base_dir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "INFO"]
        for key, value in self.config.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return f"http://127.0.0.1:{self.metrics_port}" if self.metrics_port else None

    def start(self) -> "BrokerProcess":
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        if self.ports:                         # again on the ports its clients know
            ports = [*self.ports.values()] + ([self.metrics_port] if self.metrics_port else [])
            retry_while_port_taken(self._start, f"the broker restarting on {self.log_dir}", ports)
        elif self._pick_metrics_port:
            retry_if_port_taken(self._start_with_a_free_metrics_port, f"the broker on {self.log_dir}")
        else:
            self._start()
        self.config["listeners"] = pin_listeners(self.config["listeners"], self.ports)
        return self

    def _start_with_a_free_metrics_port(self) -> None:
        self.metrics_port = free_port()
        self.config["metrics.port"] = str(self.metrics_port)
        self._start()

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
        env["PYTHONUNBUFFERED"] = "1"
        if self.power_journal:
            power_cut.begin(self.power_journal, [self.log_dir])
            env[power_cut.JOURNAL_ENV] = self.power_journal
        self.starts += 1
        log = open(self.stderr_path, "ab")
        log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
        log.flush()
        since = log.tell()                     # this start's lines follow
        self.proc = subprocess.Popen(self.command(), cwd=self.base_dir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready(since)

    def _wait_ready(self, since: int) -> None:
        """Until this start's ready line (the listeners are bound) and /ready on the admin API."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.log_text()
                message = f"broker exited with {self.proc.returncode} during start-up:\n{text[-4000:]}"
                raise PortTaken(message) if says_port_taken(self._log_since(since)) else RuntimeError(message)
            ports = ready_ports(self._log_since(since))
            if ports and (not self.metrics_port or _http_ok(f"{self.metrics_url}/ready")):
                self.ports, self.port = ports, next(iter(ports.values()))
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker not ready after {START_TIMEOUT_S:.0f}s:\n{self.log_text()[-4000:]}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; returns the exit code (SIGKILL after `timeout`)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker did not stop within {timeout}s of SIGTERM:\n{self.log_text()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoints, no clean-shutdown marker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cut(self) -> dict[str, int]:
        """Cut the power now: the broker and its workers die, the log dir keeps only what was synced."""
        assert self.power_journal, "start_broker(power=True) arms the page-cache model"
        counts = power_cut.cut(self.proc.pid, self.power_journal)
        self.proc.wait()
        return counts

    def restore_after_crash(self) -> dict[str, int]:
        """The broker died at a crash point (the power cut there): apply what the cut keeps."""
        assert self.power_journal and self.proc.poll() is not None
        return power_cut.restore(self.power_journal)

    def restart(self, *, kill: bool = False) -> "BrokerProcess":
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    # -- introspection -----------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _log_since(self, offset: int) -> str:
        with open(self.stderr_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, pid={self.pid}, log_dir={self.log_dir})"
