"""AlterUserScramCredentials (key 51), version 0.

Behaviour (Kafka's ScramControlManager.alterCredentials): needs ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every user). One result per user named. The alterations are
checked in Kafka's order, deletions then upsertions, and a user's first failure is its answer
(later alterations of that user are not looked at):
  - an empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty"
  - a mechanism code other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM
  - iterations outside 4096..16384: UNACCEPTABLE_CREDENTIAL "Too few/many iterations"
  - deleting a credential that does not exist: RESOURCE_NOT_FOUND
  - a (user, mechanism) already altered earlier in the request without failing (deleted and
    upserted, or twice): DUPLICATE_RESOURCE "A user credential cannot be altered twice in the
    same request". So a credential deleted twice that does not exist is RESOURCE_NOT_FOUND, as
    in Kafka.
Deliberate difference: Kafka's controller refuses a user named twice in one request even for two
different mechanisms (DUPLICATE_RESOURCE; its AlterUserScramCredentialsRequestTest: "do not update
the same user more than once per request"), which makes `kafka-configs.sh --add-config
'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'` (one request) fail there; we apply both.
The client sends the salted password (it salts and hashes the password itself); we keep the
RFC 5802 StoredKey and ServerKey only (security/scram_store.py), persisted crash-safely before
the answer. Users whose changes all pass are applied together; the others change nothing.
"""
from __future__ import annotations

import asyncio

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
    errors: dict[str, tuple[int, str]] = {}
    altered: set[tuple[str, int]] = set()
    checks = ([(d.name, d.mechanism, None, True) for d in request.deletions] +
              [(u.name, u.mechanism, u.iterations, False) for u in request.upsertions])
    for name, mechanism, iterations, deleting in checks:
        if name in errors:
            continue
        if (name, mechanism) in altered:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            continue
        problem = _problem(store, name, mechanism, iterations, deleting=deleting)
        if problem:
            errors[name] = problem
        else:
            altered.add((name, mechanism))
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
