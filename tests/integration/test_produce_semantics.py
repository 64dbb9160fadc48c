"""Produce path against Apache Kafka 4's answers, over TCP with raw requests (wire_support):
corner cases of the idempotent producer and of LogValidator that real clients rarely hit but
Kafka answers in a defined way. Each test names the Kafka source it follows.
"""
from __future__ import annotations

import time

import pytest

from kompakt.protocol import registry
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.records import COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_ZSTD, build_batch, read_header
from wire_support import Wire, create_topics, end_offset, list_offset, produce, req

TOPICS = {
    "sem-lat": {"message.timestamp.type": "LogAppendTime"},
    "sem-create": {},
    "sem-maxts": {},
}


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    create_topics(w, TOPICS)
    yield w
    w.close()


def idempotent(pid, seq, n=1, epoch=0, ts=None):
    ts = ts if ts is not None else int(time.time() * 1000)
    return build_batch([(b"k%d" % i, b"v", None, ts + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


@pytest.mark.parametrize("topic", ["sem-lat", "sem-create"])
def test_a_duplicate_is_answered_with_the_original_offset_and_timestamp(wire, topic):
    """UnifiedLog.append: a duplicate of one of the last 5 batches answers the original batch's
    first offset and, as log_append_time, that batch's stored timestamp (appendInfo
    .setLogAppendTime(duplicate.timestamp()), whatever the topic's timestamp type)."""
    pid = 7001 if topic == "sem-lat" else 7002
    ts = int(time.time() * 1000) - 60_000
    first = produce(wire, topic, idempotent(pid, 0, n=2, ts=ts))
    assert first.error_code == 0
    produce(wire, topic, idempotent(pid, 2, ts=ts))
    time.sleep(0.01)                                    # a later append time, were it re-stamped
    again = produce(wire, topic, idempotent(pid, 0, n=2, ts=ts))
    assert again.error_code == 0
    assert again.base_offset == first.base_offset
    if topic == "sem-lat":
        assert first.log_append_time_ms > 0
        assert again.log_append_time_ms == first.log_append_time_ms
    else:
        assert first.log_append_time_ms == -1
        assert again.log_append_time_ms == ts + 1          # the batch's max timestamp


def _with_magic(batch: bytes, magic: int) -> bytes:
    out = bytearray(batch)
    out[16] = magic                                     # magic byte, before the CRC'd part
    return bytes(out)


@pytest.mark.parametrize("magic", [0, 1])
def test_an_old_magic_batch_in_a_v3_plus_request_is_an_invalid_record(wire, magic):
    """ProduceRequest.validateRecords (v3+: "only allowed to contain record batches with magic
    version 2") throws InvalidRecordException, which KafkaApis.handleProduceRequest answers per
    partition: INVALID_RECORD, not UNSUPPORTED_FOR_MESSAGE_FORMAT."""
    p = produce(wire, "sem-create", _with_magic(build_batch([(b"k", b"v")]), magic))
    assert p.error_code == EC.INVALID_RECORD, EC(p.error_code).name
    assert p.base_offset == -1


@pytest.mark.parametrize("version", [3, 6])
def test_zstd_before_produce_v7_is_an_unsupported_compression_type(wire, version):
    """ProduceRequest.validateRecords: "Produce requests with version N are not allowed to use
    ZStandard compression" (UnsupportedCompressionTypeException) before v7 (KIP-110)."""
    before = end_offset(wire, "sem-create")
    p = produce(wire, "sem-create", build_batch([(b"k", b"v")], compression=COMPRESSION_ZSTD), version=version)
    assert p.error_code == EC.UNSUPPORTED_COMPRESSION_TYPE, EC(p.error_code).name
    assert end_offset(wire, "sem-create") == before
    assert produce(wire, "sem-create", build_batch([(b"k", b"v")], compression=COMPRESSION_ZSTD),
                   version=7).error_code == 0


def _recount(batch: bytes, count: int) -> bytes:
    """`batch` claiming `count` records (recordsCount and lastOffsetDelta agree), CRC fixed."""
    import crc32c
    from kompakt.protocol.records import LAST_OFFSET_DELTA_POS, RECORDS_COUNT_POS, ATTRIBUTES_POS
    out = bytearray(batch)
    out[RECORDS_COUNT_POS:RECORDS_COUNT_POS + 4] = count.to_bytes(4, "big")
    out[LAST_OFFSET_DELTA_POS:LAST_OFFSET_DELTA_POS + 4] = (count - 1).to_bytes(4, "big")
    out[ATTRIBUTES_POS - 4:ATTRIBUTES_POS] = crc32c.crc32c(bytes(out[ATTRIBUTES_POS:])).to_bytes(4, "big")
    return bytes(out)


@pytest.mark.parametrize("claimed", [2, 4], ids=["more-records-than-counted", "fewer-records-than-counted"])
def test_an_uncompressed_batch_whose_count_lies_is_an_invalid_record(wire, claimed):
    """Kafka's LogValidator walks every record of every batch (validateMessagesAndAssignOffsets);
    the batch iterator refuses records left after `count` ("Incorrect declared batch size, records
    still remaining") or missing ones. Appended, such a batch claims offsets it does not hold (a
    consumer stops on it, or sees the next batch's offsets twice)."""
    before = end_offset(wire, "sem-create")
    lying = _recount(build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]), claimed)
    p = produce(wire, "sem-create", lying)
    # INVALID_RECORD (not retriable), not CORRUPT_MESSAGE (retriable: a client would resend the
    # hopeless batch until its delivery timeout): Kafka's batch iterator and DefaultRecord.readFrom
    # throw InvalidRecordException for a record structure that does not add up
    assert p.error_code == EC.INVALID_RECORD, EC(p.error_code).name
    assert "Record batch in the append to sem-create-0 is malformed" in p.error_message
    assert end_offset(wire, "sem-create") == before


def test_invalid_acks_leave_the_partitions_refused_earlier_with_their_own_error(wire):
    """ReplicaManager.appendRecords answers INVALID_REQUIRED_ACKS for the partitions that reach it;
    KafkaApis.handleProduceRequest has already answered unknown partitions (and records its
    validateRecords refused) with their own errors, and merges both."""
    P = registry.API[0].request.TopicProduceData
    before = end_offset(wire, "sem-create")
    answer = wire.call(req(0, transactional_id=None, acks=2, timeout_ms=5000, topic_data=[
        P(name="sem-no-such-topic", partition_data=[P.PartitionProduceData(index=0, records=build_batch([(b"k", b"v")]))]),
        P(name="sem-create", partition_data=[P.PartitionProduceData(index=0, records=build_batch([(b"k", b"v")])),
                                             P.PartitionProduceData(index=9, records=build_batch([(b"k", b"v")]))]),
    ]), 9)
    codes = {(t.name, p.index): p.error_code for t in answer.responses for p in t.partition_responses}
    assert codes == {("sem-no-such-topic", 0): EC.UNKNOWN_TOPIC_OR_PARTITION,
                     ("sem-create", 0): EC.INVALID_REQUIRED_ACKS,
                     ("sem-create", 9): EC.UNKNOWN_TOPIC_OR_PARTITION}
    assert end_offset(wire, "sem-create") == before


def offset_for_time(wire, topic, timestamp):
    return list_offset(wire, topic, timestamp)


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_LZ4], ids=["none", "lz4"])
def test_a_batch_without_a_max_timestamp_gets_its_records_max(wire, codec):
    """Kafka's LogValidator sets a CreateTime batch's maxTimestamp from its records
    (batch.setMaxTimestamp(CREATE_TIME, maxBatchTimestamp), in place for uncompressed and
    same-codec batches). Sarama before 1.45 (IBM/sarama#3108) left it unset: kept as sent, the
    batch never reaches the time index (ListOffsets by time misses it) and its segment's largest
    timestamp is bogus for time-based retention."""
    ts = int(time.time() * 1000) - (600_000 if codec == COMPRESSION_NONE else 300_000)
    batch = build_batch([(b"a", b"1", None, ts - 20), (b"b", b"2", None, ts), (b"c", b"3", None, ts - 10)],
                        compression=codec, max_timestamp=-1)
    assert read_header(batch, 0).max_timestamp == -1
    p = produce(wire, "sem-maxts", batch)
    assert p.error_code == 0
    assert offset_for_time(wire, "sem-maxts", ts) == (p.base_offset + 1, ts)
