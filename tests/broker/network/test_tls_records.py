"""The native reader of TLS records (broker/network/tls_records.py, kompakt/native/tls.c) against
its reference, ssl.SSLObject.read, on an in-memory TLS 1.3 session: the same plaintext, a
partial record left for later, close_notify and a tampered record left for SSLObject.read (through
the TLS layer's _read_into) to report, and no reader for an SSL object it cannot vouch for, nor for
a CPython struct laid out otherwise (refused before libssl is handed anything)."""
import os
import ssl
import subprocess
import sys
import textwrap

import pytest
import trustme

from kompakt import native
from kompakt.broker.network.tls_records import native_reader
from kompakt.broker.network.tls_transport import _read_into

from test_tls_transport import memory_session


@pytest.fixture
def session():
    """(server SSLObject, its incoming BIO, client SSLObject, client's outgoing BIO), handshaken."""
    if getattr(native.LIB, "km_tls_read", None) is None:
        pytest.fail("no native seam (kompakt/native): a C compiler is needed for these tests")
    server, s_in, _, client, _, c_out = memory_session(trustme.CA())
    return server, s_in, client, c_out


def reference_read(server) -> bytes:
    out = b""
    while True:
        try:
            out += server.read(1 << 20)
        except ssl.SSLWantReadError:
            return out


@pytest.mark.parametrize("keep_gil", [False, True], ids=["worker's", "loop's"])
def test_the_native_reader_decrypts_what_sslobject_read_does_and_leaves_a_partial_record(session, keep_gil):
    """The workers' reader into a bytearray, the loop's into a memoryview (a BufferedProtocol's)."""
    server, s_in, client, c_out = session
    read = native_reader(server, s_in, keep_gil)
    assert read is not None
    plain = os.urandom(300_000)
    for i in range(0, len(plain), 70_000):                    # records of 16 KiB and shorter ones
        client.write(plain[i:i + 70_000])
    wire = c_out.read()
    s_in.write(wire[:-100])                                   # the last record not whole yet
    buf = bytearray(len(wire)) if not keep_gil else memoryview(bytearray(len(wire) + 10))[10:]
    n, done = read(buf, 0, len(buf))
    assert done and 0 < n < len(plain) and buf[:n] == plain[:n]
    s_in.write(wire[-100:])
    m, done = read(buf, n, len(buf) - n)                      # at an offset into the buffer
    assert done and bytes(buf[:n + m]) == plain
    client.write(b"more")
    s_in.write(c_out.read())
    assert reference_read(server) == b"more"                  # SSLObject.read goes on where it left


def test_close_notify_is_left_for_sslobject_read_to_report(session):
    server, s_in, client, c_out = session
    read = native_reader(server, s_in)
    client.write(b"last words")
    try:
        client.unwrap()
    except ssl.SSLWantReadError:
        pass
    s_in.write(c_out.read())
    buf = bytearray(1000)
    n, done = read(buf, 0, len(buf))
    assert (bytes(buf[:n]), done) == (b"last words", False)
    assert _read_into(server, memoryview(buf)) == (0, True)   # what the TLS layer asks next: the EOF


def test_a_tampered_record_stops_the_reader_and_sslobject_read_raises(session):
    server, s_in, client, c_out = session
    read = native_reader(server, s_in)
    client.write(b"x" * 1000)
    wire = bytearray(c_out.read())
    wire[-1] ^= 1                                             # the record's authentication tag
    s_in.write(bytes(wire))
    n, done = read(bytearray(2000), 0, 2000)
    assert (n, done) == (0, False)
    with pytest.raises(ssl.SSLError):
        _read_into(server, memoryview(bytearray(2000)))


def test_no_reader_for_an_ssl_object_it_cannot_vouch_for(session):
    server, s_in, client, c_out = session
    assert native_reader(client, ssl.MemoryBIO()) is None     # not the server's, nor its BIO
    assert native_reader(server, ssl.MemoryBIO()) is None     # another BIO than the SSL object reads


def test_a_struct_laid_out_otherwise_is_refused_before_libssl_is_handed_a_pointer():
    """CPython's _SSLSocket read as if a field came before its SSL pointer (every slot two pointers
    further on: a layout other than the one tls_records knows): native_reader must refuse it from
    what it reads of the Python object alone. Handing libssl the slot it would take for the SSL
    pointer (here the socket type, 0x100000000) crashes the process in SSL_get_rbio. In a child
    process, so that such a crash fails this test instead of ending the run."""
    code = textwrap.dedent("""
        import trustme
        from kompakt.broker.network import tls_records
        from test_tls_transport import memory_session
        server, s_in = memory_session(trustme.CA())[:2]
        inner, pointer_at = server._sslobj, tls_records._pointer_at
        tls_records._pointer_at = lambda obj, offset: pointer_at(obj, offset + 2 * tls_records._PTR * (obj is inner))
        print("reader:", tls_records.native_reader(server, s_in), tls_records.native_reader(server, s_in, True))
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), here]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "reader: None None"), done.stderr[-2000:]


def test_no_reader_when_the_mapped_libssl_is_not_the_ssl_modules(session, monkeypatch):
    """A Python whose _ssl carries its own OpenSSL beside a system libssl mapped by another library
    (python-build-standalone beside libpq) must get no reader: SSL_read_ex as _ssl's extension
    resolves it must be the mapped libssl's. Here _ssl's lookup is made to answer another function."""
    import ctypes
    import _ssl
    from kompakt.broker.network import tls_records
    server, s_in, _, _ = session
    real_cdll = ctypes.CDLL

    class OtherOpenSSL:
        def __init__(self):
            self.SSL_read_ex = real_cdll(None).strlen   # any function but libssl's

    monkeypatch.setattr(tls_records, "_libssl", None)
    monkeypatch.setattr(tls_records.ctypes, "CDLL",
                        lambda path, *a, **k: OtherOpenSSL() if path == _ssl.__file__ else real_cdll(path, *a, **k))
    assert native_reader(server, s_in) is None
    monkeypatch.setattr(tls_records.ctypes, "CDLL", real_cdll)
    monkeypatch.setattr(tls_records, "_libssl", None)
    assert native_reader(server, s_in) is not None      # the same session, the real lookup: a reader
