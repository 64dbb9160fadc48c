"""ListTransactions (API key 66), versions 0-1 (Kafka 4.0's range, the release Kompakt advertises).

Behaviour: every transactional id the coordinator knows (none in state Dead), with its producer id
and state name, filtered by the request: `state_filters` (state names; unknown names are echoed in
`unknown_state_filters` and match nothing), `producer_id_filters`, v1 `duration_filter` (only
transactions running longer than that many ms; -1 = no filter) and v2 (Kafka 4.1; not served while Kompakt advertises 4.0, the code stays) `transactional_id_pattern`
(a regular expression the whole id must match; null or empty = no filter). Ids the principal
may not DESCRIBE are left out. A pattern that is not a valid regular expression answers
INVALID_REGULAR_EXPRESSION.
"""
from __future__ import annotations

import re

from kafka.protocol.admin.transactions import ListTransactionsResponse

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

State = ListTransactionsResponse.TransactionState


async def handle(ctx, request):
    v = ctx.api_version
    duration = request.duration_filter if v >= 1 else -1
    pattern = request.transactional_id_pattern if v >= 2 else None
    try:
        if pattern:
            re.compile(pattern)
    except re.error:
        return ListTransactionsResponse(version=v, throttle_time_ms=0,
                                        error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                        unknown_state_filters=[], transaction_states=[])
    code, found, unknown = ctx.broker.txn.list(request.state_filters or (), set(request.producer_id_filters or ()),
                                               duration, pattern)
    states = [State(transactional_id=m.transactional_id, producer_id=m.producer_id,
                    transaction_state=m.state.kafka_name)
              for m in found if ctx.authorize(Op.DESCRIBE, Res.TRANSACTIONAL_ID, m.transactional_id)]
    return ListTransactionsResponse(version=v, throttle_time_ms=0, error_code=int(code),
                                    unknown_state_filters=unknown, transaction_states=states)
