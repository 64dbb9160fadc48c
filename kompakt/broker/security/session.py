"""Who is on the other end of one connection: the principal, the client's address, the listener.

Role: one `Session` per connection, made when it opens. The connection hands it to every
request's `RequestContext`; handlers read `ctx.principal` and authorize through `ctx.authorize`,
which asks `session.principal` and `session.client_host`. On a SASL listener `sasl` holds the
connection's authenticator (sasl_server.py) and `principal` is set once it succeeds; on an SSL
listener with client certificates the principal comes from the certificate (principal.py).

Invariant: `principal` only changes on a successful (re-)authentication; before that it is
`User:ANONYMOUS`, which is what Kafka calls an unauthenticated client. `client_host` is in Java's
textual form (`java_host_address`), so ACL hosts written for Kafka match the same clients.
"""
from __future__ import annotations

import ipaddress

ANONYMOUS = "User:ANONYMOUS"


def java_host_address(host: str) -> str:
    """The client's address as Java's InetAddress.getHostAddress() writes it, which is what
    Kafka's authorizer compares ACL hosts with: IPv6 in full, without zero compression or leading
    zeros (`0:0:0:0:0:0:0:1` for `::1`, a scope kept after `%`), an IPv4-mapped IPv6 address as
    its IPv4 address (Java makes an Inet4Address of it); IPv4 and anything else unchanged."""
    addr, sep, scope = host.partition("%")
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return host
    if ip.version == 4:
        return host
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":")) + sep + scope


class Session:
    __slots__ = ("principal", "client_host", "listener", "protocol", "sasl", "close")

    def __init__(self, client_host: str = "", listener: str | None = None, protocol: str = "PLAINTEXT",
                 principal: str = ANONYMOUS):
        self.principal = principal
        self.client_host = client_host       # the peer's IP address as Java writes it: what ACL hosts match
        self.listener = listener
        self.protocol = protocol             # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
        self.sasl = None                     # the SaslServer of a SASL listener's connection
        self.close = None                    # the connection's close_when_idle (failed authentication)

    def __repr__(self) -> str:
        return f"Session({self.principal} from {self.client_host} on {self.listener}/{self.protocol})"


PLAIN_SESSION = Session()                    # requests built outside a connection (tools, tests)
