"""Ports for the servers tests start, without the race of handing over a port found free.

The race: a port found free (bind to port 0, read the port, close) is free only at that moment.
Until the server binds it, anything else may take it: the other pytest-xdist worker's broker, any
server binding port 0, a client's ephemeral port. The server then fails to start (EADDRINUSE),
and the test with it. So, in order of preference:

1. A server that can bind port 0 itself does, and the test reads the real port back (Kompakt's
   ready line: `kompakt.testing.broker.ready_ports`; an in-process Broker's `bound`).
2. A program that must be told its port up front (Kompakt's admin API, where metrics.port=0
   disables it; PostgreSQL; Prometheus; a container's ports) is started through
   `retry_if_port_taken(start, what)`: `start()` takes new ports from `free_port()` at each call
   and raises `PortTaken` when its bind failed; it is called again, a few times.
3. A server that must come back on its port after a restart (its clients keep the address) is
   started again through `retry_while_port_taken(start, what, ports)`: the same ports, again for
   a while (a port probe holds a port for microseconds), then a failure naming who holds the port.

`closed_port()` is a port that nothing listens on, held (bound, not listening) for a with-block:
connecting to it is refused, and no server can take it meanwhile (tests of "nobody answers").
"""
from __future__ import annotations

import contextlib
import errno
import shutil
import socket
import subprocess
import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
ATTEMPTS = 5                 # new ports tried before giving up (each race is rare: 5 in a row is not)
RESTART_WAIT_S = 30.0        # how long a restart waits for its own port to come free
RESTART_INTERVAL_S = 0.5


class PortTaken(OSError):
    """A server could not bind its port: something else had it (errno EADDRINUSE)."""

    def __init__(self, message: str):
        super().__init__(errno.EADDRINUSE, message)

    def __str__(self) -> str:
        return self.strerror


def says_port_taken(text: str) -> bool:
    """Whether a program's output reports a bind that failed with EADDRINUSE (the C library's
    message, which Python, PostgreSQL and Java print as is and Go in lower case)."""
    return "address already in use" in text.lower()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (not a moment later: see the module docstring)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _taken(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def retry_if_port_taken(start: Callable[[], T], what: str, *, attempts: int = ATTEMPTS) -> T:
    """`start()`, called again (it takes new ports) while its bind fails with EADDRINUSE."""
    failures = []
    for _ in range(attempts):
        try:
            return start()
        except OSError as exc:
            if not _taken(exc):
                raise
            failures.append(str(exc))
    raise RuntimeError(f"{what} did not start: {attempts} times in a row a port found free was taken before it "
                       "bound it (another test's server?):\n" + "\n".join(failures))


def retry_while_port_taken(start: Callable[[], T], what: str, ports: Iterable[int], *,
                           timeout: float = RESTART_WAIT_S) -> T:
    """`start()` on the same `ports`, again while its bind fails with EADDRINUSE, for `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return start()
        except OSError as exc:
            if not _taken(exc):
                raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} could not bind its ports again within {timeout:g}s: {exc}\n"
                                   f"held by: {holders(ports)}") from exc
        time.sleep(RESTART_INTERVAL_S)


def holders(ports: Iterable[int]) -> str:
    """Who listens on `ports`, as `ss -ltnp` says (the process names and ids), for a failure message."""
    ports = list(ports)
    ss = shutil.which("ss")
    if ss is None:
        return f"unknown (no `ss` to ask about ports {ports})"
    found = []
    for port in ports:
        try:
            out = subprocess.run([ss, "-Htlnp", f"sport = :{port}"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            out = f"ss failed: {exc}"
        found.append(f"port {port}: {out or 'no listener now'}")
    return "; ".join(found)


@contextlib.contextmanager
def closed_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port bound and not listening for the with-block: connections to it are refused, and
    no server can bind it meanwhile (this socket has no SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        yield s.getsockname()[1]
