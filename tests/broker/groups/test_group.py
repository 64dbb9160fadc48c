"""The classic group state machine and membership rules (pure: no timers, no storage)."""
import pytest

from kompakt.broker.groups.group import (TRANSITIONS, ClassicGroup, GroupEvent, GroupState,
                                         IllegalStateError, transition)
from kompakt.broker.groups.member import ClassicMember, client_host
from kompakt.protocol import errors
from kompakt.protocol.consumer_protocol import encode_consumer_subscription

S, E = GroupState, GroupEvent


class Done:
    """A parked JoinGroup/SyncGroup answer: something with done()/set_result()."""

    def __init__(self):
        self.result = None

    def done(self):
        return self.result is not None

    def set_result(self, r):
        self.result = r


def member(mid, protocols=(("range", b"r"),), instance=None, awaiting=False, rebalance=1000):
    return ClassicMember(mid, instance, "client", "/127.0.0.1", rebalance, 500, "consumer",
                         list(protocols), join_future=Done() if awaiting else None)


@pytest.mark.parametrize("current,event,expected", [
    (S.EMPTY, E.PREPARE_REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, E.PREPARE_REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, E.PREPARE_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, E.ALL_MEMBERS_LEFT, S.EMPTY),
    (S.COMPLETING_REBALANCE, E.SYNC_COMPLETE, S.STABLE),
    (S.STABLE, E.DELETE, S.DEAD),
    (S.DEAD, E.DELETE, S.DEAD),
])
def test_allowed_transitions(current, event, expected):
    assert transition(current, event) is expected


def test_every_other_pair_is_illegal_and_names_state_and_event():
    illegal = [(s, e) for s in S for e in E if (s, e) not in TRANSITIONS]
    assert len(illegal) == len(S) * len(E) - len(TRANSITIONS) > 0
    for s, e in illegal:
        with pytest.raises(IllegalStateError) as info:
            transition(s, e, "g")
        assert info.value.current is s and info.value.event is e
        assert s.value in str(info.value) and e.value in str(info.value)


def test_docstring_table_matches_transitions():
    import kompakt.broker.groups.group as mod
    rows = [line for line in mod.__doc__.splitlines() if line.strip().startswith("| ") and "current" not in line]
    events = [e for e in E]
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        state = GroupState(cells[0])
        for event, cell in zip(events, cells[1:]):
            expected = TRANSITIONS.get((state, event))
            assert cell == (expected.value if expected else "-"), (state, event)


def test_fire_records_previous_state_and_timestamp():
    g = ClassicGroup("g", now_ms=5)
    g.fire(E.PREPARE_REBALANCE, 7)
    assert (g.previous_state, g.state, g.state_timestamp_ms) == (S.EMPTY, S.PREPARING_REBALANCE, 7)
    with pytest.raises(IllegalStateError):
        g.fire(E.SYNC_COMPLETE, 8)
    assert g.state is S.PREPARING_REBALANCE   # a refused event changes nothing


def test_protocol_selection_by_vote_among_common_protocols():
    g = ClassicGroup("g", 0)
    g.add(member("a", [("range", b""), ("roundrobin", b""), ("sticky", b"")]))
    g.add(member("b", [("roundrobin", b""), ("range", b"")]))
    g.add(member("c", [("roundrobin", b""), ("range", b"")]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"   # 2 votes against 1


def test_protocol_tie_goes_to_first_members_preference():
    g = ClassicGroup("g", 0)
    g.add(member("a", [("range", b""), ("roundrobin", b"")]))
    g.add(member("b", [("roundrobin", b""), ("range", b"")]))
    assert g.select_protocol() == "range"


def test_supports_protocols():
    g = ClassicGroup("g", 0)
    assert not g.supports_protocols("", [("range", b"")])     # Empty: needs a protocol type
    assert not g.supports_protocols("consumer", [])           # ... and protocols
    assert g.supports_protocols("consumer", [("range", b"")])
    g.add(member("a", [("range", b"")]))
    g.fire(E.PREPARE_REBALANCE, 0)
    assert g.supports_protocols("consumer", [("x", b""), ("range", b"")])
    assert not g.supports_protocols("consumer", [("x", b"")])
    assert not g.supports_protocols("connect", [("range", b"")])


def test_leader_moves_when_leader_leaves_and_static_mapping_follows():
    g = ClassicGroup("g", 0)
    g.add(member("a"))
    g.add(member("b", instance="i-b"))
    assert g.leader_id == "a" and g.protocol_type == "consumer"
    g.remove("a")
    assert g.leader_id == "b"
    g.replace_static_member("i-b", "b", "b2")
    assert g.leader_id == "b2" and g.static_member_id("i-b") == "b2" and g.has_member("b2")
    g.remove("b2")
    assert g.leader_id is None and g.static_members == {}


def test_validate_member_errors():
    g = ClassicGroup("g", 0)
    g.add(member("a", instance="i1"))
    g.validate_member("a", "i1")
    g.validate_member("a", None)
    with pytest.raises(errors.FencedInstanceIdError):
        g.validate_member("old", "i1")
    with pytest.raises(errors.UnknownMemberIdError):
        g.validate_member("a", "i2")
    with pytest.raises(errors.UnknownMemberIdError):
        g.validate_member("zzz", None)


def test_join_bookkeeping_and_new_leader_election():
    g = ClassicGroup("g", 0)
    g.add(member("a"))
    g.add(member("b", awaiting=True))
    assert not g.has_all_members_joined()
    assert [m.member_id for m in g.not_yet_rejoined_members()] == ["a"]
    g.pending_members.add("p")
    g.members["a"].join_future = Done()
    assert not g.has_all_members_joined()     # a pending member keeps the phase open
    g.pending_members.clear()
    assert g.has_all_members_joined()
    g.members["a"].join_future = None          # leader a did not rejoin: b takes over
    assert g.maybe_elect_new_joined_leader() and g.leader_id == "b"


def test_init_next_generation_with_and_without_members():
    sub = encode_consumer_subscription(["t1", "t2"])
    g = ClassicGroup("g", 0)
    g.add(member("a", [("range", sub)], awaiting=True))
    g.fire(E.PREPARE_REBALANCE, 1)
    g.init_next_generation(2)
    assert (g.state, g.generation_id, g.protocol_name) == (S.COMPLETING_REBALANCE, 1, "range")
    assert g.subscribed_topics == {"t1", "t2"}
    assert g.current_member_metadata() == [("a", None, sub)]
    g.fire(E.PREPARE_REBALANCE, 3)
    g.remove("a")
    g.init_next_generation(4)
    # an Empty consumer-protocol group subscribes to nothing (Kafka's computeSubscribedTopics)
    assert (g.state, g.generation_id, g.protocol_name, g.subscribed_topics) == (S.EMPTY, 2, None, set())


def test_metadata_record_fields_of_empty_and_stable_group():
    g = ClassicGroup("g", 0)
    g.add(member("a"))
    g.fire(E.PREPARE_REBALANCE, 1)
    g.init_next_generation(2)
    fields = g.metadata_record_fields({"a": b"asg"})
    assert fields["leader"] == "a" and fields["members"][0]["assignment"] == b"asg"
    assert fields["members"][0]["subscription"] == b"r" and fields["current_state_timestamp"] == 2
    e = ClassicGroup("e", 9)
    assert e.metadata_record_fields({}) == {"protocol_type": "", "generation": 0, "protocol": None,
                                            "leader": None, "members": [], "current_state_timestamp": 9}


def test_member_matches_vote_and_heartbeat_rule():
    m = member("a", [("range", b"x"), ("rr", b"y")])
    assert m.matches([("range", b"x"), ("rr", b"y")])
    assert not m.matches([("rr", b"y"), ("range", b"x")])
    assert m.vote({"rr"}) == "rr"
    assert not m.has_satisfied_heartbeat()
    m.join_future = Done()
    assert m.has_satisfied_heartbeat()          # parked in JoinGroup: kept alive
    m.is_new = True
    assert not m.has_satisfied_heartbeat()      # ... unless it never completed a join


@pytest.mark.parametrize("peer,host", [("127.0.0.1:5555", "/127.0.0.1"), ("[::1]:80", "/::1"), ("", "")])
def test_client_host(peer, host):
    assert client_host(peer) == host
