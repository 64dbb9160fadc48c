"""Large TLS requests decrypted on worker threads (broker/network/tls_transport.py, tls_records.py)
against a real in-process Broker over TCP: multi-megabyte produce requests between small ones and
fetches on one connection come back byte-exact, and `kompakt_tls_bytes_total` shows they were
decrypted off the event loop (or by the loop, on a broker without TLS threads); confluent-kafka
over TLS the same; a client's EOF (FIN, or close_notify in the job's own input) while a decryption
job runs reaches the connection after the request; a connection lost meanwhile drops the job's
plaintext; a TLS 1.3 KeyUpdate in the middle of a job's input; ciphertext after a close_notify
the job read is dropped."""
import asyncio
import ctypes
import os
import socket
import ssl
import struct
import threading

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from prometheus_client.parser import text_string_to_metric_families

from kompakt.broker import server
from kompakt.broker.network import tls_records
from kompakt.protocol.records import build_batch, iter_batches
from kompakt.storage import TopicPartition
from kompakt.testing.poll import until

from test_tls_transport import (DEADLINE_S, ca, client_context, frame, read_answer, ssl_port,  # noqa: F401
                                start_tls_broker, tls_threads_on_one_cpu)                     # (fixtures)

FT, FP = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
TD = ProduceRequest.TopicProduceData

def needs_native() -> None:
    """Decryption leaves the loop only through the native reader (a C compiler builds it, as in CI);
    without one it stays on the loop by design, and these tests would test nothing."""
    from kompakt import native
    if getattr(native.LIB, "km_tls_read", None) is None:
        pytest.fail("no native seam (kompakt/native): a C compiler is needed for these tests")


@pytest.fixture
async def broker(tls_threads_on_one_cpu, tmp_path, ca):  # noqa: F811
    needs_native()
    b = await start_tls_broker(tmp_path, ca)
    yield b
    await b.stop()


@pytest.fixture(params=["workers", "loop only"])
async def either_broker(request, tmp_path, ca, monkeypatch):  # noqa: F811
    """A broker with TLS worker threads, or one with none (as under `taskset -c 0`), where the
    loop decrypts everything itself with the native reader that keeps the GIL."""
    needs_native()
    monkeypatch.setattr(server, "threads_beside_the_loop",
                        (lambda at_most: max(1, at_most)) if request.param == "workers" else (lambda at_most: 0))
    b = await start_tls_broker(tmp_path, ca)
    yield b, request.param
    await b.stop()


def decrypted(b) -> dict:
    """The SSL listener's bytes decrypted, by thread ("event_loop", "worker")."""
    counts = next(s for s in b.listeners if s.name == "SSL").tls_bytes
    return {thread: counts[("decrypt", thread)] for thread in ("event_loop", "worker")}


def batches(partitions: int, megabytes: float, seed: int) -> list[bytes]:
    """One batch per partition of `megabytes` MB of 1000-byte random values in all."""
    per = int(megabytes * 1000 / partitions)
    return [bytes(build_batch([(b"%d-%d-%d" % (seed, p, i), os.urandom(1000)) for i in range(per)]))
            for p in range(partitions)]


def produce(topic: str, per_partition: list[bytes]) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        TD(name=topic, partition_data=[TD.PartitionProduceData(index=p, records=batch)
                                       for p, batch in enumerate(per_partition)])])


def fetch(topic: str, partitions: int, min_bytes: int) -> FetchRequest:
    """From offset 0 of each partition, once `min_bytes` are readable (synced)."""
    return FetchRequest(replica_id=-1, max_wait_ms=DEADLINE_S * 1000, min_bytes=min_bytes, max_bytes=1 << 28,
                        isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                        topics=[FT(topic=topic, partitions=[FP(partition=p, fetch_offset=0, partition_max_bytes=1 << 28,
                                                               current_leader_epoch=-1, log_start_offset=-1)
                                                            for p in range(partitions)])])


def stored_tails(records) -> list[bytes]:
    """Each stored batch from its magic byte on: what the producer sent, byte for byte (the
    broker sets the base offset and the leader epoch before it, the CRC covers what follows)."""
    buf = bytes(records or b"")
    return [buf[pos + 16:pos + 12 + header.batch_length] for pos, header in iter_batches(buf)]


async def test_multi_megabyte_produces_between_small_requests_and_fetches_are_decrypted_on_workers(either_broker,
                                                                                                ca):
    """One TLS connection pipelines a 4 MB produce (four partitions), a small produce, a fetch of
    what is stored so far, ApiVersions, a 2 MB produce and a last fetch: every answer comes in
    request order, each fetch holds the batches produced, byte for byte (the first at least the
    first two requests' five, the last all of them), and the
    SSL listener's counter shows the large requests decrypted by the worker threads, not the loop
    (on a broker without threads, by the loop)."""
    b, threads = either_broker
    b.log_manager.create_topic("p", 4, {})
    big1, big2 = batches(4, 4, 1), batches(4, 2, 2)
    small = [bytes(build_batch([(b"small", b"x" * 100)]))]
    before = decrypted(b)
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1", limit=1 << 16)
    first, every = sum(map(len, big1 + small)), sum(map(len, big1 + small + big2))
    requests = [("produce", produce("p", big1), 7), ("produce", produce("p", small), 7),
                ("fetch", fetch("p", 4, first), 11), ("api", ApiVersionsRequest(version=0), 0),
                ("produce", produce("p", big2), 7), ("fetch", fetch("p", 4, every), 11)]
    for cid, (_, msg, version) in enumerate(requests):
        writer.write(frame(msg, version, cid))
    want = {0: big1[:1] + small + big2[:1], 1: big1[1:2] + big2[1:2], 2: big1[2:3] + big2[2:3], 3: big1[3:] + big2[3:]}
    seen_first_fetch = False
    for cid, (kind, _, version) in enumerate(requests):
        body = await read_answer(reader)
        if kind == "produce":
            resp = ProduceResponse.decode(body, version=version, header=True)
            assert [p.error_code for p in resp.responses[0].partition_responses] == [0] * len(resp.responses[0].partition_responses)
        elif kind == "fetch":
            resp = FetchResponse.decode(body, version=version, header=True)
            got = {p.partition_index: stored_tails(p.records) for p in resp.responses[0].partitions}
            if not seen_first_fetch:                          # after big1 and the small one
                seen_first_fetch = True
                # a parked fetch lets the requests behind it start (its effects are applied), so
                # what it holds when it answers is some prefix of what is produced, byte-exact
                for partition, batches_ in want.items():
                    assert got[partition] == [x[16:] for x in batches_][:len(got[partition])]
                assert sum(map(len, got.values())) >= 5
            else:
                assert got == {p: [x[16:] for x in batches_] for p, batches_ in want.items()}
        else:
            resp = ApiVersionsResponse.decode(body, version=version, header=True)
        assert resp.header.correlation_id == cid
    writer.close()
    after = decrypted(b)
    large = sum(map(len, big1 + big2))
    off, on = after["worker"] - before["worker"], after["event_loop"] - before["event_loop"]
    if threads == "workers":
        assert off >= 0.9 * large and on < 0.1 * large                  # the large requests left the loop
    else:
        assert off == 0 and on >= large


async def test_confluent_kafka_over_tls_with_multi_megabyte_requests_reads_back_every_record(broker, ca, tmp_path):
    """confluent-kafka produces 12 MB of 1 KiB records to four partitions over TLS in requests of
    several MB (message.max.bytes 8 MB, 1 MB batches) and reads them back over TLS: every record,
    key and value, in order per partition; the metric a user scrapes (`kompakt_tls_bytes_total`)
    counts what the worker threads and the loop decrypted."""
    from confluent_kafka import Consumer, Producer, TopicPartition as Assigned
    b = broker
    b.log_manager.create_topic("ck", 4, {})
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    conf = {"bootstrap.servers": f"127.0.0.1:{ssl_port(b)}", "security.protocol": "SSL",
            "ssl.ca.location": str(ca_path)}
    n = 12_000
    values = {i: os.urandom(1024) for i in range(n)}

    def produce_all() -> None:
        p = Producer({**conf, "linger.ms": 200, "batch.size": 1_000_000, "message.max.bytes": 8_000_000,
                      "acks": "1", "enable.idempotence": False})
        for i, value in values.items():
            p.produce("ck", value, key=b"%d" % i, partition=i % 4)
            p.poll(0)
        assert p.flush(DEADLINE_S) == 0

    def consume_all() -> dict:
        c = Consumer({**conf, "group.id": "ck", "enable.auto.commit": False})
        c.assign([Assigned("ck", p, 0) for p in range(4)])
        got: dict = {}
        try:
            for _ in range(n):
                msg = c.poll(DEADLINE_S)
                assert msg is not None and msg.error() is None, msg and msg.error()
                got.setdefault(msg.partition(), []).append((int(msg.key()), msg.value()))
        finally:
            c.close()
        return got
    await asyncio.to_thread(produce_all)
    got = await asyncio.to_thread(consume_all)
    for partition in range(4):
        keys = [k for k, _ in got[partition]]
        assert keys == list(range(partition, n, 4))          # every record, in order
        assert all(value == values[k] for k, value in got[partition])
    b.metrics.attach(b)                                       # what the admin app does on metrics.port
    families = {f.name: f for f in text_string_to_metric_families(b.metrics.render().decode())}
    samples = {(s.labels["listener"], s.labels["operation"], s.labels["thread"]): s.value
               for s in families["kompakt_tls_bytes"].samples}
    # every byte counted once; how many reads were large enough for a worker depends on the pace
    # of the client and the loop (the raw test above pins that down)
    assert samples[("SSL", "decrypt", "worker")] > 0
    assert samples[("SSL", "decrypt", "worker")] + samples[("SSL", "decrypt", "event_loop")] >= n * 1024
    assert samples[("SSL", "encrypt", "worker")] > 0                  # the fetches' answers, as before


def held_jobs(b, monkeypatch) -> threading.Event:
    """Decryption jobs wait for the returned event before they start (the real pool and job)."""
    release, submit = threading.Event(), b.tls_workers.submit

    def held(fn, *args):
        if getattr(fn, "__name__", "") != "_run_decryption":
            return submit(fn, *args)

        def job():
            release.wait(DEADLINE_S)
            fn(*args)
        return submit(job)
    monkeypatch.setattr(b.tls_workers, "submit", held)
    return release


def tls_layer(b):
    conn = next(c for c in b.connections if c.listener == "SSL")
    return conn, conn.transport._tls


def answers(data: bytes) -> list[int]:
    """The correlation ids of the answers in `data`."""
    ids, pos = [], 0
    while pos + 8 <= len(data):
        ids.append(struct.unpack(">i", data[pos + 4:pos + 8])[0])
        pos += 4 + struct.unpack(">i", data[pos:pos + 4])[0]
    return ids


class BioClient:
    """A TLS client over a plain socket and two ssl.MemoryBIO: its bytes leave when the test says
    (`flush`), so it can put a close_notify or a KeyUpdate exactly where it wants."""

    def __init__(self, port: int, ca):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = client_context(ca).wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def handshake(self) -> None:
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self.incoming.write(self.sock.recv(1 << 16))
        self.flush()

    def flush(self) -> None:
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())

    def close_notify(self) -> None:
        """Queue the client's close_notify (sent at the next flush; the broker's comes at its close)."""
        try:
            self.tls.unwrap()
        except ssl.SSLWantReadError:
            pass

    async def read_to_the_close(self) -> bytes:
        """All the plaintext until the broker closes; then the socket is closed."""
        data = await asyncio.wait_for(asyncio.to_thread(self.read_until, lambda data: False), DEADLINE_S)
        self.sock.close()
        return data

    def read_until(self, enough) -> bytes:
        """Plaintext until `enough(data)`, the broker's close_notify or its close."""
        data = bytearray()
        while not enough(data) and (chunk := self.sock.recv(1 << 20)):
            self.incoming.write(chunk)
            try:
                while piece := self.tls.read(1 << 20):
                    data += piece
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                break
            self.flush()                                      # (the client's answer to a KeyUpdate, say)
        return bytes(data)


@pytest.mark.parametrize("goodbye", ["fin", "close_notify"])
async def test_an_eof_while_a_decryption_job_runs_reaches_the_connection_after_the_request(broker, ca, monkeypatch,
                                                                                           goodbye):
    """A client sends a 3 MB produce and an ApiVersions, then says goodbye: a TCP FIN that comes
    while the job decrypting the produce is held (the EOF waits behind it), or its close_notify
    right behind the requests (the job itself reads it). Both requests are answered, in order,
    then the broker closes; the produce is stored. Before the EOF waited, a connection told of
    it first would have closed with the request unanswered."""
    b = broker
    b.log_manager.create_topic("e", 4, {})
    big = batches(4, 3, 3)
    release = held_jobs(b, monkeypatch) if goodbye == "fin" else None
    requests = frame(produce("e", big), 7, 1) + frame(ApiVersionsRequest(version=0), 0, 2)
    client = BioClient(ssl_port(b), ca)
    await asyncio.to_thread(client.handshake)
    client.tls.write(requests)
    if goodbye == "close_notify":
        client.close_notify()
    await asyncio.to_thread(client.flush)
    if goodbye == "fin":
        await until(lambda: any(c.listener == "SSL" for c in b.connections) and tls_layer(b)[1]._busy,
                    "the decryption job under way")
        client.sock.shutdown(socket.SHUT_WR)
        await until(lambda: None in tls_layer(b)[1]._inbound, "the FIN waiting behind the job")
        release.set()
    data = await client.read_to_the_close()
    assert answers(data) == [1, 2]
    resp = ProduceResponse.decode(data[4:4 + struct.unpack(">i", data[:4])[0]], version=7, header=True)
    assert [p.error_code for p in resp.responses[0].partition_responses] == [0] * 4
    assert sum(b.log_manager.get_log(TopicPartition("e", p)).log_end_offset for p in range(4)) == 3000
    await until(lambda: not any(c.listener == "SSL" for c in b.connections), "the broker's close")
    assert decrypted(b)["worker"] >= 3_000_000


async def test_a_connection_lost_while_a_decryption_job_runs_drops_what_it_decrypted(broker, ca):
    """The client resets the connection after a job has decrypted its 3 MB produce and before the
    job's report reaches the loop: the plaintext is dropped (no request is started, nothing is
    written, no exception reaches the loop), and the worker threads serve the next connection."""
    b = broker
    b.log_manager.create_topic("r", 4, {})
    loop = asyncio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    raw = socket.create_connection(("127.0.0.1", ssl_port(b)), timeout=DEADLINE_S)
    tls = await asyncio.to_thread(client_context(ca).wrap_socket, raw, server_hostname="127.0.0.1")
    await until(lambda: any(c.listener == "SSL" for c in b.connections), "the connection")
    conn, layer = tls_layer(b)
    reports = []
    layer._decryption_done = reports.append                   # the job's report, held here
    await asyncio.to_thread(tls.sendall, frame(produce("r", batches(4, 3, 4)), 7, 1))
    await until(lambda: reports, "a decryption job's report")
    assert sum(map(len, reports[0][0])) > 0                   # it did decrypt
    tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    tls.close()                                               # RST
    await asyncio.wait_for(conn.closed, DEADLINE_S)
    type(layer)._decryption_done(layer, reports[0])           # the report arrives after connection_lost
    assert not layer._busy and layer._decrypted is None and not layer._inbound
    assert sum(b.log_manager.get_log(TopicPartition("r", p)).log_end_offset for p in range(4)) == 0
    assert errors == []
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1")
    writer.write(frame(produce("r", batches(4, 3, 5)), 7, 2))
    resp = ProduceResponse.decode(await read_answer(reader), version=7, header=True)
    assert resp.header.correlation_id == 2
    assert [p.error_code for p in resp.responses[0].partition_responses] == [0] * 4
    writer.close()


async def test_a_key_update_in_the_middle_of_a_large_request_is_read_by_the_job_and_answered(broker, ca):
    """TLS 1.3: the client asks for a KeyUpdate (update_requested) halfway through a 3 MB produce,
    so the job decrypting it meets the KeyUpdate between records and must read on with the new
    key, and the broker must send its own KeyUpdate: both requests are answered and the client
    reads the answers. (Python's ssl has no KeyUpdate call: libssl's SSL_key_update is called on
    the client's SSL object, found as tls_records finds the broker's.)"""
    b = broker
    b.log_manager.create_topic("k", 4, {})
    lib = tls_records._mapped_libssl()
    lib.SSL_key_update.argtypes, lib.SSL_key_update.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    request = frame(produce("k", batches(4, 3, 6)), 7, 1)
    client = BioClient(ssl_port(b), ca)
    await asyncio.to_thread(client.handshake)
    assert client.tls.version() == "TLSv1.3"
    client.tls.write(request[:len(request) // 2])
    client_ssl = tls_records._pointer_at(client.tls._sslobj, tls_records._HEAD + tls_records._PTR)
    assert lib.SSL_key_update(client_ssl, 1) == 1             # SSL_KEY_UPDATE_REQUESTED, sent with the next write
    client.tls.write(request[len(request) // 2:] + frame(ApiVersionsRequest(version=0), 0, 2))
    await asyncio.to_thread(client.flush)
    data = await asyncio.wait_for(asyncio.to_thread(
        client.read_until, lambda data: len(answers(bytes(data))) == 2 and len(data) > 4 + struct.unpack(">i", data[:4])[0]),
        DEADLINE_S)
    client.sock.close()
    assert answers(data) == [1, 2]
    resp = ProduceResponse.decode(data[4:4 + struct.unpack(">i", data[:4])[0]], version=7, header=True)
    assert [p.error_code for p in resp.responses[0].partition_responses] == [0] * 4
    assert decrypted(b)["worker"] >= 2_000_000


async def test_ciphertext_after_a_close_notify_read_by_a_job_is_dropped_not_decrypted_again(broker, ca, monkeypatch):
    """A client sends a 2 MB produce and an ApiVersions, its close_notify, then 256 KiB more (what
    a client sends after its close_notify means nothing: RFC 8446 6.1), and a FIN. The job reads
    the close_notify with the rest in its input: the requests are answered, in order, and the
    broker closes. Before, the bytes left behind the close_notify (64 KiB or more) started a
    job again and again, each finding the close_notify and nothing else: a worker thread spun
    for ever, and the answers, which wait while a job runs, never went out."""
    b = broker
    b.log_manager.create_topic("n", 4, {})
    release = held_jobs(b, monkeypatch)
    client = BioClient(ssl_port(b), ca)
    await asyncio.to_thread(client.handshake)
    client.tls.write(frame(produce("n", batches(4, 2, 7)), 7, 1) + frame(ApiVersionsRequest(version=0), 0, 2))
    await asyncio.to_thread(client.flush)
    await until(lambda: any(c.listener == "SSL" for c in b.connections) and tls_layer(b)[1]._busy,
                "the decryption job under way")
    client.close_notify()
    await asyncio.to_thread(client.flush)
    await asyncio.to_thread(client.sock.sendall, os.urandom(256 * 1024))
    client.sock.shutdown(socket.SHUT_WR)
    await until(lambda: None in tls_layer(b)[1]._inbound, "all of it queued behind the held job")
    release.set()
    data = await client.read_to_the_close()
    assert answers(data) == [1, 2]
    await until(lambda: not any(c.listener == "SSL" for c in b.connections), "the broker's close")
    assert sum(b.log_manager.get_log(TopicPartition("n", p)).log_end_offset for p in range(4)) == 2000
