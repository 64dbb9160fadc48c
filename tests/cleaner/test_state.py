"""The cleaning state machine: every cell of the transition table in kompakt/cleaner/state.py."""
import pytest

from kompakt.cleaner.state import (DONE, GRAB, IN_PROGRESS, NONE, PAUSE, RESUME, IllegalStateError,
                                   aborted, paused, transition)

TABLE = {
    (NONE, GRAB): IN_PROGRESS, (NONE, DONE): None, (NONE, PAUSE): paused(1), (NONE, RESUME): None,
    (IN_PROGRESS, GRAB): None, (IN_PROGRESS, DONE): NONE, (IN_PROGRESS, PAUSE): aborted(1),
    (IN_PROGRESS, RESUME): None,
    (aborted(2), GRAB): None, (aborted(2), DONE): paused(2), (aborted(2), PAUSE): aborted(3),
    (aborted(2), RESUME): None,
    (paused(1), GRAB): None, (paused(1), DONE): None, (paused(1), PAUSE): paused(2),
    (paused(1), RESUME): NONE, (paused(3), RESUME): paused(2),
}


@pytest.mark.parametrize("state,event", list(TABLE))
def test_table(state, event):
    expected = TABLE[(state, event)]
    if expected is None:
        with pytest.raises(IllegalStateError) as info:
            transition(state, event, ("t", 0))
        assert info.value.current == state and info.value.event == event
        assert "t-0" in str(info.value)
    else:
        assert transition(state, event) == expected


def test_reentrant_pauses_need_matching_resumes():
    s = NONE
    for _ in range(3):
        s = transition(s, PAUSE)
    assert s == paused(3)
    for _ in range(2):
        s = transition(s, RESUME)
    assert s == paused(1)
    assert transition(s, RESUME) == NONE


def test_abort_during_clean_then_unwind_gives_paused():
    s = transition(NONE, GRAB)
    s = transition(s, PAUSE)
    s = transition(s, PAUSE)
    assert str(s) == "Aborted(2)"
    s = transition(s, DONE)
    assert s == paused(2)


def test_unknown_event():
    with pytest.raises(ValueError):
        transition(NONE, "BOGUS")
