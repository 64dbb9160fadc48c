"""`group.coordinator.rebalance.protocols` (Kafka's GroupCoordinatorConfig / KafkaApis).

* Without `consumer`: ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION
  (before any ACL check, as Kafka's isConsumerGroupProtocolEnabled gate), while both stay in
  ApiVersions as Kafka keeps them; librdkafka's `group.protocol=consumer` member reports it as a
  fatal error, its classic members still form groups.
* Bad values stop the start with a clear message: an unknown protocol name, or a list without
  `classic` ("Disabling the 'classic' protocol is not supported").
"""
from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaError

from groups_support import create_topic, produce
from wire_support import Wire, heartbeat_request, req

CLASSIC_ONLY = {"group.coordinator.rebalance.protocols": "classic", "offsets.topic.num.partitions": "1",
                "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def classic_only(tmp_path_factory):
    from broker_process import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("classic-only"), CLASSIC_ONLY).start()
    yield b
    b.kill()


def test_consumer_protocol_apis_answer_unsupported_version(classic_only):
    w = Wire(classic_only.port)
    versions = {k.api_key: (k.min_version, k.max_version) for k in w.call(req(18), 3).api_keys}
    assert versions.get(68) == (0, 1) and versions.get(69) == (0, 1)   # still advertised, as Kafka does
    for v in (0, 1):
        hb = w.call(heartbeat_request("g", "m" if v else "", 0, ["t"]), v)
        assert (hb.error_code, hb.error_message, hb.member_epoch) == (KafkaError.UNSUPPORTED_VERSION, None, 0)
        described = w.call(req(69, group_ids=["a", "b"], include_authorized_operations=False), v)
        assert [(g.group_id, g.error_code) for g in described.groups] == [
            ("a", KafkaError.UNSUPPORTED_VERSION), ("b", KafkaError.UNSUPPORTED_VERSION)]


def test_librdkafka_consumer_protocol_member_is_refused_classic_works(classic_only):
    create_topic(classic_only.bootstrap, "proto-t", 2)
    produce(classic_only.bootstrap, "proto-t", ["a", "b", "c", "d"], 2)

    def run(protocol: str):
        c = Consumer({"bootstrap.servers": classic_only.bootstrap, "group.id": f"proto-{protocol}",
                      "group.protocol": protocol, "auto.offset.reset": "earliest"})
        got = []
        try:
            c.subscribe(["proto-t"])
            for _ in range(120):
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    return msg.error()
                got.append(msg.value())
                if len(got) == 4:
                    return sorted(got)
            return got
        finally:
            c.close()
    err = run("consumer")
    assert isinstance(err, KafkaError) and err.code() == KafkaError._FATAL, err
    assert "ConsumerGroupHeartbeat" in err.str() and "not supported" in err.str().lower(), err.str()
    assert run("classic") == [b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize("value, message", [
    ("classic,bogus", "Invalid value bogus for configuration group.coordinator.rebalance.protocols"),
    ("consumer", "Disabling the 'classic' protocol is not supported"),
])
def test_bad_values_stop_the_start_with_a_clear_message(tmp_path, value, message):
    proc = subprocess.run(
        [sys.executable, "-m", "kompakt", "serve", "--override", f"log.dirs={tmp_path / 'data'}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "metrics.port=0",
         "--override", f"group.coordinator.rebalance.protocols={value}"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout, proc.stderr[-2000:]
