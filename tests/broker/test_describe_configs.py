"""DescribeConfigs (key 32): golden bytes (v4, synonyms) and topic/broker/logger resources."""
import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest

from admin_harness import Harness, cs, framed, s16

R = DescribeConfigsRequest.DescribeConfigsResource
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, **{"log.retention.minutes": "30"})
    yield harness
    harness.close()


async def describe(h, *resources, synonyms=False, docs=False, version=4):
    request = DescribeConfigsRequest(resources=list(resources), include_synonyms=synonyms,
                                     include_documentation=docs)
    return (await h.call(request, version)).results


async def test_golden_v4_topic_key_with_synonyms(h):
    h.create("t1", 1, {"cleanup.policy": "compact"})
    request = (
        bytes.fromhex("0020 0004 00000003") + s16("test") + b"\x00"   # header v2: DescribeConfigs v4, corr 3
        + b"\x02"                                  # resources: 1
        + b"\x02" + cs("t1")                       #   resource_type TOPIC, resource_name
        + b"\x02" + cs("segment.bytes")            #   configuration_keys: ["segment.bytes"]
        + b"\x00"                                  #   tagged fields
        + b"\x01"                                  # include_synonyms true
        + b"\x00"                                  # include_documentation false
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("00000003") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # results: 1
        + bytes.fromhex("0000") + cs(None)         #   error_code NONE, error_message null
        + b"\x02" + cs("t1")                       #   resource_type, resource_name
        + b"\x02"                                  #   configs: 1
        + cs("segment.bytes") + cs("1073741824")   #     name, value
        + b"\x00"                                  #     read_only false
        + b"\x05"                                  #     config_source DEFAULT_CONFIG
        + b"\x00"                                  #     is_sensitive false
        + b"\x02"                                  #     synonyms: 1
        + cs("log.segment.bytes") + cs("1073741824") + b"\x05" + b"\x00"  # name, value, DEFAULT, tags
        + b"\x03"                                  #     config_type INT
        + cs(None)                                 #     documentation null (not asked)
        + b"\x00"                                  #     tagged fields
        + b"\x00"                                  #   tagged fields
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected


async def test_topic_sources_and_synonym_order(h):
    h.create("t", 1, {"retention.ms": "5000"})
    (result,) = await describe(h, R(resource_type=TOPIC, resource_name="t", configuration_keys=None), synonyms=True)
    rows = {c.name: c for c in result.configs}
    assert rows["retention.ms"].value == "5000" and rows["retention.ms"].config_source == 1
    assert [(s.name, s.value, s.source) for s in rows["retention.ms"].synonyms] == [
        ("retention.ms", "5000", 1), ("log.retention.minutes", "30", 4), ("log.retention.hours", "168", 5)]
    assert rows["cleanup.policy"].config_source == 5 and rows["cleanup.policy"].config_type == 7
    assert "internal.segment.bytes" not in rows
    # without synonyms asked: none sent; the broker's log.retention.minutes shows as STATIC
    h.create("u")
    (result,) = await describe(h, R(resource_type=TOPIC, resource_name="u", configuration_keys=["retention.ms"]))
    (row,) = result.configs
    assert (row.value, row.config_source, row.synonyms) == ("1800000", 4, [])


async def test_documentation_and_v1(h):
    h.create("t")
    (result,) = await describe(h, R(resource_type=TOPIC, resource_name="t", configuration_keys=["segment.ms"]),
                               docs=True)
    assert "Roll" in result.configs[0].documentation
    (result,) = await describe(h, R(resource_type=TOPIC, resource_name="t", configuration_keys=["segment.ms"]),
                               version=1)
    assert result.configs[0].value == "604800000"


async def test_errors_per_resource(h):
    results = await describe(
        h, R(resource_type=TOPIC, resource_name="missing", configuration_keys=None),
        R(resource_type=TOPIC, resource_name="bad/name", configuration_keys=None),
        R(resource_type=BROKER, resource_name="7", configuration_keys=None),
        R(resource_type=BROKER, resource_name="x", configuration_keys=None),
        R(resource_type=16, resource_name="client-metrics", configuration_keys=None),   # CLIENT_METRICS
        R(resource_type=GROUP, resource_name="", configuration_keys=None),
        R(resource_type=GROUP, resource_name="g", configuration_keys=None))
    assert [r.error_code for r in results] == [3, 17, 42, 42, 42, 42, 0]
    assert results[5].error_message == "Group name must not be empty"
    assert [(c.name, c.value) for c in results[6].configs] == [
        ("consumer.session.timeout.ms", "45000"), ("consumer.heartbeat.interval.ms", "5000")]
    assert "expected 1 or empty string" in results[2].error_message


async def test_broker_resource(h):
    (result,) = await describe(h, R(resource_type=BROKER, resource_name="1", configuration_keys=None), synonyms=True)
    rows = {c.name: c for c in result.configs}
    assert rows["log.retention.minutes"].value == "30" and rows["log.retention.minutes"].config_source == 4
    assert rows["num.partitions"].config_source == 5 and rows["num.partitions"].read_only
    # Kafka's ConfigHelper.configSynonyms drops the other spellings' entries before the key's own
    assert [(s.name, s.source) for s in rows["log.retention.hours"].synonyms] == [("log.retention.hours", 5)]
    assert rows["log.retention.ms"].synonyms == [] and rows["log.retention.ms"].config_source == 5
    assert [(s.name, s.value, s.source) for s in rows["log.retention.minutes"].synonyms] == [
        ("log.retention.minutes", "30", 4), ("log.retention.hours", "168", 5)]
    (result,) = await describe(h, R(resource_type=BROKER, resource_name="", configuration_keys=None))
    assert result.error_code == 0 and result.configs == []


async def test_broker_logger_resource(h):
    import logging
    logging.getLogger("kompakt.storage").setLevel(logging.DEBUG)
    (result,) = await describe(h, R(resource_type=BROKER_LOGGER, resource_name="1",
                                    configuration_keys=["kompakt.storage", "root"]))
    rows = {c.name: c.value for c in result.configs}
    assert rows["kompakt.storage"] == "DEBUG" and "root" in rows
