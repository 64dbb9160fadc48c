"""A Kompakt broker started for tests, in this process (its own thread and event loop) or as a
subprocess, and the helpers tests need around it (kompakt.testing; the pytest fixtures are in
plugin.py).

In-process: `Broker(config, embedded=True)` is built and started on a new thread running its own
event loop (uvloop when installed), listening on 127.0.0.1 port 0 (the OS picks a free port, so
there is no race for it). Nothing runs on the caller's thread: a pytest-asyncio test keeps its
loop to itself, and the helpers block only the caller. `stop()` stops the broker on its loop
(flush, checkpoints, clean shutdown), then the loop and the thread.

Subprocess: `python -m kompakt serve` with the same configuration, the Kafka port read back from
the broker's ready line (port 0 again), the admin HTTP API on a free port (the compact helper
uses it; metrics.port=0 would disable it, so the harness must pick one, and starts again with
another if something took it first: kompakt.testing.ports). `stop()` is SIGTERM and wait,
`kill()` SIGKILL.

Restarts: after its first start a broker keeps its ports (`listeners` and metrics.port are
pinned to the ports bound), so `start()` after `stop()` or `kill()` comes back where its clients
look for it; a port something else took meanwhile is tried again for a while, then the start fails
naming who holds it.

Defaults differ from a production broker only where tests need speed: one partition for
`__consumer_offsets` and `__transaction_state` (Kafka's test harnesses do the same), no initial
rebalance delay, background tasks from the start, an 8 MiB cleaner offset map. Any key can be
overridden with `config={...}` (Kafka's names).

Helpers speak the Kafka protocol (CreateTopics over TCP, kafka-python's schema classes) or read
files, so they work the same in both modes; `compact` asks the cleaner directly in-process and
through the admin API (`POST .../compact?roll=true`) for a subprocess.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import NamedTuple

from kompakt.testing.ports import (PortTaken, free_port, retry_if_port_taken, retry_while_port_taken,
                                   says_port_taken)

INPROCESS, SUBPROCESS = "inprocess", "subprocess"
MODES = (INPROCESS, SUBPROCESS)
START_TIMEOUT_S = 60.0

TEST_DEFAULTS = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.initial.task.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    # speed over power-cut safety in throwaway test brokers: acks=all is answered after the append,
    # consumers read up to the log end, nothing waits for an fsync (README, "Testing your application")
    "kompakt.durable.acks.enable": "false",
}


class StoredRecord(NamedTuple):
    """One record as stored in a partition's segment files."""
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


@contextlib.contextmanager
def _quiet_imports():
    """Import Kompakt's broker or protocol modules without their DeprecationWarnings: kafka-python
    builds its schema classes at import with importlib.resources calls Python 3.11+ deprecates
    (230 lines in a user's test report in subprocess mode); not the user's business."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


_READY_LINE = re.compile(r"ready in [0-9.]+s: listening on (.*?), advertising ")
_LISTENER = re.compile(r"(\w+)://(.*?):(\d+) \(")


def ready_ports(log_text: str) -> dict[str, int] | None:
    """{listener name: bound port} from `kompakt serve`'s ready line ("ready in 0.52s: listening
    on PLAINTEXT://127.0.0.1:40211 (PLAINTEXT), SSL://... (SSL), advertising ..."), the last one
    in `log_text`; None before the broker is ready."""
    found = _READY_LINE.findall(log_text)
    if not found:
        return None
    return {name: int(port) for name, _host, port in _LISTENER.findall(found[-1])}


def pin_listeners(listeners: str, ports: dict[str, int]) -> str:
    """`listeners` with each port 0 replaced by the port its listener bound (from `ready_ports`),
    so a restart binds the same ports."""
    pinned = []
    for entry in listeners.split(","):
        name, sep, address = entry.strip().partition("://")
        host, _, port = address.rpartition(":")
        if sep and port == "0" and name in ports:
            entry = f"{name}://{host}:{ports[name]}"
        pinned.append(entry.strip())
    return ",".join(pinned)


class KompaktBroker:
    """A running broker for tests: `.bootstrap` for clients, helpers, `.stop()`."""

    def __init__(self, mode: str, log_dir: str, config: dict[str, str]):
        self.mode = mode
        self.log_dir = log_dir
        self.config = config
        self.port: int = 0
        self.metrics_port: int = 0
        self._broker = None        # in-process: kompakt.broker.server.Broker
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr_path: Path | None = None
        self._correlation = itertools.count(1)
        self._bound: dict[str, int] = {}   # listener name -> port, from the last start
        self._started = False      # once started, its ports are pinned in `config`

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    bootstrap_servers = bootstrap

    @property
    def running(self) -> bool:
        if self.mode == INPROCESS:
            return self._broker is not None
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        return f"KompaktBroker({self.mode}, {self.bootstrap}, log_dir={self.log_dir})"

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "KompaktBroker":
        start = self._start_inprocess if self.mode == INPROCESS else self._start_subprocess
        if self._started:          # again on the ports its clients know
            ports = [self.port] + ([self.metrics_port] if self.metrics_port else [])
            retry_while_port_taken(start, f"the Kompakt broker restarting on {self.log_dir}", ports)
        elif self.mode == SUBPROCESS and not int(self.config.get("metrics.port") or 0):
            def start_with_admin_api():
                self.config["metrics.port"] = str(free_port())
                start()
            retry_if_port_taken(start_with_admin_api, f"the Kompakt broker on {self.log_dir} (its admin API)")
        else:
            start()
        self._started = True
        if "listeners" in self.config:
            self.config["listeners"] = pin_listeners(self.config["listeners"], self._bound)
        return self

    def _start_inprocess(self) -> None:
        with _quiet_imports():
            import kompakt.broker.server  # noqa: F401
        try:
            import uvloop
            loop = uvloop.new_event_loop()
        except ImportError:          # pragma: no cover - uvloop is a dependency of kompakt
            loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=f"kompakt-broker-{id(self):x}", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

        async def boot():
            from kompakt.broker.server import Broker
            from kompakt.config.broker_config import BrokerConfig
            broker = Broker(BrokerConfig(self.config), embedded=True)
            try:
                await broker.start()
            except BaseException:
                await broker.stop()
                raise
            return broker

        try:
            self._broker = asyncio.run_coroutine_threadsafe(boot(), loop).result(START_TIMEOUT_S)
        except BaseException:
            self._stop_loop()
            raise
        self._bound = {name: port for name, _host, port in self._broker.bound}
        self.port = self._broker.bound[0][2]
        self.metrics_port = int(self.config.get("metrics.port") or 0)

    def _start_subprocess(self) -> None:
        self.metrics_port = int(self.config["metrics.port"])
        cmd = [sys.executable, "-m", "kompakt", "serve", "--log-level", "INFO"]
        for key, value in self.config.items():
            cmd += ["--override", f"{key}={value}"]
        self._stderr_path = Path(self.log_dir).parent / f"kompakt-broker-{id(self):x}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOMPAKT_")}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self._stderr_path, "wb") as out:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          env=env, cwd=Path(self.log_dir).parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                text = self.log_text()
                message = f"kompakt serve exited with {self._proc.returncode} during start-up:\n{text[-4000:]}"
                raise PortTaken(message) if says_port_taken(text) else RuntimeError(message)
            ports = ready_ports(self.log_text())
            if ports:
                self._bound, self.port = ports, next(iter(ports.values()))
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"kompakt serve not ready after {START_TIMEOUT_S:.0f}s:\n{self.log_text()[-4000:]}")

    def log_text(self) -> str:
        """The subprocess broker's log so far ("" in-process: its loggers are this process's)."""
        if self._stderr_path is None:
            return ""
        try:
            return self._stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful stop: the broker flushes, checkpoints and marks a clean shutdown."""
        if self.mode == INPROCESS:
            if self._broker is not None:
                broker, self._broker = self._broker, None
                try:
                    asyncio.run_coroutine_threadsafe(broker.stop(), self._loop).result(timeout)
                finally:
                    self._stop_loop()
            return
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def kill(self) -> None:
        """SIGKILL the subprocess broker (no flush, no checkpoints, no clean-shutdown marker);
        `start()` runs it again on the same log dir and ports."""
        assert self.mode == SUBPROCESS, "only a subprocess broker can be killed"
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(30)
        if not loop.is_running():
            loop.close()
        self._loop = self._thread = None

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None, *,
                     compacted: bool = False) -> None:
        """CreateTopics over the Kafka protocol; `compacted=True` sets cleanup.policy=compact.
        Raises RuntimeError with the broker's message when it refuses (TOPIC_ALREADY_EXISTS, a bad
        config...)."""
        with _quiet_imports():
            from kafka.protocol.admin.topics import CreateTopicsRequest
        configs = dict(config or {})
        if compacted:
            configs.setdefault("cleanup.policy", "compact")
        T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(timeout_ms=30000, validate_only=False, topics=[T(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[T.CreatableTopicConfig(name=k, value=str(v)) for k, v in configs.items()])])
        (result,) = self._call(request, 5).topics
        if result.error_code:
            raise RuntimeError(f"cannot create topic {name}: error {result.error_code} {result.error_message}")

    async def acreate_topic(self, *args, **kwargs) -> None:
        """`create_topic` for async tests (runs in a worker thread; the test's loop keeps going)."""
        await asyncio.to_thread(self.create_topic, *args, **kwargs)

    def _call(self, request, version: int):
        """One request on a fresh connection; the decoded response."""
        with _quiet_imports():
            from kompakt.protocol import codec
        request.API_VERSION = version
        request.with_header(correlation_id=next(self._correlation), client_id="kompakt-testing")
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            (size,) = struct.unpack(">i", _read(sock, 4))
            body = _read(sock, size)
        return codec.decode_response(request.API_KEY, version, body)[1]

    # -- compaction ------------------------------------------------------------------------------
    def compact(self, topic: str, partition: int = 0, timeout: float = 60.0) -> dict:
        """Clean a compacted partition now and wait for it: the active segment is rolled first,
        so everything written so far is cleaned (the last value of each key stays; tombstones
        stay for delete.retention.ms). Returns the cleaner's figures for this clean."""
        if self.mode == INPROCESS:
            return asyncio.run_coroutine_threadsafe(self._compact_inprocess(topic, partition),
                                                    self._loop).result(timeout)
        url = (f"http://127.0.0.1:{self.metrics_port}/v1/partitions/{topic}/{partition}/compact"
               f"?roll=true&wait={timeout:g}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=timeout + 10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"cannot compact {topic}-{partition}: {exc.read().decode(errors='replace')}") from None
        if body.get("state") != "done":
            raise TimeoutError(f"the clean of {topic}-{partition} did not finish within {timeout:g}s: {body}")
        return body["stats"]

    async def _compact_inprocess(self, topic: str, partition: int) -> dict:
        broker = self._broker
        log = broker.log_manager.get_log((topic, partition))
        if log is None:
            raise RuntimeError(f"no partition {topic}-{partition}")
        if not log.config.compact:
            raise RuntimeError(f"{topic} has cleanup.policy={','.join(sorted(log.config.cleanup_policy))}; "
                               "only compacted topics are cleaned (create it with compacted=True)")
        if broker.cleaner is None:
            raise RuntimeError("the log cleaner is disabled (log.cleaner.enable=false)")
        await asyncio.to_thread(log.roll)
        return await broker.cleaner.clean_now((topic, partition))

    async def acompact(self, *args, **kwargs) -> dict:
        """`compact` for async tests."""
        return await asyncio.to_thread(self.compact, *args, **kwargs)

    # -- files -----------------------------------------------------------------------------------
    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return Path(self.log_dir) / f"{topic}-{partition}"

    def segment_files(self, topic: str, partition: int = 0) -> list[Path]:
        """The partition's segment (.log) files, oldest first."""
        return sorted(self.partition_dir(topic, partition).glob("*.log"))

    def records(self, topic: str, partition: int = 0) -> list[StoredRecord]:
        """Every record of the partition's segment files, in offset order (control batches of
        transactions left out): what a consumer reading from the start would get, as stored."""
        with _quiet_imports():
            from kompakt.protocol.records import decode_records, iter_batches, record_timestamp
        out = []
        for path in self.segment_files(topic, partition):
            data = path.read_bytes()
            for pos, header in iter_batches(data):
                if header.is_control:
                    continue
                for r in decode_records(data, pos, header):
                    out.append(StoredRecord(header.base_offset + r.offset_delta, r.key, r.value,
                                            tuple(r.headers), record_timestamp(header, r)))
        return out


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out


def start_broker(base_dir, *, mode: str = INPROCESS, config: dict | None = None) -> KompaktBroker:
    """Start a broker whose data lives in `base_dir` (created; the log dir is `base_dir/data`)."""
    if mode not in MODES:
        raise ValueError(f"unknown kompakt mode {mode!r}: use one of {', '.join(MODES)}")
    base = Path(base_dir)
    base.mkdir(parents=True, exist_ok=True)
    log_dir = str(base / "data")
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dir, "metrics.port": "0",
                **TEST_DEFAULTS}
    settings.update({k: str(v) for k, v in (config or {}).items()})
    return KompaktBroker(mode, log_dir, settings).start()
