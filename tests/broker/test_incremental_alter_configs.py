"""IncrementalAlterConfigs (key 44): golden bytes (v1) and SET/DELETE/APPEND/SUBTRACT semantics."""
import logging

from kafka.protocol.admin.configs import IncrementalAlterConfigsRequest

from admin_harness import cs, framed, h, s16

from kompakt.storage import TopicPartition

R = IncrementalAlterConfigsRequest.AlterConfigsResource
C = R.AlterableConfig
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def alter(h, name, *ops, rtype=2, validate_only=False, version=1):
    resource = R(resource_type=rtype, resource_name=name,
                 configs=[C(name=k, config_operation=op, value=v) for k, op, v in ops])
    request = IncrementalAlterConfigsRequest(resources=[resource], validate_only=validate_only)
    (result,) = (await h.call(request, version)).responses
    return result


async def test_golden_v1_append(h):
    h.create("t1")
    request = (
        bytes.fromhex("002c 0001 00000006") + s16("test") + b"\x00"   # header v2: IncrementalAlterConfigs v1
        + b"\x02"                                  # resources: 1
        + b"\x02" + cs("t1")                       #   resource_type TOPIC, resource_name
        + b"\x02"                                  #   configs: 1
        + cs("cleanup.policy") + b"\x02"           #     name, config_operation APPEND
        + cs("compact") + b"\x00"                  #     value, tagged fields
        + b"\x00"                                  #   tagged fields
        + b"\x00"                                  # validate_only false
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("00000006") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # responses: 1
        + bytes.fromhex("0000") + cs(None)         #   error_code NONE, error_message null
        + b"\x02" + cs("t1") + b"\x00"             #   resource_type, resource_name, tagged fields
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected
    assert h.lm.topics["t1"].configs == {"cleanup.policy": "delete,compact"}
    log = h.lm.get_log(TopicPartition("t1", 0))
    assert log.config.compact and log.config.delete


async def test_set_delete_subtract_keep_other_overrides(h):
    h.create("t", 1, {"cleanup.policy": "compact,delete", "retention.ms": "100", "segment.ms": "5000"})
    r = await alter(h, "t", ("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None),
                    ("max.message.bytes", SET, "2048"))
    assert r.error_code == 0
    assert h.lm.topics["t"].configs == {"cleanup.policy": "compact", "segment.ms": "5000",
                                        "max.message.bytes": "2048"}
    assert h.lm.get_log(TopicPartition("t", 0)).config.max_message_bytes == 2048
    # APPEND of an item already present changes nothing
    assert (await alter(h, "t", ("cleanup.policy", APPEND, "compact"))).error_code == 0
    assert h.lm.topics["t"].configs["cleanup.policy"] == "compact"


async def test_errors_change_nothing(h):
    h.create("t", 1, {"retention.ms": "100"})
    r = await alter(h, "t", ("retention.ms", APPEND, "5"))
    assert r.error_code == 40 and r.error_message == "Can't APPEND to key retention.ms because its type is not LIST."
    r = await alter(h, "t", ("retention.ms", SET, "x"), ("segment.ms", SET, "1000"))
    assert r.error_code == 40
    r = await alter(h, "t", ("retention.ms", SET, None))
    assert r.error_code == 42
    r = await alter(h, "t", ("retention.ms", 9, "1"))
    assert r.error_code == 42 and "Unknown operations type" in r.error_message
    r = await alter(h, "t", ("segment.ms", SET, "1000"), validate_only=True)
    assert r.error_code == 0
    r = await alter(h, "nope", ("segment.ms", SET, "1000"))
    assert r.error_code == 3
    assert h.lm.topics["t"].configs == {"retention.ms": "100"}


async def test_broker_and_logger_resources(h):
    r = await alter(h, "1", ("log.retention.hours", SET, "1"), rtype=4)
    assert r.error_code == 42 and "log.retention.hours" in r.error_message
    r = await alter(h, "1", ("kompakt.broker.handlers", SET, "WARN"), rtype=8)
    assert r.error_code == 0
    assert logging.getLogger("kompakt.broker.handlers").level == logging.WARNING
    r = await alter(h, "1", ("kompakt.broker.handlers", DELETE, None), rtype=8)
    assert r.error_code == 0 and logging.getLogger("kompakt.broker.handlers").level == logging.NOTSET
    r = await alter(h, "1", ("kompakt.storage", SET, "LOUD"), rtype=8)
    assert r.error_code == 40
    r = await alter(h, "1", ("other.lib", SET, "INFO"), rtype=8)
    assert r.error_code == 40


async def test_concurrent_alters_of_one_topic_lose_nothing(h):
    """Two clients alter different keys at once: both changes land (the read-modify-write of the
    override set is serialised, as Kafka's controller serialises config changes)."""
    import asyncio
    h.create("t")
    results = await asyncio.gather(
        alter(h, "t", ("cleanup.policy", APPEND, "compact")),
        alter(h, "t", ("retention.ms", SET, "1000")),
        alter(h, "t", ("segment.ms", SET, "2000")))
    assert [r.error_code for r in results] == [0, 0, 0]
    assert h.lm.topics["t"].configs == {"cleanup.policy": "delete,compact", "retention.ms": "1000",
                                        "segment.ms": "2000"}
