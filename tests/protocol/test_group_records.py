"""Golden-byte tests of the __consumer_offsets key/value codecs (layouts from Kafka's schema JSON)."""
import pytest

from kompakt.protocol import group_records as gr


def test_offset_commit_key_golden():
    data = gr.encode_offset_commit_key("g1", "t", 3)
    assert data == bytes.fromhex(
        "0001"          # key version 1 -> OffsetCommitKey
        "0002" "6731"   # group "g1"
        "0001" "74"     # topic "t"
        "00000003")     # partition 3
    assert gr.decode_key(data) == {"type": "offset_commit", "version": 1, "group": "g1",
                                   "topic": "t", "partition": 3}


def test_offset_commit_key_version0_decodes():
    data = bytes.fromhex("0000" "0001" "67" "0001" "74" "00000000")
    assert gr.decode_key(data)["type"] == "offset_commit"
    assert gr.decode_key(data)["version"] == 0


def test_group_metadata_key_golden():
    data = gr.encode_group_metadata_key("grp")
    assert data == bytes.fromhex("0002" "0003" "677270")  # version 2, group "grp"
    assert gr.decode_key(data) == {"type": "group_metadata", "version": 2, "group": "grp"}


def test_unknown_key_type_is_named_not_decoded():
    # type 9: a share group record (Kompakt has no share groups); 3-8 and 16 are KIP-848's
    assert gr.decode_key(bytes.fromhex("0009" "0001" "61")) == {"type": "unknown", "version": 9}
    assert gr.decode_value(bytes.fromhex("0009" "0001" "61"), b"\x00\x00") is None
    assert gr.decode_key(bytes.fromhex("0003" "0001" "61")) == {
        "type": "consumer_group_metadata", "version": 3, "group": "a"}


def test_offset_commit_value_v3_golden():
    data = gr.encode_offset_commit_value(42, "md", 1000, leader_epoch=7)
    assert data == bytes.fromhex(
        "0003"                  # value version 3 (Kafka 4 default)
        "000000000000002a"      # offset 42
        "00000007"              # leaderEpoch 7
        "0002" "6d64"           # metadata "md"
        "00000000000003e8")     # commitTimestamp 1000
    key = gr.decode_key(gr.encode_offset_commit_key("g", "t", 0))
    assert gr.decode_value(key, data) == {"version": 3, "offset": 42, "leader_epoch": 7,
                                          "metadata": "md", "commit_timestamp": 1000,
                                          "expire_timestamp": -1}


def test_offset_commit_value_v1_with_expire_timestamp():
    data = gr.encode_offset_commit_value(5, "", 10, expire_timestamp=20)
    assert data == bytes.fromhex(
        "0001"                  # version 1: the only one with expireTimestamp
        "0000000000000005"      # offset
        "0000"                  # metadata ""
        "000000000000000a"      # commitTimestamp 10
        "0000000000000014")     # expireTimestamp 20
    v = gr.decode_value({"type": "offset_commit"}, data)
    assert (v["expire_timestamp"], v["leader_epoch"]) == (20, -1)


def test_offset_commit_value_v4_flexible_golden():
    data = gr.encode_offset_commit_value(1, "m", 2, leader_epoch=3, version=4)
    assert data == bytes.fromhex(
        "0004"                  # version 4 (flexible)
        "0000000000000001"      # offset
        "00000003"              # leaderEpoch
        "02" "6d"               # COMPACT_STRING "m" (varint len+1)
        "0000000000000002"      # commitTimestamp
        "00")                   # no tagged fields
    assert gr.decode_value({"type": "offset_commit"}, data)["metadata"] == "m"
    # an unknown tagged field (tag 5, 2 bytes) is skipped
    tagged = data[:-1] + bytes.fromhex("01" "05" "02" "abcd")
    assert gr.decode_value({"type": "offset_commit"}, tagged)["offset"] == 1


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_value_roundtrip_all_versions(version):
    data = gr.encode_offset_commit_value(99, "meta", 123, leader_epoch=4, expire_timestamp=456,
                                         version=version)
    v = gr.decode_value({"type": "offset_commit"}, data)
    assert v["version"] == version and v["offset"] == 99 and v["metadata"] == "meta"
    assert v["leader_epoch"] == (4 if version >= 3 else -1)
    assert v["expire_timestamp"] == (456 if version == 1 else -1)


MEMBER = {"member_id": "m-1", "group_instance_id": "i1", "client_id": "c", "client_host": "/h",
          "rebalance_timeout": 300, "session_timeout": 100, "subscription": b"\x01",
          "assignment": b"\x02\x03"}


def test_group_metadata_value_v3_golden():
    data = gr.encode_group_metadata_value("consumer", 5, "range", "m-1", [MEMBER],
                                          current_state_timestamp=77)
    assert data == bytes.fromhex(
        "0003"                          # version 3
        "0008" "636f6e73756d6572"       # protocolType "consumer"
        "00000005"                      # generation 5
        "0005" "72616e6765"             # protocol "range"
        "0003" "6d2d31"                 # leader "m-1"
        "000000000000004d"              # currentStateTimestamp 77
        "00000001"                      # 1 member
        "0003" "6d2d31"                 #   memberId
        "0002" "6931"                   #   groupInstanceId "i1"
        "0001" "63"                     #   clientId "c"
        "0002" "2f68"                   #   clientHost "/h"
        "0000012c"                      #   rebalanceTimeout 300
        "00000064"                      #   sessionTimeout 100
        "00000001" "01"                 #   subscription
        "00000002" "0203")              #   assignment
    v = gr.decode_value(gr.encode_group_metadata_key("g"), data)
    assert v == {"version": 3, "protocol_type": "consumer", "generation": 5, "protocol": "range",
                 "leader": "m-1", "current_state_timestamp": 77, "members": [MEMBER]}


def test_group_metadata_value_empty_group_null_protocol():
    data = gr.encode_group_metadata_value("consumer", 2, None, None, [], 5)
    assert data == bytes.fromhex("0003" "0008636f6e73756d6572" "00000002" "ffff" "ffff"
                                 "0000000000000005" "00000000")
    v = gr.decode_value({"type": "group_metadata"}, data)
    assert v["protocol"] is None and v["leader"] is None and v["members"] == []


def test_group_metadata_value_v4_flexible_golden():
    member = dict(MEMBER, group_instance_id=None)
    data = gr.encode_group_metadata_value("c", 1, "p", "m", [member], 0, version=4)
    assert data == bytes.fromhex(
        "0004" "0263" "00000001" "0270" "026d" "0000000000000000"
        "02"                    # COMPACT_ARRAY of 1
        "046d2d31" "00" "0263" "032f68" "0000012c" "00000064" "0201" "030203"
        "00"                    # member tagged fields
        "00")                   # top-level tagged fields
    assert gr.decode_value({"type": "group_metadata"}, data)["members"] == [member]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_roundtrip_all_versions(version):
    data = gr.encode_group_metadata_value("consumer", 9, "rr", "m-1", [MEMBER], 11, version=version)
    v = gr.decode_value({"type": "group_metadata"}, data)
    m = v["members"][0]
    assert v["generation"] == 9 and m["assignment"] == b"\x02\x03"
    assert m["group_instance_id"] == ("i1" if version >= 3 else None)
    assert m["rebalance_timeout"] == (300 if version >= 1 else -1)
    assert v["current_state_timestamp"] == (11 if version >= 2 else -1)


def test_tombstone_value_is_none():
    assert gr.decode_value(gr.encode_group_metadata_key("g"), None) is None


@pytest.mark.parametrize("bad", [b"", b"\x00", bytes.fromhex("0001" "0005" "6731")])
def test_truncated_key_rejected(bad):
    with pytest.raises(gr.GroupRecordError):
        gr.decode_key(bad)


def test_trailing_bytes_rejected():
    with pytest.raises(gr.GroupRecordError):
        gr.decode_key(gr.encode_group_metadata_key("g") + b"\x00")
    with pytest.raises(gr.GroupRecordError):
        gr.decode_value({"type": "offset_commit"}, gr.encode_offset_commit_value(1, "", 1) + b"x")


def test_unknown_value_version_rejected():
    with pytest.raises(gr.GroupRecordError):
        gr.decode_value({"type": "offset_commit"}, bytes.fromhex("0009") + bytes(30))


def test_java_string_hash_known_values():
    assert gr.java_string_hash("") == 0
    assert gr.java_string_hash("hello") == 99162322
    assert gr.java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert gr.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # surrogate pair


def test_partition_for_uses_utils_abs():
    assert gr.partition_for("polygenelubricants", 50) == 0     # Utils.abs(MIN_VALUE) == 0
    assert gr.partition_for("hello", 50) == 99162322 % 50
    neg = "this-hashes-negative-probably"
    h = gr.java_string_hash(neg)
    assert gr.partition_for(neg, 7) == abs(h) % 7
