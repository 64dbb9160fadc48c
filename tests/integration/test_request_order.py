"""Requests pipelined on one connection see the effects of the ones before them, as on Kafka.

Kafka's socket server reads a connection's next request only once the previous one is answered,
so a client may send two requests back to back without waiting (confluent-kafka's admin client
does: DeleteRecords then ListOffsets) and rely on the second seeing the first's effect. Each
probe here sends its two requests in one write on ONE connection of a real broker process and
checks the second answer (broker/network/connection.py: the next request starts once the previous one
has applied its effects). A fetch parked for its long poll is not an effect: a produce
pipelined behind it starts at once and wakes it.
"""
from __future__ import annotations


import pytest

from kompakt.protocol import registry
from kompakt.protocol.records import build_batch
from wire_support import Wire, create_topics, list_offset, produce, req, sub

TOPIC = 2                                   # DescribeConfigs / IncrementalAlterConfigs resource type


@pytest.fixture(scope="module")
def wire(module_broker):
    w = Wire(module_broker.port)
    yield w
    w.close()


def _records(n: int) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)])


def _list_offsets(topic: str, timestamp: int):
    T = sub(2, "ListOffsetsTopic")
    return req(2, replica_id=-1, isolation_level=0, topics=[
        T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])


def _create_topic(name: str):
    T = sub(19, "CreatableTopic")
    return req(19, topics=[T(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
               timeout_ms=10000, validate_only=False)


def test_delete_records_then_list_offsets_earliest(wire):
    create_topics(wire, {"order-dr": {}})
    assert produce(wire, "order-dr", _records(10)).error_code == 0
    T = sub(21, "DeleteRecordsTopic")
    delete = req(21, topics=[T(name="order-dr", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=6)])],
                 timeout_ms=10000)
    deleted, earliest = wire.pipeline([(delete, 2), (_list_offsets("order-dr", -2), 5)])
    assert deleted.topics[0].partitions[0].error_code == 0
    assert deleted.topics[0].partitions[0].low_watermark == 6
    part = earliest.topics[0].partitions[0]
    assert (part.error_code, part.offset) == (0, 6)


def test_create_topics_then_metadata(wire):
    metadata = req(3, topics=[sub(3, "MetadataRequestTopic")(topic_id=None, name="order-ct")],
                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    created, described = wire.pipeline([(_create_topic("order-ct"), 5), (metadata, 12)])
    assert created.topics[0].error_code == 0
    [topic] = described.topics
    assert (topic.name, topic.error_code, len(topic.partitions)) == ("order-ct", 0, 1)


def test_delete_topics_then_create_topics_of_the_same_name(wire):
    create_topics(wire, {"order-dt": {}})
    assert produce(wire, "order-dt", _records(3)).error_code == 0
    delete = req(20, topic_names=["order-dt"], timeout_ms=10000)
    deleted, created, latest = wire.pipeline([(delete, 4), (_create_topic("order-dt"), 5),
                                              (_list_offsets("order-dt", -1), 5)])
    assert deleted.responses[0].error_code == 0
    assert created.topics[0].error_code == 0            # not TOPIC_ALREADY_EXISTS
    part = latest.topics[0].partitions[0]
    assert (part.error_code, part.offset) == (0, 0)     # the new topic, empty


def test_offset_commit_then_offset_fetch(wire):
    create_topics(wire, {"order-oc": {}})
    T = sub(8, "OffsetCommitRequestTopic")
    commit = req(8, group_id="order-group", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                 retention_time_ms=-1, topics=[T(name="order-oc", partitions=[
                     T.OffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                                    committed_metadata="m")])])
    F = sub(9, "OffsetFetchRequestTopic")
    fetch = req(9, group_id="order-group", topics=[F(name="order-oc", partition_indexes=[0])], require_stable=False)
    committed, fetched = wire.pipeline([(commit, 8), (fetch, 7)])
    assert committed.topics[0].partitions[0].error_code == 0
    part = fetched.topics[0].partitions[0]
    assert (part.error_code, part.committed_offset, part.metadata) == (0, 42, "m")


def test_incremental_alter_configs_then_describe_configs(wire):
    create_topics(wire, {"order-ic": {}})
    R = sub(44, "AlterConfigsResource")
    alter = req(44, resources=[R(resource_type=TOPIC, resource_name="order-ic", configs=[
        R.AlterableConfig(name="retention.ms", config_operation=0, value="1234567")])], validate_only=False)
    D = sub(32, "DescribeConfigsResource")
    describe = req(32, resources=[D(resource_type=TOPIC, resource_name="order-ic", configuration_keys=["retention.ms"])],
                   include_synonyms=False, include_documentation=False)
    altered, described = wire.pipeline([(alter, 1), (describe, 4)])
    assert altered.responses[0].error_code == 0
    [config] = described.results[0].configs
    assert (config.name, config.value) == ("retention.ms", "1234567")


def test_a_parked_fetch_does_not_hold_back_the_next_request(wire):
    """A long poll is a wait, not an effect: a produce pipelined behind a fetch parked for 25 s
    starts at once, and its append wakes the fetch, which answers the record."""
    create_topics(wire, {"order-lp": {}})
    FT = sub(1, "FetchTopic")
    fetch = req(1, replica_id=-1, max_wait_ms=25_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FT(topic="order-lp", partitions=[FT.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                    log_start_offset=-1)])])
    P = sub(0, "TopicProduceData")
    produced = req(0, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P(name="order-lp", partition_data=[P.PartitionProduceData(index=0, records=_records(1))])])
    fetched, appended = wire.pipeline([(fetch, 11), (produced, 9)])
    assert appended.responses[0].partition_responses[0].error_code == 0
    part = fetched.responses[0].partitions[0]
    assert part.error_code == 0 and part.records, "the fetch sat out its long poll: the produce waited behind it"


def test_an_acks_0_produce_that_fails_closes_before_the_next_request_starts(module_broker, wire):
    """acks=0 has no answer, so an error closes the connection (Kafka's KafkaApis: closeConnection),
    and Kafka never reads what the client sent after it: a produce pipelined behind an acks=0
    produce that failed for one partition is not appended. The failed produce also writes to a
    flush.messages=1 topic, an append on the log writer that it waits for, so it is still running
    when its effects are applied (where the next request used to start)."""
    create_topics(wire, {"order-a0": {}, "order-a0-synced": {"flush.messages": "1"}})
    P = sub(0, "TopicProduceData")

    def produce_request(topics, acks: int):
        return req(0, transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
            P(name=t, partition_data=[P.PartitionProduceData(index=0, records=_records(2))]) for t in topics])

    doomed = Wire(module_broker.port)
    try:
        doomed.send([(produce_request(["order-a0-synced", "order-a0-missing"], 0), 9),
                     (produce_request(["order-a0"], 1), 9)])
        assert doomed.sock.recv(1) == b"", "the connection was not closed"
    finally:
        doomed.close()
    # the second produce never ran: the next record lands at offset 0 (an acks=all produce, so
    # this is also past any unsynced append: the high watermark alone could miss one)
    assert produce(wire, "order-a0", _records(1)).base_offset == 0


def test_confluent_admin_delete_records_then_list_offsets(module_broker):
    """confluent-kafka-python's admin test_delete_records: DeleteRecords and ListOffsets(earliest)
    issued together on the AdminClient, whose librdkafka sends them back to back on one connection.
    Before the connection kept Kafka's order, ListOffsets answered the old log start in 7 of 10
    tries of a script and in all 5 of this test; every try must see the new one."""
    import confluent_kafka as ck
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    producer = ck.Producer({"bootstrap.servers": module_broker.bootstrap})
    topics = [f"order-ck-{i}" for i in range(5)]
    wire = Wire(module_broker.port)
    create_topics(wire, {t: {} for t in topics})
    wire.close()
    for topic in topics:
        for _ in range(10):
            producer.produce(topic, b"v")
    assert producer.flush(30) == 0
    seen = []
    for topic in topics:
        cut, partition = TopicPartition(topic, 0, 6), TopicPartition(topic, 0)
        deleted = admin.delete_records([cut])
        earliest = admin.list_offsets({partition: OffsetSpec.earliest()})
        assert deleted[cut].result(30).low_watermark == 6
        seen.append(earliest[partition].result(30).offset)
    assert seen == [6] * len(topics)
