"""One member of a classic consumer group (Kafka's ClassicGroupMember).

Role: what the coordinator knows about a member between requests: its identity (member id,
optional static `group.instance.id`), where it came from (client id, client host), its timeouts,
the protocols it offered in its last JoinGroup (name -> opaque metadata, in preference order) and
the assignment the leader gave it. It also parks the member's pending JoinGroup / SyncGroup
answer (`join_future`, `sync_future`: anything with `done()` / `set_result()`), which the
coordinator completes when the rebalance phase ends.

Invariants: `protocols` is non-empty and keeps the client's preference order; `assignment` is the
last assignment propagated for the current generation (b"" before the first SyncGroup completes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EMPTY_ASSIGNMENT = b""


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = EMPTY_ASSIGNMENT
    # A member that joined but never completed a join phase: expired by the new-member join
    # timeout rather than kept alive while it awaits the join (KIP-394).
    is_new: bool = False
    join_future: Any = None
    sync_future: Any = None
    heartbeat_timer: Any = field(default=None, repr=False)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        """The metadata this member sent for `protocol` (the subscription for consumers)."""
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata in the same order (a rejoin changing nothing)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Called when the session timer fires without a heartbeat: may the member stay?

        A new member is held only by its join timeout; members parked in JoinGroup or SyncGroup
        are kept (the rebalance and pending-sync timeouts bound them instead)."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


def client_host(peer: str) -> str:
    """Kafka's clientHost from a connection peer "host:port" / "[v6]:port": "/host"."""
    if not peer:
        return ""
    host = peer.rsplit(":", 1)[0] if peer.count(":") == 1 or peer.startswith("[") else peer
    return "/" + host.strip("[]")
