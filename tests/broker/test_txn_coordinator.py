"""The transaction coordinator through its handlers (a real Broker and LogManager, no sockets):
InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn / TxnOffsetCommit / Produce
verification / Describe* / ListTransactions, every error path with Kafka's code, fencing, KIP-360,
timeouts and id expiry driven by a test clock, and the `__transaction_state` records."""
from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin.transactions import (DescribeProducersRequest, DescribeTransactionsRequest,
                                               ListTransactionsRequest)
from kafka.protocol.admin.groups import DeleteGroupsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import OffsetDeleteRequest, OffsetFetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest,
                                                 EndTxnRequest, InitProducerIdRequest, TxnOffsetCommitRequest)

from admin_harness import Harness

from kompakt.broker.txn.state import TxnState
from kompakt.protocol import records as R
from kompakt.protocol import txn_records as T
from kompakt.storage import TopicPartition

E_NONE, E_INVALID_REQUEST, E_INVALID_TXN_STATE, E_ID_MAPPING, E_TIMEOUT, E_CONCURRENT = 0, 42, 48, 49, 50, 51
E_FENCED, E_EPOCH, E_UNKNOWN_TP, E_NOT_ATTEMPTED, E_ABORTABLE, E_UNSTABLE = 90, 47, 3, 55, 120, 88
TD = ProduceRequest.TopicProduceData
PD = TD.PartitionProduceData
APT = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self):
        return self.now


@pytest.fixture
async def h(tmp_path, request):
    harness = Harness(tmp_path, **{"transaction.state.log.num.partitions": "3",
                                   "offsets.topic.num.partitions": "1", "transaction.max.timeout.ms": "60000",
                                   **getattr(request, "param", {})})
    clock = Clock()
    broker = harness.broker
    broker.txn.time_ms = broker.txn.topic.time_ms = clock
    await broker.groups.start()
    await broker.txn.start()
    harness.clock = clock
    harness.create("a", 2)
    harness.create("b", 1)
    yield harness
    await broker.txn.stop()
    await broker.groups.stop()
    harness.close()


async def init(h, tid="tx", timeout=30000, version=4, pid=-1, epoch=-1):
    r = await h.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout,
                                           producer_id=pid, producer_epoch=epoch), version)
    return r.error_code, r.producer_id, r.producer_epoch


async def add(h, pid, epoch, parts, tid="tx", version=3):
    topics = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    r = await h.call(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                               v3_and_below_producer_epoch=epoch,
                                               v3_and_below_topics=[APT(name=t, partitions=ps)
                                                                    for t, ps in topics.items()]), version)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


async def end(h, pid, epoch, commit, tid="tx", version=3):
    r = await h.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=commit), version)
    return r.error_code


async def produce(h, pid, epoch, seq, topic="a", partition=0, tid="tx", version=9, value=b"v"):
    records = R.build_batch([(b"k", value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                            is_transactional=True)
    r = await h.call(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=1000,
                                    topic_data=[TD(name=topic, partition_data=[PD(index=partition, records=records)])]),
                     version)
    return r.responses[0].partition_responses[0].error_code


def log_of(h, topic, partition=0):
    return h.lm.get_log(TopicPartition(topic, partition))


async def completed(h):
    """Wait for the transactions being completed in the background (with durable acks the markers
    follow the Prepare record's sync, coordinator._complete), then for their syncs."""
    await asyncio.gather(*list(h.broker.txn.completing.values()))
    for topic in ("a", "b"):
        await synced(h, topic)


async def synced(h, topic, partition=0):
    """Wait for the group commit to sync what background work appended (the LSO follows the
    high watermark, the durable offset); requests wait for it themselves."""
    lg = log_of(h, topic, partition)
    await h.lm.wait_durable(lg, lg.log_end_offset)


def markers(h, topic, partition=0):
    lg = log_of(h, topic, partition)
    data = lg.read(lg.log_start_offset, 1 << 20).records
    return [(hd.producer_id, hd.producer_epoch, T.decode_marker(data, pos, hd)[0])
            for pos, hd in R.iter_batches(data) if hd.is_control]


async def test_commit_and_abort_write_markers_and_move_the_lso(h):
    code, pid, epoch = await init(h)
    assert (code, epoch) == (E_NONE, 0)
    assert await add(h, pid, epoch, [("a", 0), ("b", 0)]) == {("a", 0): 0, ("b", 0): 0}
    assert await produce(h, pid, epoch, 0) == E_NONE
    assert await produce(h, pid, epoch, 0, topic="b") == E_NONE
    assert log_of(h, "a").last_stable_offset == 0 and log_of(h, "a").high_watermark == 1
    assert (await h.call(DescribeTransactionsRequest(transactional_ids=["tx"]), 0)).transaction_states[0] \
        .transaction_state == "Ongoing"
    assert await end(h, pid, epoch, True) == E_NONE
    assert markers(h, "a") == [(pid, 0, T.COMMIT)] and markers(h, "b") == [(pid, 0, T.COMMIT)]
    assert log_of(h, "a").last_stable_offset == 2
    assert await end(h, pid, epoch, True) == E_NONE                 # a retry of a finished commit
    assert await end(h, pid, epoch, False) == E_INVALID_TXN_STATE  # the opposite: refused
    assert await add(h, pid, epoch, [("a", 1)]) == {("a", 1): 0}
    assert await produce(h, pid, epoch, 0, partition=1) == E_NONE
    assert await end(h, pid, epoch, False) == E_NONE
    assert markers(h, "a", 1) == [(pid, 0, T.ABORT)]
    assert log_of(h, "a", 1).aborted_transactions(0, 2)[0].first_offset == 0
    meta = h.broker.txn.txns["tx"]
    assert meta.state.kafka_name == "CompleteAbort" and not meta.partitions


async def fetch_a0(h, isolation, offset=0):
    """Fetch v11 of a-0 from `offset`: (offsets of the data batches returned, LSO, aborted list)."""
    FT, FP = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
    r = await h.call(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                  isolation_level=isolation, session_id=0, session_epoch=-1, rack_id="",
                                  topics=[FT(topic="a", partitions=[FP(partition=0, fetch_offset=offset,
                                                                     partition_max_bytes=1 << 20,
                                                                     current_leader_epoch=-1, log_start_offset=-1)])],
                                  forgotten_topics_data=[]), 11)
    p = r.responses[0].partitions[0]
    data = bytes(p.records or b"")
    got = [hd.base_offset for _, hd in R.iter_batches(data) if not hd.is_control]
    aborted = None if p.aborted_transactions is None else [(t.producer_id, t.first_offset)
                                                           for t in p.aborted_transactions]
    return got, p.last_stable_offset, aborted


async def test_read_committed_fetch_stops_at_the_lso_and_lists_aborted_transactions(h):
    _, pid, epoch = await init(h)
    _, pid2, epoch2 = await init(h, tid="tx2")
    await add(h, pid, epoch, [("a", 0)])
    await add(h, pid2, epoch2, [("a", 0)], tid="tx2")
    assert await produce(h, pid, epoch, 0) == E_NONE                # offset 0: tx, open
    assert await produce(h, pid2, epoch2, 0, tid="tx2") == E_NONE   # offset 1: tx2, open
    assert await fetch_a0(h, 1) == ([], 0, [])                      # nothing past the LSO
    assert await fetch_a0(h, 0) == ([0, 1], 0, None)                # read_uncommitted: everything
    assert await end(h, pid2, epoch2, False, tid="tx2") == E_NONE   # ABORT at 2; tx still open
    assert await fetch_a0(h, 1) == ([], 0, [])
    assert await end(h, pid, epoch, True) == E_NONE                 # COMMIT at 3
    assert await fetch_a0(h, 1) == ([0, 1], 4, [(pid2, 1)])         # the consumer drops tx2's batch
    assert await fetch_a0(h, 1, offset=2) == ([], 4, [(pid2, 1)])  # its ABORT marker still overlaps
    assert await fetch_a0(h, 1, offset=4) == ([], 4, [])            # at the end: nothing to list


async def test_state_is_written_in_kafkas_records_and_reloaded(h):
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0)])
    topic = h.broker.txn.topic
    lg = log_of(h, T.TRANSACTION_STATE_TOPIC, topic.partition_for("tx"))
    data = lg.read(0, 1 << 20).records
    values = []
    for pos, hd in R.iter_batches(data):
        for rec in R.decode_records(data, pos, hd):
            assert T.decode_key(rec.key)["transactional_id"] == "tx"
            values.append(T.decode_value(rec.value))
    assert [(v["state"], v["partitions"]) for v in values] == [(0, {}), (1, {"a": [0]})]
    h.broker.txn.txns.clear()                                      # a restart's reload
    assert topic.replay()["tx"]["partitions"] == {"a": [0]}


async def test_error_codes(h):
    assert await init(h, tid="") == (E_INVALID_REQUEST, -1, -1)
    assert await init(h, timeout=0) == (E_TIMEOUT, -1, -1)
    assert await init(h, timeout=60001) == (E_TIMEOUT, -1, -1)     # above transaction.max.timeout.ms
    _, pid, epoch = await init(h)
    assert await add(h, pid + 1, epoch, [("a", 0)]) == {("a", 0): E_ID_MAPPING}
    assert await add(h, pid, epoch + 1, [("a", 0)]) == {("a", 0): E_FENCED}
    assert await add(h, pid, epoch + 1, [("a", 0)], version=1) == {("a", 0): E_EPOCH}   # before v2
    assert await add(h, pid, epoch, [("a", 0), ("nope", 0), ("a", 9)]) == \
        {("a", 0): E_NOT_ATTEMPTED, ("nope", 0): E_UNKNOWN_TP, ("a", 9): E_UNKNOWN_TP}
    assert await add(h, pid, epoch, [("__consumer_offsets", 0)]) == {("__consumer_offsets", 0): 29}
    assert await add(h, pid, epoch, [("a", 0)], tid="other") == {("a", 0): E_ID_MAPPING}
    assert await end(h, pid, epoch, True) == E_INVALID_TXN_STATE  # nothing to end (Empty)
    assert await end(h, pid, epoch + 3, True) == E_FENCED
    assert await end(h, pid, epoch + 3, True, version=1) == E_EPOCH
    assert await end(h, 12345, epoch, True, tid="ghost") == E_ID_MAPPING
    assert await end(h, pid, epoch, True, tid="") == E_INVALID_REQUEST
    # a transactional write to a partition that was not added (KIP-890 part 1)
    assert await produce(h, pid, epoch, 0) == E_INVALID_TXN_STATE
    assert await produce(h, pid, epoch, 0, version=11) == E_ABORTABLE
    assert await produce(h, pid, epoch, 0, tid=None) == 53         # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert log_of(h, "a").log_end_offset == 0


async def test_one_producer_id_and_epoch_per_produce_request(h):
    """Kafka's ReplicaManager.appendRecords: the transactional batches of one Produce request must
    share one (producer id, epoch), else every partition INVALID_PRODUCER_ID_MAPPING and nothing
    is appended (two epochs of one producer id as well as two producer ids)."""
    _, pid, epoch = await init(h)
    assert await add(h, pid, epoch, [("a", 0), ("a", 1)]) == {("a", 0): 0, ("a", 1): 0}

    def txn_batch(p, e):
        return R.build_batch([(b"k", b"v")], producer_id=p, producer_epoch=e, base_sequence=0, is_transactional=True)
    for other in ((pid, epoch + 1), (pid + 1, epoch)):
        r = await h.call(ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=1000, topic_data=[
            TD(name="a", partition_data=[PD(index=0, records=txn_batch(pid, epoch)),
                                         PD(index=1, records=txn_batch(*other))])]), 9)
        assert [p.error_code for p in r.responses[0].partition_responses] == [E_ID_MAPPING, E_ID_MAPPING], other
    assert log_of(h, "a", 0).log_end_offset == 0 and log_of(h, "a", 1).log_end_offset == 0


async def test_internal_topics_that_cannot_be_created_answer_coordinator_not_available(h):
    # a topic whose name collides with __transaction_state / __consumer_offsets ('.' and '_')
    # makes their creation fail: an error code on the wire, never a closed connection
    h.create("__transaction.state", 1)
    h.create("__consumer.offsets", 1)
    assert await init(h) == (15, -1, -1)                           # COORDINATOR_NOT_AVAILABLE
    r = await h.call(TxnOffsetCommitRequest(
        transactional_id="tx", group_id="grp", producer_id=1, producer_epoch=0, generation_id=-1,
        member_id="", group_instance_id=None, topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
            name="a", partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]), 3)
    assert r.topics[0].partitions[0].error_code == 15


async def test_new_instance_fences_an_open_transaction(h):
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0)])
    assert await produce(h, pid, epoch, 0) == E_NONE
    assert await init(h) == (E_CONCURRENT, -1, -1)                 # aborting the old one first
    await completed(h)
    # at the bumped epoch, bumped once more by the abort itself (transaction.version 2 finalized)
    assert markers(h, "a") == [(pid, 2, T.ABORT)]
    assert log_of(h, "a").last_stable_offset == 2
    code, pid2, epoch2 = await init(h)
    assert (code, pid2, epoch2) == (E_NONE, pid, 3)
    assert await produce(h, pid, epoch, 1) == E_EPOCH             # the zombie's writes
    assert await end(h, pid, epoch, True) == E_FENCED
    assert h.broker.txn.counters["fenced_total"] == 1


async def test_kip360_epoch_bumps_retries_and_exhaustion(h):
    _, pid, epoch = await init(h)
    assert await init(h, pid=pid, epoch=epoch) == (E_NONE, pid, 1)          # bump
    assert await init(h, pid=pid, epoch=epoch) == (E_NONE, pid, 1)          # retry of that bump
    assert await init(h, pid=pid, epoch=7) == (E_FENCED, -1, -1)
    assert await init(h, pid=pid, epoch=7, version=3) == (E_EPOCH, -1, -1)  # before v4
    assert await init(h, pid=pid + 50, epoch=1) == (E_FENCED, -1, -1)
    meta = h.broker.txn.txns["tx"]
    h.broker.txn.txns["tx"] = meta.copy(producer_epoch=32766)                # exhausted
    code, new_pid, new_epoch = await init(h, pid=pid, epoch=32766)
    assert code == E_NONE and new_pid != pid and new_epoch == 0
    assert h.broker.txn.txns["tx"].previous_producer_id == pid


async def test_timeout_aborts_and_expired_ids_are_tombstoned(h):
    _, pid, epoch = await init(h, timeout=10000)
    await add(h, pid, epoch, [("a", 0)])
    await produce(h, pid, epoch, 0)
    h.clock.now += 9000
    assert h.broker.txn.abort_timed_out() == 0
    h.clock.now += 2000
    assert h.broker.txn.abort_timed_out() == 1
    await completed(h)
    assert markers(h, "a") == [(pid, 2, T.ABORT)] and log_of(h, "a").last_stable_offset == 2
    assert await end(h, pid, epoch, True) == E_FENCED               # the timed-out producer learns
    h.clock.now += 7 * 24 * 3600 * 1000
    assert h.broker.txn.expire_transactional_ids() == 1
    assert "tx" not in h.broker.txn.txns
    assert "tx" not in h.broker.txn.topic.replay()                  # a tombstone was written
    r = await h.call(DescribeTransactionsRequest(transactional_ids=["tx", ""]), 0)
    assert [s.error_code for s in r.transaction_states] == [105, E_INVALID_REQUEST]  # TRANSACTIONAL_ID_NOT_FOUND
    # an error row carries the schema's defaults, as Kafka's handleDescribeTransactions leaves them
    assert {(s.transaction_state, s.transaction_timeout_ms, s.transaction_start_time_ms, s.producer_id,
             s.producer_epoch, len(s.topics)) for s in r.transaction_states} == {("", 0, 0, 0, 0, 0)}


async def test_offsets_in_a_transaction(h):
    _, pid, epoch = await init(h)
    group_partition = h.broker.groups.topic.partition_for("grp")

    async def txn_commit(offset, version=3):
        r = await h.call(TxnOffsetCommitRequest(
            transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="a", partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata="m")])]), version)
        return r.topics[0].partitions[0].error_code

    async def fetch(stable):
        r = await h.call(OffsetFetchRequest(group_id="grp", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name="a", partition_indexes=[0])], require_stable=stable), 7)
        p = r.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    assert await txn_commit(5) == E_INVALID_TXN_STATE               # AddOffsetsToTxn first (KIP-890)
    assert await txn_commit(5, version=4) == E_ABORTABLE
    # markers still being written: the coordinator's code passes through (Kafka's mapping keeps it)
    meta = h.broker.txn.txns["tx"]
    h.broker.txn.txns["tx"] = meta.copy(state=TxnState.PREPARE_COMMIT)
    assert await txn_commit(5) == E_CONCURRENT
    h.broker.txn.txns["tx"] = meta.copy(producer_epoch=epoch + 1)     # another instance took over
    assert await txn_commit(5) == E_EPOCH
    h.broker.txn.txns["tx"] = meta
    r = await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                            group_id="grp"), 3)
    assert r.error_code == E_NONE
    assert ("__consumer_offsets", group_partition) in h.broker.txn.txns["tx"].partitions
    assert await txn_commit(5) == E_NONE
    assert await fetch(False) == (0, -1)                            # pending: not visible
    assert await fetch(True) == (E_UNSTABLE, -1)
    assert await end(h, pid, epoch, True) == E_NONE
    assert await fetch(True) == (0, 5)
    # an aborted transaction's offsets are dropped
    await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                        group_id="grp"), 3)
    assert await txn_commit(9) == E_NONE
    assert await end(h, pid, epoch, False) == E_NONE
    assert await fetch(True) == (0, 5)
    # replay of __consumer_offsets rebuilds the same view
    h.broker.groups.offsets.clear()
    h.broker.groups.load()
    assert h.broker.groups.offsets["grp"][("a", 0)].offset == 5


# durable acks off: EndTxn must be answered while the load still runs, which waiting for syncs could outlast
@pytest.mark.parametrize("h", [{"kompakt.durable.acks.enable": "false"}], indirect=True)
async def test_a_commit_marker_waits_for_the_offsets_load(h):
    """A COMMIT marker for __consumer_offsets is not written while the group coordinator loads that
    topic (Kafka's completeTransaction fails COORDINATOR_LOAD_IN_PROGRESS, answered to the
    transaction coordinator as NOT_LEADER_OR_FOLLOWER, which retries): the load reads the log in a
    thread and installs the pending offsets afterwards, so a marker landing in between would
    complete nothing and leave the offsets pending forever. Meanwhile the transaction stays
    PrepareCommit (CONCURRENT_TRANSACTIONS); the retry once loaded makes the offsets visible."""
    from kompakt.broker.groups.coordinator import GroupCoordinator
    _, pid, epoch = await init(h)
    r = await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                            group_id="grp"), 3)
    assert r.error_code == E_NONE
    Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    r = await h.call(TxnOffsetCommitRequest(
        transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=[Topic(name="a", partitions=[Topic.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=7, committed_leader_epoch=-1, committed_metadata="")])]), 3)
    assert r.topics[0].partitions[0].error_code == E_NONE
    group_partition = h.broker.groups.topic.partition_for("grp")
    await h.broker.groups.stop()                          # the group coordinator restarts: loading
    groups = h.broker.groups = GroupCoordinator(h.broker, time_ms=h.clock)
    await groups.start(background=True)
    assert groups.loading
    # a consumer's group was not read yet: not ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID but
    # COORDINATOR_LOAD_IN_PROGRESS (retriable; COORDINATOR_NOT_AVAILABLE before v2), nothing written
    offsets_log = log_of(h, "__consumer_offsets", group_partition)
    end_before = offsets_log.log_end_offset
    for version, code in ((3, 14), (1, 15)):
        r = await h.call(TxnOffsetCommitRequest(
            transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=3,
            member_id="m-1", group_instance_id=None, topics=[Topic(name="a", partitions=[
                Topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=8, committed_leader_epoch=-1,
                                                      committed_metadata="")])]), version)
        assert r.topics[0].partitions[0].error_code == code, version
    assert offsets_log.log_end_offset == end_before
    assert await end(h, pid, epoch, True) == E_NONE
    assert markers(h, "__consumer_offsets", group_partition) == []     # not while loading
    assert h.broker.txn.txns["tx"].state == TxnState.PREPARE_COMMIT
    assert await end(h, pid, epoch, True) == E_CONCURRENT
    await groups._load_task
    assert groups.txn_offsets.has_pending("grp", ("a", 0))             # loaded: still pending
    h.broker.txn.retry_markers()
    assert markers(h, "__consumer_offsets", group_partition) == [(pid, epoch, T.COMMIT)]
    assert h.broker.txn.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert groups.fetch_offsets("grp", None)[("a", 0)].offset == 7
    assert not groups.txn_offsets.has_pending("grp", ("a", 0))


async def test_a_restart_finishes_a_prepare_abort_and_the_lso_outlives_a_deleted_first_batch(h):
    """Probes of this review: (1) PrepareAbort written, no marker yet, coordinator restarted: the
    load writes the ABORT markers and completes the transaction; (2) records deleted past an open
    transaction's first batch: the LSO is the log start (Kafka's max(first unstable, log start)),
    read_committed returns nothing there, and the abort then lists the transaction (its first
    offset below the log start) for the batches that remain."""
    from kompakt.broker.txn.coordinator import TransactionCoordinator
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0), ("b", 0)])
    assert await produce(h, pid, epoch, 0) == E_NONE
    assert await produce(h, pid, epoch, 0, topic="b") == E_NONE
    coordinator = h.broker.txn
    coordinator._persist(coordinator.txns["tx"].prepare_end(False, h.clock()))    # as a crash leaves it
    assert markers(h, "a") == [] and log_of(h, "a").last_stable_offset == 0
    await coordinator.stop()
    restarted = h.broker.txn = TransactionCoordinator(h.broker, time_ms=h.clock)
    restarted.topic.time_ms = h.clock
    await restarted.start()
    assert restarted.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert markers(h, "a") == [(pid, epoch, T.ABORT)] and markers(h, "b") == [(pid, epoch, T.ABORT)]
    await synced(h, "a")
    assert log_of(h, "a").last_stable_offset == 2
    # (2) a second transaction, three batches at offsets 2-4, records deleted up to 4
    await add(h, pid, epoch, [("a", 0)])
    for seq in (1, 2, 3):
        assert await produce(h, pid, epoch, seq) == E_NONE
    lg = log_of(h, "a")
    lg.delete_records(4)
    assert (lg.log_start_offset, lg.last_stable_offset) == (4, 4)
    assert await fetch_a0(h, 1, offset=4) == ([], 4, [])
    assert await end(h, pid, epoch, False) == E_NONE
    assert await fetch_a0(h, 1, offset=4) == ([4], 6, [(pid, 2)])


async def test_commit_metadata_is_measured_in_utf16_units_as_java(h):
    """offset.metadata.max.bytes (4096) bounds Java's String.length() of the metadata (UTF-16 code
    units: Kafka's OffsetMetadataManager.isMetadataInvalid), not its UTF-8 bytes: 2000 euro signs
    (6000 bytes) are accepted by OffsetCommit and TxnOffsetCommit; 2049 emoji (4098 units) and 4097
    ASCII letters are OFFSET_METADATA_TOO_LARGE."""
    from kafka.protocol.consumer.group import OffsetCommitRequest
    E_TOO_LARGE = 12
    _, pid, epoch = await init(h)
    assert (await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                group_id="grp"), 3)).error_code == E_NONE

    async def txn_commit(metadata):
        Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        r = await h.call(TxnOffsetCommitRequest(
            transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[Topic(name="a", partitions=[
                Topic.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=3, committed_leader_epoch=-1,
                                                      committed_metadata=metadata)])]), 3)
        return r.topics[0].partitions[0].error_code

    async def commit(metadata):
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        r = await h.call(OffsetCommitRequest(
            group_id="plain", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, topics=[Topic(name="a", partitions=[Topic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_leader_epoch=-1, commit_timestamp=-1,
                committed_metadata=metadata)])]), 8)
        return r.topics[0].partitions[0].error_code
    for metadata, code in (("\u20ac" * 2000, E_NONE), ("\U0001F600" * 2049, E_TOO_LARGE), ("x" * 4097, E_TOO_LARGE),
                           ("x" * 4096, E_NONE)):
        assert (await txn_commit(metadata), await commit(metadata)) == (code, code), (len(metadata), code)


async def test_deleting_offsets_drops_pending_transactional_ones(h):
    # Kafka 4 (OffsetMetadataManager): DeleteGroups / OffsetDelete / a deleted topic tombstone a
    # partition whose offset is only pending in a transaction, and the tombstone ends the pending
    # offset: the transaction's later COMMIT brings nothing back, live or on replay.
    _, pid, epoch = await init(h)
    TC = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    TP = TC.TxnOffsetCommitRequestPartition

    async def pending(offset, topic="a"):
        r = await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                group_id="grp"), 3)
        assert r.error_code == E_NONE
        r = await h.call(TxnOffsetCommitRequest(
            transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[TC(name=topic, partitions=[TP(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])]), 3)
        assert r.topics[0].partitions[0].error_code == E_NONE
        assert h.broker.groups.txn_offsets.has_pending("grp", (topic, 0))

    def tombstones():
        lg = log_of(h, "__consumer_offsets", h.broker.groups.topic.partition_for("grp"))
        data = lg.read(0, 1 << 20).records
        return [(r.key, hd.is_transactional) for pos, hd in R.iter_batches(data) if not hd.is_control
                for r in R.decode_records(data, pos, hd) if r.value is None]

    def committed():
        return dict(h.broker.groups.offsets.get("grp", {}))

    await pending(5)
    r = await h.call(DeleteGroupsRequest(groups_names=["grp"]), 2)
    assert r.results[0].error_code == E_NONE
    assert len(tombstones()) == 2                       # the offset's (non-transactional) and the group's
    assert not h.broker.groups.txn_offsets.has_pending("grp", ("a", 0))
    assert await end(h, pid, epoch, True) == E_NONE
    assert committed() == {}                            # the COMMIT materialized nothing

    await pending(7)                                    # OffsetDelete, same rule
    r = await h.call(OffsetDeleteRequest(group_id="grp", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name="a", partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
            partition_index=0)])]), 0)
    assert r.error_code == E_NONE and r.topics[0].partitions[0].error_code == E_NONE
    assert await end(h, pid, epoch, True) == E_NONE
    assert committed() == {}

    await pending(8, topic="b")                         # a deleted topic, same rule
    h.broker.groups.on_topic_deleted("b")
    assert await end(h, pid, epoch, True) == E_NONE
    assert committed() == {}

    await pending(9)                                    # no deletion: the COMMIT makes it visible
    assert await end(h, pid, epoch, True) == E_NONE
    assert committed()[("a", 0)].offset == 9
    h.broker.groups.offsets.clear()                     # replay: the same view from the log
    h.broker.groups.txn_offsets.pending.clear()
    h.broker.groups.load()
    assert {tp: om.offset for tp, om in committed().items()} == {("a", 0): 9}
    assert h.broker.groups.txn_offsets.pending_count() == 0


async def test_list_describe_and_producers(h, monkeypatch):
    # ListTransactions v2 (the transactional-id pattern) is Kafka 4.1's: not advertised while
    # Kompakt advertises 4.0; its code stays for the next release's table, tested widened
    from kompakt.broker.handlers import list_transactions
    monkeypatch.setattr(list_transactions, "MAX_VERSION", 2)
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 1)])
    await produce(h, pid, epoch, 0, partition=1)
    await init(h, tid="idle")
    r = await h.call(ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[],
                                             duration_filter=-1, transactional_id_pattern=None), 2)
    assert [(s.transactional_id, s.transaction_state) for s in r.transaction_states] == [("tx", "Ongoing")]
    assert r.unknown_state_filters == ["Bogus"]
    r = await h.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                             duration_filter=-1, transactional_id_pattern="id.*"), 2)
    assert [s.transactional_id for s in r.transaction_states] == ["idle"]
    r = await h.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                             duration_filter=-1, transactional_id_pattern="("), 2)
    assert r.error_code == 128                                      # INVALID_REGULAR_EXPRESSION
    [d] = (await h.call(DescribeTransactionsRequest(transactional_ids=["tx"]), 0)).transaction_states
    assert (d.producer_id, d.transaction_timeout_ms, [(t.topic, t.partitions) for t in d.topics]) == \
        (pid, 30000, [("a", [1])])
    r = await h.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name="a", partition_indexes=[1, 7])]), 0)
    ok, missing = r.topics[0].partitions
    [p] = ok.active_producers
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == (pid, 0, 0, 0)
    assert missing.error_code == E_UNKNOWN_TP
    f = await h.call(FindCoordinatorRequest(key="tx", key_type=1), 3)
    assert (f.error_code, f.node_id) == (0, 1)


async def test_batched_add_partitions_v4_and_verify_only(h):
    _, pid, epoch = await init(h)
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    req = AddPartitionsToTxnRequest(transactions=[
        Txn(transactional_id="tx", producer_id=pid, producer_epoch=epoch, verify_only=False,
            topics=[Txn.AddPartitionsToTxnTopic(name="a", partitions=[0])]),
        Txn(transactional_id="tx", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=[Txn.AddPartitionsToTxnTopic(name="a", partitions=[0, 1])])])
    r = await h.call(req, 5)
    got = [{(t.name, p.partition_index): p.partition_error_code for t in res.topic_results
            for p in t.results_by_partition} for res in r.results_by_transaction]
    assert got == [{("a", 0): 0}, {("a", 0): 0, ("a", 1): E_ABORTABLE}]


async def test_metrics(h):
    from prometheus_client.parser import text_string_to_metric_families
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0)])
    await produce(h, pid, epoch, 0)
    await produce(h, pid, epoch, 1)

    def scrape():
        m = h.broker.metrics
        m.attach(h.broker)
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}

    got = scrape()
    assert got[("kompakt_transactions", (("state", "Ongoing"),))] == 1
    assert got[("kompakt_log_last_stable_offset_lag", (("partition", "0"), ("topic", "a")))] == 2
    assert got[("kompakt_log_ongoing_transactions", (("partition", "0"), ("topic", "a")))] == 1
    assert await end(h, pid, epoch, False) == E_NONE
    got = scrape()
    assert got[("kompakt_transactions_aborted_total", ())] == 1
    assert got[("kompakt_transactions", (("state", "CompleteAbort"),))] == 1
    assert got[("kompakt_log_last_stable_offset_lag", (("partition", "0"), ("topic", "a")))] == 0
    assert ("kompakt_transaction_coordinator_load_seconds", ()) in got


async def test_write_txn_markers_ends_a_hanging_transaction(h):
    from kafka.protocol.producer.transaction import WriteTxnMarkersRequest
    M = WriteTxnMarkersRequest.WritableTxnMarker
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0)])
    await produce(h, pid, epoch, 0)
    h.broker.txn.txns.clear()              # the coordinator lost track: the transaction hangs
    assert log_of(h, "a").last_stable_offset == 0

    async def write(epoch_, partitions, result=False):
        r = await h.call(WriteTxnMarkersRequest(markers=[M(
            producer_id=pid, producer_epoch=epoch_, transaction_result=result, coordinator_epoch=0,
            topics=[M.WritableTxnMarkerTopic(name="a", partition_indexes=partitions)])]), 1)
        return [p.error_code for t in r.markers[0].topics for p in t.partitions]

    assert await write(epoch, [0, 9]) == [E_NONE, E_UNKNOWN_TP]
    assert markers(h, "a") == [(pid, epoch, T.ABORT)] and log_of(h, "a").last_stable_offset == 2
    assert await write(epoch - 1, [0]) == [E_EPOCH]                     # an older epoch than the log knows


async def test_a_batch_of_another_epoch_is_verified_even_with_a_transaction_open(h):
    """Kafka 4's UnifiedLog.hasOngoingTransaction(producerId, producerEpoch): a transaction open in
    the partition counts only for the epoch that opened it. A transactional batch of the same
    producer id at a newer epoch the coordinator never gave out is verified, refused (PRODUCER_FENCED
    -> INVALID_PRODUCER_EPOCH) and never appended; before, it skipped verification, joined the open
    transaction and moved the partition's epoch, so the real producer's next batch and its COMMIT
    marker were refused there and the transaction stayed open forever (LSO stuck)."""
    _, pid, epoch = await init(h)
    await add(h, pid, epoch, [("a", 0)])
    assert await produce(h, pid, epoch, 0) == E_NONE
    assert await produce(h, pid, epoch + 1, 0) == E_EPOCH
    assert log_of(h, "a").log_end_offset == 1
    assert await produce(h, pid, epoch, 1) == E_NONE
    assert await end(h, pid, epoch, True) == E_NONE
    assert markers(h, "a") == [(pid, epoch, T.COMMIT)]
    assert log_of(h, "a").last_stable_offset == log_of(h, "a").log_end_offset == 3


# ---- transaction version 2 (KIP-890 part 2: EndTxn v5, Produce v12, TxnOffsetCommit v5) --------

async def end5(h, pid, epoch, commit, tid="tx"):
    """EndTxn v5: (code, the producer id and epoch the answer carries)."""
    r = await h.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=commit), 5)
    return r.error_code, r.producer_id, r.producer_epoch


def state_values(h, tid="tx"):
    """Every `__transaction_state` value written for `tid`, decoded, in order."""
    lg = log_of(h, T.TRANSACTION_STATE_TOPIC, h.broker.txn.topic.partition_for(tid))
    data = lg.read(0, 1 << 20).records
    return [T.decode_value(rec.value) for pos, hd in R.iter_batches(data)
            for rec in R.decode_records(data, pos, hd) if T.decode_key(rec.key)["transactional_id"] == tid]


@pytest.mark.parametrize("h", [{}, {"kompakt.durable.acks.enable": "false"}], indirect=True,
                         ids=["durable-acks", "kafka-acks"])
async def test_tv2_produce_adds_the_partition_and_every_end_bumps_the_epoch(h):
    """Kafka 4.0's TransactionCoordinator for a v5 EndTxn, row by row of its table (Empty /
    Complete* x commit / abort x current / retried epoch), with Produce v12 adding partitions
    itself: no AddPartitionsToTxn is sent anywhere here. With durable acks (EndTxn answered once
    its markers are synced) and without (markers written before the answer, Kafka's way)."""
    _, pid, epoch = await init(h, version=5)
    assert epoch == 0
    assert await produce(h, pid, 0, 0, version=12) == E_NONE         # a-0 never added: added now
    assert await produce(h, pid, 0, 0, topic="b", version=12) == E_NONE
    meta = h.broker.txn.txns["tx"]
    assert (meta.state, meta.partitions, meta.client_transaction_version) == (
        TxnState.ONGOING, {("a", 0), ("b", 0)}, 2)
    assert await produce(h, pid, 0, 0, partition=1, version=11) == E_ABORTABLE   # v11 only asks
    assert await end5(h, pid, 0, True) == (E_NONE, pid, 1)           # the bumped epoch, answered
    assert markers(h, "a") == [(pid, 1, T.COMMIT)] and markers(h, "b") == [(pid, 1, T.COMMIT)]
    assert await end5(h, pid, 0, True) == (E_NONE, pid, 1)           # a retry: the same answer
    assert await end5(h, pid, 0, False) == (E_INVALID_TXN_STATE, -1, -1)
    assert await end5(h, pid, 1, True) == (E_INVALID_TXN_STATE, -1, -1)   # nothing to commit
    assert await produce(h, pid, 0, 1, version=12) == E_EPOCH         # the finished transaction's late write
    # the next transaction: epoch 1, sequences from 0 again
    assert await produce(h, pid, 1, 0, version=12) == E_NONE
    assert await end5(h, pid, 1, False) == (E_NONE, pid, 2)
    assert markers(h, "a") == [(pid, 1, T.COMMIT), (pid, 2, T.ABORT)]
    assert await end5(h, pid, 1, False) == (E_NONE, pid, 2)          # a retry of the abort
    # an abort with nothing added (the client sent a record that never arrived): its own end
    assert await end5(h, pid, 2, False) == (E_NONE, pid, 3)
    assert markers(h, "a")[-1] == (pid, 2, T.ABORT)                    # no marker for it
    assert h.broker.txn.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert await end5(h, pid, 1, False) == (E_FENCED, -1, -1)         # neither current nor a retry
    assert await end5(h, pid + 9, 3, False) == (E_ID_MAPPING, -1, -1)
    # a client of transaction version 0/1 on the same id: the epoch stays (EndTxn v3)
    assert await add(h, pid, 3, [("a", 0)]) == {("a", 0): E_NONE}
    assert await produce(h, pid, 3, 0) == E_NONE
    assert await end(h, pid, 3, True) == E_NONE
    assert markers(h, "a")[-1] == (pid, 3, T.COMMIT)
    assert h.broker.txn.txns["tx"].producer_epoch == 3
    # what __transaction_state holds (transaction.version 2 finalized: the flexible v1 values)
    values = state_values(h)
    assert {v["version"] for v in values} == {1}
    prepared = [v for v in values if v["state"] in (2, 3)]
    assert [(v["producer_epoch"], v["client_transaction_version"]) for v in prepared] == [
        (1, 2), (2, 2), (3, 2), (3, 0)]


async def test_tv2_an_exhausted_epoch_moves_to_the_next_producer_id(h):
    _, pid, _ = await init(h)
    h.broker.txn.txns["tx"] = h.broker.txn.txns["tx"].copy(producer_epoch=32766)
    assert await produce(h, pid, 32766, 0, version=12) == E_NONE
    code, new_pid, new_epoch = await end5(h, pid, 32766, True)
    assert (code, new_epoch) == (E_NONE, 0) and new_pid not in (pid, -1)
    assert markers(h, "a") == [(pid, 32767, T.COMMIT)]               # the old id's last epoch
    prepare = [v for v in state_values(h) if v["state"] == 2][-1]
    assert (prepare["producer_id"], prepare["producer_epoch"], prepare["next_producer_id"]) == (pid, 32767, new_pid)
    meta = h.broker.txn.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_epoch, meta.previous_producer_id) == (
        new_pid, 0, 32766, pid)
    assert await end5(h, pid, 32766, True) == (E_NONE, new_pid, 0)    # a retry with the old id
    assert await produce(h, new_pid, 0, 0, version=12) == E_NONE
    assert await end5(h, new_pid, 0, True) == (E_NONE, new_pid, 1)


async def test_tv2_txn_offset_commit_v5_needs_no_add_offsets(h):
    _, pid, epoch = await init(h)
    group_partition = h.broker.groups.topic.partition_for("grp")
    P = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition

    async def txn_commit(offset, producer_epoch, version=5):
        r = await h.call(TxnOffsetCommitRequest(
            transactional_id="tx", group_id="grp", producer_id=pid, producer_epoch=producer_epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="a", partitions=[P(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])]),
            version)
        return r.topics[0].partitions[0].error_code

    assert await txn_commit(7, epoch, version=4) == E_ABORTABLE       # v4 still needs AddOffsetsToTxn
    assert await txn_commit(7, epoch) == E_NONE
    assert ("__consumer_offsets", group_partition) in h.broker.txn.txns["tx"].partitions
    assert await end5(h, pid, epoch, True) == (E_NONE, pid, epoch + 1)
    r = await h.call(OffsetFetchRequest(group_id="grp", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="a", partition_indexes=[0])], require_stable=True), 7)
    assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].committed_offset) == (E_NONE, 7)
    assert await txn_commit(9, epoch) == E_EPOCH                      # the ended transaction's epoch


async def test_tv2_fencing_aborts_at_a_bumped_epoch_and_level_0_writes_v0_values(h):
    # transaction.version 2 finalized: the fence's abort bumps once more (Kafka's endTransaction
    # with the server's version), so the markers carry epoch + 2
    _, pid, epoch = await init(h)
    assert await produce(h, pid, epoch, 0, version=12) == E_NONE
    assert await init(h) == (E_CONCURRENT, -1, -1)
    await completed(h)
    assert markers(h, "a") == [(pid, epoch + 2, T.ABORT)]
    assert await init(h) == (E_NONE, pid, epoch + 3)
    assert await end5(h, pid, epoch, True) == (E_FENCED, -1, -1)
    # transaction.version 0: v0 values, and the fence aborts at epoch + 1 only
    h.broker.features.levels["transaction.version"] = 0
    _, pid2, epoch2 = await init(h, tid="tx0")
    assert await produce(h, pid2, epoch2, 0, tid="tx0", version=12) == E_NONE
    assert await init(h, tid="tx0") == (E_CONCURRENT, -1, -1)
    await completed(h)
    assert markers(h, "a")[-1] == (pid2, epoch2 + 1, T.ABORT)
    assert {v["version"] for v in state_values(h, "tx0")} == {0}


async def test_tv2_a_restart_completes_a_prepare_that_moves_to_the_next_producer_id(h):
    """A crash right after a version 2 PrepareCommit leaving epoch 32766 (the next producer id in
    its v1 record's tagged fields): the reload completes it onto the next id at epoch 0, and the
    client's retry with the old id and epoch gets that answer."""
    from kompakt.broker.txn.coordinator import TransactionCoordinator
    _, pid, _ = await init(h)
    h.broker.txn.txns["tx"] = h.broker.txn.txns["tx"].copy(producer_epoch=32766)
    assert await produce(h, pid, 32766, 0, version=12) == E_NONE
    coordinator = h.broker.txn
    spare = await coordinator._new_producer_id()
    coordinator._persist(coordinator.txns["tx"].prepare_end(True, h.clock(), 2, spare))   # as a crash leaves it
    assert markers(h, "a") == []
    await coordinator.stop()
    restarted = h.broker.txn = TransactionCoordinator(h.broker, time_ms=h.clock)
    restarted.topic.time_ms = h.clock
    await restarted.start()
    meta = restarted.txns["tx"]
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.client_transaction_version) == (
        TxnState.COMPLETE_COMMIT, spare, 0, 2)
    assert markers(h, "a") == [(pid, 32767, T.COMMIT)]
    assert await end5(h, pid, 32766, True) == (E_NONE, spare, 0)
