"""TLS records decrypted many at a time with the GIL dropped once: the reader the TLS layer's
worker threads use (network/tls_transport.py).

Role: `native_reader(sslobj, incoming, keep_gil)` answers `read(buf, start, length) -> (bytes
written, done)`, which decrypts what the connection's incoming MemoryBIO holds into
buf[start:start + length] (a bytearray, or a writable memoryview such as a BufferedProtocol's
buffer) through the compiled seam's km_tls_read (kompakt/native/tls.c: SSL_read_ex record after
record in one ctypes call), or None when that cannot be done safely; the TLS layer then reads with
SSLObject.read, and decrypts on the event loop only. Why: ssl.SSLObject.read returns one TLS record
(16 KiB at most) per call and takes the GIL back after each. On a worker thread beside a busy event
loop each of those takes waited for the loop to let go of the GIL (up to the 5 ms switch interval):
a TLS producer's throughput fell ~4x when its requests were decrypted that way (bench/RESULTS.md,
2026-11-28). The worker threads' reader drops the GIL for the call (ctypes.CDLL); the event loop's
(`keep_gil`, ctypes.PyDLL) keeps it: a few records take tens of µs, and each drop would let
another thread (the log writer, a worker) take the GIL, the loop waiting to get it back (inline
decryption beside such a thread: 0.6 against 0.75-0.93 ms of loop CPU per MB).

How it reaches OpenSSL (the ssl module hands out no SSL pointer): CPython's _ssl._SSLSocket (an
SSLObject's `_sslobj`) begins, after the object header, with `PyObject *Socket; SSL *ssl;`, and
_ssl.MemoryBIO with `BIO *bio;` (Modules/_ssl.c, the same from 3.5 to 3.13). The layout is
checked on the Python object before libssl sees a pointer (a wrong one would crash it): the slot
before the SSL pointer is NULL (no socket) and the one after it is the object's SSLContext. Then
both pointers are checked against each other through libssl itself: SSL_get_rbio(ssl) must be
that MemoryBIO's BIO, and SSL_is_server(ssl) 1. SSL_read_ex is taken from the one libssl
mapped into the process (/proc/self/maps), and only when it is the function _ssl's own extension
resolves (the ssl module's OpenSSL); with none (OpenSSL linked statically), several, one that is
not the ssl module's, or another Python, there is no reader.

Invariants: a reader is called only by the thread that owns the connection's SSL object (a job of
tls_transport.py), and the objects it points into live as long as it does (it holds them). It
stops at the first SSL_read_ex that reads nothing; `done` is True when that was the usual end (no
complete record left: SSL_ERROR_WANT_READ) or the buffer filled, else (close_notify, an error)
its caller calls SSLObject.read, which finds the same state and answers as always
(SSLZeroReturnError: close_notify; SSLError: a bad record).
"""
from __future__ import annotations

import _ssl
import ctypes
import os
import ssl
import sys

from kompakt import native

_HEAD = object.__basicsize__                  # PyObject_HEAD
_PTR = ctypes.sizeof(ctypes.c_void_p)
_LAYOUT_KNOWN = sys.implementation.name == "cpython" and (3, 8) <= sys.version_info[:2] <= (3, 13)
_libssl = None                                # the mapped libssl through ctypes, once looked up (False: none)


def _mapped_libssl():
    """The libssl this process has mapped (the ssl module's), through ctypes; None unless exactly one."""
    global _libssl
    if _libssl is None:
        _libssl = False
        try:
            with open("/proc/self/maps") as maps:
                paths = {fields[5] for fields in (line.split(None, 5) for line in maps)
                         if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libssl.so")}
        except OSError:
            paths = set()
        if len(paths) == 1:
            try:
                lib = ctypes.CDLL(paths.pop().strip())   # already loaded: dlopen answers that copy
                lib.SSL_get_rbio.argtypes, lib.SSL_get_rbio.restype = [ctypes.c_void_p], ctypes.c_void_p
                lib.SSL_is_server.argtypes, lib.SSL_is_server.restype = [ctypes.c_void_p], ctypes.c_int
                lib.SSL_read_ex, lib.SSL_get_error        # present (OpenSSL 1.1.1 and later)
                # ... and the one the ssl module calls: SSL_read_ex looked up from _ssl's own
                # extension (itself, then what it links) must be the same function. A Python with
                # OpenSSL linked into _ssl (python-build-standalone) beside a system libssl mapped
                # by another library (libpq) would otherwise run a different OpenSSL on its objects
                ours = ctypes.CDLL(_ssl.__file__).SSL_read_ex
                if ctypes.cast(ours, ctypes.c_void_p).value == ctypes.cast(lib.SSL_read_ex, ctypes.c_void_p).value:
                    _libssl = lib
            except (OSError, AttributeError):
                pass
    return _libssl or None


def _pointer_at(obj, offset: int) -> int | None:
    return ctypes.c_void_p.from_address(id(obj) + offset).value


def native_reader(sslobj: ssl.SSLObject, incoming: ssl.MemoryBIO, keep_gil: bool = False):
    """`read(buf, start, length)` for this connection (see the module docstring), or None."""
    km_tls_read = getattr(native.GIL_LIB if keep_gil else native.LIB, "km_tls_read", None)
    if km_tls_read is None or not _LAYOUT_KNOWN:
        return None
    lib = _mapped_libssl()
    inner = getattr(sslobj, "_sslobj", None)
    if (lib is None or type(inner) is not _ssl._SSLSocket or type(incoming) is not ssl.MemoryBIO
            or type(inner).__basicsize__ < _HEAD + 3 * _PTR or ssl.MemoryBIO.__basicsize__ < _HEAD + _PTR):
        return None
    # The slots beside the SSL pointer, from the Python object alone, before libssl is handed
    # anything (a wrong pointer crashes SSL_get_rbio): no socket (an SSLObject reads BIOs), then
    # the SSLContext the object answers as its own
    if _pointer_at(inner, _HEAD) is not None or _pointer_at(inner, _HEAD + 2 * _PTR) != id(inner.context):
        return None
    ssl_ptr, bio_ptr = _pointer_at(inner, _HEAD + _PTR), _pointer_at(incoming, _HEAD)
    if not ssl_ptr or not bio_ptr or lib.SSL_get_rbio(ssl_ptr) != bio_ptr or lib.SSL_is_server(ssl_ptr) != 1:
        return None
    read_ex = ctypes.cast(lib.SSL_read_ex, ctypes.c_void_p).value
    get_error = ctypes.cast(lib.SSL_get_error, ctypes.c_void_p).value
    keep = (inner, incoming)                  # the SSL and the BIO live while the reader does

    def read(buf, start: int, length: int, _keep=keep) -> tuple[int, bool]:
        if length <= 0:
            return 0, True
        window = (ctypes.c_char * length).from_buffer(buf, start)
        err = ctypes.c_int32()
        n = km_tls_read(read_ex, get_error, ssl_ptr, ctypes.addressof(window), length, ctypes.byref(err))
        return n, err.value in (0, ssl.SSL_ERROR_WANT_READ)
    return read
