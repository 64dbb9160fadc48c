"""What a handler sees of the world for one request.

Role: a small slotted object built per request by the dispatcher: the broker (and through it the
log manager, group coordinator, config, metrics), the request header fields handlers need
(`api_version`, `client_id`, `correlation_id`), the peer (for logging) and the listener it came
in on (Metadata advertises that listener's address), the connection's `Parked` set of long
polls (broker/fetch/wait.py), so a fetch parked by a client that has gone answers at once, and the
connection's security `Session` (who the client is: `ctx.principal`).

Request order (broker/network/connection.py): a connection starts its next request once this one has
applied its effects, by default when the handler returns. A handler that keeps waiting after its
effects are visible (Fetch before it parks for its long poll, Produce after its appends and
before a durable acknowledgement) calls `ctx.effects_applied()` there, so the next request starts
while this one's answer is pending (responses still leave in request order). It is idempotent,
and a no-op outside a connection (`on_effects` None). After it the handler must not read its
request's raw bytes again (Produce's records are views into the request's frame): the connection
hands a large frame's buffer to the next request then.

Authorization, the one way for handlers (Kafka's authorization table names what each API checks):

    ctx.authorize(Op.WRITE, Res.TOPIC, name) -> bool       # one resource
    ctx.authorize_cluster(Op.ALTER) -> bool                # the cluster resource
    ctx.authorized(Op.DESCRIBE, Res.TOPIC, items, key=...) # the items allowed, in order
    ctx.authorized_operations(Res.TOPIC, name) -> set      # for `authorized_operations` fields
    ctx.authorizer                                         # None when no authorizer is configured

(`Op`, `Res` from kompakt.broker.security.acl.) With no `authorizer.class.name` every check is
one attribute test and answers True, so handlers call them unconditionally.

Invariant: handlers reach shared state only through `ctx`; nothing here is per-connection mutable
state that a handler could leak into another request.
"""
from __future__ import annotations

from kompakt.broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Op, Res
from kompakt.broker.security.session import PLAIN_SESSION


class RequestContext:
    __slots__ = ("broker", "header", "api_version", "client_id", "correlation_id", "peer", "frame_size",
                 "listener", "parked", "session", "throttle_ms", "on_effects", "zero_copy")

    def __init__(self, broker, header, peer: str = "", frame_size: int = 0, listener: str | None = None,
                 parked=None, session=None):
        self.broker = broker
        self.listener = listener          # the listener name the request came in on (Metadata)
        self.header = header
        self.api_version = header.api_version
        self.client_id = header.client_id
        self.correlation_id = header.correlation_id
        self.peer = peer
        self.frame_size = frame_size
        self.parked = parked              # the connection's broker/fetch/wait.Parked (None outside a connection)
        self.session = session if session is not None else PLAIN_SESSION
        # A handler that finds the client over its quota sets this: the connection reads no new
        # request for that long after the answer (Kafka's channel muting, broker/quotas).
        self.throttle_ms = 0
        # Set by the connection: called once when this request's effects are visible (see above).
        self.on_effects = None
        # Set by a plaintext connection: the answer may carry storage FileRecords (file ranges it
        # sends with sendfile) in place of record bytes (Fetch; broker/network/direct_send.py).
        self.zero_copy = False

    def effects_applied(self) -> None:
        """Every effect of this request is visible to later requests: the connection may start
        the next one now (idempotent; a no-op outside a connection). The next request's first
        step may run inside this call, before it returns (connection.py's eager start): what
        the caller read of shared state before it may have changed after it."""
        on_effects = self.on_effects
        if on_effects is not None:
            self.on_effects = None
            on_effects()

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

    # -- authorization (see the module docstring) ------------------------------------------------
    @property
    def principal(self) -> str:
        return self.session.principal

    @property
    def authorizer(self):
        return getattr(self.broker, "authorizer", None)

    def authorize(self, op: int, resource_type: int, name: str) -> bool:
        az = getattr(self.broker, "authorizer", None)
        if az is None:
            return True
        session = self.session
        return az.authorize(session.principal, session.client_host, op, resource_type, name)

    def topic_describe_check(self):
        """With an authorizer, `topic -> may this principal DESCRIBE it?` (what a KIP-848 regex
        resolution triggered by this request applies to each matching topic); None without one."""
        if getattr(self.broker, "authorizer", None) is None:
            return None
        return lambda topic: self.authorize(Op.DESCRIBE, Res.TOPIC, topic)

    def authorize_cluster(self, op: int) -> bool:
        return self.authorize(op, Res.CLUSTER, CLUSTER_NAME)

    def authorize_any(self, op: int, resource_type: int) -> bool:
        """May the principal do `op` on some resource of this type (Kafka's authorizeByResourceType)?"""
        az = getattr(self.broker, "authorizer", None)
        if az is None:
            return True
        session = self.session
        return az.authorize_by_resource_type(session.principal, session.client_host, op, resource_type)

    def authorized(self, op: int, resource_type: int, items, key=None) -> list:
        """The items (names, or objects named by `key(item)`) the principal may `op`, in order."""
        az = getattr(self.broker, "authorizer", None)
        if az is None:
            return list(items)
        session = self.session
        principal, host = session.principal, session.client_host
        return [item for item in items
                if az.authorize(principal, host, op, resource_type, item if key is None else key(item))]

    def authorized_operations(self, resource_type: int, name: str) -> set[int]:
        """The `authorized_operations` bit set for a resource, for requests that ask for it (else
        answer None, "not asked", -2147483648). With no authorizer: every operation the type has
        (Kafka's AuthHelper.authorizedOperations)."""
        az = getattr(self.broker, "authorizer", None)
        if az is None:
            return set(SUPPORTED_OPERATIONS.get(resource_type, ()))
        session = self.session
        return az.authorized_operations(session.principal, session.client_host, resource_type, name)

    def __repr__(self) -> str:
        return (f"RequestContext(api_key={self.header.api_key}, v{self.api_version}, "
                f"client_id={self.client_id!r}, peer={self.peer})")
