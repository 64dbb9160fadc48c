"""A small synchronous Kafka client for command-line tools: connections, versions, routing, errors.

Role: `Cluster(bootstrap)` connects to the first reachable `host:port` of the bootstrap list,
reads its ApiVersions and its Metadata (brokers, controller), and sends each request where Kafka's
Admin client sends it: `controller()` for topic creation/deletion (a KRaft broker forwards it
anyway), `coordinator(group)` (FindCoordinator) for group requests, `node(leader_id)` for
ListOffsets. Requests are built from plain keyword arguments (nested structs as dicts) with the
request classes of kompakt.protocol.registry (kafka-python 3.x's compiled Kafka JSON schemas),
at the highest version both sides support within `CLIENT_VERSIONS`: the versions whose fields
the commands fill and read.

Security: `security` (clients/security.py, from --command-config) starts TLS on each connection
and authenticates with SASL after ApiVersions, as Kafka's clients do.

Errors: every failure is a `CommandError` with a one-line message and the process exit status:
`BrokerError` (exit 1) carries Kafka's error name and the broker's message (or Kafka's
description when the broker sent none); a broker that cannot be reached, closes the connection or
does not answer in time is exit 2, with the address and how to point elsewhere.

Invariant: one request in flight per connection; every answer's correlation id and length are
checked against the request before it is used.
"""
from __future__ import annotations

import itertools
import socket
import struct

from kompakt.protocol import codec, registry

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
CLIENT_ID = "kompakt-cli"

# API key -> (lowest, highest) version this client fills and reads. The ranges stop where a
# version changes the meaning of a field we use: OffsetCommit/OffsetFetch v10 name topics by id,
# Metadata needs v4+ to ask for no auto-creation.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    2: (1, 10),     # ListOffsets
    3: (4, 13),     # Metadata
    8: (2, 9),      # OffsetCommit
    9: (2, 9),      # OffsetFetch (v8+: the groups array)
    10: (0, 6),     # FindCoordinator (v4+: coordinator_keys)
    15: (0, 6),     # DescribeGroups
    16: (0, 5),     # ListGroups
    17: (1, 1),     # SaslHandshake (v1: the mechanism's bytes travel in SaslAuthenticate)
    18: (0, 0),     # ApiVersions: v0 is answered by every broker since 0.10
    19: (2, 7),     # CreateTopics
    20: (1, 6),     # DeleteTopics (v6: topics by name or id)
    36: (0, 2),     # SaslAuthenticate
    32: (1, 4),     # DescribeConfigs
    37: (0, 3),     # CreatePartitions
    42: (0, 2),     # DeleteGroups
    44: (0, 1),     # IncrementalAlterConfigs
    69: (0, 1),     # ConsumerGroupDescribe (KIP-848 groups)
}


class CommandError(Exception):
    """A failure the command reports in one line, then exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class BrokerError(CommandError):
    """A Kafka error code in an answer: `context: NAME: message`."""

    def __init__(self, code: int, message: str | None, context: str):
        self.code = code
        self.name = error_name(code)
        super().__init__(f"{context}: {self.name}: {message or error_description(code)}")


def _error_class(code: int):
    import kafka.errors as kafka_errors
    return kafka_errors.for_code(code)


def error_name(code: int) -> str:
    """Kafka's name of an error code (Errors.java: TOPIC_ALREADY_EXISTS, NON_EMPTY_GROUP, ...)."""
    from kompakt.protocol.errors import ErrorCode
    try:
        return ErrorCode(code).name
    except ValueError:   # a code Kompakt never raises: kafka-python's name for it
        cls = _error_class(code)
        return cls.message if cls.errno == code else f"ERROR_{code}"


def error_description(code: int) -> str:
    cls = _error_class(code)
    return cls.description if cls.errno == code else "an error code this client does not know"


def check(code: int, message: str | None, context: str) -> None:
    if code:
        raise BrokerError(code, message, context)


def build(cls, fields: dict):
    """A request object (or nested struct) from keyword values; nested structs may be dicts."""
    values = {}
    for name, value in fields.items():
        data_class = getattr(cls._struct.fields[name], "data_class", None)
        if data_class is not None and hasattr(data_class, "_struct"):
            if isinstance(value, list):
                value = [build(data_class, v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = build(data_class, value)
        values[name] = value
    return cls(**values)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise CommandError(f"bad broker address {address!r}: expected host:port", 2)
    return host.strip("[]"), int(port)


class Connection:
    """One TCP connection to one broker, with the API versions it announced."""

    def __init__(self, host: str, port: int, timeout: float, security=None):
        """Connect, start TLS and read ApiVersions, then authenticate (SASL) if `security` says so
        (a clients.security.ClientSecurity; None: plaintext)."""
        self.address = f"{host}:{port}"
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise CommandError(f"cannot reach a Kafka broker at {self.address} ({_reason(exc)}); is it "
                               "running? Point elsewhere with --bootstrap host:port", 2) from None
        if security is not None:
            try:
                self.sock = security.wrap(self.sock, host)
            except OSError as exc:   # ssl.SSLError included: an untrusted or mismatched certificate
                self.sock.close()
                raise CommandError(f"TLS with {self.address} failed ({_reason(exc)}); check "
                                   "security.protocol and ssl.truststore.location in --command-config", 2) from None
        self.ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        answer = self._send(registry.API[18].request(), 0)
        check(answer.error_code, None, f"ApiVersions from {self.address}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        if security is not None:
            security.authenticate(self)

    def version(self, api_key: int) -> int:
        """The highest version of `api_key` both this client and the broker support."""
        name = registry.API[api_key].name
        lo, hi = CLIENT_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[1] < lo or theirs[0] > hi:
            offered = "not at all" if theirs is None else f"versions {theirs[0]}-{theirs[1]}"
            raise CommandError(f"the broker at {self.address} does not support {name} versions {lo}-{hi} "
                               f"(it offers {offered})")
        return min(hi, theirs[1])

    def supports(self, api_key: int) -> bool:
        lo, hi = CLIENT_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        return theirs is not None and theirs[1] >= lo and theirs[0] <= hi

    def call(self, api_key: int, **fields):
        """Send one request at the negotiated version; its decoded answer (`.API_VERSION` says which)."""
        return self._send(build(registry.API[api_key].request, fields), self.version(api_key))

    def _send(self, request, version: int):
        name = registry.API[request.API_KEY].name
        request.API_VERSION = version
        correlation_id = next(self.ids)
        request.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
        try:
            self.sock.sendall(bytes(request.encode(header=True, framed=True)))
            (size,) = struct.unpack(">i", self._read(4, name))
            body = self._read(size, name)
        except socket.timeout:
            raise CommandError(f"the broker at {self.address} did not answer {name} within "
                               f"{self.timeout:g}s (--timeout)", 2) from None
        except OSError as exc:
            raise CommandError(f"lost the connection to {self.address} during {name} ({_reason(exc)})", 2) from None
        try:
            answered_id, answer, end = codec.decode_response(request.API_KEY, version, body)
        except Exception as exc:   # a broker speaking something else (TLS, HTTP) on this port
            raise CommandError(f"{self.address} answered {name} v{version} with bytes that do not decode "
                               f"({exc.__class__.__name__}); is it a Kafka listener of the security.protocol "
                               "--command-config gives (default PLAINTEXT)?", 2) from None
        if answered_id != correlation_id or end != len(body):
            raise CommandError(f"{self.address} answered {name} v{version} out of order or with a "
                               "malformed body", 2)
        return answer

    def _read(self, n: int, name: str) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise CommandError(f"the broker at {self.address} closed the connection during {name} (a TLS "
                                   "or SASL listener? say so with --command-config)", 2)
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or exc.__class__.__name__


class Cluster:
    """The brokers behind a bootstrap list, one lazily opened connection per broker."""

    def __init__(self, bootstrap: str = DEFAULT_BOOTSTRAP, timeout: float = 30.0, security=None):
        self.timeout = timeout
        self.security = security
        self.addresses = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self.addresses:
            raise CommandError("--bootstrap is empty: give host:port[,host:port...]", 2)
        self.bootstrap = self._connect_any()
        self.connections: dict[int, Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None

    def _connect_any(self) -> Connection:
        failure = None
        for host, port in self.addresses:
            try:
                return Connection(host, port, self.timeout, self.security)
            except CommandError as exc:
                failure = exc
        assert failure is not None
        raise failure

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in {id(c): c for c in [self.bootstrap, *self.connections.values()]}.values():
            conn.close()

    # -- metadata ---------------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None = None):
        """Metadata of `topics` (None: every topic), never creating one; remembers the brokers."""
        answer = self.bootstrap.call(
            3, topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        check(getattr(answer, "error_code", 0) or 0, None, "Metadata")
        self.brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        self.controller_id = answer.controller_id
        self.cluster_id = answer.cluster_id
        return answer

    def node(self, node_id: int) -> Connection:
        if node_id in self.connections:
            return self.connections[node_id]
        if not self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise CommandError(f"broker {node_id} is not in the cluster's metadata "
                               f"(brokers: {sorted(self.brokers) or 'none'})")
        host, port = self.brokers[node_id]
        if (host, port) == self.bootstrap_address():
            conn = self.bootstrap
        else:
            conn = Connection(host, port, self.timeout, self.security)
        self.connections[node_id] = conn
        return conn

    def bootstrap_address(self) -> tuple[str, int]:
        host, _, port = self.bootstrap.address.rpartition(":")
        return host, int(port)

    def controller(self) -> Connection:
        """Where topic changes go: the controller Metadata names, else any broker (KRaft forwards)."""
        if not self.brokers:
            self.metadata([])
        return self.node(self.controller_id) if self.controller_id in self.brokers else self.bootstrap

    def coordinator(self, group: str) -> Connection:
        """The group coordinator of `group` (FindCoordinator, key type 0)."""
        answer = self.bootstrap.call(10, key=group, key_type=0, coordinator_keys=[group])
        if answer.API_VERSION >= 4:
            (found,) = answer.coordinators
        else:
            found = answer
        check(found.error_code, found.error_message, f"FindCoordinator for group '{group}'")
        self.brokers.setdefault(found.node_id, (found.host, found.port))
        return self.node(found.node_id)
