"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings and filters.

Role: the vocabulary of the authorizer, with Kafka's wire codes (clients send these int8s in
CreateAcls / DescribeAcls / DeleteAcls), and the two pure rules everything else leans on:

* `binding_matches(filter, binding)` - Kafka's AclBindingFilter.matches: a filter field that is
  ANY (type, operation, permission) or null (name, principal, host) matches every value. The
  resource pattern type of a filter:
      LITERAL / PREFIXED  the binding has that pattern type and exactly that name
      ANY                 any pattern type, exactly that name
      MATCH               every binding that *applies to* the named resource: LITERAL with that
                          name or the wildcard `*`, and PREFIXED whose name is a prefix of it
* `validate_binding(binding) -> message | None` - what CreateAcls refuses (INVALID_REQUEST).

Implied operations (Kafka's AclEntry.supportedOperations / StandardAuthorizerData): an ALLOW of
READ, WRITE, DELETE or ALTER also allows DESCRIBE; an ALLOW of ALTER_CONFIGS also allows
DESCRIBE_CONFIGS; ALL allows (and a DENY of ALL denies) every operation. A DENY denies only its
own operation (and ALL): denying READ does not deny DESCRIBE.

Invariant: a principal is a string `Type:name` (`User:alice`), the wildcard principal is `User:*`,
the wildcard host `*`, the wildcard resource name `*`, the cluster's name `kafka-cluster`.
"""
from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
Res = ResourceType

# operation requested -> ALLOW entries' operations that grant it (besides ALL)
IMPLIED_BY: dict[int, frozenset[int]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}

# Operations a resource type has (Kafka's AclEntry.supportedOperations): what "authorized
# operations" in Metadata / DescribeCluster / DescribeGroups enumerates.
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    Res.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                Op.ALTER_CONFIGS),
    Res.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    Res.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                  Op.ALTER, Op.DESCRIBE),
    Res.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
    Res.DELEGATION_TOKEN: (Op.DESCRIBE,),
    Res.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


class AclBinding(NamedTuple):
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def describe(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={Op(self.operation).name}, "
                f"permissionType={PermissionType(self.permission).name}) on "
                f"{Res(self.resource_type).name}:{PatternType(self.pattern_type).name}:{self.resource_name}")


class AclFilter(NamedTuple):
    """DescribeAcls / DeleteAcls filter; None in name, principal or host matches anything."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int


def _pattern_matches(f: AclFilter, b: AclBinding) -> bool:
    if f.resource_type != Res.ANY and f.resource_type != b.resource_type:
        return False
    pt = f.pattern_type
    if pt == PatternType.ANY:
        return f.resource_name is None or f.resource_name == b.resource_name
    if pt == PatternType.MATCH:
        name = f.resource_name
        if name is None:
            return True
        if b.pattern_type == PatternType.LITERAL:
            return b.resource_name == name or b.resource_name == WILDCARD
        return b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name)
    return pt == b.pattern_type and (f.resource_name is None or f.resource_name == b.resource_name)


def binding_matches(f: AclFilter, b: AclBinding) -> bool:
    """Kafka's AclBindingFilter.matches (see the module docstring)."""
    return (_pattern_matches(f, b)
            and (f.principal is None or f.principal == b.principal)
            and (f.host is None or f.host == b.host)
            and (f.operation == Op.ANY or f.operation == b.operation)
            and (f.permission == PermissionType.ANY or f.permission == b.permission))


def filter_problem(f: AclFilter) -> str | None:
    """Why Kafka refuses a filter (INVALID_REQUEST), or None."""
    for value, enum, what in ((f.resource_type, Res, "resource type"), (f.pattern_type, PatternType, "pattern type"),
                              (f.operation, Op, "operation"), (f.permission, PermissionType, "permission type")):
        if value not in enum._value2member_map_ or value == 0:
            return f"Filter contains UNKNOWN elements ({what} {value})"
    return None


def parse_principal(text: str | None) -> tuple[str, str] | None:
    """`User:alice` -> ("User", "alice"); None for a malformed principal."""
    if not text or ":" not in text:
        return None
    kind, name = text.split(":", 1)
    return (kind, name) if kind and name else None


def validate_binding(b: AclBinding) -> str | None:
    """Why CreateAcls refuses this binding (Kafka's AclControlManager.validateNewAcl and
    AclApis.handleCreateAcls), or None. The principal check is ours: Kafka stores a principal
    without a colon and fails later, when StandardAcl.kafkaPrincipal() parses it to authorize."""
    if b.resource_type not in Res._value2member_map_ or b.resource_type in (Res.UNKNOWN, Res.ANY):
        return "Invalid resourceType " + str(b.resource_type)
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + str(b.pattern_type)
    if b.operation not in Op._value2member_map_ or b.operation in (Op.UNKNOWN, Op.ANY):
        return "Invalid operation " + str(b.operation)
    if b.permission not in (PermissionType.DENY, PermissionType.ALLOW):
        return "Invalid permissionType " + str(b.permission)
    if not b.resource_name:
        return "Invalid empty resource name"
    if b.resource_type == Res.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if parse_principal(b.principal) is None:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type from the principal name)"
    # no check of the host: Kafka stores an empty one too (it then matches no client address)
    return None
