"""Connections on a real in-process Broker over TCP: response order, flow control, idle close,
graceful stop with requests in flight."""
import asyncio
import struct

import pytest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from kompakt.broker.server import Broker
from kompakt.config.broker_config import BrokerConfig
from kompakt.testing.poll import until

FT = FetchRequest.FetchTopic
FP = FT.FetchPartition
DEADLINE_S = 20


@pytest.fixture
async def broker(tmp_path):
    brokers = []

    async def start(**config):
        props = {"log.dirs": str(tmp_path / f"data{len(brokers)}"), "listeners": "PLAINTEXT://127.0.0.1:0",
                 "metrics.port": "0", "log.cleaner.enable": "false"}
        props.update(config)
        b = Broker(BrokerConfig(props))
        brokers.append(b)
        await b.start()
        return b

    yield start
    for b in brokers:
        await b.stop()


def frame(msg, version, correlation_id):
    msg.with_header(correlation_id=correlation_id, client_id="t")
    payload = bytes(msg.encode(version=version, header=True))
    return struct.pack(">i", len(payload)) + payload


def long_poll(topic, correlation_id, wait_ms):
    req = FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[FT(topic=topic, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1000,
                                                                current_leader_epoch=-1, log_start_offset=-1)])])
    return frame(req, 11, correlation_id)


async def read_correlation(reader):
    size, correlation_id = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), DEADLINE_S))
    await reader.readexactly(size - 4)
    return correlation_id


async def connect(b):
    return await asyncio.open_connection("127.0.0.1", b.bound[0][2])


async def long_poll_in_flight(broker, correlation_id, wait_ms, **config):
    """A broker with topic "t" and a connection whose long poll (on "t", `wait_ms`) is in
    flight: (broker, reader, writer)."""
    b = await broker(**config)
    b.log_manager.create_topic("t", 1, {})
    reader, writer = await connect(b)
    writer.write(long_poll("t", correlation_id, wait_ms))
    await writer.drain()
    await until(lambda: any(c.in_flight for c in b.connections), "the long poll in flight")
    return b, reader, writer


async def test_responses_follow_request_order_even_when_handlers_finish_out_of_order(broker):
    b = await broker()
    b.log_manager.create_topic("t", 1, {})
    reader, writer = await connect(b)
    # a long poll (finishes after 200 ms) then an ApiVersions (finishes at once)
    writer.write(long_poll("t", 1, 200) + frame(ApiVersionsRequest(version=0), 0, 2))
    assert [await read_correlation(reader), await read_correlation(reader)] == [1, 2]
    writer.close()


async def test_reading_pauses_at_queued_max_requests(broker):
    b = await broker(**{"queued.max.requests": "2"})
    b.log_manager.create_topic("t", 1, {})
    reader, writer = await connect(b)
    writer.write(b"".join(long_poll("t", i, 150) for i in range(1, 6)))
    await writer.drain()
    [conn] = list(b.connections)
    await until(lambda: conn.in_flight >= 2, "two requests in flight")
    assert conn._reading_paused and conn.in_flight == 2   # the other three wait in the socket
    assert [await read_correlation(reader) for _ in range(5)] == [1, 2, 3, 4, 5]
    assert not conn._reading_paused
    writer.close()


async def test_idle_connections_are_closed(broker):
    b = await broker(**{"connections.max.idle.ms": "100"})
    reader, writer = await connect(b)
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""     # EOF from the broker
    writer.close()


async def test_graceful_stop_answers_requests_in_flight(broker):
    b, reader, writer = await long_poll_in_flight(broker, 7, 300)
    stopping = asyncio.create_task(b.stop())
    assert await read_correlation(reader) == 7                # answered before the close
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    await stopping
    assert not b.ready and not b.connections
    writer.close()


async def test_stop_does_not_sit_out_a_long_poll(broker):
    b, reader, writer = await long_poll_in_flight(broker, 1, 600_000)      # a ten-minute max_wait
    await asyncio.wait_for(b.stop(), DEADLINE_S)              # the fetch answers at once
    assert await read_correlation(reader) == 1
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    writer.close()


async def test_stop_aborts_connections_past_shutdown_timeout(broker):
    b = await broker(**{"shutdown.timeout.ms": "50"})
    reader, writer = await connect(b)
    [conn] = await _connections(b)
    conn.pending.append(_stuck_slot())
    await asyncio.wait_for(b.stop(), DEADLINE_S)              # does not wait for the stuck request
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    writer.close()


async def _connections(b):
    return await until(lambda: list(b.connections), "the broker to accept the connection")


def _stuck_slot():
    from kompakt.broker.network.connection import _Slot
    return _Slot()                                            # a request that never finishes


async def test_port_in_use_fails_start_with_a_clear_message(broker):
    first = await broker()
    port = first.bound[0][2]
    with pytest.raises(OSError, match=f"cannot listen on PLAINTEXT://127.0.0.1:{port}"):
        await broker(listeners=f"PLAINTEXT://127.0.0.1:{port}")


async def test_advertised_listener(broker):
    b = await broker(**{"advertised.listeners": "PLAINTEXT://kafka.example:9999"})
    assert b.advertised == ("kafka.example", 9999)


async def test_half_closed_client_still_gets_its_answers(broker):
    b = await broker()
    b.log_manager.create_topic("t", 1, {})
    reader, writer = await connect(b)
    writer.write(long_poll("t", 1, 100) + frame(ApiVersionsRequest(version=0), 0, 2))
    writer.write_eof()                                        # shutdown(SHUT_WR)
    assert [await read_correlation(reader), await read_correlation(reader)] == [1, 2]
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    writer.close()


async def test_each_listener_advertises_its_own_address(broker):
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
    b = await broker(listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                     **{"advertised.listeners": "INTERNAL://kompakt:19092,EXTERNAL://localhost:9092"})
    seen = {}
    for name, _, port in b.bound:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(MetadataRequest(version=1, topics=None), 1, 3))
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))[0]
        resp = MetadataResponse.decode(await asyncio.wait_for(reader.readexactly(size), DEADLINE_S),
                                       version=1, header=True)
        seen[name] = (resp.brokers[0].host, resp.brokers[0].port)
        writer.close()
    assert seen == {"INTERNAL": ("kompakt", 19092), "EXTERNAL": ("localhost", 9092)}


class _CrashingHandler:
    """A handler module with a bug: what a client can provoke with bodies no handler expects."""
    API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 4

    def __init__(self, where):
        self.where = where

    def decode(self, header, frame):
        if self.where == "decode":
            raise TypeError("decoder bug")
        return None

    async def handle(self, ctx, request):
        raise TypeError("handler bug")


@pytest.mark.parametrize("where", ["decode", "handle"])
async def test_a_handler_bug_closes_that_connection_with_one_warning_line(broker, caplog, where):
    b = await broker()
    witness_reader, witness_writer = await connect(b)
    real = b.dispatcher.handlers[18]
    b.dispatcher.handlers[18] = _CrashingHandler(where)
    reader, writer = await connect(b)
    with caplog.at_level("DEBUG", logger="kompakt.broker.network.connection"):
        writer.write(frame(ApiVersionsRequest(version=0), 0, 7))
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""      # closed, no answer
    b.dispatcher.handlers[18] = real
    records = [r for r in caplog.records if r.name == "kompakt.broker.network.connection"]
    warnings = [r for r in records if r.levelname == "WARNING"]
    assert [r.levelname for r in records if r.levelname not in ("DEBUG",)] == ["WARNING"]
    line = warnings[0].getMessage()
    assert "closing connection from 127.0.0.1:" in line and "TypeError" in line and "bug" in line
    assert "correlation id 7" in line and "test_connection.py:" in line
    assert warnings[0].exc_info is None                                     # the traceback is DEBUG only
    assert [r for r in records if r.levelname == "DEBUG" and r.exc_info]
    # the broker goes on serving: the connection opened before answers, and a new one does too
    witness_writer.write(frame(ApiVersionsRequest(version=0), 0, 8))
    assert await read_correlation(witness_reader) == 8
    witness_writer.close()
    writer.close()


async def test_a_client_that_goes_away_releases_its_parked_fetches(broker):
    b, reader, writer = await long_poll_in_flight(broker, 1, 60_000)
    await until(lambda: b.fetch_waiters.waiting, "the fetch to park")
    [conn] = await _connections(b)
    writer.transport.abort()                                  # RST: the client vanished
    await asyncio.wait_for(conn.closed, DEADLINE_S)
    # the parked task is cancelled, not left for 60 s
    await until(lambda: not (b.fetch_waiters.waiting or conn.pending), "the parked fetch to go")
    assert conn not in b.connections


async def test_tls_responses_are_encrypted_as_the_socket_drains_and_all_arrive_before_close(broker, tmp_path):
    """A TLS connection encrypts an answer as the socket drains: with a client that does not
    read, an 8 MB fetch response waits mostly unencrypted (the socket's transport holds about its
    high-water mark of ciphertext, not the whole response), the connection stops reading
    (pause_writing) and a close asked meanwhile (broker stop) still lets every byte out first."""
    import socket
    import ssl

    import trustme
    from kafka.protocol.consumer.fetch import FetchResponse

    from kompakt.protocol.records import build_batch
    from kompakt.storage import TopicPartition

    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    b = await broker(listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                     **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "server.pem")})
    b.log_manager.create_topic("big", 1, {})
    log = b.log_manager.get_log(TopicPartition("big", 0))
    for i in range(128):                                      # 128 batches of 64 KiB
        log.append_as_leader(bytearray(build_batch([(None, bytes([i]) * 1024)] * 64)))
    log.sync_data()                                           # readable: the high watermark is the durable offset
    stored = log.read(0, 1 << 30).records
    assert len(stored) > 8_000_000

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)   # a client that reads slowly
    sock.connect(("127.0.0.1", dict((n, p) for n, _, p in b.bound)["SSL"]))
    sock.setblocking(False)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    reader, writer = await asyncio.open_connection(sock=sock, ssl=client_ctx, server_hostname="127.0.0.1",
                                                   limit=1 << 16)
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 26, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[FT(topic="big", partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 26,
                                                              current_leader_epoch=-1, log_start_offset=-1)])])
    writer.write(frame(req, 11, 7))
    await writer.drain()
    conn = None
    for _ in range(DEADLINE_S * 100):                         # the client reads nothing meanwhile
        conn = next((c for c in b.connections if c.listener == "SSL"), None)
        if conn is not None and conn._write_paused:
            break
        await asyncio.sleep(0.01)
    assert conn is not None and conn._write_paused
    held_back = conn.transport.unencrypted_bytes
    # Not yet encrypted: all but what the kernel's send buffer (autotuned, up to tcp_wmem's
    # maximum under load), the transport and the client took; handing it all over would hold back 0.
    sndbuf = conn.transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    assert held_back > len(stored) - sndbuf - (2 << 20), (held_back, sndbuf)
    from kompakt.broker.network.tls_transport import JOB_BYTES, RAW_HIGH
    # encrypted, waiting in the socket's transport (about its high-water mark) or being encrypted
    assert conn.transport.get_write_buffer_size() - held_back <= RAW_HIGH + 2 * JOB_BYTES
    conn.close_when_idle()                                    # what a broker stop asks
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))[0]
    body = await asyncio.wait_for(reader.readexactly(size), DEADLINE_S)
    resp = FetchResponse.decode(body, version=11, header=True)
    assert resp.header.correlation_id == 7
    assert bytes(resp.responses[0].partitions[0].records) == bytes(stored)
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""   # then closed
    writer.close()


async def test_a_large_request_gets_its_memory_before_its_body_is_read(broker):
    """queued.max.request.bytes as Kafka's memory pool: a connection whose next (large) request
    finds the pool used up stops reading at its size prefix - no buffer is made for it, its body
    stays in the socket - and goes on once a handler gives memory back."""
    from kafka.protocol.producer.produce import ProduceRequest
    from kompakt.protocol.records import build_batch
    from kompakt.storage import TopicPartition
    b = await broker(**{"queued.max.request.bytes": "1"})
    b.log_manager.create_topic("t", 1, {})
    a_reader, a_writer = await connect(b)
    real = b.dispatcher.handlers[18]
    holder = b.dispatcher.handlers[18] = _Holds()
    try:
        a_writer.write(frame(ApiVersionsRequest(version=0), 0, 1))    # its handler holds the whole pool
        await a_writer.drain()
        await until(lambda: any(c.in_flight for c in b.connections), "the holder in flight")
        TD = ProduceRequest.TopicProduceData
        produce = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[TD(
            name="t", partition_data=[TD.PartitionProduceData(index=0, records=build_batch([(b"k", b"v" * 300_000)]))])])
        big = frame(produce, 9, 2)
        assert len(big) > 300_000
        b_reader, b_writer = await connect(b)
        b_writer.write(big)
        [conn] = await until(lambda: [c for c in b.connections if c._awaiting_memory],
                             "the produce's connection to wait for memory")
        assert conn._reading_paused and conn._held is None and conn.reader._large is None   # nothing made for it
        assert conn.reader.buffered < len(big) - 4                                            # its body is not read
        assert b.limits.queued_bytes < len(big)
        holder.release.set()                                                    # the holder answers ...
        assert await read_correlation(a_reader) == 1
        assert await read_correlation(b_reader) == 2                           # ... and the produce goes on
        assert b.log_manager.get_log(TopicPartition("t", 0)).log_end_offset == 1
        await until(lambda: not b.limits.queued_bytes, "the produce's memory back in the pool")
    finally:
        b.dispatcher.handlers[18] = real
    a_writer.close()
    b_writer.close()


async def test_a_parked_fetch_holds_no_request_memory(broker):
    """Kafka gives a request's memory back to the pool once its handler has handled it
    (KafkaRequestHandler: request.releaseBuffer() after apis.handle), before a delayed answer: a
    fetch parked for its long poll (or a produce waiting for its sync) holds none. With a
    one-byte pool, a produce on another connection is read and appended at once, and its append
    answers the parked fetch, with the records."""
    from kafka.protocol.producer.produce import ProduceRequest
    from kompakt.protocol.records import build_batch
    b, a_reader, a_writer = await long_poll_in_flight(broker, 1, 600_000,   # parks for ten minutes
                                                      **{"queued.max.request.bytes": "1"})
    await until(lambda: any(c.parked.futures for c in b.connections), "the fetch to park")
    assert b.limits.queued_bytes == 0                            # parked: its memory is back
    TD = ProduceRequest.TopicProduceData
    produce = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[TD(
        name="t", partition_data=[TD.PartitionProduceData(index=0, records=build_batch([(b"k", b"v" * 1000)]))])])
    b_reader, b_writer = await connect(b)
    b_writer.write(frame(produce, 9, 2))
    assert await read_correlation(b_reader) == 2
    size, correlation_id = struct.unpack(">ii", await asyncio.wait_for(a_reader.readexactly(8), DEADLINE_S))
    assert correlation_id == 1 and size > 1000                   # the fetch answered the record
    await a_reader.readexactly(size - 4)
    a_writer.close()
    b_writer.close()


class _Holds:
    """An ApiVersions handler that keeps its request (and its request memory) until released,
    never applying its effects early (a JoinGroup waiting for its rebalance does the same)."""
    API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 4

    def __init__(self):
        self.release = asyncio.Event()

    def decode(self, header, frame):
        return None

    async def handle(self, ctx, request):
        await self.release.wait()
        return struct.pack(">ii", 4, ctx.correlation_id)


async def test_queued_max_request_bytes_0_is_no_limit_as_kafka(broker):
    """Kafka makes a memory pool only when queued.max.request.bytes > 0 (SocketServer): 0 is no
    limit, not a pool that never has memory."""
    b = await broker(**{"queued.max.request.bytes": "0"})
    reader, writer = await connect(b)
    writer.write(frame(ApiVersionsRequest(version=0), 0, 7))
    assert await read_correlation(reader) == 7
    writer.close()


class _WaitsAfterEffects:
    """A handler that applies its effects, then keeps waiting (as Produce waits for its durable
    acknowledgement), noting whether its large frame's buffer was back with the reader by then."""
    API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 4

    def __init__(self, conns):
        self.conns = conns
        self.buffers = []
        self.recycled = []
        self.release = asyncio.Event()

    def decode(self, header, frame):
        self.buffers.append(frame.obj)
        return None

    async def handle(self, ctx, request):
        buf = self.buffers[-1]
        ctx.effects_applied()
        self.recycled.append(any(s is buf for s in self.conns[0].reader._spares))
        await self.release.wait()
        return struct.pack(">ii", 4, ctx.correlation_id)


async def test_a_large_frame_is_recycled_once_its_effects_are_applied(broker):
    """A request that waits after its effects are applied (a produce waiting for its sync) gives
    its frame's buffer back then: the pipelined large frames behind it reuse it instead of each
    getting a fresh megabyte, and every answer still arrives, in order."""
    from kompakt.protocol.framing import LARGE_FRAME
    b = await broker()
    reader, writer = await connect(b)
    conns = await _connections(b)
    real = b.dispatcher.handlers[18]
    handler = b.dispatcher.handlers[18] = _WaitsAfterEffects(conns)
    try:
        body = b"\0" * (2 * LARGE_FRAME)
        for cid in (1, 2, 3):
            payload = struct.pack(">hhih", 18, 0, cid, 1) + b"t" + body
            writer.write(struct.pack(">i", len(payload)) + payload)
        await until(lambda: len(handler.recycled) >= 3, "three frames handled")
        assert handler.recycled == [True, True, True]
        assert handler.buffers[1] is handler.buffers[0] and handler.buffers[2] is handler.buffers[0]
        handler.release.set()
        assert [await read_correlation(reader) for _ in range(3)] == [1, 2, 3]
    finally:
        b.dispatcher.handlers[18] = real
        writer.close()


async def test_a_zero_copy_answer_behind_bytes_the_transport_holds_is_read_into_memory(broker):
    """A plaintext answer carrying file ranges is sent directly (sendfile) only when the
    transport's buffer is empty; behind an answer the transport still holds, its ranges are read
    into memory and queued after it, so the bytes never overtake or interleave. Both answers
    arrive whole, in order, with the log's bytes."""
    import socket

    from kafka.protocol.consumer.fetch import FetchResponse

    from kompakt.protocol.records import build_batch
    from kompakt.storage import TopicPartition
    from kompakt.storage.segment import FILE_RECORDS_MIN

    b = await broker()
    stored = {}
    b.log_manager.create_topic("zc", 8, {})
    for p in range(8):
        log = b.log_manager.get_log(TopicPartition("zc", p))
        for i in range(32):                                   # 32 batches of ~16 KiB
            log.append_as_leader(bytearray(build_batch([(None, bytes([p, i]) * 512)] * 16)))
        log.sync_data()                                       # readable: the high watermark is the durable offset
        stored[p] = bytes(log.read(0, 1 << 30).records)

    def fetch(correlation_id, part_max):
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 26, isolation_level=0,
                           session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                           topics=[FT(topic="zc", partitions=[FP(partition=p, fetch_offset=0, partition_max_bytes=part_max,
                                                                 current_leader_epoch=-1, log_start_offset=-1)
                                                              for p in range(8)])])
        return frame(req, 11, correlation_id)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)        # a client that reads nothing yet
    sock.connect(("127.0.0.1", b.bound[0][2]))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    [conn] = await _connections(b)
    conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer.write(fetch(1, FILE_RECORDS_MIN - 1024))           # bytes only: through the transport
    await until(lambda: conn.transport.get_write_buffer_size() > 0 and not conn.pending,
                "the first answer in the transport's buffer")
    assert conn.transport.get_write_buffer_size() > 0          # the socket is full: the transport holds it
    writer.write(fetch(2, 1 << 20))                           # file ranges, behind those bytes
    await until(lambda: not conn.pending, "the second answer handed over")
    assert conn._direct is None                               # not sent around the transport's bytes
    answers = []
    for _ in range(2):
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))[0]
        answers.append(FetchResponse.decode(await asyncio.wait_for(reader.readexactly(size), DEADLINE_S),
                                            version=11, header=True))
    assert [a.header.correlation_id for a in answers] == [1, 2]
    for part in answers[0].responses[0].partitions:
        data = bytes(part.records)
        assert 0 < len(data) < FILE_RECORDS_MIN and stored[part.partition_index].startswith(data)
    assert {p.partition_index: bytes(p.records) for p in answers[1].responses[0].partitions} == stored
    writer.close()
