"""AlterClientQuotas (API key 49), versions 0-1.

Behaviour (Kafka's ClientQuotaControlManager.alterClientQuotas): each entry names an entity
(pairs of user / client-id / ip and a name, null = that type's default) and operations: set a
key to a value, or remove it. Per entry, with Kafka's messages, INVALID_REQUEST for: an empty
entity, a type twice, an unknown type, an empty name, ip combined with user/client-id, a key
twice, a key not valid for the entity ("Invalid configuration key k"), a value <= 0, a
fractional or too large value for an integral key, and an entity named twice in the request (every
copy fails). Valid entries are stored together (kompakt-client-quotas.json, crash-safe, before
the answer) and take effect at once: producer_byte_rate and consumer_byte_rate throttle Produce
and Fetch (broker/quotas); the other keys are stored and described but not enforced.
`validate_only`: every check, nothing stored. Authorization: CLUSTER ALTER_CONFIGS, else every
entry answers CLUSTER_AUTHORIZATION_FAILED.

Version notes: v1 flexible.
"""
from __future__ import annotations

from kafka.protocol.admin.client_quotas import AlterClientQuotasResponse

from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1

Entry = AlterClientQuotasResponse.EntryData
Entity = Entry.EntityData


async def handle(ctx, request) -> AlterClientQuotasResponse:
    pairs = [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in request.entries]
    if ctx.authorize_cluster(Op.ALTER_CONFIGS):
        wanted = [(p, [(op.key, op.value, bool(op.remove)) for op in entry.ops])
                  for p, entry in zip(pairs, request.entries)]
        results = await ctx.broker.quotas.alter(wanted, bool(request.validate_only))
    else:
        results = [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)] * len(pairs)
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        Entry(error_code=code, error_message=message,
              entity=[Entity(entity_type=t, entity_name=n) for t, n in p])
        for p, (code, message) in zip(pairs, results)])
