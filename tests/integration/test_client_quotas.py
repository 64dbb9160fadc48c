"""Client quotas end to end on a real broker: @platformatic/kafka's admin sets and describes
them (AlterClientQuotas v1, DescribeClientQuotas v0), librdkafka producers and consumers see the
throttle time Kafka would give them (its statistics), nothing is lost, the broker mutes the
throttled connection, and the quotas survive a restart.

The broker keeps quota.window.num=2 (1 s windows) so throttles are a fraction of a second.
"""
import json
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from compat_support import ensure_node_modules, node_step, running_broker
from kompakt.testing.poll import wait_until
from wire_support import Wire, list_offset

TIMEOUT = 30
QUOTA_BROKER = {"quota.window.num": "2", "num.partitions": "1"}


def create_topic(broker, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
        future.result(TIMEOUT)


def quotas(broker, **args):
    result = node_step("platformatic_client.js", broker, "quotas", args)
    return _described(result), result["altered"]


def _described(result) -> dict:
    return {e["entity"][0]["entityName"]: {v["key"]: v["value"] for v in e["values"]} for e in result["described"]}


def max_throttle(stats: list[dict]) -> int:
    return max((b.get("throttle", {}).get("max", 0) for s in stats for b in s["brokers"].values()), default=0)


def produce_all(broker, client_id: str, topic: str, n: int = 20, size: int = 1000) -> list[dict]:
    stats: list[dict] = []
    # small batches: a consumer can only ever be served a batch its quota allows within the
    # retained windows (as on Kafka, where a larger one waits for good)
    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 4096,
                  "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
    for i in range(n):
        p.produce(topic, key=b"%d" % i, value=b"x" * size)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0
    end = time.monotonic() + 1.0             # one more statistics interval after the last answer
    while time.monotonic() < end:
        p.poll(0.05)
    return stats


def throttled_total(broker, quota_type: str) -> float:
    text = urllib.request.urlopen(f"{broker.metrics_url}/metrics", timeout=TIMEOUT).read().decode()
    prefix = f'kompakt_client_quota_throttled_requests_total{{quota_type="{quota_type}"}} '
    return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    ensure_node_modules()
    with running_broker(tmp_path_factory.mktemp("quotas"), QUOTA_BROKER) as proc:
        create_topic(proc, "free", "slow", "q")
        yield proc


def test_a_throttled_connection_reads_nothing_until_the_throttle_ends(broker):
    wire = Wire(broker.port)
    E = AlterClientQuotasRequest.EntryData
    answer = wire.call(AlterClientQuotasRequest(validate_only=False, entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name="muted")],
        ops=[E.OpData(key="producer_byte_rate", value=1000.0, remove=False)])]), 1)
    assert [e.error_code for e in answer.entries] == [0]
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=b"k", value=b"x" * 1500, headers=[])
    builder.close()
    T = ProduceRequest.TopicProduceData
    try:
        sent = time.monotonic()
        answer = wire.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            T(name="q", partition_data=[T.PartitionProduceData(index=0, records=bytes(builder.buffer()))])]),
            9, client_id="muted")
        # ~1600 bytes in a young 1 s window against 1000 B/s: about (1600 - 1000) / 1000 * 1000 ms
        assert 400 <= answer.throttle_time_ms <= 900
        wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, client_id="muted")
        # the broker read nothing more on this connection until the throttle was over: it began
        # after the produce was sent, so this is a lower bound a loaded machine can only exceed
        # (counted from the answer's arrival instead, a late delivery would eat into it)
        assert time.monotonic() - sent >= 0.8 * answer.throttle_time_ms / 1000.0
    finally:
        wire.close()
    wait_until(lambda: throttled_total(broker, "produce") >= 1, "the throttle metric")


def test_a_request_behind_a_throttled_produce_waits_for_its_answer_and_the_throttle(broker):
    """A produce over its quota keeps the connection's next request back until its answer is out
    and then for its throttle (Kafka reads nothing from a channel with a request in flight, then
    mutes it, KIP-219), though an unthrottled produce lets the next start once it has appended."""
    wire, probe = Wire(broker.port), Wire(broker.port)
    E = AlterClientQuotasRequest.EntryData
    answer = wire.call(AlterClientQuotasRequest(validate_only=False, entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name="muted-pipeline")],
        ops=[E.OpData(key="producer_byte_rate", value=1000.0, remove=False)])]), 1)
    assert [e.error_code for e in answer.entries] == [0]
    T = ProduceRequest.TopicProduceData

    def produce_request(size: int):
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
        builder.append(timestamp=None, key=b"k", value=b"x" * size, headers=[])
        builder.close()
        return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            T(name="pipelined", partition_data=[T.PartitionProduceData(index=0, records=bytes(builder.buffer()))])])

    create_topic(broker, "pipelined")
    try:
        started = time.monotonic()
        sent = wire.send([(produce_request(1500), 9), (produce_request(10), 9)], client_id="muted-pipeline")
        [throttled] = wire.answers(sent[:1])
        assert 400 <= throttled.throttle_time_ms <= 900
        [second] = wire.answers(sent[1:])
        assert second.responses[0].partition_responses[0].error_code == 0
        # the second began after the first's answer and its throttle: a lower bound a loaded
        # machine only exceeds (had it started during the first's durable wait, its answer would
        # have followed the first's within that sync)
        assert time.monotonic() - started >= 0.95 * throttled.throttle_time_ms / 1000.0   # timers: ms grain
        assert list_offset(probe, "pipelined", -1)[0] == 2
    finally:
        wire.close()
        probe.close()


def test_byte_rate_quotas_throttle_the_named_clients_only(broker):
    described, altered = quotas(broker, set={"slow": {"producer_byte_rate": 10000, "consumer_byte_rate": 10000}})
    assert [a["errorCode"] for a in altered] == [0]
    assert described["slow"] == {"producer_byte_rate": 10000, "consumer_byte_rate": 10000}

    assert max_throttle(produce_all(broker, "free", "free")) == 0
    assert max_throttle(produce_all(broker, "slow", "slow")) > 0   # librdkafka saw throttle_time_ms
    assert throttled_total(broker, "produce") >= 1

    stats: list[dict] = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow", "group.id": "quota-readers",
                  "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
    c.assign([TopicPartition("slow", 0, 0)])
    seen = set()
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < 20 and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            if m.error() is None:
                seen.add(m.offset())
    c.close()
    assert seen == set(range(20))                               # throttled, never lost
    assert max_throttle(stats) > 0 and throttled_total(broker, "fetch") >= 1

    broker.restart()                                            # persisted before the answer
    # one node process: describe after the restart, then remove
    after, removed = node_step("platformatic_client.js", broker, "sequence", {"steps": [
        ["quotas", {}], ["quotas", {"remove": {"slow": ["producer_byte_rate", "consumer_byte_rate"]}}]]})
    assert _described(after)["slow"] == {"producer_byte_rate": 10000, "consumer_byte_rate": 10000}
    assert "slow" not in _described(removed)
