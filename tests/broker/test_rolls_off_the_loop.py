"""Every segment roll creates its files off the event loop (storage/log_writer.py).

A roll creates the new segment's files and a producer snapshot: a file-system stall the loop
must not take. Produce appends that roll for any reason (segment.bytes: tests/broker/
test_produce.py; segment.ms and a full index: here) run again on the log writer; the synchronous
appends of the group and transaction coordinators and of markers leave their roll to the writer
(Log.ROLL_LATER). Each test records the thread of every new segment's file creation
(Log._new_segment) and checks offsets and order afterwards.
"""
from __future__ import annotations

import asyncio
import threading

import pytest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest, WriteTxnMarkersRequest

from admin_harness import Harness, h  # noqa: F401  (h is a fixture)

from kompakt.protocol import group_records as gr
from kompakt.protocol import records as R
from kompakt.storage import TopicPartition
from kompakt.storage.log import Log

TS = 1_700_000_000_000
TD = ProduceRequest.TopicProduceData


@pytest.fixture
def rolls(monkeypatch):
    """(thread ident, partition dir name) of every new segment's file creation."""
    seen = []
    real = Log._new_segment

    def traced(self, base_offset):
        seen.append((threading.get_ident(), self.dir.rsplit("/", 1)[-1]))
        return real(self, base_offset)

    monkeypatch.setattr(Log, "_new_segment", traced)
    return seen


async def produce(h, topic, records):
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        TD(name=topic, partition_data=[TD.PartitionProduceData(index=0, records=records)])])
    [t] = (await h.call(req, 9)).responses
    [p] = t.partition_responses
    return p.error_code, p.base_offset


async def writer_idle(lm, *tps):
    for _ in range(1000):
        if not any(lm.writer.busy(lm.get_log(tp)) for tp in tps):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the log writer never finished")


def offsets_of(plog) -> list[int]:
    out = []
    for seg in plog.segments:
        for _, hdr, _, _ in seg.iter_batches(0):
            out.extend(range(hdr.base_offset, hdr.last_offset + 1))
    return out


async def test_produce_rolls_by_segment_ms_and_by_a_full_index_run_off_the_loop(h, rolls):
    h.create("timed", 1, {"segment.ms": "1000"})
    h.create("indexed", 1, {"segment.index.bytes": "24", "index.interval.bytes": "1"})
    loop_thread = threading.get_ident()
    # each timed batch is 2 s younger than the last: segment.ms rolls before every append but the first
    timed = [produce(h, "timed", R.build_batch([(b"k", b"v%d" % i)], base_timestamp=TS + 2000 * i))
             for i in range(6)]
    indexed = [produce(h, "indexed", R.build_batch([(b"k", b"w%d" % i)], base_timestamp=TS)) for i in range(12)]
    answers = await asyncio.gather(*timed, *indexed)
    assert answers == [(0, i) for i in range(6)] + [(0, i) for i in range(12)]
    by_topic = {}
    for thread, name in rolls:
        by_topic.setdefault(name, []).append(thread)
    assert len(by_topic["timed-0"]) == 5 and len(by_topic["indexed-0"]) >= 3, by_topic
    assert loop_thread not in {thread for thread, _ in rolls}
    timed_log = h.lm.get_log(TopicPartition("timed", 0))
    indexed_log = h.lm.get_log(TopicPartition("indexed", 0))
    assert [s.base_offset for s in timed_log.segments] == list(range(6))   # Kafka's boundaries exactly
    assert offsets_of(timed_log) == list(range(6)) and offsets_of(indexed_log) == list(range(12))
    assert indexed_log.num_segments == len(by_topic["indexed-0"]) + 1


@pytest.fixture
async def hc(tmp_path):
    """A broker whose coordinators' internal topics have one small-segment partition each."""
    harness = Harness(tmp_path, **{"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "1500",
                                   "transaction.state.log.num.partitions": "1",
                                   "transaction.state.log.segment.bytes": "1500"})
    broker = harness.broker
    await broker.groups.start()
    await broker.txn.start()
    yield harness
    await broker.txn.stop()
    await broker.groups.stop()
    harness.close()


def commit(group, offset):
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               topics=[T(name="t", partitions=[T.OffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                   committed_metadata="m" * 40)])])


def marker(producer_id):
    M = WriteTxnMarkersRequest.WritableTxnMarker
    return WriteTxnMarkersRequest(markers=[M(producer_id=producer_id, producer_epoch=0, transaction_result=False,
                                             topics=[M.WritableTxnMarkerTopic(name="m", partition_indexes=[0])],
                                             coordinator_epoch=0, transaction_version=0)])


async def test_coordinator_and_marker_appends_leave_their_rolls_to_the_log_writer(hc, rolls):
    hc.create("t", 1)
    hc.create("m", 1, {"internal.segment.bytes": "600"})
    loop_thread = threading.get_ident()
    lm = hc.lm
    offsets_tp = TopicPartition("__consumer_offsets", 0)
    state_tp = TopicPartition("__transaction_state", 0)
    marked_tp = TopicPartition("m", 0)
    sizes = {offsets_tp: 1500, state_tp: 1500, marked_tp: 600}
    for i in range(40):
        r = await hc.call(commit("g", i), 8)
        assert r.topics[0].partitions[0].error_code == 0
        r = await hc.call(InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000,
                                                producer_id=-1, producer_epoch=-1), 4)
        assert r.error_code == 0 and r.producer_epoch == i
        r = await hc.call(marker(1000 + i), 1)
        assert r.markers[0].topics[0].partitions[0].error_code == 0
        await writer_idle(lm, *sizes)        # a loop with time between requests, as a broker's
    names = {name for _, name in rolls}
    assert {"__consumer_offsets-0", "__transaction_state-0", "m-0"} <= names, rolls
    assert loop_thread not in {thread for thread, _ in rolls}
    for tp, segment_bytes in sizes.items():
        plog = lm.get_log(tp)
        assert plog.num_segments >= 3 and plog.log_end_offset >= 40
        biggest = max(h.size for seg in plog.segments for _, h, _, _ in seg.iter_batches(0))
        for seg in plog.segments[:-1]:     # rolled right after the append that found it due
            assert 0 < seg.size <= segment_bytes + biggest, (tp, seg.size)

    # a burst that leaves the writer no time: the due segment takes what comes before the roll
    answers = await asyncio.gather(*(hc.call(commit("g", i), 8, correlation_id=i) for i in range(40, 80)))
    assert [r.topics[0].partitions[0].error_code for r in answers] == [0] * 40
    await writer_idle(lm, offsets_tp)
    assert loop_thread not in {thread for thread, _ in rolls}
    for tp in sizes:
        plog = lm.get_log(tp)
        assert offsets_of(plog) == list(range(plog.log_end_offset))
        for seg, nxt in zip(plog.segments, plog.segments[1:]):     # no boundary inside a batch
            assert seg.size > 0 and seg.read_next_offset() == nxt.base_offset
    # every commit is in the log, in order, and the last one is what OffsetFetch answers
    commits = []
    for seg in lm.get_log(offsets_tp).segments:
        for _, h, buf, pos in seg.iter_batches(0):
            for rec in R.decode_records(buf, pos, h):
                key = gr.decode_key(bytes(rec.key))
                if key["type"] == "offset_commit":
                    commits.append(gr.decode_value(key, bytes(rec.value))["offset"])
    assert commits == list(range(80))
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    r = await hc.call(OffsetFetchRequest(group_id="g", topics=[T(name="t", partition_indexes=[0])]), 7)
    assert r.topics[0].partitions[0].committed_offset == 79
