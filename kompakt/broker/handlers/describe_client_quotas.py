"""DescribeClientQuotas (API key 48), versions 0-1.

Behaviour (Kafka's ClientQuotasImage.describe): the stored quota entities matching the filter,
each with all its quota values. Filter components, per entity type (user, client-id, ip), at
most one each: EXACT (match = the name), DEFAULT (the type's default entity, match null),
SPECIFIED (any entity that has the type, match null). `strict`: the entity has exactly the
filtered types; otherwise it may have more. Entity names are null for defaults.
Refusals, top level with entries null: INVALID_REQUEST for an empty type, a type twice, a match
string where none belongs (or none where one does), an unknown match type, ip combined with
user/client-id; UNSUPPORTED_VERSION for an unknown entity type (as Kafka answers).
Authorization: CLUSTER DESCRIBE_CONFIGS, else CLUSTER_AUTHORIZATION_FAILED.

Version notes: v1 flexible.
"""
from __future__ import annotations

from kafka.protocol.admin.client_quotas import DescribeClientQuotasResponse

from kompakt.broker.quotas.entities import QuotaError
from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

Entry = DescribeClientQuotasResponse.EntryData
Entity = Entry.EntityData
Value = Entry.ValueData


def _error(code: int, message: str | None) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=code, error_message=message, entries=None)


async def handle(ctx, request) -> DescribeClientQuotasResponse:
    if not ctx.authorize_cluster(Op.DESCRIBE_CONFIGS):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        found = ctx.broker.quotas.describe(request.components, bool(request.strict))
    except QuotaError as exc:
        return _error(exc.code, exc.message)
    entries = [Entry(entity=[Entity(entity_type=t, entity_name=n) for t, n in entity],
                     values=[Value(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
