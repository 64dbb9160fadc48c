"""CreatePartitions (key 37): golden bytes (v3) and INVALID_PARTITIONS / validate-only rules."""
from kafka.protocol.admin.topics import CreatePartitionsRequest

from admin_harness import cs, framed, h, s16

CP = CreatePartitionsRequest.CreatePartitionsTopic


async def grow(h, *topics, validate_only=False, version=3):
    request = CreatePartitionsRequest(topics=list(topics), timeout_ms=30000, validate_only=validate_only)
    return {r.name: r for r in (await h.call(request, version)).results}


async def test_golden_v3(h):
    h.create("t1", 2)
    request = (
        bytes.fromhex("0025 0003 00000009") + s16("test") + b"\x00"   # header v2: CreatePartitions v3, corr 9
        + b"\x02"                                  # topics: 1
        + cs("t1")                                 #   name
        + bytes.fromhex("00000004")                #   count 4
        + b"\x00"                                  #   assignments: null
        + b"\x00"                                  #   tagged fields
        + bytes.fromhex("00007530")                # timeout_ms
        + b"\x00"                                  # validate_only false
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("00000009") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # results: 1
        + cs("t1") + bytes.fromhex("0000")         #   name, error_code NONE
        + cs(None) + b"\x00"                       #   error_message null, tagged fields
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected
    assert h.lm.topics["t1"].partitions == 4


async def test_not_an_increase(h):
    h.create("t", 3)
    results = await grow(h, CP(name="t", count=3, assignments=None), CP(name="u", count=2, assignments=None))
    assert results["t"].error_code == 37 and results["t"].error_message == "Topic already has 3 partition(s)."
    assert results["u"].error_code == 3
    results = await grow(h, CP(name="t", count=1, assignments=None), version=0)
    assert results["t"].error_code == 37 and "would not be an increase" in results["t"].error_message
    assert h.lm.topics["t"].partitions == 3


async def test_validate_only_and_assignments(h):
    h.create("t", 1)
    A = CP.CreatePartitionsAssignment
    assert (await grow(h, CP(name="t", count=5, assignments=None), validate_only=True))["t"].error_code == 0
    assert h.lm.topics["t"].partitions == 1
    bad = await grow(h, CP(name="t", count=3, assignments=[A(broker_ids=[1])]))
    assert bad["t"].error_code == 39
    good = await grow(h, CP(name="t", count=3, assignments=[A(broker_ids=[1]), A(broker_ids=[1])]))
    assert good["t"].error_code == 0 and h.lm.topics["t"].partitions == 3


async def test_duplicates(h):
    h.create("t", 1)
    request = CreatePartitionsRequest(topics=[CP(name="t", count=2, assignments=None)] * 2, timeout_ms=1,
                                      validate_only=False)
    results = (await h.call(request, 3)).results
    assert [(r.name, r.error_code) for r in results] == [("t", 42)]
    assert h.lm.topics["t"].partitions == 1


async def test_internal_topic_is_not_grown(h):
    h.create("__consumer_offsets", 3)
    results = await grow(h, CP(name="__consumer_offsets", count=6, assignments=None))
    assert results["__consumer_offsets"].error_code == 42
    assert h.lm.topics["__consumer_offsets"].partitions == 3
