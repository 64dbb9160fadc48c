"""The authorizer: Kafka's StandardAuthorizer rules over an in-memory index of ACLs.

Role: answer "may principal P from host H do operation O on resource (type, name)?" for every
request a handler authorizes (`RequestContext.authorize`), and manage the ACL set behind
CreateAcls / DescribeAcls / DeleteAcls, persisted by `AclStore` (acl_store.py).

Decision, in order (Kafka's StandardAuthorizerData.authorize):
  1. P is in `super.users`                                  -> ALLOWED
  2. collect the ACLs bound to the resource: LITERAL with its exact name, LITERAL `*`, PREFIXED
     whose name is a prefix of it. None at all              -> `allow.everyone.if.no.acl.found`
  3. of those, the ones whose principal is P or `User:*` and host is H or `*`:
     a DENY of O or ALL                                     -> DENIED (DENY wins)
     an ALLOW of O, ALL or an operation implying O          -> ALLOWED
  4. otherwise                                              -> DENIED

The index: per resource type, literal name -> bindings and prefix -> bindings, plus the set of
prefix lengths in use, so a check costs a few dict lookups whatever the ACL count.

Invariant: the index is rebuilt whole from `bindings` on every change (changes are rare admin
calls; checks are on the request path), so a reader never sees a half-applied change.
"""
from __future__ import annotations

import logging
import threading
from typing import Iterable

from kompakt.broker.security.acl import (CLUSTER_NAME, IMPLIED_BY, SUPPORTED_OPERATIONS, WILDCARD,
                                         WILDCARD_PRINCIPAL, AclBinding, AclFilter, Op, PatternType,
                                         PermissionType, Res, binding_matches)

log = logging.getLogger("kompakt.authorizer")

# Kafka's class names for `authorizer.class.name` (KRaft and the ZooKeeper-era one) turn ours on.
AUTHORIZER_CLASS_NAMES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
})


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users=User:alice;User:bob` (semicolon separated, as Kafka)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class _Index:
    __slots__ = ("literal", "prefixed", "prefix_lengths", "by_type")

    def __init__(self, bindings: Iterable[AclBinding]):
        self.literal: dict[tuple[int, str], list[AclBinding]] = {}
        self.prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        self.prefix_lengths: dict[int, list[int]] = {}
        self.by_type: dict[int, list[AclBinding]] = {}
        lengths: dict[int, set[int]] = {}
        for b in bindings:
            key = (b.resource_type, b.resource_name)
            if b.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(key, []).append(b)
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            else:
                self.literal.setdefault(key, []).append(b)
            self.by_type.setdefault(b.resource_type, []).append(b)
        self.prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}

    def bound_to(self, rtype: int, name: str) -> list[AclBinding]:
        out = list(self.literal.get((rtype, name), ()))
        if name != WILDCARD:
            out += self.literal.get((rtype, WILDCARD), ())
        prefixed = self.prefixed
        for n in self.prefix_lengths.get(rtype, ()):
            if n > len(name):
                break
            out += prefixed.get((rtype, name[:n]), ())
        return out


class Authorizer:
    def __init__(self, *, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 store=None):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.store = store
        self.bindings: list[AclBinding] = list(store.load()) if store is not None else []
        self._index = _Index(self.bindings)
        self._lock = threading.Lock()        # create/delete run in worker threads (they fsync)

    # -- decisions (the request path) ----------------------------------------------------------
    def authorize(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._index.bound_to(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        granting = IMPLIED_BY.get(op)
        allowed = False
        for b in acls:
            if (b.principal != principal and b.principal != WILDCARD_PRINCIPAL) or (b.host != WILDCARD and b.host != host):
                continue
            if b.permission == PermissionType.DENY:
                if b.operation == op or b.operation == Op.ALL:
                    if log.isEnabledFor(logging.DEBUG):      # the names cost more than the decision
                        log.debug("DENIED %s from %s: %s on %s:%s (DENY %s)", principal, host, Op(op).name,
                                  Res(rtype).name, name, b.describe())
                    return False
            elif b.operation == op or b.operation == Op.ALL or (granting is not None and b.operation in granting):
                allowed = True
        if not allowed and log.isEnabledFor(logging.DEBUG):
            log.debug("DENIED %s from %s: %s on %s:%s (no ALLOW)", principal, host, Op(op).name, Res(rtype).name, name)
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, op: int, rtype: int) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may P do O on *some* resource of this type?
        (InitProducerId without a transactional id asks it for WRITE on any topic.) First, as
        Kafka, the decision for a resource literally named `hardcode` (so super users, and
        `allow.everyone.if.no.acl.found` when no ACL applies to that name, are allowed whatever
        the DENYs); then True when an ALLOW of O for P/host is not cancelled by a DENY on the
        same or a covering pattern."""
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        mine = [b for b in self._index.by_type.get(rtype, ())
                if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
                and b.operation in (op, Op.ALL)]
        denies = [b for b in mine if b.permission == PermissionType.DENY]
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
            return False
        for a in mine:
            if a.permission != PermissionType.ALLOW:
                continue
            if not any(_covers(d, a) for d in denies):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, rtype: int, name: str) -> set[int]:
        """The operations P may do on the resource: the bit set of Metadata / DescribeCluster /
        DescribeGroups `authorized_operations` (bit n = operation code n)."""
        return {op for op in SUPPORTED_OPERATIONS.get(rtype, ()) if self.authorize(principal, host, op, rtype, name)}

    # -- management (CreateAcls / DescribeAcls / DeleteAcls) -----------------------------------------
    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings if binding_matches(f, b)]

    def create(self, new: list[AclBinding]) -> None:
        """Add bindings (duplicates of existing ones are no-ops, as in Kafka) and persist.
        Blocking (fsync): call it from a worker thread."""
        with self._lock:
            have = set(self.bindings)
            added = [b for b in dict.fromkeys(new) if b not in have]
            if added:
                self._replace(self.bindings + added)
        for b in added:
            log.info("ACL created: %s", b.describe())

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding matching each filter; per filter, the bindings it removed (one
        that several filters match is reported under the first only, as Kafka's
        AclControlManager.deleteAcls). Blocking (fsync): call it from a worker thread."""
        with self._lock:
            gone: set[AclBinding] = set()
            matched = []
            for f in filters:
                mine = [b for b in self.bindings if b not in gone and binding_matches(f, b)]
                gone.update(mine)
                matched.append(mine)
            if gone:
                self._replace([b for b in self.bindings if b not in gone])
        for b in gone:
            log.info("ACL deleted: %s", b.describe())
        return matched

    def _replace(self, bindings: list[AclBinding]) -> None:
        if self.store is not None:
            self.store.save(bindings)        # first to disk: a crash never loses an acknowledged change
        self.bindings = bindings
        self._index = _Index(bindings)


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether a DENY's pattern covers everything an ALLOW's pattern grants."""
    if deny.pattern_type == PatternType.LITERAL:
        return allow.pattern_type == PatternType.LITERAL and deny.resource_name == allow.resource_name
    return allow.resource_name.startswith(deny.resource_name)


__all__ = ["Authorizer", "AUTHORIZER_CLASS_NAMES", "CLUSTER_NAME", "parse_super_users"]
