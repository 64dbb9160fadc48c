"""Zero-copy fetch (issue 25): a plaintext Fetch answer's record ranges go from the segment files
to the socket with sendfile (broker/network/direct_send.py); over TLS the ranges are read when
they are encrypted (broker/network/tls_transport.py). Both must carry exactly the bytes the log
holds.

One broker for the module, with a PLAINTEXT and an SSL listener; a topic of 8 partitions of about
1 MiB each (1 KiB records of known content), so a fetch answer holds 8 ranges far above
segment.FILE_RECORDS_MIN. Checked: a confluent-kafka consumer on either listener gets every record
with its key and value; raw Fetch answers read by a slow reader with a 4 KiB receive buffer (the
broker's sends fill the socket and wait for it: back-pressure) equal, byte for byte, the same
request answered over TLS and what the segment files hold; answers pipelined behind a large one
arrive whole and in order; the descriptors the sends hold are all closed afterwards, over either
listener, clients that vanish mid-answer included; a read_committed consumer over ranges holding aborted and
committed transactions gets exactly the committed records.
"""
from __future__ import annotations

import hashlib
import os
import socket
import ssl
import time
from pathlib import Path

import confluent_kafka as ck
import pytest

from security_support import Pki
from wire_support import Wire, req, sub

TOPIC = "zero-copy"
PARTITIONS = 8
PER_PARTITION = 1100           # 1 KiB values: ~1.1 MiB per partition
TIMEOUT_S = 60


def value_of(p: int, i: int) -> bytes:
    """Record i of partition p: 1 KiB of deterministic, incompressible-looking bytes."""
    seed = hashlib.sha256(b"%d/%d" % (p, i)).digest()
    return (seed * 32)[:1024]


@pytest.fixture(scope="module")
def zc_broker(tmp_path_factory):
    from broker_process import BrokerProcess
    base = tmp_path_factory.mktemp("zero-copy")
    pki = Pki(base / "pki")
    proc = BrokerProcess(base / "broker", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_pem,
        "offsets.topic.num.partitions": "1"})
    proc.config["listeners"] = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
    proc.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(TIMEOUT_S)
        producer = ck.Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 20, "acks": "all",
                                "batch.size": 32768})   # many batches: a 64 KiB limit cuts between them
        for i in range(PER_PARTITION):
            for p in range(PARTITIONS):
                producer.produce(TOPIC, value_of(p, i), b"k%d" % i, partition=p)
            producer.poll(0)
        assert producer.flush(TIMEOUT_S) == 0
        yield proc, pki, f"127.0.0.1:{proc.ports['SSL']}"
    finally:
        try:
            proc.stop()
        except RuntimeError:
            proc.kill()


def consume_all(conf: dict) -> dict[int, list[tuple[int, bytes, bytes]]]:
    c = ck.Consumer({**conf, "group.id": f"zc-{time.monotonic_ns()}", "enable.auto.commit": False,
                     "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    c.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while sum(map(len, got.values())) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


def check_records(got) -> None:
    for p in range(PARTITIONS):
        assert len(got[p]) == PER_PARTITION, (p, len(got[p]))
        for i, (offset, key, value) in enumerate(got[p]):
            assert (offset, key) == (i, b"k%d" % i), (p, i, offset, key)
            assert value == value_of(p, i), (p, i)


def test_a_plaintext_consumer_reads_every_record(zc_broker):
    proc, _, _ = zc_broker
    check_records(consume_all({"bootstrap.servers": proc.bootstrap}))


def test_a_tls_consumer_reads_every_record(zc_broker):
    proc, pki, ssl_bootstrap = zc_broker
    check_records(consume_all({"bootstrap.servers": ssl_bootstrap, "security.protocol": "SSL",
                               "ssl.ca.location": pki.ca_file}))


def fetch_request(max_bytes: int = 50 << 20, part_max: int = 10 << 20):
    F = sub(1, "FetchTopic")
    return req(1, cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
               isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
               topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
                   partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                   log_start_offset=-1, partition_max_bytes=part_max) for p in range(PARTITIONS)])])


def records_of(answer) -> dict[int, bytes]:
    (topic,) = answer.responses
    assert all(p.error_code == 0 for p in topic.partitions)
    return {p.partition_index: bytes(p.records) for p in topic.partitions}


class SlowWire(Wire):
    """Reads its answers late and in small pieces (a slow consumer): the broker fills the socket."""

    def _read(self, n: int, name: str, version: int) -> bytes:
        time.sleep(0.002)
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 64 * 1024))
            assert chunk, f"broker closed the connection on {name} v{version}"
            out += chunk
        return bytes(out)


def segment_bytes(proc, p: int, n: int) -> bytes:
    data = Path(proc.log_dir, f"{TOPIC}-{p}", "00000000000000000000.log").read_bytes()
    return data[:n]


def test_a_slow_reader_gets_exactly_the_log_bytes_in_order(zc_broker):
    proc, pki, ssl_bootstrap = zc_broker
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)    # before connect: a small window
    sock.settimeout(TIMEOUT_S)
    sock.connect(("127.0.0.1", proc.port))
    wire = SlowWire(None, sock=sock)
    try:
        # an answer of bytes only (64 KiB per partition: below FILE_RECORDS_MIN) that the
        # transport still holds when the next, large one is ready (its ranges are then read into
        # memory), that large answer again once sending directly, and an ApiVersions: every answer
        # whole and in request order (Wire checks ids and sizes)
        calls = [(fetch_request(part_max=64 * 1024), 12), (fetch_request(), 12), (fetch_request(), 11),
                 (req(18, client_software_name="t", client_software_version="1"), 3)]
        small, big, again, versions = wire.pipeline(calls)
    finally:
        wire.close()
    assert versions.error_code == 0
    plain = records_of(big)
    assert records_of(again) == plain
    assert sum(map(len, plain.values())) > PARTITIONS * PER_PARTITION * 1024
    for p, data in records_of(small).items():
        assert 0 < len(data) <= 64 * 1024 and plain[p].startswith(data)
    for p, data in plain.items():
        assert data == segment_bytes(proc, p, len(data)), p

    ctx = ssl.create_default_context(cafile=pki.ca_file)
    host, port = ssl_bootstrap.split(":")
    tls = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=TIMEOUT_S), server_hostname=host)
    wire = Wire(None, sock=tls)
    try:
        assert records_of(wire.call(fetch_request(), 12)) == plain
    finally:
        wire.close()


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_every_range_descriptor_is_closed_after_sending(zc_broker, listener):
    """Each FileRecords holds a dup() of its segment's descriptor, and a DirectSender a dup() of
    the socket's: all are closed once sent (over TLS: once read for encryption), or when the
    client goes away mid-answer (a leak would exhaust the broker's descriptors). The broker's
    open descriptors return to what they were."""
    proc, pki, ssl_bootstrap = zc_broker
    fds = Path(f"/proc/{proc.pid}/fd")
    port = proc.port if listener == "PLAINTEXT" else int(ssl_bootstrap.rsplit(":", 1)[1])

    def connect(sock: socket.socket) -> socket.socket:
        sock.settimeout(TIMEOUT_S)
        sock.connect(("127.0.0.1", port))
        if listener == "SSL":
            sock = ssl.create_default_context(cafile=pki.ca_file).wrap_socket(sock, server_hostname="127.0.0.1")
        return sock

    def fetch_once():
        wire = Wire(None, sock=connect(socket.socket()))
        try:
            assert sum(map(len, records_of(wire.call(fetch_request(), 12)).values())) > 1 << 20
        finally:
            wire.close()

    fetch_once()                                      # segments opened, connections settled
    deadline = time.monotonic() + TIMEOUT_S
    baseline = len(list(fds.iterdir()))
    for _ in range(10):
        fetch_once()
    for _ in range(3):                                # gone mid-answer: 4 KiB window, closed unread
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock = connect(raw)
        request = fetch_request()
        request.API_VERSION = 12
        request.with_header(correlation_id=1, client_id="gone")
        sock.sendall(request.encode(header=True, framed=True))
        time.sleep(0.2)
        sock.close()
    while len(list(fds.iterdir())) > baseline:
        assert time.monotonic() < deadline, (baseline, sorted(os.readlink(f) for f in fds.iterdir()))
        time.sleep(0.05)


def test_read_committed_over_ranges_drops_an_aborted_transaction(zc_broker):
    """read_committed answers name the aborted transactions overlapping the records returned, up
    to the last batch's last offset: read from a FileRecords' last batch header. A consumer reading
    large answers (ranges) of aborted and committed transactions gets exactly the committed ones."""
    proc, _, _ = zc_broker
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("zc-txn", 1)])["zc-txn"].result(TIMEOUT_S)
    p = ck.Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "zc-txn", "linger.ms": 20,
                     "batch.size": 32768})
    p.init_transactions(TIMEOUT_S)
    expected = []
    for txn in range(6):                                   # ~600 KiB each: abort, commit, abort, ...
        p.begin_transaction()
        for i in range(600):
            value = b"%d/%d/" % (txn, i) + value_of(txn, i)[:1000]
            p.produce("zc-txn", value, partition=0)
            if txn % 2:
                expected.append(value)
        p.flush(TIMEOUT_S)
        if txn % 2:
            p.commit_transaction(TIMEOUT_S)
        else:
            p.abort_transaction(TIMEOUT_S)
    c = ck.Consumer({"bootstrap.servers": proc.bootstrap, "group.id": f"zc-txn-{time.monotonic_ns()}",
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    c.assign([ck.TopicPartition("zc-txn", 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < len(expected) and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    got.append(m.value())
        for m in c.consume(1000, 1.0):                     # nothing more (no aborted record leaks)
            if m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == expected
