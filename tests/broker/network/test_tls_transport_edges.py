"""Second read of our TLS layer (broker/network/tls_transport.py): edges found by trying to break
it with real TLS clients against a real in-process Broker over TCP (helpers shared with
test_tls_transport.py)."""
import asyncio
import gc
import os
import socket
import ssl
import threading

import trustme

from kompakt.broker.server import Broker
from kompakt.config.broker_config import BrokerConfig

from test_tls_transport import big_topic, client_context, fetch_all, frame, ssl_port


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


async def test_stop_with_encryption_jobs_still_queued_closes_every_socket(tmp_path):
    """Broker.stop while busy TLS consumers keep more encryption jobs queued than there are
    worker threads: stop aborts them after shutdown.timeout.ms and shuts the pool down (queued
    jobs cancelled); no socket of theirs stays open afterwards. Before, a queued job's duplicate
    of the socket descriptor (for the worker's own send) was closed only by the job's return,
    which a cancelled job never makes: it stayed open until the garbage collector found the
    connection (disabled here so that the test shows what is closed deterministically)."""
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "metrics.port": "0", "log.cleaner.enable": "false",
                             "listeners": "SSL://127.0.0.1:0", "listener.security.protocol.map": "SSL:SSL",
                             "shutdown.timeout.ms": "300",
                             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "server.pem")}))
    await b.start()
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
