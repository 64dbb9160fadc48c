"""One client connection: frames in, requests started one after another, responses out in order.

Role: an `asyncio.BufferedProtocol`; the event loop reads straight into the FrameReader's buffer
(a large produce request into a buffer of its own, see protocol/framing.py). Each complete frame
gets a slot in `pending`, one per request in arrival order, which holds its response until every
earlier one is written, because Kafka clients match responses to requests by order as well as
correlation id.

Request order (Kafka's muted channel): a request starts (is parsed, passes the SASL gate, and
its handler's first step runs at once, in the read callback or in the task of the request before
it that applied its effects; it gets a task of its own only if it then waits: `_start`) only
after the request before it on this connection has applied its effects, so a client may
pipeline DeleteRecords then ListOffsets, or CreateTopics then Metadata, and the second sees the
first's effect, as on Kafka, whose socket server reads a connection's next request only once the
previous one is answered. Applied means: the handler returned, or it
called `ctx.effects_applied()` (broker/network/context.py) because it keeps waiting after its effects
are visible: Fetch before it parks for its long poll, Produce after its appends. Those waits are
not effects, so they hold back neither the next request nor pipelined produce throughput (on
Kafka a request behind a parked fetch waits for its answer; here it starts at once, and the
fetch answers as if that request had come on another connection). Everything else - a JoinGroup waiting for its rebalance, say - simply
holds the next request back, as Kafka's muted channel does. `_running` is the started request
that has not applied its effects; `_queued` the read requests not yet started.

Flow control (uvicorn's shape): at most `queued.max.requests` requests are in flight (read,
not answered) on this connection (frames beyond that wait in the reader) and reading pauses
while that many are in flight or while the transport's write buffer is above its high-water
mark (`pause_writing`); it resumes when both clear. A request read is not started while earlier
answers wait to go out (`_write_out` says why), so a client that pipelines and does not read
holds about one answer in the broker, not one per request, as on Kafka. Request memory (queued.max.request.bytes,
broker/network/limits.py): a large frame's memory is asked for when its size prefix arrives, before its
buffer is made and its body read (`_admit_large`, Kafka's memory pool); a small frame, already in
the shared read buffer, when it is complete; either way a connection that gets none pauses
reading until some is freed. A request gives its memory back (and a large frame its buffer)
once its handler is done with the frame: when its effects are applied or it returns, whichever
comes first (`_release`), as Kafka's request handler releases the buffer after handling, before
a delayed answer; so a parked fetch or a produce waiting for its sync holds none. A slow consumer throttles its own connection and
nobody else's. Responses that finish in the same loop pass leave in one `writelines` (writev).
A client over its byte-rate quota (broker/quotas) is muted the same way for the throttle time
its answer carries (`throttle`): no new request is read or started until it ends. A throttled
Produce, and a Fetch from a client already over its quota, do not apply their effects early, so
the next request waits for their answer and then the throttle, as Kafka (which reads nothing
from a channel before answering, then mutes it, KIP-219).

Zero copy: requests run with `ctx.zero_copy`, so a Fetch answer may carry storage FileRecords
(segment file ranges) in place of record bytes. Over TLS the transport takes them as they are and
reads each range when it encrypts it (network/tls_transport.py). On plaintext such an answer, when the transport's
write buffer is empty, goes out through a network.direct_send.DirectSender, which writes the socket
itself (sendfile for the ranges); every answer after it goes the same way until it has drained,
so output stays in order and never interleaves, and while the socket is full reading pauses as
for pause_writing. If the transport still holds earlier bytes, the ranges are read into memory
and written through the transport as before.

Security (broker/security): on a TLS listener the transport is network/tls_transport.py's
TlsTransport (the handshake was done before connection_made); bytes arrive decrypted into our
buffer as on plaintext, and answers are handed over whole, file ranges included: it encrypts them
as the socket drains (large ones on worker threads, off the loop), and its pause_writing counts
the bytes not yet encrypted too, so reading pauses behind a large answer as behind a full socket. `session` says who the client is (the
certificate's principal, or SASL's once authenticated); on a SASL listener `gate` admits only
ApiVersions/SaslHandshake/SaslAuthenticate until authentication succeeds (anything else closes
the connection, as Kafka) and closes an expired KIP-368 session; after a SaslHandshake v0 the
tokens arrive bare and are answered bare (`_raw_sasl_token`). Plain listeners pay one `is None`.

Failure policy: an oversized or negative size prefix, a malformed header or body, an unknown API
key, an unsupported version (other than ApiVersions) or a handler bug closes this connection
with one WARNING line naming the peer and the reason. A handler bug (any exception other than
CloseConnection escaping prepare or run) is handled the same way wherever it surfaces: one
WARNING line naming the API, version, correlation id, client id, exception and the line that
raised it; the traceback goes to DEBUG (a client can provoke it at will, so it must not flood the
log at ERROR). Nothing a client sends reaches past its own connection.

Shutdown: `close_when_idle()` stops reading and closes the transport once every request
already taken in (a slot in `pending`) has been started in turn and answered; the server waits
for that with a timeout, then `abort()`s. A client that half-closes (EOF) gets the same
treatment: answers to what was taken in, then the close. Frames still in the reader at that
point (beyond queued.max.requests in flight, or waiting for request memory) are not answered.
Either way its parked fetches answer at once (`Parked.release`) rather than at their max_wait_ms.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
import traceback

from kompakt.broker.network.dispatch import CloseConnection, ProtocolViolation
from kompakt.broker.fetch.wait import Parked
from kompakt.broker.network.direct_send import DirectSender
from kompakt.broker.security.session import Session, java_host_address
from kompakt.protocol.framing import FrameReader, InvalidFrameError
from kompakt.storage.file_records import FileRecords

log = logging.getLogger(__name__)


class _Slot:
    __slots__ = ("done", "data", "task", "nbytes", "frame", "held")

    def __init__(self, nbytes: int = 0):
        self.done = False
        self.data = None
        self.task = None
        self.frame = None                    # the request's frame until it starts
        self.held = None                     # then until its effects are applied (recycled then)
        self.nbytes = nbytes                 # in the request-memory pool until the handler is done with the frame


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker, dispatcher, *, max_request_bytes: int, max_in_flight: int,
                 listener: str | None = None, security=None):
        self.broker = broker
        self.listener = listener
        self.dispatcher = dispatcher
        self.reader = FrameReader(max_request_bytes)
        self.max_in_flight = max_in_flight
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.pending: collections.deque[_Slot] = collections.deque()   # every request read, unanswered
        self._queued: collections.deque[_Slot] = collections.deque()   # the not yet started tail of pending
        self._running: _Slot | None = None   # the started request that has not applied its effects yet
        self._stopped = False                # start nothing more (aborted, or failing SASL v0)
        self.closed = asyncio.get_running_loop().create_future()
        self.last_active = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._reading_paused = False
        self._write_paused = False
        self._closing = False
        self._processing = False
        self._out: list = []                 # responses ready to write, in order
        self._out_bytes = 0                  # their size (file ranges counted too)
        self._write_scheduled = False
        self.parked = Parked()               # this connection's long-polling fetches
        self.security = security             # the listener's security.setup.ListenerSecurity (None: plain)
        self.session = Session(listener=listener)   # who the client is (security/session.py)
        self.gate = None                     # SASL: admits(api_key) before each request, else None
        self._throttled = None               # the TimerHandle ending a quota throttle, while muted
        self._tls = security is not None and security.ssl_context is not None
        # Fetch may answer FileRecords: sent with sendfile (plaintext), read by the TLS layer (TLS)
        self._zero_copy = self._tls or hasattr(os, "sendfile")
        self._direct: DirectSender | None = None   # writing the socket itself (see the docstring)
        self.limits = getattr(broker, "limits", None)   # broker/network/limits.py (connections, request memory)
        self._host = None                    # the client address counted by limits.admit
        self._held = None                    # a frame waiting for request memory (queued.max.request.bytes)
        self._precharged = 0                 # request memory taken for a large frame before its body is read
        self._awaiting_memory = False        # a large frame's size is read, its memory not yet granted
        if self.limits is not None:
            self.reader.admit_large = self._admit_large

    # -- transport callbacks ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        client_host = peer[0] if isinstance(peer, tuple) and peer else ""
        self.session.client_host = java_host_address(client_host)     # as Kafka's ACL hosts name it
        if self.limits is not None:
            # Refused: max.connections(.per.ip) (logged there), or Broker.stop has begun - a TLS
            # handshake under way when it closed the listeners finishes after the drain, which
            # never saw it; served, it would stay open on the stopped broker
            if getattr(self.broker, "stopping", False) or self.limits.admit(client_host) is not None:
                self._closing = True
                transport.abort()
                return
            self._host = client_host
        self.broker.connections.add(self)
        if self.broker.metrics is not None:
            self.broker.metrics.connection_opened()
        if self.security is not None and (self.security.sasl is not None or self.security.ssl_context is not None):
            session = self.security.open_session(transport, self.session.client_host, self.peer,
                                                 self.close_when_idle)
            if session is None:
                self.abort()
            else:
                self.session = session
                if session.sasl is not None:
                    self.gate = session.sasl.admits

    def connection_lost(self, exc) -> None:
        if self.limits is not None:
            if self._host is None:           # refused in connection_made: never counted
                self.transport = None
                if not self.closed.done():
                    self.closed.set_result(None)
                return
            self.limits.release(self._host)
            self.limits.forget(self)
            self._held = None
            held = sum(slot.nbytes for slot in self.pending) + self._precharged
            self._precharged = 0
            if held:
                self.limits.free(held)
        self.broker.connections.discard(self)
        if self._throttled is not None:
            self._throttled.cancel()
            self._throttled = None
        if self.broker.metrics is not None:
            self.broker.metrics.connection_closed()
        for slot in self.pending:
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
        self.pending.clear()
        self._queued.clear()
        self._running = None
        self._stopped = True
        self._close_direct()
        self.transport = None
        if not self.closed.done():
            self.closed.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)
        self.last_active = time.monotonic()
        self._process()

    def _process(self) -> None:
        """Take the buffered frames, up to `queued.max.requests` in flight (the rest wait in the
        reader, and reading pauses, until earlier responses are written), and start the next
        one whenever no request is applying its effects (see the module docstring)."""
        if self._processing:
            return
        self._processing = True
        try:
            queued = self._queued
            while True:
                if not self._closing and len(self.pending) < self.max_in_flight and self._take_frames():
                    continue                 # a frame was queued (or the connection refused one)
                if not queued or self._running is not None or self._throttled is not None or self._stopped \
                        or self._write_paused or self._out_bytes >= OUT_HIGH \
                        or (self._direct is not None and self._direct.blocked):
                    break                    # (answers waiting to go out: see _write_out)
                self._start(queued.popleft())
        finally:
            self._processing = False
        self._update_reading()

    def _take_frames(self) -> bool:
        """Queue the reader's next complete frame as a slot; False when there is none to take."""
        frame, self._held = self._held, None
        if frame is None:
            try:
                frame = self.reader.next_frame()
            except InvalidFrameError as exc:
                self._violation(str(exc))
                return False
            if frame is None:
                return False
        charge = 0
        limits = self.limits
        if limits is not None:
            if self._precharged:             # a large frame: its memory was taken before its body was read
                charge, self._precharged = self._precharged, 0
            elif not limits.reserve(self, len(frame)):
                self._held = frame           # resume_held() once answers free request memory
                return False
            else:
                charge = len(frame)
        slot = _Slot(charge)
        slot.frame = frame
        self.pending.append(slot)
        self._queued.append(slot)
        return True

    def eof_received(self):
        # The client will send nothing more: answer what it already sent, then close (over TLS
        # too: our TLS layer keeps the socket open for the answers).
        self.close_when_idle()
        return True

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None:
            self._process()                  # starts what waited for the answers to go (_write_out); reads again

    # -- requests ------------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        """Start the request in `slot` (the one before it has applied its effects)."""
        frame, slot.frame = slot.frame, None
        gate = self.gate
        if gate is not None:
            sasl = self.session.sasl
            if sasl.raw_tokens:              # after a SaslHandshake v0: a bare SASL token
                self._raw_sasl_token(sasl, slot, frame)
                return
            if not gate(int.from_bytes(frame[0:2], "big", signed=True)):
                # before SASL authentication (or after its session expired): Kafka closes the connection
                self._violation(sasl.refusal(int.from_bytes(frame[0:2], "big", signed=True)))
                return
        try:
            prepared = self.dispatcher.prepare(frame, self.peer, self.listener, self.parked, self.session)
        except ProtocolViolation as exc:
            self._violation(str(exc))
            return
        except Exception as exc:             # a decoder bug: still only this connection's problem
            self._handler_failed(_describe_frame(frame), exc)
            return
        if isinstance(prepared, (bytes, bytearray)):
            slot.done, slot.data = True, prepared
            slot.held = frame
            self._release(slot)
            self._flush()
        else:
            self._running = slot
            slot.held = frame
            prepared[0].on_effects = self._effects_applied
            prepared[0].zero_copy = self._zero_copy
            run = self._run(slot, frame, *prepared)
            # Eager start: the handler's first step runs now, in this loop pass. A request that
            # never waits (most appends, metadata, offsets) is answered before the next frame is
            # looked at, so a burst of pipelined requests is still handled in one pass and its
            # answers leave in one writev, as when requests ran concurrently; only a request that
            # waits gets a task (_resumed).
            try:
                waiting_on = run.send(None)
            except StopIteration:
                return
            slot.task = self._loop.create_task(_resumed(run, waiting_on))

    def _effects_applied(self) -> None:
        """The running request's effects are visible (RequestContext.effects_applied): start the
        next. Its handler reads its frame no more (context.py), so a large frame's buffer goes
        back to the reader now, not when the answer is ready: a produce waiting for its durable
        acknowledgement would otherwise hold its megabyte while the next ones get fresh ones."""
        slot = self._running
        self._running = None
        if slot is not None:
            self._release(slot)
        if self.transport is not None:
            self._process()

    def _release(self, slot: _Slot) -> None:
        """The handler is done with the request's frame (its effects are applied, or it returned):
        a large frame's buffer goes back to the reader and the request's bytes to the memory pool
        (queued.max.request.bytes), once each. Kafka's request handler releases the request's
        buffer to the pool as soon as it has handled it (KafkaRequestHandler: releaseBuffer
        after apis.handle), before a delayed answer (a parked fetch, an acks=all produce)."""
        held, slot.held = slot.held, None
        if held is not None:
            self.reader.recycle(held)
        if slot.nbytes:
            self.limits.free(slot.nbytes)
            slot.nbytes = 0

    async def _run(self, slot: _Slot, frame, ctx, module, request) -> None:
        try:
            slot.data = await self.dispatcher.run(ctx, module, request)
            ctx.on_effects = None
            if self._running is slot:        # returned without calling effects_applied: done now
                self._running = None
            if ctx.throttle_ms > 0:
                self.throttle(ctx.throttle_ms)
            del ctx, request
            self._release(slot)              # answered: its buffer and memory can take the next
        except asyncio.CancelledError:
            raise
        except CloseConnection as exc:
            self._violation(str(exc))
            return
        except Exception as exc:
            self._handler_failed(self._describe(ctx), exc)
            return
        slot.done = True
        self._flush()

    def _raw_sasl_token(self, sasl, slot: _Slot, frame) -> None:
        """SASL without Kafka framing (SaslHandshake v0): answer the token bare, or close after
        connection.failed.authentication.delay.ms when it fails (v0 has no error response)."""
        try:
            answer = sasl.authenticate(bytes(frame))
        except Exception:                    # AuthenticationFailed / IllegalSaslState: logged by sasl
            self._closing = self._stopped = True
            self._loop.call_later(sasl.config.failure_delay_ms / 1000.0, self.abort)
            return
        if sasl.principal is not None:
            self.session.principal = sasl.principal
        slot.done, slot.data = True, len(answer).to_bytes(4, "big") + answer
        self._release(slot)
        self._flush()

    def _flush(self) -> None:
        """Move the finished responses at the head of the queue to the output batch."""
        pending = self.pending
        out = self._out
        while pending and pending[0].done:
            slot = pending.popleft()
            if slot.nbytes:                  # released already, unless it failed before starting
                self.limits.free(slot.nbytes)
                slot.nbytes = 0
            data = slot.data
            if data is not None:
                if isinstance(data, list):
                    out.extend(data)
                    self._out_bytes += sum(map(len, data))
                else:
                    out.append(data)
                    self._out_bytes += len(data)
        if out and not self._write_scheduled:
            # Responses finishing in the same loop iteration leave in one writev, not one
            # send() each (pipelining clients finish many at once).
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)
        if self._closing and not pending:
            if not out and self._direct is None and self.transport is not None:
                self.transport.close()
            return
        self._process()                      # closing: the requests already read still start

    def _write_out(self) -> None:
        """Hand the output batch to the transport (or the DirectSender); then start the requests
        held back while it waited.

        Why held back: a request read is not started while earlier answers wait to go out - more
        than OUT_HIGH bytes of them in this batch, or the transport over its high-water mark
        (pause_writing) - as Kafka's muted channel handles a connection's next request only once
        the answer before it has been sent (the socket full under the DirectSender counts too;
        _direct_drained starts them). Otherwise a client that pipelines fetches and does not read
        has every one answered at once, and each answer waits in the broker (bytes, or a file
        range holding a descriptor), as many as queued.max.requests."""
        self._send_out()
        if self._queued and self.transport is not None:
            self._process()

    def _send_out(self) -> None:
        self._write_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        transport = self.transport
        if transport is None or not out:
            return
        if self._direct is not None or (not self._tls and self._zero_copy
                                        and any(type(b) is FileRecords for b in out)):
            if self._direct is None and transport.get_write_buffer_size():
                # earlier answers still wait in the transport: no writing around them
                try:
                    out = [b.read() if type(b) is FileRecords else b for b in out]
                except OSError as exc:
                    self._direct_failed(exc)
                    return
            else:
                if self._direct is None:
                    self._direct = DirectSender(self._loop, transport.get_extra_info("socket").fileno(),
                                                self._update_reading, self._direct_drained, self._direct_failed)
                self._direct.send(out)       # may drain (and close, if closing) before it returns
                return
        if len(out) == 1:
            transport.write(out[0])
        else:
            transport.writelines(out)
        if self._closing and not self.pending:
            transport.close()

    def _direct_drained(self) -> None:
        """The DirectSender sent everything: answers go through the transport again."""
        self._direct = None
        self._update_reading()
        if self._closing and not self.pending and not self._out and self.transport is not None:
            self.transport.close()
        elif self._queued and self.transport is not None:
            self._process()                  # held back while the socket was full (_write_out)

    def _direct_failed(self, exc: OSError) -> None:
        """Sending a zero-copy answer failed (peer gone, segment file short): a frame cut short
        cannot be finished, so the connection goes."""
        self._direct = None
        log.debug("closing connection from %s: sending a fetch answer failed: %s", self.peer, exc)
        self.abort()

    def _close_direct(self) -> None:
        direct, self._direct = self._direct, None
        if direct is not None:
            direct.close()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closing:
            return
        should_pause = (self._write_paused or (self._direct is not None and self._direct.blocked)
                        or len(self.pending) >= self.max_in_flight
                        or self._throttled is not None or self._held is not None or self._awaiting_memory)
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    # -- quota throttling ------------------------------------------------------------------------
    def throttle(self, ms: int) -> None:
        """A quota violation (broker/quotas): read and start no new request for `ms` milliseconds
        (Kafka mutes the channel; the answer carrying throttle_time_ms still goes out now, and
        requests already started finish). A longer throttle replaces a shorter one."""
        end = self._loop.time() + ms / 1000.0
        if self._throttled is not None:
            if self._throttled.when() >= end:
                return
            self._throttled.cancel()
        self._throttled = self._loop.call_at(end, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        self._throttled = None
        self._update_reading()
        self._process()

    # -- closing ---------------------------------------------------------------------------------
    def _violation(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.abort()

    def _describe(self, ctx) -> str:
        """`Produce v9 (correlation id 7, client id 'rdkafka')` for a log line."""
        return (f"{self.dispatcher.names.get(ctx.header.api_key, ctx.header.api_key)} v{ctx.api_version} "
                f"(correlation id {ctx.correlation_id}, client id {ctx.client_id!r})")

    def _handler_failed(self, what: str, exc: BaseException) -> None:
        """A handler or decoder raised: one WARNING line (where, not the whole traceback), close."""
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        log.warning("closing connection from %s: %s raised %s: %s%s", self.peer, what,
                    type(exc).__name__, exc, where)
        log.debug("traceback of the failure above", exc_info=exc)
        self.abort()

    def abort(self) -> None:
        self._closing = self._stopped = True
        self._close_direct()                 # its duplicate descriptor would keep the socket open
        if self.transport is not None:
            self.transport.abort()

    def close_when_idle(self) -> None:
        """Stop reading; close once every request already read has been answered."""
        if self._closing or self.transport is None:
            return
        self._closing = True
        self.parked.release()                # a parked fetch answers now with what it has
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        if not self.pending and not self._out and self._direct is None:
            self.transport.close()

    def _admit_large(self, size: int) -> bool:
        """The FrameReader read a large frame's size and asks for its memory before making its
        buffer (Kafka's memory pool: a request that cannot get memory is not read; reading
        pauses, and resume_held asks again once answers free some)."""
        if self.limits.reserve(self, size):
            self._precharged = size
            self._awaiting_memory = False
            return True
        self._awaiting_memory = True
        return False

    def resume_held(self) -> None:
        """Request memory was freed (limits.free): start the held frame, on the next loop pass."""
        if self.transport is not None:
            self._loop.call_soon(self._process)

    @property
    def in_flight(self) -> int:
        return len(self.pending)


async def _resumed(coro, waiting_on):
    """The rest of a coroutine that was stepped once by hand (`waiting_on` is what that step
    yielded), run by the task this wraps it in."""
    return await _Resume(coro, waiting_on)


class _Resume:
    """Awaitable that hands a task what a hand-stepped coroutine yielded, then drives the
    coroutine on with whatever the task sends or throws in (what `yield from` does for a
    coroutine from its start)."""
    __slots__ = ("coro", "first")

    def __init__(self, coro, first):
        self.coro, self.first = coro, first

    def __await__(self):
        coro, yielded = self.coro, self.first
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:       # the task throws in (CancelledError)
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


OUT_HIGH = 1 << 20                          # answer bytes waiting for the write pass that hold back the next request


def _describe_frame(frame) -> str:
    """What we can say about a frame whose decoding failed: its raw header fields."""
    if len(frame) < 8:
        return f"a {len(frame)}-byte request"
    key, version, correlation_id = int.from_bytes(frame[0:2], "big", signed=True), \
        int.from_bytes(frame[2:4], "big", signed=True), int.from_bytes(frame[4:8], "big", signed=True)
    return f"decoding API key {key} v{version} (correlation id {correlation_id})"
