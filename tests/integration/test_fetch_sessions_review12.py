"""Second read of Fetch's incremental sessions (KIP-227) and topic ids against Kafka 4's semantics
(FetchManager.newContext, FetchContext, ReplicaManager.readFromLocalLog): each test is a behaviour
a Kafka client would see differently, found by the review and fixed (raw requests over TCP to one
module broker).
"""
from __future__ import annotations

import time

import pytest

from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.records import build_batch
from wire_support import Wire, error_codes, req, sub

FT = sub(1, "FetchTopic")
FP = sub(1, "FetchTopic", "FetchPartition")


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    yield w
    w.close()


def create_topic(wire, name: str, partitions: int = 1) -> None:
    deadline = time.monotonic() + 30
    while True:     # a recreate may race the deletion still under way
        answer = wire.call(req(19, topics=[sub(19, "CreatableTopic")(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False), 5)
        codes = set(error_codes(answer))
        if codes == {0}:
            return
        assert codes == {EC.TOPIC_ALREADY_EXISTS} and time.monotonic() < deadline, answer
        time.sleep(0.1)


def delete_topic(wire, name: str) -> None:
    answer = wire.call(req(20, topic_names=[name], timeout_ms=10000), 4)
    assert set(error_codes(answer)) == {0}, answer


def topic_id(wire, name: str):
    M = sub(3, "MetadataRequestTopic")
    meta = wire.call(req(3, topics=[M(name=name, topic_id=None)], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False), 12)
    assert meta.topics[0].error_code == 0, meta
    return meta.topics[0].topic_id


def produce(wire, name: str, partition: int, n: int = 1) -> None:
    P = sub(0, "TopicProduceData", "PartitionProduceData")
    records = build_batch([(b"k", b"v") for _ in range(n)], base_timestamp=int(time.time() * 1000))
    answer = wire.call(req(0, transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        sub(0, "TopicProduceData")(name=name, partition_data=[P(index=partition, records=bytes(records))])]), 9)
    assert set(error_codes(answer)) == {0}, answer


def fetch(wire, version: int, parts, *, session_id=0, epoch=-1, forget=(), max_wait_ms=0, min_bytes=0):
    """parts: [(topic name, topic id, partition, offset)] -> (response, {(name or id, p): data})."""
    topics: dict = {}
    for name, tid, p, offset in parts:
        topics.setdefault((name, tid), []).append(FP(
            partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20))
    forgotten = [sub(1, "ForgottenTopic")(topic=name, topic_id=tid, partitions=ps) for name, tid, ps in forget]
    request = req(1, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                  isolation_level=0, session_id=session_id, session_epoch=epoch,
                  topics=[FT(topic=name, topic_id=tid, partitions=ps) for (name, tid), ps in topics.items()],
                  forgotten_topics_data=forgotten, rack_id="")
    answer = wire.call(request, version)
    out = {}
    for t in answer.responses:
        for p in t.partitions:
            out[(t.topic if version < 13 else t.topic_id, p.partition_index)] = p
    return answer, out


def test_a_session_over_a_recreated_topic_answers_inconsistent_topic_id(wire):
    """Kafka's ReplicaManager.readFromLocalLog checks the topic id the session holds against the
    partition's: a topic deleted and recreated under the same name is INCONSISTENT_TOPIC_ID for a
    v13+ session opened on the old id. The session kept the old name and served the NEW topic's
    records under the old topic id (the consumer read records of another topic as its own)."""
    create_topic(wire, "r12-recreated")
    old_id = topic_id(wire, "r12-recreated")
    produce(wire, "r12-recreated", 0)
    answer, out = fetch(wire, 13, [(None, old_id, 0, 1)], epoch=0)
    sid = answer.session_id
    assert sid != 0 and out[(old_id, 0)].error_code == 0 and not out[(old_id, 0)].records

    delete_topic(wire, "r12-recreated")
    create_topic(wire, "r12-recreated")
    assert topic_id(wire, "r12-recreated") != old_id
    produce(wire, "r12-recreated", 0, n=3)

    answer, out = fetch(wire, 13, [], session_id=sid, epoch=1)
    assert answer.error_code == 0
    assert [(k, p.error_code, bool(p.records)) for k, p in out.items()] == [
        ((old_id, 0), EC.INCONSISTENT_TOPIC_ID, False)]
    # a full fetch by the old id: the id is simply unknown now
    _, out = fetch(wire, 13, [(None, old_id, 0, 1)])
    assert out[(old_id, 0)].error_code == EC.UNKNOWN_TOPIC_ID


def test_a_session_refuses_requests_of_the_other_topic_id_kind(wire):
    """Kafka's FetchManager.newContext: a session opened by names (v7-12) answers an incremental
    v13+ request (by ids) FETCH_SESSION_TOPIC_ID_ERROR, and the reverse; the client then starts
    over with a full fetch. It mixed name-keyed and id-keyed partitions in one session."""
    create_topic(wire, "r12-kinds")
    tid = topic_id(wire, "r12-kinds")
    answer, _ = fetch(wire, 12, [("r12-kinds", None, 0, 0)], epoch=0)
    by_name = answer.session_id
    answer, _ = fetch(wire, 13, [(None, tid, 0, 0)], epoch=0)
    by_id = answer.session_id
    assert 0 not in (by_name, by_id)

    answer, out = fetch(wire, 13, [(None, tid, 0, 0)], session_id=by_name, epoch=1)
    assert (answer.error_code, answer.session_id, out) == (EC.FETCH_SESSION_TOPIC_ID_ERROR, 0, {})
    answer, out = fetch(wire, 12, [("r12-kinds", None, 0, 0)], session_id=by_id, epoch=1)
    assert (answer.error_code, answer.session_id, out) == (EC.FETCH_SESSION_TOPIC_ID_ERROR, 0, {})
    # the error leaves both sessions as they were: the right kind of request still works
    answer, _ = fetch(wire, 12, [], session_id=by_name, epoch=1)
    assert (answer.error_code, answer.session_id) == (0, by_name)
    answer, _ = fetch(wire, 13, [], session_id=by_id, epoch=1)
    assert (answer.error_code, answer.session_id) == (0, by_id)


def test_a_duplicate_of_a_parked_incremental_fetch_is_an_invalid_epoch(module_broker, wire):
    """Kafka's FetchManager.newContext moves the session to its next epoch when the request
    arrives, before any long poll, and IncrementalFetchContext answers INVALID_FETCH_SESSION_EPOCH
    if the epoch moved under it: two requests with one epoch (a retry on another connection while
    the first is parked) are one fetch and one error. Both were served: the second forgot a
    partition under the parked first, which then closed its connection (KeyError)."""
    create_topic(wire, "r12-dup", 2)
    answer, _ = fetch(wire, 12, [("r12-dup", None, 0, 0), ("r12-dup", None, 1, 0)], epoch=0)
    sid = answer.session_id
    parked = Wire(module_broker.port)
    try:
        request = req(1, replica_id=-1, max_wait_ms=3000, min_bytes=1 << 20, max_bytes=1 << 20, isolation_level=0,
                      session_id=sid, session_epoch=1, topics=[], forgotten_topics_data=[], rack_id="")
        request.API_VERSION = 12
        request.with_header(correlation_id=77, client_id="wire-test")
        parked.sock.sendall(bytes(request.encode(header=True, framed=True)))
        time.sleep(0.5)     # parked: nothing to read, min_bytes far away
        answer, out = fetch(wire, 12, [], session_id=sid, epoch=1, forget=[("r12-dup", None, [1])])
        assert (answer.error_code, answer.session_id, out) == (EC.INVALID_FETCH_SESSION_EPOCH, 0, {})
        produce(wire, "r12-dup", 1)
        first = parked._read(4, "Fetch", 12)
        body = parked._read(int.from_bytes(first, "big"), "Fetch", 12)
        from kompakt.protocol import codec
        _, parked_answer, _ = codec.decode_response(1, 12, body)
        assert parked_answer.error_code == 0 and parked_answer.session_id == sid
        assert [(t.topic, [p.partition_index for p in t.partitions]) for t in parked_answer.responses] == [
            ("r12-dup", [1])]
    finally:
        parked.close()
    # the session moved on: epoch 2 is next
    answer, _ = fetch(wire, 12, [], session_id=sid, epoch=2)
    assert (answer.error_code, answer.session_id) == (0, sid)


def test_an_unknown_partition_does_not_cut_the_long_poll_of_the_others(module_broker, wire):
    """Kafka's KafkaApis.handleFetchRequest answers unknown topics/partitions (and unauthorized
    ones) itself and long-polls the others (ReplicaManager.fetchMessages); only errors from reading
    a log answer at once. A consumer still assigned a deleted topic's partition kept getting
    immediate empty answers for its live partitions: no long poll, a fetch loop spinning at once
    instead of waiting max_wait_ms for records."""
    create_topic(wire, "r12-poll")
    parked = Wire(module_broker.port)
    try:
        request = req(1, replica_id=-1, max_wait_ms=20000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                      session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                          FT(topic="r12-poll", partitions=[FP(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                               last_fetched_epoch=-1, log_start_offset=-1,
                                                               partition_max_bytes=1 << 20) for p in (0, 7)]),
                          FT(topic="r12-no-such-topic", partitions=[FP(
                              partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=1 << 20)])])
        request.API_VERSION = 12
        request.with_header(correlation_id=78, client_id="wire-test")
        parked.sock.sendall(bytes(request.encode(header=True, framed=True)))
        time.sleep(0.5)     # let it park (were it answered already, the record below is missing)
        produce(wire, "r12-poll", 0)
        from kompakt.protocol import codec
        head = parked._read(4, "Fetch", 12)
        _, answer, _ = codec.decode_response(1, 12, parked._read(int.from_bytes(head, "big"), "Fetch", 12))
    finally:
        parked.close()
    got = {(t.topic, p.partition_index): (p.error_code, bool(p.records)) for t in answer.responses for p in t.partitions}
    assert got == {("r12-poll", 0): (0, True), ("r12-poll", 7): (EC.UNKNOWN_TOPIC_OR_PARTITION, False),
                   ("r12-no-such-topic", 0): (EC.UNKNOWN_TOPIC_OR_PARTITION, False)}
    # nothing to wait for but unknown partitions: answered at once
    _, out = fetch(wire, 12, [("r12-no-such-topic", None, 0, 0)], max_wait_ms=20000, min_bytes=1)
    assert out[("r12-no-such-topic", 0)].error_code == EC.UNKNOWN_TOPIC_OR_PARTITION


def test_forgetting_every_partition_closes_the_session(wire):
    """Kafka's FetchManager.newContext: an incremental request that leaves its session without a
    partition removes the session and is answered sessionless (session id 0), freeing its slot of
    max.incremental.fetch.session.cache.slots; the client's next fetch is a full one. The empty
    session was kept (answered with its id) until evicted."""
    create_topic(wire, "r12-empty", 2)
    answer, _ = fetch(wire, 12, [("r12-empty", None, 0, 0), ("r12-empty", None, 1, 0)], epoch=0)
    sid = answer.session_id
    answer, _ = fetch(wire, 12, [], session_id=sid, epoch=1, forget=[("r12-empty", None, [0])])
    assert (answer.error_code, answer.session_id) == (0, sid)           # one partition left
    answer, out = fetch(wire, 12, [], session_id=sid, epoch=2, forget=[("r12-empty", None, [1])])
    assert (answer.error_code, answer.session_id, out) == (0, 0, {})
    answer, _ = fetch(wire, 12, [], session_id=sid, epoch=3)
    assert answer.error_code == EC.FETCH_SESSION_ID_NOT_FOUND
