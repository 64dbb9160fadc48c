"""AlterConfigs (key 33): golden bytes (v0) and the legacy replace-everything semantics."""
from kafka.protocol.admin.configs import AlterConfigsRequest

from admin_harness import framed, h, s16

from kompakt.storage import TopicPartition

R = AlterConfigsRequest.AlterConfigsResource
C = R.AlterableConfig


async def alter(h, *resources, validate_only=False, version=2):
    request = AlterConfigsRequest(resources=list(resources), validate_only=validate_only)
    return (await h.call(request, version)).responses


def topic(name, **configs):
    return R(resource_type=2, resource_name=name,
             configs=[C(name=k.replace("_", "."), value=v) for k, v in configs.items()])


async def test_golden_v0_replaces_overrides_and_applies_live(h):
    h.create("t1", 1, {"cleanup.policy": "compact", "segment.ms": "60000"})
    request = (
        bytes.fromhex("0021 0000 00000004") + s16("test")   # header v1: AlterConfigs v0, corr 4
        + bytes.fromhex("00000001")                # resources: 1
        + b"\x02" + s16("t1")                      #   resource_type TOPIC, resource_name
        + bytes.fromhex("00000001")                #   configs: 1
        + s16("retention.ms") + s16("1000")        #     name, value
        + b"\x00"                                  # validate_only false
    )
    expected = framed(
        bytes.fromhex("00000004")                  # correlation id
        + bytes.fromhex("00000000")                # throttle_time_ms
        + bytes.fromhex("00000001")                # responses: 1
        + bytes.fromhex("0000") + s16(None)        #   error_code NONE, error_message null
        + b"\x02" + s16("t1")                      #   resource_type, resource_name
    )
    assert await h.send(request) == expected
    assert h.lm.topics["t1"].configs == {"retention.ms": "1000"}
    log = h.lm.get_log(TopicPartition("t1", 0))
    assert log.config.retention_ms == 1000 and not log.config.compact


async def test_validate_only_and_bad_values(h):
    h.create("t", 1, {"retention.ms": "5"})
    (r,) = await alter(h, topic("t", segment_ms="1000"), validate_only=True)
    assert r.error_code == 0 and h.lm.topics["t"].configs == {"retention.ms": "5"}
    (r,) = await alter(h, topic("t", segment_ms="-1"))
    assert r.error_code == 40 and "segment.ms" in r.error_message
    (r,) = await alter(h, R(resource_type=2, resource_name="t", configs=[C(name="retention.ms", value=None)]))
    assert r.error_code == 42 and "Null value" in r.error_message
    (r,) = await alter(h, R(resource_type=2, resource_name="t", configs=[C(name="retention.ms", value="1"),
                                                                     C(name="retention.ms", value="2")]))
    assert r.error_code == 42 and "duplicate" in r.error_message
    assert h.lm.topics["t"].configs == {"retention.ms": "5"}


async def test_resources_errors(h):
    h.create("t")
    results = await alter(h, topic("missing", retention_ms="1"), topic("t", retention_ms="1"),
                          topic("t", retention_ms="2"),
                          R(resource_type=4, resource_name="1", configs=[C(name="log.retention.hours", value="1")]),
                          R(resource_type=8, resource_name="1", configs=[]))
    assert [r.error_code for r in results] == [3, 42, 42, 42, 42]
    assert "server.properties" in results[3].error_message
    assert h.lm.topics["t"].configs == {}
