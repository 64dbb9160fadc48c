"""The integration tests' broker harness: a real `python -m kompakt serve` process on free ports.

`BrokerProcess` and `free_port` live here, not in conftest.py, so test modules import them by a
name of their own (`from broker_process import BrokerProcess`): every test room has a
conftest.py, and `from conftest import ...` gets whichever room's conftest pytest imported last
(tests/interop's, since that room exists). conftest.py documents the contract and builds the
fixtures on this class.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kompakt.storage import power_cut

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ApiVersions v0 request: size, api_key 18, version 0, correlation id 1, client_id "ready"
_API_VERSIONS_V0 = struct.pack(">ihhih5s", 2 + 2 + 4 + 2 + 5, 18, 0, 1, 5, b"ready")


def _answers_api_versions(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(_API_VERSIONS_V0)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            size, correlation_id = struct.unpack(">ii", head)
            return correlation_id == 1 and size > 4
    except OSError:
        return False


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
        self.port = free_port()
        self.metrics_port = free_port()
        self.config = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": self.log_dir,
            "metrics.port": str(self.metrics_port),
            "metrics.host": "127.0.0.1",
            # tests expect a quick, deterministic broker: no 30 s background delay
            "log.initial.task.delay.ms": "0",
        }
        self.config.update({k: str(v) for k, v in config.items()})
        if str(self.config.get("metrics.port")) == "0":
            self.metrics_port = 0
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}" if self.metrics_port else None
        self.stderr_path = self.base_dir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "INFO"]
        for key, value in self.config.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> "BrokerProcess":
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
        env["PYTHONUNBUFFERED"] = "1"
        if self.power_journal:
            power_cut.begin(self.power_journal, [self.log_dir])
            env[power_cut.JOURNAL_ENV] = self.power_journal
        self.starts += 1
        log = open(self.stderr_path, "ab")
        log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.command(), cwd=self.base_dir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during start-up:\n"
                                   f"{self.log_text()[-4000:]}")
            if _answers_api_versions(self.port) and (
                    not self.metrics_port or _http_ok(f"{self.metrics_url}/ready")):
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

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, pid={self.pid}, log_dir={self.log_dir})"
