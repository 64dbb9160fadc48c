"""DescribeClientQuotas / AlterClientQuotas on a real Broker, and what a quota does to Produce
and Fetch answers: throttle_time_ms as Kafka computes it, a throttled fetch answered empty
without the session forgetting the data it did not send (so the next fetch gets it)."""
import pytest
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest

from admin_harness import Harness

from kompakt.protocol.records import build_batch

AE = AlterClientQuotasRequest.EntryData
DC = DescribeClientQuotasRequest.ComponentData


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    harness.create("t", 1)
    yield harness
    harness.close()


async def set_quota(h, key, value, client_id="test", version=1):
    request = AlterClientQuotasRequest(validate_only=False, entries=[AE(
        entity=[AE.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[AE.OpData(key=key, value=value or 0.0, remove=value is None)])])
    (entry,) = (await h.call(request, version)).entries
    return entry


async def test_alter_then_describe_over_the_wire(h):
    entry = await set_quota(h, "producer_byte_rate", 2048.0, version=0)
    assert (entry.error_code, entry.error_message, [(e.entity_type, e.entity_name) for e in entry.entity]) == (
        0, None, [("client-id", "test")])
    request = DescribeClientQuotasRequest(strict=False, components=[DC(entity_type="client-id", match_type=0, match="test")])
    for version in (0, 1):
        answer = await h.call(request, version)
        assert answer.error_code == 0
        assert [([(e.entity_type, e.entity_name) for e in x.entity], [(v.key, v.value) for v in x.values])
                for x in answer.entries] == [([("client-id", "test")], [("producer_byte_rate", 2048.0)])]
    bad = await h.call(DescribeClientQuotasRequest(strict=False, components=[
        DC(entity_type="user", match_type=1, match="x")]), 1)
    assert (bad.error_code, bad.entries) == (42, None)
    assert "MATCH_TYPE_DEFAULT, but also specified a match string" in bad.error_message


async def produce(h, version=9):
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=bytes(build_batch([(b"k", b"v" * 500)])))])])
    return await h.call(request, version)


async def test_produce_answers_throttle_time_over_the_quota(h):
    assert (await produce(h)).throttle_time_ms == 0          # no quota: nothing recorded at all
    assert not h.broker.quotas.produce.sensors
    await set_quota(h, "producer_byte_rate", 100.0)
    first = await produce(h)
    # ~600 bytes over a young sensor's 10 s window: 60 B/s, under 100
    assert first.throttle_time_ms == 0 and first.responses[0].partition_responses[0].error_code == 0
    for _ in range(3):
        answer = await produce(h)
    # 4 requests, ~2400 bytes / 10 s = ~240 B/s: (240 - 100) / 100 * 10000 ms, and every append happened
    assert 12_000 <= answer.throttle_time_ms <= 16_000
    assert answer.responses[0].partition_responses[0].base_offset == 4


async def fetch(h, session_id, epoch, offset=0, version=12):
    T = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="",
                           cluster_id=None, topics=[T(topic="t", partitions=[T.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])])
    return await h.call(request, version)


async def test_throttled_fetch_is_empty_and_the_session_serves_the_data_next_time(h):
    h.append("t", 0, 3)
    await set_quota(h, "consumer_byte_rate", 100.0)
    full = await fetch(h, 0, 0)                           # opens a session, under the quota
    assert full.throttle_time_ms == 0 and full.session_id != 0
    assert full.responses[0].partitions[0].records
    h.append("t", 0, 3)
    await set_quota(h, "consumer_byte_rate", 1.0)
    throttled = await fetch(h, full.session_id, 1, offset=3)
    assert throttled.throttle_time_ms > 0 and throttled.responses == []
    assert throttled.session_id == full.session_id
    await set_quota(h, "consumer_byte_rate", None)        # quota removed: served at once
    assert not h.broker.quotas.fetch.enabled
    served = await fetch(h, full.session_id, 2, offset=3)
    assert served.throttle_time_ms == 0
    (part,) = served.responses[0].partitions
    assert part.high_watermark == 6 and part.records
