"""The transaction coordinator: transactional ids, their producer ids and epochs, and their transactions.

Role: Kafka's TransactionCoordinator + TransactionStateManager on one node. The handlers call it:
InitProducerId (with a transactional id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions; Produce and TxnOffsetCommit ask `verify` before a
producer's first transactional write to a partition (KIP-890 part 1), or, from a client of
transaction version 2 (Produce v12, TxnOffsetCommit v5), add the partition themselves
(`add_partitions` with client_tv 2: KIP-890 part 2, no AddPartitionsToTxn). This broker coordinates
every transactional id; the state machine lives in state.py, the records in
`__transaction_state` (state_topic.py), the markers are written by markers.py.

Flow of one change: look the metadata up, check the request against it (Kafka's error codes),
compute the new metadata (`TxnMetadata.prepare_*`), append its record, install it. Everything runs
on the event loop between awaits and appends are synchronous, so no two requests interleave on
one transactional id and memory always equals the log (Kafka's pendingState is never needed).
EndTxn writes PrepareCommit/PrepareAbort, then every marker, then CompleteCommit/CompleteAbort
(with durable acks each step waits until the one before is synced: `_complete`), and answers once
the Prepare record is written (with durable acks: once the markers are synced) (markers that fail are retried every second; the
id answers CONCURRENT_TRANSACTIONS meanwhile). A restart reloads the topic and completes every
PrepareCommit/PrepareAbort before the listeners open.

Transaction versions (Kafka 4.0): a client's version comes with its request (EndTxn v5, Produce
v12, TxnOffsetCommit v5 and AddPartitionsToTxn v4+: 2; older versions and AddOffsetsToTxn: 0).
Version 2's EndTxn bumps the epoch of every transaction it ends and answers the new epoch (or,
from epoch 32766, a new producer id at epoch 0, `next_producer_id` in PrepareCommit/PrepareAbort),
a retry being told from the next transaction's end by the epoch (`_end_txn_v2`); version 0/1 keeps
it (`_end_txn_v1`). The finalized feature transaction.version (broker/features, 2 on a fresh node)
picks the `__transaction_state` value version (0: v0; 1, 2: the flexible v1 with the previous and
next producer id and the client's version) and how the coordinator's own aborts end a transaction.

Fencing (Kafka's rules): InitProducerId for an id whose transaction is Ongoing bumps the epoch,
aborts that transaction at the new epoch (one more with transaction.version 2, as every abort
bumps it then; so the old producer's writes and EndTxn are refused) and
answers CONCURRENT_TRANSACTIONS; the retry then gets epoch + 1 again. A transaction open longer
than its timeout is aborted the same way by the check every
transaction.abort.timed.out.transaction.cleanup.interval.ms. KIP-360: InitProducerId carrying
the current (id, epoch) bumps the epoch; the previous epoch repeated is a retry (same answer);
an exhausted epoch (32766) moves to a new producer id. Ids idle (Empty / Complete*) longer than
transactional.id.expiration.ms are tombstoned every
transaction.remove.expired.transaction.cleanup.interval.ms.

Crash points (tests only, kompakt/storage/faults.py): `txn_prepare_written` (Prepare* record
appended, no marker yet), `txn_marker_written` (markers.py), `txn_markers_written` (every
marker written, Complete* not yet).
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time as _time
from typing import Callable

from kompakt.broker.features.levels import TRANSACTION_VERSION
from kompakt.broker.txn.producer_ids import ProducerIdFileError, get_manager
from kompakt.broker.txn import markers
from kompakt.broker.txn.state import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, SHORT_MAX, TxnMetadata, TxnState,
                                      is_epoch_exhausted)
from kompakt.broker.txn.state_topic import TransactionStateTopic
from kompakt.protocol import txn_records as tr
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition
from kompakt.storage.faults import crash_point

log = logging.getLogger(__name__)

E = ErrorCode
MARKER_RETRY_S = 1.0
# Kafka's appendTransactionToLog mapping of log append errors to coordinator errors
_APPEND_ERRORS = {E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
                  E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
                  E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
                  E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
                  E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
                  E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR, E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR}


_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


class CoordinatorError(Exception):
    """A request answered with `code` before anything was written."""

    def __init__(self, code: ErrorCode, message: str = ""):
        super().__init__(message or code.name)
        self.code = code


class TransactionCoordinator:
    def __init__(self, broker, *, time_ms: Callable[[], int] | None = None):
        self.broker = broker
        self.config = broker.config
        self.time_ms = time_ms or (lambda: int(_time.time() * 1000))
        self.topic = TransactionStateTopic(broker.log_manager, self.config, self.time_ms)
        self.txns: dict[str, TxnMetadata] = {}
        self.unmarked: dict[str, set] = {}           # Prepare* ids whose markers still need writing
        self.completing: dict[str, asyncio.Task] = {}   # ids whose markers wait for a sync (_complete)
        self.active = False
        self.loading = False
        self.load_time_ms = 0.0
        self.counters = {"committed_total": 0, "aborted_total": 0, "timed_out_total": 0,
                         "fenced_total": 0, "expired_ids_total": 0}
        self._tasks: list[asyncio.Task] = []

    # ============================================================================== lifecycle

    async def start(self) -> None:
        """Reload __transaction_state and finish every transaction a crash left in Prepare*."""
        self.loading = True
        t0 = _time.monotonic()
        try:
            loaded = await asyncio.to_thread(self.topic.replay) if self.topic.exists() else {}
            for tid, value in loaded.items():
                self.txns[tid] = _from_value(tid, value)
            self.load_time_ms = (_time.monotonic() - t0) * 1000.0
        finally:
            self.loading = False
        self.active = True
        pending = [m for m in self.txns.values() if m.pending]
        if self.txns:
            log.info("transaction coordinator loaded %d transactional ids from %s in %.0f ms; "
                     "completing %d transactions", len(self.txns), tr.TRANSACTION_STATE_TOPIC,
                     self.load_time_ms, len(pending))
        for meta in pending:
            self._complete(meta, meta.state == TxnState.PREPARE_COMMIT)
        if self.completing:      # completed before the listeners open
            await asyncio.gather(*list(self.completing.values()), return_exceptions=True)
        abort_s = self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000.0
        expire_s = self.config["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000.0
        self._tasks = [asyncio.create_task(self._every(abort_s, self.abort_timed_out), name="txn-abort-timed-out"),
                       asyncio.create_task(self._every(expire_s, self.expire_transactional_ids),
                                           name="txn-expire-ids"),
                       asyncio.create_task(self._every(MARKER_RETRY_S, self.retry_markers), name="txn-markers")]

    async def stop(self) -> None:
        self.active = False
        for task in list(self.completing.values()):   # left in Prepare*: the next start completes them
            task.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []

    async def _every(self, interval_s: float, fn) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator task %s failed", getattr(fn, "__name__", fn))

    def _check_active(self) -> None:
        if self.loading:
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS)
        if not self.active:
            raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE)

    # ============================================================================ InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for a transactional producer (Kafka's handleInitProducerId)."""
        try:
            self._check_active()
            if not transactional_id:
                raise CoordinatorError(E.INVALID_REQUEST, "empty transactional id")
            if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
                raise CoordinatorError(E.INVALID_TRANSACTION_TIMEOUT)
            await self._ensure_topic()
            meta = self.txns.get(transactional_id)
            if meta is None:
                pid = await self._new_producer_id()
                meta = self.txns.setdefault(transactional_id, TxnMetadata(
                    transactional_id, pid, timeout_ms=timeout_ms, last_update_ms=self.time_ms()))
            elif is_epoch_exhausted(meta.producer_epoch):
                spare = await self._new_producer_id()     # before anything else: this may await
                meta = self.txns[transactional_id]
                return self._init_existing(meta, timeout_ms, expected, spare)
            return self._init_existing(meta, timeout_ms, expected, None)
        except CoordinatorError as exc:
            return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH

    async def _ensure_topic(self) -> None:
        """`__transaction_state` exists, or CoordinatorError: a topic that cannot be created (a
        colliding name, a failing disk) leaves the coordinator unavailable, as Kafka's answers."""
        try:
            await self.topic.ensure_async()
        except KafkaError as exc:
            log.warning("cannot create %s: %s", tr.TRANSACTION_STATE_TOPIC, exc)
            raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE) from exc

    def _init_existing(self, meta: TxnMetadata, timeout_ms: int, expected, spare_pid) -> tuple[int, int, int]:
        if expected is not None and not (meta.producer_epoch == NO_PRODUCER_EPOCH
                                         or expected[0] == meta.producer_id
                                         or (expected[0] == meta.previous_producer_id
                                             and is_epoch_exhausted(expected[1]))):
            raise CoordinatorError(E.PRODUCER_FENCED)
        state = meta.state
        if meta.pending:
            raise CoordinatorError(E.CONCURRENT_TRANSACTIONS)
        if state == TxnState.ONGOING:
            # fence the running producer: abort its transaction at a bumped epoch; the client retries
            fenced = meta.prepare_fence()
            self.counters["fenced_total"] += 1
            log.info("transactional id %s: a new producer instance fences epoch %d; aborting its "
                     "transaction", meta.transactional_id, meta.producer_epoch)
            self._end(fenced, commit=False, client_tv=self.server_transaction_version())
            raise CoordinatorError(E.CONCURRENT_TRANSACTIONS)
        now = self.time_ms()
        if is_epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            if spare_pid is None:
                raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS)
            new = meta.prepare_init(timeout_ms, now, spare_pid, 0,
                                    meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH)
        elif expected is None:
            new = meta.prepare_init(timeout_ms, now, meta.producer_id, meta.producer_epoch + 1, NO_PRODUCER_EPOCH)
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
            new = meta.prepare_init(timeout_ms, now, meta.producer_id, meta.producer_epoch + 1, meta.producer_epoch)
        elif expected[1] == meta.last_producer_epoch:
            new = meta.prepare_init(timeout_ms, now, meta.producer_id, meta.producer_epoch,
                                    meta.last_producer_epoch)    # a retry of a bump that succeeded
        else:
            log.info("transactional id %s: expected epoch %d is neither the current %d nor the previous %d",
                     meta.transactional_id, expected[1], meta.producer_epoch, meta.last_producer_epoch)
            raise CoordinatorError(E.PRODUCER_FENCED)
        self._persist(new)
        log.info("initialized transactional id %s with producer id %d and epoch %d on partition %s-%d",
                 new.transactional_id, new.producer_id, new.producer_epoch, tr.TRANSACTION_STATE_TOPIC,
                 self.topic.partition_for(new.transactional_id))
        return E.NONE, new.producer_id, new.producer_epoch

    async def _new_producer_id(self) -> int:
        manager = get_manager(self.broker)
        try:
            if manager.needs_reservation():
                return await asyncio.to_thread(manager.generate)
            return manager.generate()
        except (OSError, ProducerIdFileError) as exc:
            log.error("cannot allocate a producer id: %s", exc)
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS) from exc

    # ============================================================================== AddPartitions

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions, client_tv: int = 0) -> ErrorCode:
        """AddPartitionsToTxn / AddOffsetsToTxn (Kafka's handleAddPartitionsToTransaction);
        with `client_tv` 2 the implicit add of a Produce v12 / TxnOffsetCommit v5 (what Kafka's
        broker sends its coordinator as AddPartitionsToTxn v4+ without verify_only)."""
        try:
            self._check_active()
            meta = self._owned(transactional_id, producer_id, producer_epoch)
            if meta.pending:
                return E.CONCURRENT_TRANSACTIONS
            partitions = set(partitions)
            if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
                return E.NONE
            self._persist(meta.prepare_add(partitions, self.time_ms(), client_tv))
            return E.NONE
        except CoordinatorError as exc:
            return exc.code

    def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
               partitions) -> dict:
        """{partition: code}: is each partition in the producer's open transaction (KIP-890
        part 1, Kafka's handleVerifyPartitionsInTransaction)? TRANSACTION_ABORTABLE when not."""
        partitions = list(partitions)
        try:
            self._check_active()
            if not transactional_id:
                raise CoordinatorError(E.INVALID_REQUEST)
            meta = self._owned(transactional_id, producer_id, producer_epoch)
            if meta.pending:
                raise CoordinatorError(E.CONCURRENT_TRANSACTIONS)
            return {tp: (E.NONE if tuple(tp) in meta.partitions else E.TRANSACTION_ABORTABLE)
                    for tp in partitions}
        except CoordinatorError as exc:
            return {tp: exc.code for tp in partitions}

    def _owned(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        if not transactional_id:
            raise CoordinatorError(E.INVALID_REQUEST)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise CoordinatorError(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != producer_epoch:
            raise CoordinatorError(E.PRODUCER_FENCED)
        return meta

    # ===================================================================================== EndTxn

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      client_tv: int = 0) -> tuple[ErrorCode, int, int]:
        """EndTxn: (code, producer id, epoch). `client_tv` is the client's transaction version,
        which Kafka reads off the request version (v5: 2, else 0). Version 2 bumps the epoch and
        answers the new id and epoch (also to a retry of an EndTxn that already completed);
        version 0/1 keeps the epoch and answers -1, -1."""
        try:
            self._check_active()
            if client_tv < 2:
                return self._end_txn_v1(transactional_id, producer_id, producer_epoch, commit), \
                    NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            meta = self.txns.get(transactional_id) if transactional_id else None
            spare = None
            if meta is not None and is_epoch_exhausted(meta.producer_epoch) and not meta.pending:
                spare = await self._new_producer_id()     # before deciding: this may await
            return self._end_txn_v2(transactional_id, producer_id, producer_epoch, commit, spare)
        except CoordinatorError as exc:
            return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH

    def _end_txn_v1(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """Transaction version 0/1 (Kafka's endTransactionWithTV1): the epoch does not move."""
        if not transactional_id:
            return E.INVALID_REQUEST
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return E.PRODUCER_FENCED
        state = meta.state
        if state == TxnState.ONGOING:
            self._end(meta, commit)
            return E.NONE
        same = E.NONE if state in _COMPLETE else E.CONCURRENT_TRANSACTIONS   # a retry
        if state in (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) and commit:
            return same
        if state in (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT) and not commit:
            return same
        log.debug("transactional id %s is %s but received %s", transactional_id, state.kafka_name,
                  "COMMIT" if commit else "ABORT")
        return E.INVALID_TXN_STATE

    def _end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                    spare_pid: int | None) -> tuple[ErrorCode, int, int]:
        """Transaction version 2 (Kafka 4.0's endTransaction for a client of TV2). The epoch alone
        tells a retry from the next transaction's end: the request's epoch + 1 is what an EndTxn
        that went through left behind (or, across an exhausted epoch, epoch 32766 of the previous
        producer id against epoch 0 of the new one). Per state, for the request's epoch being the
        current one / a retry's (PF PRODUCER_FENCED, ITS INVALID_TXN_STATE, EB a new end with an
        epoch bump):

            state            | ABORT current | ABORT retry | COMMIT current | COMMIT retry
            Ongoing          | EB            | PF          | EB             | PF
            Empty            | EB            | PF          | ITS            | PF
            CompleteAbort    | EB            | NONE        | ITS            | ITS
            CompleteCommit   | EB            | ITS         | ITS            | NONE
            PrepareAbort     | PF            | CT          | PF             | ITS
            PrepareCommit    | PF            | ITS         | PF             | CT

        (CT CONCURRENT_TRANSACTIONS: the markers are still being written.) A NONE answers the id
        and epoch the end left; EB answers the bumped epoch, or the next producer id at epoch 0
        when the epoch left was 32766."""
        if not transactional_id:
            raise CoordinatorError(E.INVALID_REQUEST)
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise CoordinatorError(E.INVALID_PRODUCER_ID_MAPPING)
        retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == SHORT_MAX - 1
                             and meta.producer_epoch == 0)
        retry_on_bump = meta.producer_epoch == producer_epoch + 1
        if meta.producer_id != producer_id and not retry_on_overflow:
            raise CoordinatorError(E.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        if meta.pending:
            valid = retry_on_bump
        elif state in _COMPLETE:
            valid = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch == meta.producer_epoch
        if not valid:
            raise CoordinatorError(E.PRODUCER_FENCED)
        retry = retry_on_bump or retry_on_overflow
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.pending:
            same = (state == TxnState.PREPARE_COMMIT) == commit
            raise CoordinatorError(E.CONCURRENT_TRANSACTIONS if same else E.INVALID_TXN_STATE)
        if state in _COMPLETE and retry:
            if state != wanted:
                raise CoordinatorError(E.INVALID_TXN_STATE)
            return E.NONE, meta.producer_id, meta.producer_epoch     # what the end answered
        if commit and state != TxnState.ONGOING:
            log.debug("transactional id %s is %s but received COMMIT", transactional_id, state.kafka_name)
            raise CoordinatorError(E.INVALID_TXN_STATE)
        next_pid = NO_PRODUCER_ID
        if is_epoch_exhausted(meta.producer_epoch):
            if spare_pid is None:              # exhausted meanwhile: the client retries
                raise CoordinatorError(E.CONCURRENT_TRANSACTIONS)
            next_pid = spare_pid
        prepared = self._end(meta, commit, client_tv=2, next_producer_id=next_pid)
        if next_pid != NO_PRODUCER_ID:
            return E.NONE, next_pid, 0
        return E.NONE, prepared.producer_id, prepared.producer_epoch

    def _end(self, meta: TxnMetadata, commit: bool, client_tv: int = 0,
             next_producer_id: int = NO_PRODUCER_ID) -> TxnMetadata:
        """Prepare* record, then the markers, then Complete* (see the module docstring)."""
        prepared = meta.prepare_end(commit, self.time_ms(), client_tv, next_producer_id)
        self._persist(prepared)
        crash_point("txn_prepare_written")
        self._complete(prepared, commit)
        return prepared

    def server_transaction_version(self) -> int:
        """The finalized transaction.version: which TransactionLogValue version the records are
        written in (1+: the flexible one), and how the coordinator's own aborts (a fence, a
        timeout) end a transaction (2: with an epoch bump), as Kafka's transactionVersionLevel."""
        features = getattr(self.broker, "features", None)
        return features.level(TRANSACTION_VERSION) if features is not None else 0

    def completion(self, transactional_id: str) -> asyncio.Task | None:
        """The task writing this id's markers and Complete* once what precedes them is synced
        (durable acks), or None: EndTxn answers once it has ended."""
        return self.completing.get(transactional_id)

    def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        """The markers, then Complete*. With durable acks, in Kafka's order with "replicated" read
        as "synced": the Prepare* record is synced before any marker is written and every marker
        before Complete* is, so a power cut that keeps a marker keeps Prepare* (the restart writes
        the other markers) and one that keeps Complete* keeps every marker. The waiting runs in a
        task of its own (`completing`, one per id; a fresh context, so it is not counted as the
        request's own writes); the id answers CONCURRENT_TRANSACTIONS meanwhile, as while markers
        are retried."""
        lm = self.broker.log_manager
        loop = asyncio._get_running_loop()
        if not getattr(lm, "durable_acks", False) or loop is None:
            self._write_markers_and_complete(meta, commit)
            return
        tid = meta.transactional_id
        if tid in self.completing:
            return
        task = loop.create_task(self._complete_durably(meta, commit), name=f"txn-complete-{tid}",
                                context=contextvars.Context())
        self.completing[tid] = task
        task.add_done_callback(lambda t, tid=tid: self.completing.pop(tid, None)
                               if self.completing.get(tid) is t else None)

    async def _complete_durably(self, meta: TxnMetadata, commit: bool) -> None:
        tid = meta.transactional_id
        try:
            await self._synced([TopicPartition(tr.TRANSACTION_STATE_TOPIC, self.topic.partition_for(tid))])
            if not self._write_markers(meta, commit):
                return                      # retry_markers goes on
            await self._synced([TopicPartition(t, p) for t, p in sorted(meta.partitions)])
        except KafkaError as exc:           # a sync failed: its log dir is offline now
            log.warning("transaction %s: a sync before its markers or Complete failed (%s); will retry",
                        tid, exc)
            self.unmarked.setdefault(tid, set(meta.partitions))
            return
        self._write_complete(meta, commit)

    async def _synced(self, tps) -> None:
        lm = self.broker.log_manager
        for tp in tps:
            plog = lm.get_log(tp)
            if plog is not None:
                await lm.wait_durable(plog, plog.log_end_offset)

    def _write_markers_and_complete(self, meta: TxnMetadata, commit: bool) -> None:
        if self._write_markers(meta, commit):
            self._write_complete(meta, commit)

    def _write_markers(self, meta: TxnMetadata, commit: bool) -> bool:
        """Every marker still due is written (else they are left in `unmarked` for the retry)."""
        tid = meta.transactional_id
        partitions = self.unmarked.get(tid, meta.partitions)
        left = markers.write_markers(self.broker, meta.copy(partitions=set(partitions)), commit, self.time_ms())
        if left:
            self.unmarked[tid] = left
            return False
        self.unmarked.pop(tid, None)
        crash_point("txn_markers_written")
        return True

    def _write_complete(self, meta: TxnMetadata, commit: bool) -> None:
        tid = meta.transactional_id
        try:
            self._persist(meta.prepare_complete(self.time_ms()))
        except CoordinatorError as exc:
            log.warning("transaction %s: markers written but Complete not (%s); will retry", tid, exc.code.name)
            self.unmarked[tid] = set()
            return
        self.counters["committed_total" if commit else "aborted_total"] += 1

    def retry_markers(self) -> None:
        """Markers that could not be written (storage errors) are retried here, every second."""
        for tid in list(self.unmarked):
            meta = self.txns.get(tid)
            if meta is None or not meta.pending:
                self.unmarked.pop(tid, None)
                continue
            self._complete(meta, meta.state == TxnState.PREPARE_COMMIT)

    # =========================================================================== timers

    def abort_timed_out(self) -> int:
        """Abort (fencing the producer) every transaction Ongoing longer than its timeout."""
        now = self.time_ms()
        n = 0
        for meta in list(self.txns.values()):
            if meta.state != TxnState.ONGOING or meta.start_ms + meta.timeout_ms >= now:
                continue
            log.info("aborting transaction of %s (producer %d epoch %d): open for %d ms, timeout %d ms",
                     meta.transactional_id, meta.producer_id, meta.producer_epoch, now - meta.start_ms,
                     meta.timeout_ms)
            try:
                self._end(meta.prepare_fence(), commit=False, client_tv=self.server_transaction_version())
                self.counters["timed_out_total"] += 1
                n += 1
            except CoordinatorError as exc:
                log.warning("rollback of the timed-out transaction of %s failed: %s",
                            meta.transactional_id, exc.code.name)
        return n

    def expire_transactional_ids(self) -> int:
        """Tombstone ids idle longer than transactional.id.expiration.ms (Empty / Complete*)."""
        cutoff = self.time_ms() - self.config["transactional.id.expiration.ms"]
        n = 0
        for tid, meta in list(self.txns.items()):
            if meta.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                continue
            if meta.last_update_ms > cutoff:
                continue
            meta.prepare_dead()                    # checks the transition
            try:
                self.topic.append(tid, None)
            except KafkaError as exc:
                log.warning("could not expire transactional id %s: %s", tid, exc)
                continue
            del self.txns[tid]
            self.counters["expired_ids_total"] += 1
            n += 1
        if n:
            log.info("expired %d transactional ids", n)
        return n

    # =============================================================================== describe

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, None
        if not transactional_id:
            return E.INVALID_REQUEST, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, meta

    def list(self, states=(), producer_ids=(), duration_ms: int = -1,
             id_pattern: str | None = None) -> tuple[ErrorCode, list[TxnMetadata], list[str]]:
        """(code, matching transactions, unknown state names) for ListTransactions."""
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, [], []
        wanted, unknown = set(), []
        for name in states or ():
            s = TxnState.from_name(name)
            (wanted.add(s) if s is not None else unknown.append(name))
        pattern = re.compile(id_pattern) if id_pattern else None
        now = self.time_ms()
        out = []
        for meta in self.txns.values():
            if meta.state == TxnState.DEAD:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if states and meta.state not in wanted:
                continue
            if duration_ms >= 0 and now - meta.start_ms <= duration_ms:
                continue
            if pattern is not None and not pattern.fullmatch(meta.transactional_id):
                continue
            out.append(meta)
        return E.NONE, out, unknown

    def stats(self) -> dict:
        by_state = {s.kafka_name: 0 for s in TxnState if s != TxnState.DEAD}
        for meta in self.txns.values():
            by_state[meta.state.kafka_name] += 1
        return {"by_state": by_state, "load_time_ms": self.load_time_ms, **self.counters}

    # ============================================================================== persistence

    def _persist(self, new: TxnMetadata) -> None:
        """Append `new`'s record, then install it; raises CoordinatorError with Kafka's mapping."""
        # the value version follows the finalized transaction.version (Kafka's valueToBytes):
        # 0 writes v0, 1 and 2 the flexible v1 with the tagged fields
        value = tr.encode_value(producer_id=new.producer_id, producer_epoch=new.producer_epoch,
                                timeout_ms=new.timeout_ms, state=int(new.state),
                                partitions=new.partitions_by_topic() if new.state != TxnState.EMPTY else None,
                                last_update_ms=new.last_update_ms, start_ms=new.start_ms,
                                version=1 if self.server_transaction_version() >= 1 else 0,
                                previous_producer_id=new.previous_producer_id,
                                next_producer_id=new.next_producer_id,
                                client_transaction_version=new.client_transaction_version)
        try:
            self.topic.append(new.transactional_id, value)
        except KafkaError as exc:
            code = ErrorCode(int(exc.code))
            log.info("appending the state of %s failed: %s", new.transactional_id, exc)
            raise CoordinatorError(_APPEND_ERRORS.get(code, code)) from exc
        except OSError as exc:
            log.error("appending the state of %s failed on disk: %s", new.transactional_id, exc)
            raise CoordinatorError(E.NOT_COORDINATOR) from exc
        self.txns[new.transactional_id] = new


def _from_value(tid: str, v: dict) -> TxnMetadata:
    parts = {(topic, p) for topic, ids in v["partitions"].items() for p in ids}
    state = TxnState(v["state"])
    return TxnMetadata(tid, v["producer_id"], v["producer_epoch"], NO_PRODUCER_EPOCH,
                       v.get("previous_producer_id", NO_PRODUCER_ID), v["timeout_ms"], state,
                       parts if state != TxnState.EMPTY else set(), v["start_ms"], v["last_update_ms"],
                       v.get("next_producer_id", NO_PRODUCER_ID), v.get("client_transaction_version", 0))
