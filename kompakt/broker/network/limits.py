"""Connection and request-memory limits: Kafka's max.connections, max.connections.per.ip (and its
overrides) and queued.max.request.bytes, for every listener of the broker.

Role: one `Limits` per broker, asked by each connection when it opens (`admit`) and closes
(`release`), and before it starts a request (`reserve`). The config is read at each question, so
the dynamic broker configs (max.connections* are dynamic in Kafka) apply to new connections at once.

  max.connections              (default 2147483647) open connections across listeners; one more is
                               closed at once (Kafka's acceptor blocks instead: with one event loop
                               a closed socket is the cheaper way to say "later")
  max.connections.per.ip       (default 2147483647) open connections from one client address; one
                               more is closed at once, as Kafka does (TooManyConnectionsException)
  max.connections.per.ip.overrides  `host:n,host:n` per-address exceptions (Kafka's format)
  queued.max.request.bytes     (default -1; 0 or less: no limit, as Kafka) bytes of requests
                               read and not yet answered, across connections (Kafka's memory pool). A connection whose next
                               request finds the pool used up stops reading until answers free
                               memory: a large request is asked for when its size prefix arrives
                               and its body stays in the socket (protocol/framing.py admit_large);
                               a small one, already in the read buffer, waits there, parsed
                               later. As Kafka's non-strict pool,
                               a request is admitted whenever any memory is free, so one request
                               larger than the pool still goes through alone.
Refusals are counted (`refused` by reason, exported as kompakt_broker_connections_refused_total)
and logged once per address and reason until that address has a connection accepted again.

Invariants: `open_total == sum(open_by_ip.values())`; `queued_bytes` is the sum of the reservations
of requests not yet answered; a connection is resumed at most once per release that frees memory.
"""
from __future__ import annotations

import collections
import logging

log = logging.getLogger(__name__)

UNLIMITED = 2**31 - 1


def parse_overrides(text: str | None) -> dict[str, int]:
    """`host:n,host:n` -> {host: n} (max.connections.per.ip.overrides); bad entries are skipped."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        host, sep, n = item.strip().rpartition(":")
        if sep and host and n.strip().isdigit():
            out[host.strip().strip("[]")] = int(n)
    return out


class Limits:
    def __init__(self, config):
        self.config = config
        self.open_by_ip: collections.Counter[str] = collections.Counter()
        self.open_total = 0
        self.refused: collections.Counter[str] = collections.Counter()
        self.queued_bytes = 0
        self._waiting: collections.deque = collections.deque()   # connections holding a request back
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}
        self._logged: set[tuple[str, str]] = set()

    # -- connections ----------------------------------------------------------------------------
    def _per_ip_limit(self, host: str) -> int:
        text = self.config.get("max.connections.per.ip.overrides") or ""
        if text != self._overrides_text:
            self._overrides_text, self._overrides = text, parse_overrides(text)
        return self._overrides.get(host, self.config.get("max.connections.per.ip") or UNLIMITED)

    def admit(self, host: str) -> str | None:
        """Count a new connection from `host`; None if admitted, else the reason it is refused."""
        reason = None
        if self.open_total >= (self.config.get("max.connections") or UNLIMITED):
            reason = "max.connections"
        elif self.open_by_ip[host] >= self._per_ip_limit(host):
            reason = "max.connections.per.ip"
        if reason is not None:
            self.refused[reason] += 1
            if (host, reason) not in self._logged:
                self._logged.add((host, reason))
                log.warning("refusing connections from %s: %s reached (%d open from it, %d in all); "
                            "logged once until one is accepted again", host, reason, self.open_by_ip[host],
                            self.open_total)
            return reason
        self.open_by_ip[host] += 1
        self.open_total += 1
        if self._logged:
            self._logged = {k for k in self._logged if k[0] != host}
        return None

    def release(self, host: str) -> None:
        self.open_total -= 1
        self.open_by_ip[host] -= 1
        if self.open_by_ip[host] <= 0:
            del self.open_by_ip[host]

    # -- request memory (queued.max.request.bytes) ------------------------------------------------
    def reserve(self, conn, nbytes: int) -> bool:
        """Take `nbytes` for a request about to start; False (and `conn` queued to be resumed) when
        the pool has nothing free."""
        cap = self._pool_bytes()
        if cap is None or self.queued_bytes < cap:
            self.queued_bytes += nbytes
            return True
        if conn not in self._waiting:
            self._waiting.append(conn)
        return False

    def free(self, nbytes: int) -> None:
        """An answered (or abandoned) request gives its bytes back; waiting connections go on."""
        self.queued_bytes -= nbytes
        cap = self._pool_bytes()
        while self._waiting and (cap is None or self.queued_bytes < cap):
            self._waiting.popleft().resume_held()

    def _pool_bytes(self) -> int | None:
        """The pool's size; None for no pool (Kafka makes one only when the key is > 0)."""
        cap = self.config.get("queued.max.request.bytes")
        return cap if cap is not None and cap > 0 else None

    def forget(self, conn) -> None:
        try:
            self._waiting.remove(conn)
        except ValueError:
            pass
