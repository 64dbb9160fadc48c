"""The per-partition cleaning state machine (Kafka's LogCleaningState, held as data).

Role: say, for one partition, whether the cleaner may work on it, is working on it, has been asked
to stop, or is paused by someone else (retention, truncation, DeleteRecords, partition deletion,
config changes, a pipeline adopt). The LogCleanerManager keeps one of these per partition under its
lock and applies events with `transition()`; nothing else mutates a state.

States (None means "absent from the manager's map"):

    NONE          not being cleaned; the cleaner may grab it
    IN_PROGRESS   a worker is cleaning it
    ABORTED(n)    a worker is cleaning it and n callers asked it to stop; when the worker unwinds
                  the partition becomes PAUSED(n)   (Kafka has only one pending abort; we count them
                  so two concurrent pausers, e.g. retention and topic deletion, never raise)
    PAUSED(n)     n reentrant pauses outstanding; n matching resumes return it to NONE

Transition table (event -> next state; "-" raises IllegalStateError(current, event)):

    state \\ event | GRAB          | DONE        | PAUSE            | RESUME
    --------------+---------------+-------------+------------------+------------------------------
    NONE          | IN_PROGRESS   | -           | PAUSED(1)        | -
    IN_PROGRESS   | -             | NONE        | ABORTED(1)       | -
    ABORTED(n)    | -             | PAUSED(n)   | ABORTED(n+1)     | -
    PAUSED(n)     | -             | -           | PAUSED(n+1)      | NONE if n == 1 else PAUSED(n-1)

GRAB is the selection of the filthiest log; DONE ends a clean (Kafka's doneCleaning and
doneDeleting, both legal from IN_PROGRESS and ABORTED); PAUSE is abort_and_pause_cleaning (the
caller then waits until the state is PAUSED, i.e. until the worker has stopped) and also the
pause of non-compacted logs for retention; RESUME is resume_cleaning.

Invariant: a partition in IN_PROGRESS or ABORTED has exactly one worker job; a partition in
PAUSED(n) has none and n > 0.
"""
from __future__ import annotations

from dataclasses import dataclass


class IllegalStateError(RuntimeError):
    """An event that the transition table does not allow from the current state."""

    def __init__(self, current: "CleaningState", event: str, tp=None):
        where = f" for partition {tp[0]}-{tp[1]}" if tp is not None else ""
        super().__init__(f"cleaning state machine{where}: event {event} is illegal in state {current}")
        self.current = current
        self.event = event


@dataclass(frozen=True, slots=True)
class CleaningState:
    kind: str        # "None", "InProgress", "Aborted", "Paused"
    count: int = 0   # pauses outstanding (Paused) or pending (Aborted)

    def __str__(self) -> str:
        return f"{self.kind}({self.count})" if self.kind in ("Aborted", "Paused") else self.kind


NONE = CleaningState("None")
IN_PROGRESS = CleaningState("InProgress")

GRAB = "GRAB"
DONE = "DONE"
PAUSE = "PAUSE"
RESUME = "RESUME"
EVENTS = (GRAB, DONE, PAUSE, RESUME)


def aborted(n: int) -> CleaningState:
    return CleaningState("Aborted", n)


def paused(n: int) -> CleaningState:
    return CleaningState("Paused", n)


def transition(current: CleaningState, event: str, tp=None) -> CleaningState:
    """The next state; raises IllegalStateError(current, event) for a dash in the table."""
    kind, n = current.kind, current.count
    if event == GRAB:
        if kind == "None":
            return IN_PROGRESS
    elif event == DONE:
        if kind == "InProgress":
            return NONE
        if kind == "Aborted":
            return paused(n)
    elif event == PAUSE:
        if kind == "None":
            return paused(1)
        if kind == "InProgress":
            return aborted(1)
        if kind == "Aborted":
            return aborted(n + 1)
        if kind == "Paused":
            return paused(n + 1)
    elif event == RESUME:
        if kind == "Paused":
            return NONE if n == 1 else paused(n - 1)
    else:
        raise ValueError(f"unknown cleaning event {event!r}")
    raise IllegalStateError(current, event, tp)
