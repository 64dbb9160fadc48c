"""DescribeCluster (key 60): golden bytes (v0) and endpoint types."""
from kafka.protocol.admin.cluster import DescribeClusterRequest

from admin_harness import cs, framed, h, s16


async def test_golden_v0(h):
    request = (
        bytes.fromhex("003c 0000 0000000a") + s16("test") + b"\x00"   # header v2: DescribeCluster v0, corr 10
        + b"\x01"                                  # include_cluster_authorized_operations true
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("0000000a") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + bytes.fromhex("0000") + cs(None)         # error_code NONE, error_message null
        + cs(h.broker.cluster_id)                  # cluster_id
        + bytes.fromhex("00000001")                # controller_id 1
        + b"\x02"                                  # brokers: 1
        + bytes.fromhex("00000001")                #   broker_id 1
        + cs("127.0.0.1") + bytes.fromhex("00004a94")   # host, port 19092
        + cs(None) + b"\x00"                       #   rack null, tagged fields
        + bytes.fromhex("00001fa0")                # cluster_authorized_operations: bits 5,7-12
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected


async def test_endpoint_types(h):
    r = await h.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2,
                                            include_fenced_brokers=True), 2)
    assert r.error_code == 114 and "CONTROLLER" in r.error_message and r.brokers == []
    r = await h.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=7), 1)
    assert r.error_code == 115
    r = await h.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1,
                                            include_fenced_brokers=True), 2)
    assert r.error_code == 0 and [(b.broker_id, b.is_fenced) for b in r.brokers] == [(1, False)]
    assert r.authorized_operations is None
