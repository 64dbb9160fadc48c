"""Client quota entities and the admin side: validation of AlterClientQuotas entries and the
filter of DescribeClientQuotas, with Kafka's rules and messages (ClientQuotaControlManager,
ClientQuotasImage.describe).

An entity is a set of (type, name) pairs, type `user`, `client-id` or `ip`, name None for the
type's default (`<default>` in kafka-configs.sh). Kept as a sorted tuple so it can key a dict:
    (("client-id", "app"), ("user", "alice"))      user alice using client id app
    (("user", None),)                               every user without a quota of its own

Keys and value types (QuotaConfig): user / client-id entities take producer_byte_rate and
consumer_byte_rate (integral bytes per second), request_percentage and controller_mutation_rate
(doubles); ip entities take connection_creation_rate (integral). Every value must be > 0.
"""
from __future__ import annotations

from kompakt.protocol.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                    "request_percentage": "double", "controller_mutation_rate": "double"}
IP_KEYS = {"connection_creation_rate": "int"}
ENFORCED_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
_LIMITS = {"int": 2**31 - 1, "long": 2**63 - 1}
_TYPE_WORDS = {"int": "an INT", "long": "a LONG"}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaError(Exception):
    """One entity's (or a describe filter's) refusal: a Kafka error code and Kafka's message."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def entity_key(pairs) -> tuple:
    return tuple(sorted(pairs, key=lambda p: p[0]))


def describe_entity(entity: tuple) -> str:
    """Kafka's ClientQuotaEntity toString, for messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def validate_entity(pairs) -> dict[str, str | None]:
    """Kafka's validateEntity + configKeysForEntityType: the entity as {type: name}; QuotaError."""
    if not pairs:
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    out: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in out:
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        out[entity_type] = name
        if name is not None and name == "":
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
    if IP in out and (USER in out or CLIENT_ID in out):
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                                                    "not be combined with User or ClientId")
    return out


def keys_for(entity: dict) -> dict[str, str]:
    return IP_KEYS if IP in entity else USER_CLIENT_KEYS


def validate_value(keys: dict[str, str], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue."""
    kind = keys.get(key)
    if kind is None:
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:   # NaN too: a NaN bound would make every comparison false
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if kind in _LIMITS:
        if value > _LIMITS[kind]:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {_TYPE_WORDS[kind]}.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def parse_filter(components) -> tuple[dict[str, str | None], set[str]]:
    """DescribeClientQuotas components -> (exact matches {type: name|None}, types that must be
    present); Kafka's checks, as QuotaError (UNSUPPORTED_VERSION for an unknown entity type)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for c in components:
        entity_type = c.entity_type
        if not entity_type:
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if entity_type in exact or entity_type in present:
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(entity_type)
        else:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
    types = set(exact) | present
    if IP in types and (USER in types or CLIENT_ID in types):
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                    "component should not be used with user or clientId filter "
                                                    "component.")
    return exact, present


def matches(entity: tuple, exact: dict, present: set, strict: bool) -> bool:
    """Kafka's ClientQuotasImage.matches."""
    as_dict = dict(entity)
    if strict and len(as_dict) != len(exact) + len(present):
        return False
    for entity_type, name in exact.items():
        if entity_type not in as_dict or as_dict[entity_type] != name:
            return False
    return all(t in as_dict for t in present)
