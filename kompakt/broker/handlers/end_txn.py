"""EndTxn (API key 26), versions 0-5.

Behaviour: commit or abort the producer's transaction. The coordinator (kompakt/broker/txn)
writes PrepareCommit/PrepareAbort to `__transaction_state`, a COMMIT/ABORT marker into every
partition of the transaction (the consumers' last stable offset moves; a group's pending
transactional offsets become visible or are dropped), then CompleteCommit/CompleteAbort, and
answers once the Prepare record is written (durable acks, kompakt.durable.acks.enable: once the
Prepare record and then every marker are synced, storage/group_commit.py). Codes: NONE (also for a retry of a finished
commit/abort), INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2),
CONCURRENT_TRANSACTIONS (a retry while markers are still being written), INVALID_TXN_STATE
(nothing to end, or the opposite of what is being ended), INVALID_REQUEST (empty id),
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (no WRITE on the id).

Version notes: v2 PRODUCER_FENCED; v3 flexible; v4 TRANSACTION_ABORTABLE. v5 is transaction
version 2 (KIP-890 part 2; what the Java client sends once transaction.version 2 is finalized, as
on a fresh node): every EndTxn bumps the producer epoch, the markers carry the new epoch, and the
answer's producer_id / producer_epoch (v5 fields) are the ones to use next (a new producer id at
epoch 0 once the epoch 32766 is left); a retry of an end that went through is answered NONE with
them; an abort with nothing added is an end of its own (epoch bumped, no marker); a commit with
nothing added is INVALID_TXN_STATE (coordinator._end_txn_v2 has the table). Kafka reads the
client's transaction version off the request version alone (v5: 2, v0-4: 0), whatever the
finalized level, and so does Kompakt. An error answers -1 / -1, as does every v0-4 answer.

Codec: kompakt/protocol/txn_codec.py (hand-written: one EndTxn per transaction).
"""
from __future__ import annotations

import asyncio

from kompakt.broker.security.acl import Op, Res
from kompakt.protocol import txn_codec
from kompakt.protocol.errors import ErrorCode

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_TV2_VERSION = 5

decode = txn_codec.decode_end_txn


async def handle(ctx, request):
    v = ctx.api_version
    pid = epoch = -1
    if not ctx.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        code, pid, epoch = await ctx.broker.txn.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, bool(request.committed),
            client_tv=2 if v >= FIRST_TV2_VERSION else 0)
        if code == ErrorCode.PRODUCER_FENCED and v < 2:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        completion = ctx.broker.txn.completion(request.transactional_id) if code == ErrorCode.NONE else None
        if completion is not None:
            # durable acks: answered once the markers and Complete* are synced (coordinator._complete)
            ctx.effects_applied()
            await asyncio.shield(completion)
    if code and ctx.metrics is not None:
        ctx.metrics.record_error("EndTxn", code)
    return txn_codec.encode_end_txn_response(ctx.correlation_id, v, int(code), producer_id=pid,
                                             producer_epoch=epoch)
