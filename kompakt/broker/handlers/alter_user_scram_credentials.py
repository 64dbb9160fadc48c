"""AlterUserScramCredentials (key 51), version 0.

Behaviour (Kafka's ScramControlManager.alterCredentials): needs ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every user). One result per user named, first failure wins:
  - the user named more than once (deletion and upsertion, or twice for one mechanism):
    DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same request"
  - an empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty"
  - a mechanism code other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM
  - iterations outside 4096..16384: UNACCEPTABLE_CREDENTIAL "Too few/many iterations"
  - deleting a credential that does not exist: RESOURCE_NOT_FOUND
The client sends the salted password (it salts and hashes the password itself); we keep the
RFC 5802 StoredKey and ServerKey only (security/scram_store.py), persisted crash-safely before
the answer. Users whose changes all pass are applied together; the others change nothing.
"""
from __future__ import annotations

import asyncio
from collections import Counter

from kafka.protocol.admin.users import AlterUserScramCredentialsResponse

from kompakt.broker.security.acl import Op
from kompakt.broker.security.scram_store import (MAX_ITERATIONS, MECHANISM_CODES, MIN_ITERATIONS,
                                                 credential_from_salted)
from kompakt.protocol.errors import ErrorCode

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

_Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def _problem(store, name, mechanism_code, iterations=None, deleting=False):
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = MECHANISM_CODES.get(mechanism_code)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism_code}"
    if deleting:
        if store.lookup(name, mechanism) is None:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    elif iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    elif iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


async def handle(ctx, request):
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    order = list(dict.fromkeys(names))
    if not ctx.authorize_cluster(Op.ALTER):
        return AlterUserScramCredentialsResponse(version=ctx.api_version, throttle_time_ms=0, results=[
            _Result(user=n, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message="Cluster authorization failed.") for n in order])
    store = ctx.broker.scram_store
    per_mech = Counter([(d.name, d.mechanism) for d in request.deletions] +
                       [(u.name, u.mechanism) for u in request.upsertions])
    errors: dict[str, tuple[int, str]] = {}
    for (name, _), n in per_mech.items():
        if n > 1:
            errors.setdefault(name, (ErrorCode.DUPLICATE_RESOURCE,
                                     "A user credential cannot be altered twice in the same request"))
    for d in request.deletions:
        problem = _problem(store, d.name, d.mechanism, deleting=True)
        if problem and d.name not in errors:
            errors[d.name] = problem
    for u in request.upsertions:
        problem = _problem(store, u.name, u.mechanism, u.iterations)
        if problem and u.name not in errors:
            errors[u.name] = problem
    deletions = [(d.name, MECHANISM_CODES[d.mechanism]) for d in request.deletions if d.name not in errors]
    upserts = [(u.name, MECHANISM_CODES[u.mechanism],
                credential_from_salted(MECHANISM_CODES[u.mechanism], u.salt, u.salted_password, u.iterations))
               for u in request.upsertions if u.name not in errors]
    if deletions or upserts:
        try:
            await asyncio.to_thread(store.apply, upserts, deletions)
        except OSError as exc:
            for name in order:
                errors.setdefault(name, (ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store SCRAM credentials: {exc}"))
    results = [_Result(user=n, error_code=errors[n][0] if n in errors else 0,
                       error_message=errors[n][1] if n in errors else None) for n in order]
    return AlterUserScramCredentialsResponse(version=ctx.api_version, throttle_time_ms=0, results=results)
