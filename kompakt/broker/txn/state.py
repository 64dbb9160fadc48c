"""A transactional id's metadata and its state machine (Kafka's TransactionMetadata / TransactionState).

Role: the pure part of the transaction coordinator. `TxnMetadata` holds what `__transaction_state`
records (producer id and epoch, timeout, state, partitions, timestamps) and moves between states
only through `transition()`. It never does I/O and never reads a clock: the coordinator computes a
new `TxnMetadata` with `prepare_*`, appends its record, and only then installs it (`install`),
so memory always equals what a replay of the log would build.

States (Kafka's ids are the ones written to disk):

    0 Empty              no transaction; after InitProducerId
    1 Ongoing            partitions (or a group's offsets) added; records may be written
    2 PrepareCommit      EndTxn(commit) written: the markers are being written
    3 PrepareAbort       EndTxn(abort), a timeout or a fencing InitProducerId: markers being written
    4 CompleteCommit     every COMMIT marker is written
    5 CompleteAbort      every ABORT marker is written
    6 Dead               the transactional id expired (tombstoned); never written as a value
    7 PrepareEpochFence  an Ongoing transaction whose producer is being fenced: the epoch is
                         bumped and the transaction then aborts (never written as a value)

Transition table (event -> next state; "-" raises IllegalStateError(current, event)):

    state \\ event     | INIT  | ADD     | COMMIT        | ABORT         | FENCE             | COMPLETE       | EXPIRE
    ------------------+-------+---------+---------------+---------------+-------------------+----------------+-------
    Empty             | Empty | Ongoing | -             | PrepareAbort* | -                 | -              | Dead
    Ongoing           | -     | Ongoing | PrepareCommit | PrepareAbort  | PrepareEpochFence | -              | -
    PrepareCommit     | -     | -       | -             | -             | -                 | CompleteCommit | -
    PrepareAbort      | -     | -       | -             | -             | -                 | CompleteAbort  | -
    CompleteCommit    | Empty | Ongoing | -             | PrepareAbort* | -                 | -              | Dead
    CompleteAbort     | Empty | Ongoing | -             | PrepareAbort* | -                 | -              | Dead
    PrepareEpochFence | -     | -       | -             | PrepareAbort  | -                 | -              | -
    Dead              | -     | -       | -             | -             | -                 | -              | -

(Kafka 4.0's validPreviousStates, read as rows.) INIT is InitProducerId (epoch bump, or a new
producer id once the epoch is exhausted), ADD is AddPartitionsToTxn / AddOffsetsToTxn (or, with
transaction version 2, a Produce v12 / TxnOffsetCommit v5 to a partition not yet in the
transaction), COMMIT and ABORT are EndTxn (ABORT also ends a fence), FENCE is a producer fenced
while its transaction is open (InitProducerId from a new instance, or the transaction timing out),
COMPLETE is "every marker written", EXPIRE is transactional.id.expiration.ms passing.
* an abort with no partition added: only EndTxn v5 (transaction version 2) may do it, the
  coordinator refuses it to older clients (INVALID_TXN_STATE).

Transaction version 2 (KIP-890 part 2; `client_transaction_version` 2, from EndTxn v5, Produce
v12, TxnOffsetCommit v5 and the broker's own AddPartitionsToTxn v4+): every COMMIT/ABORT bumps the
epoch (`prepare_end`: PrepareCommit/PrepareAbort carry epoch + 1, `last_producer_epoch` the old
one), so the markers are written with the new epoch and fence the finished transaction's late
writes; when the epoch being left is exhausted (32766) the coordinator hands `next_producer_id`
along and Complete* moves to it at epoch 0 (Kafka's prepareComplete). Version 0/1 clients keep
the epoch.

Invariants: a transaction in Empty / Complete* has no partitions and start time -1 (Empty) or the
finished transaction's start (Complete*); the epoch only grows for a producer id (a new id starts at
0); `producer_epoch` is never above 32767; `previous_producer_id` is the producer id the metadata
had before its last transition (Kafka's TxnTransitMetadata.prevProducerId).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> "TxnState | None":
        for s, n in _NAMES.items():
            if n == name:
                return s
        return None


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}

INIT, ADD, COMMIT, ABORT, FENCE, COMPLETE, EXPIRE = "INIT", "ADD", "COMMIT", "ABORT", "FENCE", "COMPLETE", "EXPIRE"

S = TxnState
TRANSITIONS: dict[tuple[TxnState, str], TxnState] = {
    (S.EMPTY, INIT): S.EMPTY, (S.EMPTY, ADD): S.ONGOING, (S.EMPTY, ABORT): S.PREPARE_ABORT,
    (S.EMPTY, EXPIRE): S.DEAD,
    (S.ONGOING, ADD): S.ONGOING, (S.ONGOING, COMMIT): S.PREPARE_COMMIT, (S.ONGOING, ABORT): S.PREPARE_ABORT,
    (S.ONGOING, FENCE): S.PREPARE_EPOCH_FENCE,
    (S.PREPARE_COMMIT, COMPLETE): S.COMPLETE_COMMIT,
    (S.PREPARE_ABORT, COMPLETE): S.COMPLETE_ABORT,
    (S.COMPLETE_COMMIT, INIT): S.EMPTY, (S.COMPLETE_COMMIT, ADD): S.ONGOING,
    (S.COMPLETE_COMMIT, ABORT): S.PREPARE_ABORT, (S.COMPLETE_COMMIT, EXPIRE): S.DEAD,
    (S.COMPLETE_ABORT, INIT): S.EMPTY, (S.COMPLETE_ABORT, ADD): S.ONGOING,
    (S.COMPLETE_ABORT, ABORT): S.PREPARE_ABORT, (S.COMPLETE_ABORT, EXPIRE): S.DEAD,
    (S.PREPARE_EPOCH_FENCE, ABORT): S.PREPARE_ABORT,
}
del S


class IllegalStateError(RuntimeError):
    """An event the transition table does not allow from the current state."""

    def __init__(self, current: TxnState, event: str, transactional_id: str = ""):
        super().__init__(f"transaction state machine of {transactional_id!r}: event {event} is illegal "
                         f"in state {current.kafka_name}")
        self.current = current
        self.event = event


def transition(current: TxnState, event: str, transactional_id: str = "") -> TxnState:
    """The next state; raises IllegalStateError(current, event) for a dash in the table."""
    nxt = TRANSITIONS.get((current, event))
    if nxt is None:
        raise IllegalStateError(current, event, transactional_id)
    return nxt


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's isEpochExhausted: an epoch of Short.MaxValue - 1 cannot be bumped for a new session."""
    return epoch >= SHORT_MAX - 1


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id (the fields of TransactionLogValue, plus the last epoch in memory)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH    # not persisted (Kafka reloads it as -1)
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set = field(default_factory=set)    # {(topic, partition)}
    start_ms: int = -1
    last_update_ms: int = -1
    next_producer_id: int = NO_PRODUCER_ID          # TV2: the id an exhausted epoch moves to
    client_transaction_version: int = 0             # of the request behind the last change

    def copy(self, **changes) -> "TxnMetadata":
        # spelled out: dataclasses.replace costs ~3 us a call, and every request makes one or two
        new = TxnMetadata(self.transactional_id, self.producer_id, self.producer_epoch,
                          self.last_producer_epoch, self.previous_producer_id, self.timeout_ms,
                          self.state, self.partitions, self.start_ms, self.last_update_ms,
                          self.next_producer_id, self.client_transaction_version)
        for name, value in changes.items():
            setattr(new, name, value)
        if "partitions" not in changes:
            new.partitions = set(self.partitions)
        return new

    def _to(self, event: str, **changes) -> "TxnMetadata":
        # Kafka's prepareTransitionTo: the previous producer id is the one before this transition
        return self.copy(state=transition(self.state, event, self.transactional_id),
                         previous_producer_id=self.producer_id, **changes)

    # ---- the transitions (each returns the new metadata; nothing changes in place) --------------
    def prepare_init(self, timeout_ms: int, now_ms: int, producer_id: int, epoch: int,
                     last_epoch: int) -> "TxnMetadata":
        """InitProducerId: Empty with a bumped epoch (or a new producer id at epoch 0)."""
        return self._to(INIT, producer_id=producer_id, producer_epoch=epoch, last_producer_epoch=last_epoch,
                        timeout_ms=timeout_ms, partitions=set(), start_ms=-1, last_update_ms=now_ms)

    def prepare_add(self, partitions, now_ms: int, client_tv: int = 0) -> "TxnMetadata":
        start = now_ms if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                         TxnState.COMPLETE_ABORT) else self.start_ms
        return self._to(ADD, partitions=self.partitions | set(partitions), start_ms=start, last_update_ms=now_ms,
                        client_transaction_version=client_tv)

    def prepare_end(self, commit: bool, now_ms: int, client_tv: int = 0,
                    next_producer_id: int = NO_PRODUCER_ID) -> "TxnMetadata":
        """PrepareCommit / PrepareAbort (Kafka's prepareAbortOrCommit). Transaction version 2
        bumps the epoch (never past 32767: an abort at the top, after a fence there, keeps it);
        an abort with nothing added (from Empty / Complete*) starts its transaction now."""
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if client_tv >= 2:
            epoch, last = min(epoch + 1, SHORT_MAX), epoch
        nothing_added = self.state not in (TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE)
        return self._to(COMMIT if commit else ABORT, producer_epoch=epoch, last_producer_epoch=last,
                        start_ms=now_ms if nothing_added else self.start_ms, last_update_ms=now_ms,
                        next_producer_id=next_producer_id, client_transaction_version=client_tv)

    def prepare_fence(self) -> "TxnMetadata":
        """Ongoing -> PrepareEpochFence with the epoch bumped (in memory only: the abort that
        follows writes PrepareAbort at this epoch, or one more with transaction version 2)."""
        if self.producer_epoch >= SHORT_MAX:
            raise IllegalStateError(self.state, FENCE, self.transactional_id)
        return self._to(FENCE, producer_epoch=self.producer_epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_complete(self, now_ms: int) -> "TxnMetadata":
        """Complete*: with transaction version 2 and an exhausted epoch, the next producer id at
        epoch 0 (`last_producer_epoch` stays the last epoch the client saw, 32766)."""
        changes = {}
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            changes = {"producer_id": self.next_producer_id, "producer_epoch": 0}
        return self._to(COMPLETE, partitions=set(), last_update_ms=now_ms, next_producer_id=NO_PRODUCER_ID,
                        **changes)

    def prepare_dead(self) -> "TxnMetadata":
        return self._to(EXPIRE, partitions=set())

    # ---- views ------------------------------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """A transaction whose markers are still being written (clients get CONCURRENT_TRANSACTIONS)."""
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    def partitions_by_topic(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            out.setdefault(topic, []).append(partition)
        return out
