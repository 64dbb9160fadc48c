"""kompakt.testing.ports and the ready-line helpers: real sockets, real EADDRINUSE."""
import socket
import threading

import pytest

from kompakt.testing.broker import pin_listeners, ready_ports
from kompakt.testing.ports import PortTaken, closed_port, free_port, retry_if_port_taken, retry_while_port_taken

READY = ("2026-11-28 17:40:01 INFO kompakt.broker.server: Kompakt broker 1 ready in 0.52s: listening on "
         "PLAINTEXT://127.0.0.1:40211 (PLAINTEXT), V6://::1:40212 (PLAINTEXT), SSL://0.0.0.0:40213 (SSL), "
         "advertising PLAINTEXT 127.0.0.1:40211, V6 ::1:40212, SSL host:40213, cluster id x, 0 logs in /d\n")


def test_the_ready_line_gives_every_listeners_port_and_a_restart_pins_them():
    assert ready_ports("starting\n") is None
    ports = ready_ports("starting\n" + READY.replace("40211", "1") + READY)     # the last start counts
    assert ports == {"PLAINTEXT": 40211, "V6": 40212, "SSL": 40213}
    assert pin_listeners("PLAINTEXT://127.0.0.1:0,V6://[::1]:0,SSL://0.0.0.0:9093", ports) == \
        "PLAINTEXT://127.0.0.1:40211,V6://[::1]:40212,SSL://0.0.0.0:9093"     # a fixed port stays


def listen_on(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_port_taken_before_the_bind_is_replaced_by_another():
    with closed_port() as held:
        offered = iter([held, free_port()])
        tried = []

        def start():
            tried.append(next(offered))
            return listen_on(tried[-1])        # EADDRINUSE on the held port
        server = retry_if_port_taken(start, "the test server")
        server.close()
    assert len(tried) == 2 and tried[0] == held


def test_only_a_taken_port_is_retried_and_not_forever():
    def refused():
        raise OSError(13, "Permission denied")
    with pytest.raises(OSError, match="Permission denied"):
        retry_if_port_taken(refused, "x")
    calls = []

    def taken():
        calls.append(1)
        raise PortTaken("port 1 taken")
    with pytest.raises(RuntimeError, match="3 times in a row .*\nport 1 taken"):
        retry_if_port_taken(taken, "the test server", attempts=3)
    assert len(calls) == 3


def test_a_restart_waits_for_its_own_port_and_names_who_holds_it():
    holder = listen_on(0)
    port = holder.getsockname()[1]
    threading.Timer(0.3, holder.close).start()              # a holder that lets go soon
    retry_while_port_taken(lambda: listen_on(port), "the test server", [port], timeout=30).close()
    with listen_on(port):                                    # one that does not
        with pytest.raises(RuntimeError, match=f"could not bind its ports again within 0.2s.*\n"
                                               f"held by: port {port}: "):
            retry_while_port_taken(lambda: listen_on(port), "the test server", [port], timeout=0.2)


def test_a_closed_port_refuses_connections_and_cannot_be_taken():
    with closed_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as servers do
            with pytest.raises(OSError, match="Address already in use"):
                other.bind(("127.0.0.1", port))
