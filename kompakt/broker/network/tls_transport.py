"""TLS on our side of the socket: a TLS listener's handshake, decryption and encryption over
ssl.SSLObject and two ssl.MemoryBIO, large answers encrypted and large requests decrypted on
worker threads.

Role: a TLS listener (SSL, SASL_SSL) is a plain TCP server whose protocol is a `TlsProtocol`. It
does the handshake (within the listener's handshake timeout), then makes the connection's
application protocol (a KafkaConnection, an asyncio.BufferedProtocol) and hands it a
`TlsTransport`, which behaves as the loop's SSL transport did: decrypted bytes go straight into the
application's buffer (get_buffer/buffer_updated), writes are encrypted and sent in order, and
pause_reading/resume_reading/close/abort/is_closing/get_write_buffer_size/get_extra_info
('peername', 'socket', 'ssl_object', 'peercert', 'cipher', ...) work as on any transport.

Why our own: the loop's SSL transport (uvloop's, in C) encrypts every write on the event-loop
thread, so a TLS consumer's fetch costs the loop its whole encryption (~0.35 ms a MB) and a second
core cannot take any of it, and decrypts every read there too (a TLS producer's 1 MB request
costs the loop its decryption). ssl.SSLObject.write releases the GIL inside OpenSSL, so here a
large answer is encrypted by a job on a small shared pool of worker threads (the broker's
`tls_workers`, storage/worker_threads.py) while the loop serves everything else; a large input is
decrypted the same way (Input). The bytes each thread encrypted and decrypted are counted in the
listener's `tls_bytes` (kompakt_tls_bytes_total{listener,operation,thread}).

Output: the application's buffers (not copies) queue in `_plain`, and so do the storage
FileRecords a Fetch answer carries in place of record bytes (`writelines` takes both): a file
range is read (pread) only when it is encrypted, and its descriptor is closed after its last byte
is read (or, when the connection goes first, once nothing refers to it). `_pump` takes batches of
up to JOB_BYTES. A batch below OFF_LOOP_BYTES is encrypted inline (a hop to a thread and back
costs the loop 10-20 µs, what encrypting ~40 KiB costs; a produce acknowledgement or a metadata
answer is never worth it); a larger one goes to a worker, which reads its file ranges, encrypts,
and, when the socket's transport held nothing at the hand-over, sends the ciphertext itself on a
duplicate of the socket's descriptor (as direct_send.py does on plaintext): such a job takes up
to DIRECT_JOB_BYTES and streams them out JOB_BYTES at a time (encrypt, send, next), not one step
per loop iteration, which a busy loop stretches to milliseconds; at the first step the socket
does not take whole it stops, and the loop queues that step's unsent ciphertext behind the
transport and puts the untouched rest back at the head of the queue. So the page-cache copy, the
encryption and the send of a large answer all leave the loop. Small buffers are joined before encryption
(each SSL write ends a TLS record: one per tiny piece would bloat and slow the stream); buffers
of a TLS record or more pass through uncopied.

Input: ciphertext is decrypted straight into the application's buffer (get_buffer/buffer_updated)
on the loop when it is small: a read below OFF_LOOP_DECRYPT_BYTES, with nothing waiting before it
(a produce of 1 KiB records arrives in reads of 64-256 KiB, a metadata request in one small one).
A larger read, or ciphertext that queued up meanwhile in `_inbound` (while a job ran or the
application paused), goes to a decryption job once OFF_LOOP_DECRYPT_BYTES wait (a hop to a thread
and back cost the loop ~22 µs of CPU on a loaded 2-vCPU machine, what decrypting ~45 KiB costs it
there: 0.45-0.6 ms a MB with the copy into the BIO): the job takes up to DECRYPT_JOB_BYTES of the
queue, and then what queues up behind it while it runs (until the queue is empty or it made
DECRYPT_JOB_BYTES of plaintext: a request arriving in several reads is decrypted as it comes, not
a job per read with a loop pass between), feeds it to the incoming BIO
and decrypts into a buffer of its own through tls_records.py's native reader, which calls
SSL_read_ex record after record with the GIL dropped once a DECRYPT_STEP (SSLObject.read returns
one 16 KiB record a call and takes the GIL back after each: beside a busy loop each take waited up
to the 5 ms switch interval, and a TLS producer lost ~4x of its rate that way). Where there is no
native reader (no C compiler, KOMPAKTNATIVE_IMPL=python, OpenSSL linked statically), decryption
stays on the loop. When the job returns the loop copies its plaintext into the application's
buffers (~0.03 ms a MB) and sends what reading produced (a KeyUpdate's answer, an alert). Inline,
more than a record waiting is decrypted with the loop's native reader, which keeps the GIL (a
SSLObject.read per record would hand it to another thread each time).

Invariants:
  * one thread at a time uses a connection's SSL object: OpenSSL's SSL is not safe for concurrent
    SSL_read/SSL_write (they share the record layer's state and the BIOs). While a job runs
    (`_busy`: an encryption, `_job` plaintext bytes, or a decryption) the loop touches neither the
    SSL object nor its BIOs: ciphertext that arrives is queued (`_inbound`, an EOF as None) and
    fed, then decrypted, when the job has returned (while a decryption job runs the loop only
    appends to `_inbound`, or clears it when the connection goes, and the job only takes from its
    head, up to an EOF it leaves there; `_inbound_bytes` counts what it took until it returns); at
    most one job per connection, whichever its kind, and inline encryption or decryption only when
    none runs, so the ciphertext leaves in the order the plaintext came and the plaintext reaches
    the application in the order the ciphertext came (a job's plaintext before anything queued
    behind it);
  * back-pressure: nothing is encrypted while the socket's transport holds RAW_HIGH bytes (its
    pause_writing) - what waits is plaintext, already in memory; the application is paused
    (pause_writing: KafkaConnection stops reading requests) while its unsent bytes, encrypted or
    not, exceed HIGH_WATER, and resumed at LOW_WATER. The socket is read while the application
    reads and less than INBOUND_HIGH of ciphertext waits in `_inbound` (behind a job, or a pause);
    so a connection holds at most INBOUND_HIGH queued, a job's DECRYPT_JOB_BYTES and its plaintext;
  * a worker sends on the socket only when the transport's buffer was empty at the hand-over
    and the loop writes nothing until the job has returned, so bytes never overtake each other;
    the duplicate descriptor is closed once no job holds it (it must neither keep a closed
    connection's socket open nor be reused under a worker's send), and also when a job returns
    with no next one to start: an idle connection holds one descriptor, as on plaintext
    (direct_send.py closes its duplicate when it drains);
  * after abort or connection_lost nothing is written or delivered: a job that returns then is
    dropped (a decryption's plaintext with it; a running decryption stops at its next step), one
    no worker has started is cancelled (so it cannot hold the duplicate descriptor open forever
    when the pool is shut down), the queues are cleared, and a job still sending is stopped by a
    shutdown of the socket; a file
    range cut short (a truncated segment) aborts the connection, since a frame cannot be
    finished any other way; close() first encrypts and sends what was written, then sends
    close_notify (unwrap) and closes the socket;
  * the application gets connection_made only after a complete handshake, and then exactly one
    connection_lost; after its pause_reading nothing more is decrypted for it (the ciphertext waits
    in `_inbound` or the BIO; a running job stops at its next DECRYPT_STEP, and the plaintext it
    made that the application did not take waits in `_decrypted`) until resume_reading;
  * a failed handshake is logged once by the context's LoggedSSLObject (security/tls.py), its
    alert sent, the socket closed; a handshake that does not finish within the timeout, a
    peer that leaves during it, and one under way when the broker stops (abort_handshake),
    close without a log line, as the loop's SSL transport did.
A client's EOF (close_notify or TCP FIN) reaches the application as eof_received, after every
byte the client sent before it (the EOF waits in `_inbound` while any of them may still wait in
the layer: queued, in a job, or decrypted and not taken; a close_notify a job read comes after
that job's plaintext, and nothing the client sent after its close_notify is ever decrypted);
if it answers True the socket stays open for the answers (TLS 1.3 allows a half-close), else it
is closed. Reading may produce output (a TLS 1.3 KeyUpdate's answer, an
alert; a TLS 1.2 renegotiation is refused with one, security/tls.py setting OP_NO_RENEGOTIATION):
the loop sends it after each inline decryption and when a job returns, before anything encrypted
later.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl

from kompakt.broker.network.tls_records import native_reader
from kompakt.storage.file_records import FileRecords

log = logging.getLogger(__name__)

TLS_RECORD = 16384                  # OpenSSL's maximum record payload
OFF_LOOP_BYTES = 64 * 1024          # batches this large are encrypted on a worker thread
JOB_BYTES = 512 * 1024              # plaintext per encryption (a job's step, or one inline batch)
DIRECT_JOB_BYTES = 8 * 1024 * 1024  # plaintext handed to a job that sends its steps itself
RAW_HIGH = 512 * 1024               # ciphertext the socket's transport may hold before encryption waits
RAW_LOW = 128 * 1024
HIGH_WATER = 1024 * 1024            # unsent bytes (plain + ciphertext) that pause the application's writing
LOW_WATER = RAW_HIGH                # ... and resume it (>= RAW_HIGH: plaintext sent means resumed)
OFF_LOOP_DECRYPT_BYTES = 64 * 1024  # ciphertext waiting that is decrypted on a worker thread
DECRYPT_JOB_BYTES = 4 * 1024 * 1024  # ciphertext a decryption job takes at most
DECRYPT_STEP = 512 * 1024           # a decryption job looks for a pause_reading or a close this often
INBOUND_HIGH = DECRYPT_JOB_BYTES    # ciphertext queued behind a job (or a pause) that stops reading the socket

# The keys of a listener's `tls_bytes` Counter (broker/observability/live.py exports it): bytes of
# application data by operation and by the thread that did it
DECRYPTED_ON_LOOP, DECRYPTED_ON_WORKER = ("decrypt", "event_loop"), ("decrypt", "worker")
ENCRYPTED_ON_LOOP, ENCRYPTED_ON_WORKER = ("encrypt", "event_loop"), ("encrypt", "worker")

_HANDSHAKE, _OPEN, _CLOSING, _CLOSED = "handshake", "open", "closing", "closed"
_UNKNOWN = object()


class _FilePart:
    """Bytes [start, start + length) of a storage FileRecords' range, read when encrypted."""
    __slots__ = ("records", "start", "length")

    def __init__(self, records: FileRecords, start: int, length: int):
        self.records, self.start, self.length = records, start, length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes (pread: the GIL is released); the range's descriptor is closed after its last part."""
        records = self.records
        data = os.pread(records.fd, self.length, records.position + self.start)
        if len(data) < self.length:           # truncated under us (storage/file_records.py)
            raise OSError(f"segment file shorter than the range being sent ({len(data)} of {self.length} bytes)")
        if self.start + self.length == records.size:
            records.close()
        return data


def _take(queue: collections.deque, limit: int) -> tuple[list, int]:
    """Up to `limit` bytes from the head of `queue` (buffers and _FileParts; the last one taken
    split if need be): (the pieces, their size)."""
    batch, room = [], limit
    while queue and room > 0:
        b = queue[0]
        if len(b) <= room:
            batch.append(queue.popleft())
            room -= len(b)
        elif type(b) is _FilePart:
            batch.append(_FilePart(b.records, b.start, room))
            queue[0] = _FilePart(b.records, b.start + room, b.length - room)
            room = 0
        else:
            view = b if isinstance(b, memoryview) else memoryview(b)
            batch.append(view[:room])
            queue[0] = view[room:]
            room = 0
    return batch, limit - room


def _encrypt(sslobj: ssl.SSLObject, outgoing: ssl.MemoryBIO, batch: list) -> bytes:
    """The ciphertext of `batch` (buffers and _FileParts, in order); runs on the loop or on a
    worker thread."""
    small = []
    for b in batch:
        if type(b) is _FilePart:
            b = b.read()
        if len(b) < TLS_RECORD:
            small.append(b)
            continue
        if small:
            sslobj.write(b"".join(small) if len(small) > 1 else small[0])
            small = []
        sslobj.write(b)
    if small:
        sslobj.write(b"".join(small) if len(small) > 1 else small[0])
    return outgoing.read()


def _read_into(sslobj: ssl.SSLObject, buf: memoryview) -> tuple[int, bool]:
    """Decrypt what the incoming BIO holds into `buf`, as far as it goes: (bytes written, whether
    the client's close_notify came). Reading may leave output in the outgoing BIO (a KeyUpdate's
    answer, an alert), for the caller to send; a bad record raises ssl.SSLError. Runs on the loop
    or on a worker thread (SSLObject.read releases the GIL inside OpenSSL)."""
    size, filled = len(buf), 0
    try:
        while filled < size:
            n = sslobj.read(size - filled, buf[filled:])
            if not n:
                return filled, True
            filled += n
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        pass                                 # the BIO is empty (or output must go first: the caller sends it)
    except ssl.SSLZeroReturnError:
        return filled, True
    return filled, False


class TlsProtocol(asyncio.Protocol):
    """The socket's protocol on a TLS listener (see the module docstring)."""

    def __init__(self, context: ssl.SSLContext, app_factory, workers, handshake_timeout_s: float,
                 handshakes: set | None = None, tls_bytes: collections.Counter | None = None):
        """`context`: the listener's live SSLContext (its sslobject_class logs failed
        handshakes); `app_factory()` makes the application protocol once the handshake is done;
        `workers`: a WorkerThreads for the large encryptions and decryptions, or None to do all
        inline; `handshakes`: the owner's set of protocols still in their handshake (this one is
        in it until its handshake ends), so that it can close them (abort_handshake) at shutdown;
        `tls_bytes`: the listener's Counter of bytes by (operation, thread), counted on the loop."""
        self._handshakes = handshakes
        self._context = context
        self._app_factory = app_factory
        self._workers = workers
        self._timeout_s = handshake_timeout_s
        self._state = _HANDSHAKE
        self._raw = None                     # the TCP transport
        self._app = None                     # the application protocol, once the handshake is done
        self.transport = None                # the TlsTransport it was given
        self._plain: collections.deque = collections.deque()   # buffers written, not yet encrypted
        self._plain_bytes = 0
        self._busy = False                   # a job (encryption or decryption) owns the SSL object
        self._job = 0                        # plaintext bytes a worker is encrypting now (0: none)
        self._job_future = None              # the pool's Future of that job (cancelled if we go first)
        self._inbound: collections.deque = collections.deque()  # ciphertext (None: EOF) not in the BIO yet
        self._inbound_bytes = 0
        self._decrypted = None               # plaintext pieces a job decrypted that the application has not taken
        self._raw_reading_paused = False     # the socket's transport was told pause_reading
        self._reader = _UNKNOWN              # tls_records' native reader for the jobs (None: decrypt inline)
        self._loop_reader = _UNKNOWN         # ... and the loop's, which keeps the GIL (None: SSLObject.read)
        self._tls_bytes = tls_bytes if tls_bytes is not None else collections.Counter()
        self._raw_paused = False             # the socket's transport is above RAW_HIGH
        self._app_write_paused = False       # the application was told pause_writing
        self._reading_paused = False         # the application asked pause_reading
        self._decrypt_scheduled = False
        self._eof_seen = False
        self._sock = None                    # a duplicate of the socket's descriptor, for the workers' sends

    # -- the socket's side -------------------------------------------------------------------
    def connection_made(self, raw) -> None:
        self._raw = raw
        self._loop = asyncio.get_running_loop()
        raw.set_write_buffer_limits(high=RAW_HIGH, low=RAW_LOW)
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._ssl = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._timer = self._loop.call_later(self._timeout_s, self._handshake_timed_out)
        if self._handshakes is not None:
            self._handshakes.add(self)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state is _OPEN or state is _CLOSING:
            if (self._busy or self._inbound or self._reading_paused or self._decrypted is not None
                    or (len(data) >= OFF_LOOP_DECRYPT_BYTES and self._workers is not None)):
                # behind what waits, or large enough for a worker (_drain_input decides)
                self._inbound.append(data)
                self._inbound_bytes += len(data)
                if self._busy or self._reading_paused or self._decrypted is not None:
                    if self._inbound_bytes >= INBOUND_HIGH:
                        self._update_raw_reading()
                    return
                self._drain_input()
                return
            self._incoming.write(data)
            self._decrypt()
        elif state is _HANDSHAKE:
            self._incoming.write(data)
            self._handshake()

    def eof_received(self) -> bool:
        if self._state is _HANDSHAKE:        # left during the handshake: the transport closes
            self._handshake_over()
            self._state = _CLOSED
            return False
        # After what came before it (_drain_input): queued while a job owns the SSL object, while
        # the application does not read, or while a decryption resume_reading scheduled has not
        # run - the bytes it left in the BIO came first (the loop may poll the socket, and see
        # this EOF, before it runs that callback)
        if (self._busy or self._reading_paused or self._inbound or self._decrypt_scheduled
                or self._decrypted is not None):
            self._inbound.append(None)
        else:
            self._eof()
        return True                          # keep writing: the application answers, then closes

    def connection_lost(self, exc) -> None:
        if self._state is _HANDSHAKE:
            self._handshake_over()
        self._discard()
        app, self._app = self._app, None
        if app is not None:
            app.connection_lost(exc)

    def pause_writing(self) -> None:
        self._raw_paused = True

    def resume_writing(self) -> None:
        self._raw_paused = False
        self._pump()

    # -- handshake ---------------------------------------------------------------------------
    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._send_output()
            return
        except (ssl.SSLError, OSError):      # logged and counted by LoggedSSLObject
            self._handshake_over()
            self._state = _CLOSED
            self._send_output()              # the alert, then the close
            self._raw.close()
            return
        self._handshake_over()
        self._state = _OPEN
        self._send_output()                  # the server's last flight (TLS 1.3: and its tickets)
        self.transport = TlsTransport(self)
        app = self._app = self._app_factory()
        app.connection_made(self.transport)
        self._decrypt()                      # application data that came with the client's Finished

    def _handshake_over(self) -> None:
        self._timer.cancel()
        if self._handshakes is not None:
            self._handshakes.discard(self)

    def abort_handshake(self) -> None:
        """Close a connection still in its handshake (the broker is stopping): no log line, as
        for a peer that leaves during it."""
        if self._state is _HANDSHAKE:
            self._handshake_over()
            self._state = _CLOSED
            self._raw.abort()

    def _handshake_timed_out(self) -> None:
        if self._state is _HANDSHAKE:
            self._handshake_over()
            log.debug("TLS handshake with %s did not finish within %.0f s: connection closed",
                      self._raw.get_extra_info("peername"), self._timeout_s)
            self._state = _CLOSED
            self._raw.abort()

    # -- input -------------------------------------------------------------------------------
    def _decrypt(self) -> None:
        """Decrypt what the incoming BIO holds straight into the application's buffer, while it
        reads and no job owns the SSL object."""
        sslobj, incoming = self._ssl, self._incoming
        while self._state is _OPEN and not self._busy and not self._reading_paused:
            app = self._app
            buf = app.get_buffer(-1)
            try:
                if incoming.pending > TLS_RECORD and self._native_reader(on_loop=True) is not None:
                    # two records or more: one call that keeps the GIL (a call per record would
                    # hand it to another thread each time); SSLObject.read says why it stopped
                    filled, done = self._loop_reader(buf, 0, len(buf))
                    eof = False
                    if not done:
                        more, eof = _read_into(sslobj, buf[filled:])
                        filled += more
                else:
                    filled, eof = _read_into(sslobj, buf)
            except ssl.SSLError as exc:
                self._fail("reading", exc)
                return
            if filled:
                self._tls_bytes[DECRYPTED_ON_LOOP] += filled
                app.buffer_updated(filled)
            if eof:
                self._eof()
                break
            if filled < len(buf):
                break                        # the BIO is empty
        if not self._busy and self._state is not _CLOSED:
            self._send_output()              # what reading produced (alerts, key updates)

    def _eof(self) -> None:
        """The client will send nothing more (close_notify, or its TCP FIN): told once."""
        if self._eof_seen:
            return
        self._eof_seen = True
        if self._state is _OPEN and self._app is not None and not self._app.eof_received():
            self.close()

    def _drain_input(self) -> None:
        """After a job, or when the application reads again, or when ciphertext came to a queue:
        the plaintext a job left, then the ciphertext queued (by a worker if there is much of it,
        else inline, with what waits in the BIO), then the EOF, if one came after them. Nothing
        while a job runs (resume_reading's call may come then; the job's end comes back here)."""
        self._decrypt_scheduled = False
        if self._busy:
            return
        if self._decrypted is not None:
            self._deliver()
            if self._decrypted is not None or self._busy:
                return                       # paused again, or its answers' encryption took the SSL object
        inbound = self._inbound
        if (self._workers is not None and self._state is _OPEN and not self._reading_paused
                and self._inbound_bytes + self._incoming.pending >= OFF_LOOP_DECRYPT_BYTES
                and self._native_reader() is not None and self._start_decryption()):
            self._update_raw_reading()
            return
        while inbound and inbound[0] is not None:
            data = inbound.popleft()
            self._inbound_bytes -= len(data)
            self._incoming.write(data)
        self._decrypt()
        if inbound and not self._busy and not self._reading_paused and self._state is _OPEN:
            inbound.clear()                  # the EOF (nothing comes after it)
            self._eof()
        self._update_raw_reading()

    def _native_reader(self, on_loop: bool = False):
        """The reader the decryption jobs use (tls_records.py), found at the first large input;
        None where there is none: a worker reading record by record would wait for the GIL after
        each, so decryption then stays on the loop. `on_loop`: the loop's own, which keeps the GIL."""
        if on_loop:
            if self._loop_reader is _UNKNOWN:
                self._loop_reader = native_reader(self._ssl, self._incoming, keep_gil=True)
            return self._loop_reader
        if self._reader is _UNKNOWN:
            self._reader = native_reader(self._ssl, self._incoming)
        return self._reader

    def _start_decryption(self) -> bool:
        """Hand up to DECRYPT_JOB_BYTES of the queued ciphertext, and what waits in the BIO, to a
        worker (_run_decryption); False if the pool is shut down (the broker is stopping), the
        ciphertext then in the BIO for the caller to decrypt inline."""
        inbound, chunks, taken = self._inbound, [], 0
        while inbound and inbound[0] is not None and taken < DECRYPT_JOB_BYTES:
            chunks.append(inbound.popleft())
            taken += len(chunks[-1])
        self._inbound_bytes -= taken
        # the plaintext is shorter than its ciphertext: room for all of it (and what OpenSSL holds)
        room = taken + self._incoming.pending + self._ssl.pending()
        self._busy = True
        future = self._workers.submit(self._run_decryption, chunks, room)
        if future is None:
            self._busy = False
            for data in chunks:
                self._incoming.write(data)
            return False
        self._job_future = future
        return True

    def _run_decryption(self, chunks: list, room: int) -> None:
        """On a worker thread: feed `chunks` to the SSL object (ours until _decryption_done runs)
        and decrypt what it then holds into a buffer of `room` bytes, DECRYPT_STEP at a time with
        the native reader (the GIL dropped once a step); then take what queued up in `_inbound`
        meanwhile (the loop only appends to it while a job runs) and go on, until it is empty, the
        plaintext reaches DECRYPT_JOB_BYTES, or the application pauses reading or the connection
        is closed (what is not decrypted stays in the BIO or the queue). So a request that arrives
        in several reads is decrypted as it comes, not a job per read with a loop pass between.
        Where a step stops short other than for want of a whole record, SSLObject.read says why.
        Reports (the plaintext pieces, close_notify seen, bytes taken from `_inbound`) or the
        exception."""
        try:
            incoming, inbound, reader = self._incoming, self._inbound, self._reader
            pieces, made, taken, eof = [], 0, 0, False
            while True:
                for data in chunks:
                    incoming.write(data)
                out = bytearray(room)
                view, filled = memoryview(out), 0
                while filled < room and self._state is _OPEN and not self._reading_paused:
                    length = min(DECRYPT_STEP, room - filled)
                    n, done = reader(out, filled, length)
                    if not done:             # close_notify, or an error: SSLObject.read says which
                        more, eof = _read_into(self._ssl, view[filled + n:filled + length])
                        n += more
                    filled += n
                    if eof or n < length:
                        break                # close_notify, or the BIO is empty
                if filled:
                    pieces.append(view[:filled])
                    made += filled
                if eof or made >= DECRYPT_JOB_BYTES or self._state is not _OPEN or self._reading_paused:
                    break
                chunks, size = [], 0
                while size < DECRYPT_JOB_BYTES:
                    try:
                        data = inbound[0]
                        if data is None:     # the EOF: the loop hands it over after this plaintext
                            break
                        inbound.popleft()    # (the head, unless a close cleared the queue: IndexError)
                    except IndexError:
                        break
                    chunks.append(data)
                    size += len(data)
                if not chunks:
                    break
                taken += size
                room = size + incoming.pending + self._ssl.pending()
            result = (pieces, eof, taken)
        except Exception as exc:             # noqa: BLE001 - the loop decides (_decryption_done)
            result = exc
        try:
            self._loop.call_soon_threadsafe(self._decryption_done, result)
        except RuntimeError:                 # the loop is closed: the connection went with it
            pass

    def _decryption_done(self, result) -> None:
        self._busy, self._job_future = False, None
        if self._state is _CLOSED:
            self._release_socket()
            return                           # aborted or lost meanwhile: nothing more goes in or out
        if isinstance(result, Exception):
            self._fail("reading", result)
            return
        pieces, eof, taken = result
        self._inbound_bytes -= taken
        self._send_output()                  # what reading produced (a KeyUpdate's answer, an alert)
        if pieces:
            self._tls_bytes[DECRYPTED_ON_WORKER] += sum(map(len, pieces))
            self._decrypted = collections.deque(pieces)
        if eof:                              # close_notify: what came after it means nothing
            # and is never read (SSL_read answers the close_notify again): left in the BIO, 64 KiB
            # of it would start a job that finds only that, and the next, for ever
            self._incoming.read()
            self._inbound.clear()
            self._inbound_bytes = 0
            self._inbound.append(None)
        self._drain_input()                  # the plaintext to the application, then what came meanwhile
        self._pump()                         # answers written meanwhile (or a close waiting for the job)
        if not self._busy:
            self._release_socket()

    def _deliver(self) -> None:
        """The plaintext a job decrypted into the application's buffers, while it reads; what it
        does not take (it paused reading) waits for resume_reading."""
        pieces, app = self._decrypted, self._app
        while pieces and self._state is _OPEN and not self._reading_paused:
            data = pieces[0]
            buf = app.get_buffer(-1)
            n = min(len(buf), len(data))
            if not n:
                self._fail("reading", RuntimeError("get_buffer() returned an empty buffer"))
                return
            buf[:n] = data[:n]
            if n == len(data):
                pieces.popleft()
            else:
                pieces[0] = data[n:]
            app.buffer_updated(n)
        if not pieces or self._state is not _OPEN:
            self._decrypted = None

    def _update_raw_reading(self) -> None:
        """The socket is read while the application reads and the ciphertext waiting for the SSL
        object (a job runs, or the application paused) stays below INBOUND_HIGH."""
        if self._state is _CLOSED:
            return
        pause = self._reading_paused or self._inbound_bytes >= INBOUND_HIGH
        if pause is not self._raw_reading_paused:
            self._raw_reading_paused = pause
            if pause:
                self._raw.pause_reading()
            else:
                self._raw.resume_reading()

    # -- output ------------------------------------------------------------------------------
    def write(self, data) -> None:
        self.writelines((data,))

    def writelines(self, buffers) -> None:
        """Queue bytes-like buffers and storage FileRecords (read when encrypted), in order."""
        if self._state is not _OPEN:
            return
        for data in buffers:
            if type(data) is FileRecords:
                data = _FilePart(data, 0, data.size)
            if len(data):
                self._plain.append(data)
                self._plain_bytes += len(data)
        self._pump()

    def _pump(self) -> None:
        """Encrypt and send the queued plaintext while the socket takes it and no job runs."""
        while self._plain and not self._busy and not self._raw_paused:
            if self._state is not _OPEN and self._state is not _CLOSING:
                return
            off_loop = self._workers is not None and self._plain_bytes >= OFF_LOOP_BYTES
            # the socket's transport holds nothing: the worker may send what it encrypts itself,
            # and go on to the next step without waiting for the loop
            sock = self._direct_socket() if off_loop and not self._raw.get_write_buffer_size() else None
            batch, size = self._take(DIRECT_JOB_BYTES if sock is not None else JOB_BYTES)
            if off_loop:
                self._job, self._busy = size, True
                future = self._workers.submit(self._run_job, batch, sock)
                if future is not None:
                    self._job_future = future
                    break
                self._job, self._busy = 0, False     # the pool is shut down (broker stopping): inline
            try:
                data = _encrypt(self._ssl, self._outgoing, batch)
            except OSError as exc:           # ssl.SSLError, or a segment file cut short
                self._fail("encrypting", exc)
                return
            self._tls_bytes[ENCRYPTED_ON_LOOP] += size
            self._raw.write(data)            # may call pause_writing
        self._check_app_writing()
        if self._state is _CLOSING and not self._plain and not self._busy:
            self._shut()

    def _take(self, limit: int) -> tuple[list, int]:
        """Up to `limit` bytes from the head of the plaintext queue (a buffer split if need be)."""
        batch, taken = _take(self._plain, limit)
        self._plain_bytes -= taken
        return batch, taken

    def _direct_socket(self) -> socket.socket | None:
        """Our duplicate of the connection's socket, for jobs to send on (made at the first)."""
        if self._sock is None:
            raw_sock = self._raw.get_extra_info("socket")
            if raw_sock is None:
                return None
            self._sock = socket.socket(fileno=os.dup(raw_sock.fileno()))
            self._sock.setblocking(False)    # (shares the transport's file status: already so)
        return self._sock

    def _drop_job(self) -> None:
        """Closed (abort, connection_lost): a job still waiting for a worker is cancelled. It
        would never report back once the pool drops it (Broker.stop shuts the pool down with
        cancel_futures), leaving `_job` set and the duplicate socket open until the garbage
        collector found this protocol; cancelled here, it never runs, so the duplicate is ours
        to close now, and no worker encrypts for a connection that is gone."""
        future = self._job_future
        if future is not None and future.cancel():
            self._job, self._job_future, self._busy = 0, None, False

    def _release_socket(self, shutdown: bool = False) -> None:
        """Closed, or no job to run: our duplicate goes once no job uses it (else when it
        returns), so it neither keeps the socket open nor is reused under a worker; `shutdown`
        (an abort) also stops a running job's send from putting anything more on the wire."""
        sock = self._sock
        if sock is None:
            return
        if self._busy:
            if shutdown:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        self._sock = None
        sock.close()

    def _run_job(self, batch: list, sock: socket.socket | None) -> None:
        """On a worker thread: encrypt `batch` (the SSL object is ours until _job_done runs); given
        the socket, in steps sent as they are made (_encrypt_and_send). Reports (ciphertext for
        the transport, plaintext pieces not encrypted) or the exception."""
        try:
            if sock is None:
                result = (_encrypt(self._ssl, self._outgoing, batch), ())
            else:
                result = self._encrypt_and_send(batch, sock)
        except Exception as exc:             # noqa: BLE001 - the loop decides (_job_done)
            result = exc
        del batch
        try:
            self._loop.call_soon_threadsafe(self._job_done, result)
        except RuntimeError:                 # the loop is closed: the connection went with it
            pass

    def _encrypt_and_send(self, batch: list, sock: socket.socket) -> tuple:
        """Encrypt JOB_BYTES at a time and send each step at once, so a large answer streams out
        at the cipher's pace instead of one step per loop iteration (a busy loop's iteration takes
        milliseconds). Stops at the first step the socket does not take whole (its unsent
        ciphertext and the untouched rest go back to the loop, which queues them behind the
        transport: back-pressure as usual) or once the connection is closed."""
        queue = collections.deque(batch)
        del batch
        while queue:
            step, _ = _take(queue, JOB_BYTES)
            data = _encrypt(self._ssl, self._outgoing, step)
            del step
            try:
                sent = sock.send(data)
            except OSError:                  # full (EAGAIN), or gone: the transport's write finds out
                sent = 0
            if sent < len(data) or self._state is _CLOSED:
                return memoryview(data)[sent:], list(queue)
        return b"", ()

    def _job_done(self, result) -> None:
        encrypted = self._job
        self._job, self._job_future, self._busy = 0, None, False
        if self._state is _CLOSED:
            self._release_socket()
            return                           # aborted or lost meanwhile: nothing more goes out
        if isinstance(result, Exception):
            self._fail("encrypting", result)
            return
        unsent, rest = result
        if rest:                             # not encrypted: back at the head of the queue
            self._plain.extendleft(reversed(rest))
            returned = sum(len(b) for b in rest)
            self._plain_bytes += returned
            encrypted -= returned
        self._tls_bytes[ENCRYPTED_ON_WORKER] += encrypted
        if len(unsent):
            self._raw.write(unsent)
        self._drain_input()                  # requests that came meanwhile go before the next job
        self._pump()
        if not self._busy:                   # no further job: the duplicate goes until one needs it
            self._release_socket()

    def _send_output(self) -> None:
        data = self._outgoing.read()
        if data:
            self._raw.write(data)

    def _check_app_writing(self) -> None:
        app = self._app
        if app is None or self._state is _CLOSED:
            return
        unsent = self._plain_bytes + self._job + self._raw.get_write_buffer_size()
        if not self._app_write_paused:
            if unsent > HIGH_WATER:
                self._app_write_paused = True
                app.pause_writing()
        elif unsent <= LOW_WATER:
            self._app_write_paused = False
            app.resume_writing()

    def get_write_buffer_size(self) -> int:
        raw = 0 if self._raw is None else self._raw.get_write_buffer_size()
        return self._plain_bytes + self._job + raw

    @property
    def unencrypted_bytes(self) -> int:
        """Bytes written and not known to be encrypted yet: queued, or handed to a job that has
        not returned (the rest of get_write_buffer_size is ciphertext the transport holds)."""
        return self._plain_bytes + self._job

    # -- reading control, closing --------------------------------------------------------------
    def pause_reading(self) -> None:
        if self._state is _CLOSED or self._reading_paused:
            return
        self._reading_paused = True
        self._update_raw_reading()

    def resume_reading(self) -> None:
        if self._state is _CLOSED or not self._reading_paused:
            return
        self._reading_paused = False
        self._update_raw_reading()
        if not self._decrypt_scheduled:
            # what waits in the BIO, on the next loop pass: the application is inside its own
            # callback now and would not see the data
            self._decrypt_scheduled = True
            self._loop.call_soon(self._drain_input)

    def close(self) -> None:
        """Send what was written, then close_notify, then close the socket."""
        if self._state is not _OPEN:
            return
        self._state = _CLOSING
        self._pump()

    def _shut(self) -> None:
        self._state = _CLOSED
        try:
            self._ssl.unwrap()               # close_notify (the peer's is not waited for)
        except (ssl.SSLError, ValueError):
            pass
        self._send_output()
        self._release_socket()
        self._raw.close()

    def abort(self) -> None:
        if self._raw is None:
            return
        self._discard()
        self._raw.abort()                    # connection_lost follows

    def _discard(self) -> None:
        """Closed without a goodbye (abort, connection_lost): nothing more is encrypted or sent,
        what waits is dropped, a job not started is cancelled and a running one's send stopped."""
        self._state = _CLOSED
        self._plain.clear()
        self._plain_bytes = 0
        self._inbound.clear()
        self._inbound_bytes = 0
        self._decrypted = None
        self._drop_job()
        self._release_socket(shutdown=True)

    def is_closing(self) -> bool:
        return self._state is not _OPEN

    def _fail(self, what: str, exc: BaseException) -> None:
        log.debug("closing TLS connection from %s: %s failed: %s", self._raw.get_extra_info("peername"),
                  what, exc)
        self.abort()

    def get_extra_info(self, name: str, default=None):
        if name == "ssl_object":
            return self._ssl
        if name == "peercert":
            return self._ssl.getpeercert()
        if name == "cipher":
            return self._ssl.cipher()
        if name == "compression":
            return self._ssl.compression()
        if name == "sslcontext":
            return self._ssl.context
        return self._raw.get_extra_info(name, default)


class TlsTransport(asyncio.Transport):
    """What the application protocol holds as its transport: TlsProtocol's application side."""

    __slots__ = ("_tls",)

    def __init__(self, tls: TlsProtocol):
        super().__init__()
        self._tls = tls

    def write(self, data) -> None:
        self._tls.write(data)

    def writelines(self, list_of_data) -> None:
        self._tls.writelines(list_of_data)

    def pause_reading(self) -> None:
        self._tls.pause_reading()

    def resume_reading(self) -> None:
        self._tls.resume_reading()

    def is_reading(self) -> bool:
        return not self._tls._reading_paused and not self._tls.is_closing()

    def close(self) -> None:
        self._tls.close()

    def abort(self) -> None:
        self._tls.abort()

    def is_closing(self) -> bool:
        return self._tls.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._tls.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return LOW_WATER, HIGH_WATER

    @property
    def unencrypted_bytes(self) -> int:
        return self._tls.unencrypted_bytes

    def get_extra_info(self, name: str, default=None):
        return self._tls.get_extra_info(name, default)

    def can_write_eof(self) -> bool:
        return False


def tls_protocol_factory(security, app_factory, workers, handshakes: set | None = None):
    """A protocol factory for loop.create_server on a TLS listener: each connection's TLS layer
    over the listener's live context (a keystore rotated at run time serves new connections);
    those still in their handshake are kept in `handshakes` (see TlsProtocol); bytes encrypted
    and decrypted are counted in the listener's `tls_bytes`."""
    tls_bytes = security.tls_bytes
    def factory() -> TlsProtocol:
        return TlsProtocol(security.live_context, app_factory, workers, security.handshake_timeout_s, handshakes,
                           tls_bytes)
    return factory
