"""What a handler sees of the world for one request.

Role: a small slotted object built per request by the dispatcher: the broker (and through it the
log manager, group coordinator, config, metrics), the request header fields handlers need
(`api_version`, `client_id`, `correlation_id`), the peer (for logging) and the listener it came
in on (Metadata advertises that listener's address), and the connection's `Parked` set of long
polls (fetch_wait.py), so a fetch parked by a client that has gone answers at once.

Invariant: handlers reach shared state only through `ctx`; nothing here is per-connection mutable
state that a handler could leak into another request.
"""
from __future__ import annotations


class RequestContext:
    __slots__ = ("broker", "header", "api_version", "client_id", "correlation_id", "peer", "frame_size",
                 "listener", "parked")

    def __init__(self, broker, header, peer: str = "", frame_size: int = 0, listener: str | None = None,
                 parked=None):
        self.broker = broker
        self.listener = listener          # the listener name the request came in on (Metadata)
        self.header = header
        self.api_version = header.api_version
        self.client_id = header.client_id
        self.correlation_id = header.correlation_id
        self.peer = peer
        self.frame_size = frame_size
        self.parked = parked              # the connection's fetch_wait.Parked (None outside a connection)

    @property
    def log_manager(self):
        return self.broker.log_manager

    @property
    def groups(self):
        return self.broker.groups

    @property
    def config(self):
        return self.broker.config

    @property
    def metrics(self):
        return self.broker.metrics

    def __repr__(self) -> str:
        return (f"RequestContext(api_key={self.header.api_key}, v{self.api_version}, "
                f"client_id={self.client_id!r}, peer={self.peer})")
