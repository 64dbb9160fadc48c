"""Second read of our TLS layer (broker/network/tls_transport.py): edges found by trying to break
it with real TLS clients against a real in-process Broker over TCP (helpers shared with
test_tls_transport.py)."""
import asyncio
import gc
import os
import socket
import ssl
import threading
import time

import struct

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from kompakt import native
from kompakt.broker.network.tls_transport import HIGH_WATER
from kompakt.storage import TopicPartition

from test_tls_transport import (DEADLINE_S, FP, FT, big_topic, ca, client_context, fetch_all, frame,  # noqa: F401
                                produce, read_answer, ssl_port, start_tls_broker, tls_broker,
                                tls_threads_on_one_cpu)                                                  # (fixtures)


def sockets_open() -> set:
    """This process's socket descriptors, as (fd, inode) names."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:                                       # the listing's own descriptor, gone
            continue
        if target.startswith("socket:"):
            found.add((fd, target))
    return found


async def test_stop_with_encryption_jobs_still_queued_closes_every_socket(tls_threads_on_one_cpu, tmp_path, ca):
    """Broker.stop while busy TLS consumers keep more encryption jobs queued than there are
    worker threads: stop aborts them after shutdown.timeout.ms and shuts the pool down (queued
    jobs cancelled); no socket of theirs stays open afterwards. Before, a queued job's duplicate
    of the socket descriptor (for the worker's own send) was closed only by the job's return,
    which a cancelled job never makes: it stayed open until the garbage collector found the
    connection (disabled here so that the test shows what is closed deterministically)."""
    b = await start_tls_broker(tmp_path, ca, **{"shutdown.timeout.ms": "300"})
    big_topic(b, "big", 64)                                   # 4 MB answers: 8 jobs each
    before = sockets_open()
    reading = threading.Event()
    reading.set()

    def consume(tls) -> None:                                 # reads on, so jobs keep coming
        try:
            while reading.is_set() and tls.recv(1 << 16):
                pass
        except OSError:
            pass
    clients, readers = [], []
    gc.disable()
    try:
        for _ in range(8):                                    # more than the at most 4 workers
            raw = socket.create_connection(("127.0.0.1", ssl_port(b)), timeout=20)
            tls = await asyncio.to_thread(client_context(ca).wrap_socket, raw, server_hostname="127.0.0.1")
            await asyncio.to_thread(tls.sendall, b"".join(frame(fetch_all("big"), 11, c) for c in range(20)))
            clients.append(tls)
            readers.append(threading.Thread(target=consume, args=(tls,)))
            readers[-1].start()
        await asyncio.sleep(0.2)
        await b.stop()
        reading.clear()
        for tls in clients:
            tls.close()
        for t in readers:
            t.join(20)
        for _ in range(5):
            await asyncio.sleep(0.01)                         # connection_lost callbacks
        assert b.tls_workers is None or b.tls_workers.closed
        assert sockets_open() - before == set()
    finally:
        gc.enable()


def segment_descriptors(b, topic: str) -> int:
    """Descriptors this process holds on `topic`'s segment files (the segment's own, and one per
    file range a fetch answer carries: storage/file_records.py duplicates it)."""
    log_dir = b.log_manager.get_log(TopicPartition(topic, 0)).dir
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        held += target.startswith(str(log_dir)) and target.endswith(".log")
    return held


@pytest.mark.parametrize("listener", ["SSL", "PLAINTEXT"])
async def test_pipelined_fetches_to_a_client_that_does_not_read_wait_unanswered(tls_broker, ca, listener):
    """A client pipelines 24 fetches of a 4 MB topic and reads nothing: the broker answers one,
    and while that answer waits for the client the others wait as requests (in flight, not
    started), as on Kafka, whose muted channel handles the next request only once the answer
    before it has gone. Before, every request read was answered at once and its answer queued
    behind the first (over TLS ~100 MB counted unsent; on either listener a segment descriptor
    per answer's file range), the more, the more a client pipelined (up to queued.max.requests).
    Once the client reads, every answer comes, in order and byte-exact."""
    b = tls_broker
    stored = big_topic(b, "big", 64)
    baseline = segment_descriptors(b, "big")
    n = 24
    port = dict((name, p) for name, _, p in b.bound)[listener]
    raw = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock = raw
    if listener == "SSL":
        sock = await asyncio.to_thread(client_context(ca).wrap_socket, raw, server_hostname="127.0.0.1")
    await asyncio.to_thread(sock.sendall, b"".join(frame(fetch_all("big"), 11, c) for c in range(n)))
    conn = None
    for _ in range(DEADLINE_S * 100):                         # until the broker has read them all
        conn = next((c for c in b.connections if c.listener == listener), None)
        if conn is not None and conn.in_flight + segment_descriptors(b, "big") - baseline >= n - 1:
            break
        await asyncio.sleep(0.01)
    for _ in range(20):                                       # loop passes for whatever would start next
        await asyncio.sleep(0.01)
    assert segment_descriptors(b, "big") - baseline <= 2, conn.in_flight   # answers waiting: one or two
    assert conn.in_flight >= n - 2                            # the rest wait as requests
    if listener == "SSL":
        assert conn.transport.get_write_buffer_size() <= len(stored) + HIGH_WATER

    def read_all() -> list:
        data, answers = bytearray(), []
        while len(answers) < n:
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = sock.recv(1 << 20)
                assert chunk, "connection closed early"
                data += chunk
            size = struct.unpack(">i", data[:4])[0]
            answers.append(bytes(data[4:4 + size]))
            del data[:4 + size]
        return answers
    for c, body in enumerate(await asyncio.to_thread(read_all)):
        resp = FetchResponse.decode(body, version=11, header=True)
        assert resp.header.correlation_id == c and bytes(resp.responses[0].partitions[0].records) == stored
    sock.close()


async def test_a_handshake_that_finishes_after_stop_began_gets_no_connection(tls_broker, ca):
    """Broker.stop closes the listening sockets and drains the connections it has; a TLS client
    whose handshake was under way then (accepted, not yet a connection) and finishes afterwards
    is refused: no request of it is answered and it is not left open on a stopped broker.
    Before, its connection was made after the drain and served requests while the broker shut
    down (the loop's SSL transport did the same)."""
    b = tls_broker
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context(ca).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b))
    while True:                                               # all but the client's last flight
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            writer.write(outgoing.read())
            incoming.write(await asyncio.wait_for(reader.read(1 << 16), DEADLINE_S))
    stopping = asyncio.create_task(b.stop())
    await asyncio.sleep(0)                                    # stop has begun (and closed the listener)
    client.write(frame(ApiVersionsRequest(version=0), 0, 1))
    writer.write(outgoing.read())                             # the client's Finished, then a request
    answered = b""
    try:
        while not answered and (data := await asyncio.wait_for(reader.read(1 << 16), DEADLINE_S)):
            incoming.write(data)
            try:
                answered += client.read(1 << 16)
            except ssl.SSLWantReadError:
                pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    await asyncio.wait_for(stopping, DEADLINE_S)
    assert answered == b""
    assert not b.connections
    writer.close()


@pytest.mark.parametrize("listener, produce_bytes", [("SSL", 40_000), ("PLAINTEXT", 40_000), ("SSL", 3_000_000)])
async def test_a_half_close_behind_requests_still_held_in_the_tls_layer_is_answered_after_them(
        tls_threads_on_one_cpu, tmp_path, ca, listener, produce_bytes):
    """queued.max.requests=1: a client pipelines a long poll (answered after 300 ms), a 40 KB
    produce (or a 3 MB one, decrypted by a worker thread once reading resumes: the EOF waits
    for that job too) and two ApiVersions, then half-closes (FIN). While the long poll is in flight the
    connection reads nothing more; over TLS the rest of the client's bytes wait in the TLS layer,
    still encrypted. When the long poll is answered reading resumes, and the EOF behind those
    bytes must reach the connection after them, as the bytes and then the EOF do on plaintext:
    all four requests are answered, then the connection closes. Before, the layer handed the EOF
    over as soon as it arrived while the bytes waited for the decryption scheduled at the resume,
    so the connection closed with only the long poll answered."""
    b = await start_tls_broker(tmp_path, ca, **{"queued.max.requests": "1"})
    try:
        b.log_manager.create_topic("t", 1, {})
        port = dict((name, p) for name, _, p in b.bound)[listener]
        poll = FetchRequest(replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                            topics=[FT(topic="t", partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1000,
                                                                 current_leader_epoch=-1, log_start_offset=-1)])])
        requests = (frame(poll, 11, 1) + frame(produce("t", os.urandom(produce_bytes)), 7, 2)
                    + frame(ApiVersionsRequest(version=0), 0, 3) + frame(ApiVersionsRequest(version=0), 0, 4))

        def client() -> list:
            raw = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
            sock = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1") if listener == "SSL" else raw
            sock.sendall(requests)
            time.sleep(0.1)                                   # the broker has read what it takes for now
            socket.socket.shutdown(sock, socket.SHUT_WR)      # the TCP FIN (under the TLS session)
            data = bytearray()
            while chunk := sock.recv(1 << 16):
                data += chunk
            sock.close()
            answers, pos = [], 0
            while pos + 8 <= len(data):
                answers.append(struct.unpack(">i", data[pos + 4:pos + 8])[0])   # correlation ids
                pos += 4 + struct.unpack(">i", data[pos:pos + 4])[0]
            return answers
        assert await asyncio.to_thread(client) == [1, 2, 3, 4]
        if produce_bytes > 1_000_000 and getattr(native.LIB, "km_tls_read", None) is not None:
            # decrypted by a worker (without the native seam, KOMPAKTNATIVE_IMPL=python, by the loop)
            assert next(s for s in b.listeners if s.name == "SSL").tls_bytes[("decrypt", "worker")] >= 0.9 * produce_bytes
    finally:
        await b.stop()


async def test_stop_closes_a_tls_connection_still_in_its_handshake(tls_broker):
    """A client that connected to a TLS listener and sent nothing yet (no ClientHello) is no
    connection of the broker's, only a handshake under way; Broker.stop closes it too, as Kafka's
    socket server closes every channel at shutdown, handshaking or not. Before, it stayed open
    after stop until the listener's handshake timeout (ssl handshake timeout, 10 s; an hour here)
    fired on a loop that might be gone by then."""
    b = tls_broker
    next(s for s in b.listeners if s.name == "SSL").handshake_timeout_s = 3600
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b))
    await asyncio.sleep(0.05)                                 # accepted: its handshake is waiting
    await b.stop()
    try:
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    except ConnectionResetError:
        pass                                                  # aborted: RST
    writer.close()


async def test_an_idle_tls_connection_after_large_answers_holds_no_duplicate_socket(tls_threads_on_one_cpu,
                                                                                    tls_broker, ca):
    """A large answer is encrypted and sent by a worker on a duplicate of the socket's descriptor;
    once the job returned with no other to start, the duplicate is closed (as plaintext's
    DirectSender closes its own when it drains). Before, a TLS consumer kept it for the
    connection's life: two descriptors per connection. Here: two 4 MB fetches read whole, then
    the broker's side of the connection is one socket descriptor, and a third fetch still works."""
    b = tls_broker
    stored = big_topic(b, "big", 64)
    before = sockets_open()
    reader, writer = await asyncio.open_connection("127.0.0.1", ssl_port(b), ssl=client_context(ca),
                                                   server_hostname="127.0.0.1", limit=1 << 16)

    async def fetch(cid: int) -> None:
        writer.write(frame(fetch_all("big"), 11, cid))
        resp = FetchResponse.decode(await read_answer(reader), version=11, header=True)
        assert bytes(resp.responses[0].partitions[0].records) == stored

    await fetch(1)
    await fetch(2)
    assert b.tls_workers is not None and b.tls_workers.started     # the answers went to the threads
    for _ in range(50):                                            # the job's return reaches the loop
        if len(sockets_open() - before) <= 2:
            break
        await asyncio.sleep(0.02)
    assert len(sockets_open() - before) == 2                       # the client's socket and the broker's
    await fetch(3)
    writer.close()
