"""Who is on the other end of one connection: the principal, the client's address, the listener.

Role: one `Session` per connection, made when it opens. The connection hands it to every
request's `RequestContext`; handlers read `ctx.principal` and authorize through `ctx.authorize`,
which asks `session.principal` and `session.client_host`. On a SASL listener `sasl` holds the
connection's authenticator (sasl_server.py) and `principal` is set once it succeeds; on an SSL
listener with client certificates the principal comes from the certificate (principal.py).

Invariant: `principal` only changes on a successful (re-)authentication; before that it is
`User:ANONYMOUS`, which is what Kafka calls an unauthenticated client.
"""
from __future__ import annotations

ANONYMOUS = "User:ANONYMOUS"


class Session:
    __slots__ = ("principal", "client_host", "listener", "protocol", "sasl", "close")

    def __init__(self, client_host: str = "", listener: str | None = None, protocol: str = "PLAINTEXT",
                 principal: str = ANONYMOUS):
        self.principal = principal
        self.client_host = client_host       # the peer's IP address, what ACL hosts match
        self.listener = listener
        self.protocol = protocol             # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
        self.sasl = None                     # the SaslServer of a SASL listener's connection
        self.close = None                    # the connection's close_when_idle (failed authentication)

    def __repr__(self) -> str:
        return f"Session({self.principal} from {self.client_host} on {self.listener}/{self.protocol})"


PLAIN_SESSION = Session()                    # requests built outside a connection (tools, tests)
