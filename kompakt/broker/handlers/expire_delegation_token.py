"""ExpireDelegationToken (API key 40), versions 1-2 (Kafka 4.0 removed v0): answered as Kafka 4.0 with
delegation tokens disabled, its default (handlers/_tokens.py has the rules): no token exists to
expire and nothing changes.
"""
from __future__ import annotations

from kompakt.broker.handlers._tokens import renew_or_expire_answer

API_KEY = 40
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx, request):
    return renew_or_expire_answer(ctx, API_KEY)
