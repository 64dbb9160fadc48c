"""From a request frame to a handler and back to response bytes.

Role: parse the request header, find the API's handler module, gate the version, decode the body
(the handler's own `decode(header, frame)` when it has one, e.g. Produce's zero-copy path, else
kafka-python's schema), run `handle(ctx, request)`, and encode what it returns:

  handler returns            sent to the client
  -------------------------  --------------------------------------------------------------
  kafka-python response obj  framed response header + body (codec.encode_response)
  bytes / list of buffers    as-is (already framed, e.g. Fetch's zero-copy encoder)
  None                       nothing (Produce with acks=0)

Client errors that Kafka answers by closing the connection raise `ProtocolViolation` here:
malformed headers or bodies, unknown API keys, and versions outside the handler's range, except
ApiVersions, which answers UNSUPPORTED_VERSION with our ranges in v0 form (KIP-511) so clients
can retry lower.

Durability: the appends a handler's coordinator writes made (storage.group_commit.pending_acks)
are synced before its answer is encoded and sent (DESIGN.md: acknowledged means on disk).

Invariant: `prepare` is synchronous and does all parsing, so a bad frame is rejected before any
later frame on the connection is looked at; `run` never raises for a handler's KafkaError (those
become error codes inside the handler) - anything else escaping a handler (or a decoder) is a
bug, and connection.py closes only that connection with one WARNING line naming the request.
"""
from __future__ import annotations

import asyncio
import logging
import time

from kompakt.broker.network.context import RequestContext
from kompakt.broker.handlers import load_handlers, version_ranges
from kompakt.protocol import codec, registry
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage.group_commit import pending_acks

log = logging.getLogger(__name__)


# (api key, version) pairs each client we test with sends, seen on the wire (Produce, Fetch,
# ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat,
# LeaveGroup, SyncGroup, ApiVersions, CreateTopics, InitProducerId).
CLIENT_VERSIONS = {
    "librdkafka 2.16": [(0, 10), (1, 16), (2, 7), (3, 13), (8, 9), (9, 9), (10, 2), (11, 5), (12, 3),
                        (13, 1), (14, 3), (18, 3), (19, 4), (22, 4)],
    "kafka-python 3.0": [(0, 9), (1, 12), (2, 11), (3, 13), (8, 8), (9, 8), (10, 6), (11, 7), (12, 4),
                         (13, 5), (14, 5), (18, 4), (22, 4)],
    "aiokafka 0.14": [(0, 7), (1, 11), (2, 3), (3, 5), (8, 3), (9, 3), (10, 1), (11, 5), (12, 3),
                      (13, 1), (14, 3), (18, 0)],
}


class ProtocolViolation(Exception):
    """The client sent something Kafka answers by closing the connection."""


class CloseConnection(Exception):
    """Raised by a handler to answer by closing the connection (Produce acks=0 errors: the only
    way to tell a client that expects no response that something went wrong)."""


class Dispatcher:
    def __init__(self, broker, handlers=None):
        self.broker = broker
        self.handlers = load_handlers() if handlers is None else handlers
        self.ranges = version_ranges(self.handlers)
        self.names = {key: (registry.API[key].name if key in registry.API else str(key))
                      for key in self.handlers}

    def warm_order(self) -> list[tuple[int, int]]:
        """(api key, version) pairs to compile ahead of use: what the clients we know send first,
        then the newest version of every served API. Others compile on first use (~5-10 ms once)."""
        served = {key: (lo, hi) for key, lo, hi in self.ranges if key in registry.API}
        order: list[tuple[int, int]] = []
        candidates = [pair for pairs in CLIENT_VERSIONS.values() for pair in pairs]
        candidates += [(key, hi) for key, (_, hi) in served.items()]
        for key, version in candidates:
            if key in served and served[key][0] <= version <= served[key][1] and (key, version) not in order:
                order.append((key, version))
        return order

    async def warm_in_background(self) -> int:
        """Compile the `warm_order` codecs on the loop, one at a time, yielding to requests between.

        Compiling every served version takes seconds of CPU (hundreds of generated functions) and
        each broker start in a test suite would pay it; compiling before the listeners open would
        delay the first answer by that much. So: the likely ones, after opening, between requests.
        """
        n = 0
        for key, version in self.warm_order():
            registry.decoder(key, version)
            registry.encoder(key, version)
            n += 2
            await asyncio.sleep(0)
        return n

    def prepare(self, frame, peer: str = "", listener: str | None = None, parked=None, session=None):
        """Parse and decode one frame: returns (ctx, handler module, request) or an immediate
        encoded response (bytes). Raises ProtocolViolation."""
        try:
            header = codec.read_request_header(frame)
        except codec.MalformedRequestError as exc:
            raise ProtocolViolation(str(exc)) from None
        module = self.handlers.get(header.api_key)
        if module is None:
            raise ProtocolViolation(f"unknown or unsupported API key {header.api_key} "
                                    f"(correlation id {header.correlation_id})")
        version = header.api_version
        if not module.MIN_VERSION <= version <= module.MAX_VERSION:
            if header.api_key == registry.API_VERSIONS_KEY:
                return codec.encode_api_versions_error(header.correlation_id,
                                                       ErrorCode.UNSUPPORTED_VERSION, self.ranges)
            raise ProtocolViolation(f"{self.names[header.api_key]} v{version} is not supported "
                                    f"(we serve v{module.MIN_VERSION}-v{module.MAX_VERSION})")
        decode = getattr(module, "decode", None) or codec.decode_request
        try:
            request = decode(header, frame)
        except codec.MalformedRequestError as exc:
            raise ProtocolViolation(str(exc)) from None
        return RequestContext(self.broker, header, peer, len(frame), listener, parked, session), module, request

    async def run(self, ctx: RequestContext, module, request):
        """Run the handler and encode its answer (see the table above)."""
        started = time.perf_counter()
        acks = []
        # set anew by every request, not reset by token: connection.py runs a handler's first step
        # in its own callback and the rest in a task (another context), and a stale list left in
        # the callback's context is replaced by the next request's before any append can reach it
        pending_acks.set(acks)
        try:
            response = await module.handle(ctx, request)
        finally:
            pending_acks.set(None)
        if acks:
            await self._durable(ctx, acks)
        if response is None:
            out = None
            size = 0
        elif isinstance(response, (bytes, bytearray)):
            out, size = response, len(response)
        elif isinstance(response, list):
            out, size = response, sum(len(c) for c in response)
        else:
            out = codec.encode_response(ctx.header, response)
            size = len(out)
        elapsed = time.perf_counter() - started
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.observe_request(self.names[ctx.header.api_key], elapsed,
                                    getattr(response, "error_code", 0) or 0, ctx.frame_size + 4, size)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s v%d correlation %d from %s (%s): %d bytes in, %d out, %.2f ms",
                      self.names[ctx.header.api_key], ctx.api_version, ctx.correlation_id, ctx.peer,
                      ctx.client_id, ctx.frame_size + 4, size, elapsed * 1000)
        return out

    async def _durable(self, ctx: RequestContext, acks: list) -> None:
        """The handler's coordinator writes (offset commits, transaction state and markers, group
        metadata) are synced before its answer leaves: wait for the group commit. The next
        request on the connection may start meanwhile (`effects_applied`: the writes are
        visible). A failed sync (the log dir failed and is offline now) closes the connection,
        so the client, which never got the answer, retries against what is left."""
        ctx.effects_applied()
        lm = self.broker.log_manager
        for plog, offset in acks:
            try:
                await lm.wait_durable(plog, offset)
            except KafkaError as exc:
                raise CloseConnection(f"{self.names[ctx.header.api_key]}: its writes to {plog.tp[0]}-"
                                      f"{plog.tp[1]} could not be synced: {exc}") from exc
