"""Our TLS layer (broker/network/tls_transport.py) on a real in-process Broker over TCP: answers
encrypted on worker threads arrive byte-exact and in order between small inline ones, an abort
while a worker encrypts, a client's half-close, the handshake timeout, and small pieces sharing
a TLS record."""
import asyncio
import socket
import ssl
import struct

import pytest
import trustme
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from kompakt.broker import server
from kompakt.broker.network import tls_transport
from kompakt.broker.server import Broker
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition
from kompakt.testing.poll import until

FT = FetchRequest.FetchTopic
FP = FT.FetchPartition
TD = ProduceRequest.TopicProduceData
DEADLINE_S = 20


@pytest.fixture
def ca():
    return trustme.CA()


async def start_tls_broker(tmp_path, ca, **config) -> Broker:
    """An in-process broker with a PLAINTEXT and an SSL listener (and `config`), started."""
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "metrics.port": "0", "log.cleaner.enable": "false",
                             "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "server.pem"),
                             **config}))
    await b.start()
    return b


@pytest.fixture
async def tls_broker(tmp_path, ca):
    b = await start_tls_broker(tmp_path, ca)
    yield b
    await b.stop()


def ssl_port(b) -> int:
    return dict((n, p) for n, _, p in b.bound)["SSL"]


def client_context(ca) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


def frame(msg, version, correlation_id) -> bytes:
    msg.with_header(correlation_id=correlation_id, client_id="t")
    payload = bytes(msg.encode(version=version, header=True))
    return struct.pack(">i", len(payload)) + payload


def fetch_all(topic: str) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 26, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                        topics=[FT(topic=topic, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 26,
                                                               current_leader_epoch=-1, log_start_offset=-1)])])


def produce(topic: str, value: bytes) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        TD(name=topic, partition_data=[TD.PartitionProduceData(index=0, records=build_batch([(None, value)]))])])


def big_topic(b, name: str, batches: int) -> bytes:
    """A topic of `batches` 64 KiB batches, synced (readable); its stored bytes."""
    b.log_manager.create_topic(name, 1, {})
    log = b.log_manager.get_log(TopicPartition(name, 0))
    for i in range(batches):
        log.append_as_leader(bytearray(build_batch([(None, bytes([i % 251]) * 1024)] * 64)))
    log.sync_data()
    return bytes(log.read(0, 1 << 30).records)


async def read_answer(reader) -> bytes:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))[0]
    return await asyncio.wait_for(reader.readexactly(size), DEADLINE_S)


@pytest.fixture
def tls_threads_on_one_cpu(monkeypatch):
    """The broker made after this gets TLS worker threads even where the process may run on one
    CPU only (`taskset -c 0`, a one-core runner), where it would encrypt everything inline and the
    tests of the threads would test nothing (they failed there: no pool). Request it before
    tls_broker."""
    on_cpus = server.threads_beside_the_loop
    monkeypatch.setattr(server, "threads_beside_the_loop", lambda at_most: max(1, on_cpus(at_most)))


def force_worker_threads(monkeypatch) -> None:
    """Every answer of 4 KiB or more goes to the worker threads: jobs of 32 KiB, or of 160 KiB
    sent in 32 KiB steps by the worker (many per answer, and a step the socket does not take whole
    puts the rest of its job back)."""
    monkeypatch.setattr(tls_transport, "OFF_LOOP_BYTES", 4096)
    monkeypatch.setattr(tls_transport, "JOB_BYTES", 32 * 1024)
    monkeypatch.setattr(tls_transport, "DIRECT_JOB_BYTES", 160 * 1024)


async def test_fetches_encrypted_on_threads_arrive_byte_exact_between_pipelined_produces(tls_threads_on_one_cpu, tls_broker,
                                                                                          ca, monkeypatch):
    """One TLS connection pipelines produces (small answers, encrypted inline; a 300 KiB request
    decrypted while jobs run) and 2 MB fetches (encrypted by worker jobs of 32 KiB): every answer
    comes back in request order and each fetch holds exactly the stored bytes."""
    force_worker_threads(monkeypatch)
    b = tls_broker
    stored = big_topic(b, "big", 32)
    assert len(stored) > 2_000_000
    b.log_manager.create_topic("p", 1, {})
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1", limit=1 << 16)
    requests, cid = [], 0
    for round_ in range(6):
        for value in (b"small-%d" % round_, bytes(300 * 1024)):
            cid += 1
            requests.append((cid, "produce", frame(produce("p", value), 7, cid)))
        cid += 1
        requests.append((cid, "fetch", frame(fetch_all("big"), 11, cid)))
        cid += 1
        requests.append((cid, "api", frame(ApiVersionsRequest(version=0), 0, cid)))

    async def send():                                         # while the answers before are being encrypted
        for *_, request in requests:
            writer.write(request)
            await writer.drain()
            await asyncio.sleep(0.002)
    sending = asyncio.create_task(send())
    for want, kind, _ in requests:
        body = await read_answer(reader)
        if kind == "fetch":
            resp = FetchResponse.decode(body, version=11, header=True)
            assert bytes(resp.responses[0].partitions[0].records) == stored
        elif kind == "produce":
            resp = ProduceResponse.decode(body, version=7, header=True)
            assert resp.responses[0].partition_responses[0].error_code == 0
        else:
            resp = ApiVersionsResponse.decode(body, version=0, header=True)
        assert resp.header.correlation_id == want
    await sending
    assert b.tls_workers is not None and b.tls_workers.started      # the answers did go to the threads
    assert b.log_manager.get_log(TopicPartition("p", 0)).log_end_offset == 12
    writer.close()


async def test_an_abort_while_a_worker_encrypts_writes_nothing_more_and_frees_the_answer(tls_threads_on_one_cpu, tls_broker,
                                                                                         ca, monkeypatch):
    """The connection is aborted right after a fetch answer's first job went to a worker: the
    client sees the connection go, the job's ciphertext is dropped when it comes back, or the
    job is cancelled if no worker had started it (no exception in the loop), the unencrypted rest is let go, and the threads serve the next
    connection."""
    force_worker_threads(monkeypatch)
    b = tls_broker
    stored = big_topic(b, "big", 16)
    loop = asyncio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    submit, jobs, aborted = b.tls_workers.submit, [], []

    def submit_then_abort(fn, *args):                         # the real pool; the abort lands mid-job
        job = submit(fn, *args)
        jobs.append(job)
        if not aborted:
            conn = next(c for c in b.connections if c.listener == "SSL")
            aborted.append((conn, conn.transport))
            conn.abort()
        return job
    monkeypatch.setattr(b.tls_workers, "submit", submit_then_abort)
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1")
    writer.write(frame(fetch_all("big"), 11, 1))
    try:
        got = await asyncio.wait_for(reader.read(), DEADLINE_S)
    except (ConnectionResetError, ssl.SSLError):
        got = b""
    assert len(got) < len(stored)                             # cut off, not answered
    [(conn, transport)] = aborted
    await asyncio.wait_for(conn.closed, DEADLINE_S)
    assert len(jobs) == 1                                     # nothing encrypted after the abort
    # the job ran (its result is dropped below) or, not started at the abort, was cancelled
    await asyncio.wait([asyncio.wrap_future(jobs[0])], timeout=DEADLINE_S)
    assert jobs[0].done()
    for _ in range(3):                                        # its result reaches the loop, and is dropped
        await asyncio.sleep(0)
    assert transport.unencrypted_bytes == 0 and transport.is_closing()
    assert conn not in b.connections
    writer.close()
    monkeypatch.setattr(b.tls_workers, "submit", submit)
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1")
    writer.write(frame(fetch_all("big"), 11, 2))
    resp = FetchResponse.decode(await read_answer(reader), version=11, header=True)
    assert resp.header.correlation_id == 2 and bytes(resp.responses[0].partitions[0].records) == stored
    writer.close()
    assert errors == []


async def test_a_client_that_half_closes_gets_its_answers_then_close_notify(tls_broker, ca):
    """A TLS client that sends its requests and then its FIN (shutdown(SHUT_WR)) is answered, as
    on plaintext, then the broker sends close_notify and closes (the loop's SSL transport closed
    at the EOF without answering)."""
    b = tls_broker
    stored = big_topic(b, "big", 4)

    def client() -> tuple[list, bytes]:
        with socket.create_connection(("127.0.0.1", ssl_port(b)), timeout=DEADLINE_S) as raw:
            # a TCP close without close_notify raises SSLEOFError here instead of reading b""
            tls = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
            tls.sendall(frame(ApiVersionsRequest(version=0), 0, 1) + frame(fetch_all("big"), 11, 2))
            socket.socket.shutdown(tls, socket.SHUT_WR)      # the TCP FIN under the TLS session
            data = b""
            while chunk := tls.recv(1 << 16):                # b"" at the broker's close_notify
                data += chunk
            return data
    data = await asyncio.to_thread(client)
    first = struct.unpack(">i", data[:4])[0]
    assert ApiVersionsResponse.decode(data[4:4 + first], version=0, header=True).header.correlation_id == 1
    resp = FetchResponse.decode(data[8 + first:], version=11, header=True)
    assert resp.header.correlation_id == 2 and bytes(resp.responses[0].partitions[0].records) == stored


async def test_max_connections_per_ip_closes_a_tls_connection_after_its_handshake(tmp_path, ca):
    """max.connections.per.ip over TLS: the refusal comes when the connection is made, after the
    handshake (Kafka's acceptor counts TCP connections; we count after TLS, as the loop's SSL
    transport did); the refused connection is aborted without disturbing the admitted one, and
    once that closes, a new one is admitted (the count was released once, not twice)."""
    b = await start_tls_broker(tmp_path, ca, **{"max.connections.per.ip": "1"})
    try:
        async def api_versions(cid, streams=None):
            reader, writer = streams or await asyncio.open_connection(
                "127.0.0.1", ssl_port(b), ssl=client_context(ca), server_hostname="127.0.0.1")
            writer.write(frame(ApiVersionsRequest(version=0), 0, cid))
            try:
                body = await read_answer(reader)
            except (asyncio.IncompleteReadError, ConnectionResetError, ssl.SSLError):
                return None, (reader, writer)
            return ApiVersionsResponse.decode(body, version=0, header=True).header.correlation_id, (reader, writer)
        answered, first = await api_versions(1)
        assert answered == 1
        refused, second = await api_versions(2)
        assert refused is None and b.limits.refused["max.connections.per.ip"] == 1
        second[1].close()
        assert (await api_versions(3, first))[0] == 3                       # the first is still served
        first[1].close()
        await until(lambda: not b.connections, "the first connection's close reaching the broker")
        again, third = await api_versions(4)
        assert again == 4
        third[1].close()
    finally:
        await b.stop()


async def test_a_handshake_that_does_not_finish_in_time_is_closed(tls_broker):
    """A client that connects and sends nothing is closed after the listener's handshake
    timeout; no KafkaConnection is made for it."""
    b = tls_broker
    sec = next(s for s in b.listeners if s.name == "SSL")
    sec.handshake_timeout_s = 0.2
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b))
    try:
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    except ConnectionResetError:
        pass                                                  # aborted: RST
    assert not any(c.listener == "SSL" for c in b.connections)
    writer.close()


def memory_session(ca) -> tuple:
    """A TLS session in memory, its handshake done: (server SSLObject, its incoming and outgoing
    BIOs, client SSLObject, its incoming and outgoing BIOs)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_context(ca).wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    for _ in range(4):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return server, s_in, s_out, client, c_in, c_out


def test_small_pieces_share_a_tls_record_and_large_ones_pass_whole():
    """Each SSL write ends a TLS record: runs of pieces smaller than a record are joined first,
    pieces of a record or more are written as they are."""
    server, s_in, s_out, client, c_in, c_out = memory_session(trustme.CA())
    big = bytes(range(256)) * (tls_transport.TLS_RECORD // 256)
    pieces = [b"a", b"bc", big, b"d", b"e", big, big, b"f"]
    wire = tls_transport._encrypt(server, s_out, pieces)
    records, pos = 0, 0
    while pos < len(wire):                                    # TLS record headers: type, version, length
        pos += 5 + struct.unpack(">H", wire[pos + 3:pos + 5])[0]
        records += 1
    assert records == 6                                       # abc, big, de, big, big, f
    c_in.write(wire)
    plain = b""
    while True:
        try:
            plain += client.read(1 << 16)
        except ssl.SSLWantReadError:
            break
    assert plain == b"".join(pieces)
