"""`__transaction_state` records and end-transaction markers: golden bytes, round trips, errors."""
from __future__ import annotations

import struct

import pytest

from kompakt.protocol import records as R
from kompakt.protocol import txn_records as T


def test_key_golden_bytes():
    data = T.encode_key("my-txn")
    assert data == bytes.fromhex("0000" "0006") + b"my-txn"     # version 0, STRING
    assert T.decode_key(data) == {"version": 0, "transactional_id": "my-txn"}
    assert T.decode_key(bytes.fromhex("0001") + b"xx")["transactional_id"] is None   # unknown key


def test_value_v0_golden_bytes():
    data = T.encode_value(producer_id=1000, producer_epoch=5, timeout_ms=60000, state=1,
                          partitions={"foo": [0, 2]}, last_update_ms=1_700_000_000_123,
                          start_ms=1_700_000_000_000)
    assert data == bytes.fromhex(
        "0000"                          # version 0
        "00000000000003e8"              # producer id 1000
        "0005"                          # epoch 5
        "0000ea60"                      # timeout 60000 ms
        "01"                            # Ongoing
        "00000001"                      # one topic
        "0003" "666f6f"                 # "foo"
        "00000002" "00000000" "00000002"  # partitions [0, 2]
        "0000018bcfe5687b"              # last update
        "0000018bcfe56800")             # start
    v = T.decode_value(data)
    assert (v["producer_id"], v["producer_epoch"], v["timeout_ms"], v["state"]) == (1000, 5, 60000, 1)
    assert v["partitions"] == {"foo": [0, 2]}
    assert (v["last_update_ms"], v["start_ms"]) == (1_700_000_000_123, 1_700_000_000_000)


def test_empty_state_writes_null_partitions_and_tombstones_decode_to_none():
    data = T.encode_value(producer_id=1, producer_epoch=0, timeout_ms=1, state=0, partitions=None,
                          last_update_ms=5, start_ms=-1)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"     # null array
    assert T.decode_value(data)["partitions"] == {}
    assert T.decode_value(None) is None
    with pytest.raises(T.TxnRecordError):
        T.encode_value(producer_id=1, producer_epoch=0, timeout_ms=1, state=0, partitions={"a": [1]},
                       last_update_ms=5, start_ms=-1)


def test_value_v1_flexible_with_tagged_fields():
    # hand-built v1: compact forms, then tags 0 (previous pid), 1 (next pid), 2 (client TV)
    body = (struct.pack(">hqhib", 1, 77, 3, 1000, 2)
            + bytes([2])                                 # compact array: 1 topic
            + bytes([4]) + b"top"                        # compact string "top"
            + bytes([2]) + struct.pack(">i", 9)          # compact array [9]
            + bytes([0])                                 # topic's tagged fields
            + struct.pack(">qq", 11, 10)
            + bytes([3, 0, 8]) + struct.pack(">q", 76)
            + bytes([1, 8]) + struct.pack(">q", 78)
            + bytes([2, 2]) + struct.pack(">h", 2))
    v = T.decode_value(body)
    assert v["version"] == 1 and v["partitions"] == {"top": [9]} and v["state"] == 2
    assert (v["previous_producer_id"], v["next_producer_id"], v["client_transaction_version"]) == (76, 78, 2)


def test_value_v1_golden_bytes_as_transaction_version_1_and_2_write_them():
    data = T.encode_value(producer_id=1000, producer_epoch=6, timeout_ms=60000, state=2,
                          partitions={"foo": [0, 2]}, last_update_ms=1_700_000_000_123,
                          start_ms=1_700_000_000_000, version=1, previous_producer_id=1000,
                          next_producer_id=1001, client_transaction_version=2)
    assert data == bytes.fromhex(
        "0001"                          # version 1 (flexible)
        "00000000000003e8"              # producer id 1000
        "0006"                          # epoch 6
        "0000ea60"                      # timeout 60000 ms
        "02"                            # PrepareCommit
        "02"                            # compact array: 1 topic (length + 1)
        "04" "666f6f"                   # compact string "foo"
        "03" "00000000" "00000002"      # compact array [0, 2]
        "00"                            # the topic entry's tagged fields: none
        "0000018bcfe5687b"              # last update
        "0000018bcfe56800"              # start
        "03"                            # three tagged fields, in tag order:
        "00" "08" "00000000000003e8"    #   tag 0 previous producer id (8 bytes)
        "01" "08" "00000000000003e9"    #   tag 1 next producer id
        "02" "02" "0002")               #   tag 2 client transaction version (2 bytes)
    v = T.decode_value(data)
    assert (v["version"], v["previous_producer_id"], v["next_producer_id"], v["client_transaction_version"]) == (
        1, 1000, 1001, 2)
    # defaults are left out; Empty writes a null array (compact: 0)
    empty = T.encode_value(producer_id=7, producer_epoch=0, timeout_ms=1, state=0, partitions=None,
                           last_update_ms=5, start_ms=-1, version=1)
    assert empty[2 + 8 + 2 + 4 + 1:] == bytes.fromhex("00" "0000000000000005" "ffffffffffffffff" "00")
    assert T.decode_value(empty)["partitions"] == {}
    # lengths past one varint byte (compact: length + 1 as an unsigned varint)
    wide = {"t" * 300: list(range(200)), "é": [7]}
    data = T.encode_value(producer_id=7, producer_epoch=0, timeout_ms=1, state=1, partitions=wide,
                          last_update_ms=5, start_ms=4, version=1)
    assert data[17:20] == bytes.fromhex("03" "ad02") and T.decode_value(data)["partitions"] == wide
    with pytest.raises(T.TxnRecordError):
        T.encode_value(producer_id=7, producer_epoch=0, timeout_ms=1, state=0, partitions=None,
                       last_update_ms=5, start_ms=-1, version=2)


@pytest.mark.parametrize("bad", [b"\x00\x05" + b"\0" * 40, b"\x00\x00\x00", b"\x00\x00" + b"\0" * 14 + b"\x09"])
def test_bad_values_raise(bad):
    with pytest.raises(T.TxnRecordError):
        T.decode_value(bad)


def test_marker_batch_matches_kafkas_layout():
    data = T.marker_batch(42, 3, T.COMMIT, 7, 1_700_000_000_000)
    h = R.read_header(data)
    assert h.is_control and h.is_transactional and h.compression == 0
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (42, 3, -1, 1)
    [rec] = R.decode_records(data, 0, h)
    assert rec.key == bytes.fromhex("0000" "0001")                 # version 0, COMMIT
    assert rec.value == bytes.fromhex("0000" "00000007")           # version 0, coordinator epoch 7
    assert T.decode_marker(data, 0, h) == (T.COMMIT, 7)
    assert T.decode_marker(*_emptied(data)) is None


def _emptied(data):
    h = R.read_header(data)
    empty = R.build_batch([], producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                          is_transactional=True, is_control=True)
    return empty, 0, R.read_header(empty)


@pytest.mark.parametrize("tid, value", [
    ("tx-1", T.encode_value(producer_id=5, producer_epoch=1, timeout_ms=60000, state=1,
                            partitions={"t": [0, 3], "é" * 70: [7]}, last_update_ms=3, start_ms=2)),
    ("x" * 300, None),                        # a tombstone; lengths past one varint byte
])
def test_state_batch_is_build_batchs_bytes(tid, value):
    # hand-built for the hot path; must equal what the general builder makes of the same record
    assert T.state_batch(tid, value, 1_700_000_000_000) == R.build_batch(
        [(T.encode_key(tid), value)], base_timestamp=1_700_000_000_000)


@pytest.mark.parametrize("ctype", [T.ABORT, T.COMMIT])
def test_marker_batch_is_build_batchs_bytes(ctype):
    ref = R.build_batch([(T.CONTROL_KEY.pack(0, ctype), T.MARKER_VALUE.pack(0, 2**31 - 1))],
                        base_timestamp=5, producer_id=2**50, producer_epoch=32766, base_sequence=-1,
                        is_transactional=True, is_control=True)
    assert T.marker_batch(2**50, 32766, ctype, 2**31 - 1, 5) == ref


def test_decode_marker_of_a_compressed_batch_and_a_short_value():
    rec = (T.CONTROL_KEY.pack(0, T.ABORT), T.MARKER_VALUE.pack(0, 9))
    gz = R.build_batch([rec], compression=1, producer_id=1, producer_epoch=0, is_transactional=True,
                       is_control=True)
    assert T.decode_marker(gz, 0, R.read_header(gz)) == (T.ABORT, 9)
    short = R.build_batch([(rec[0], b"\x00\x00\x00")], producer_id=1, producer_epoch=0,
                          is_transactional=True, is_control=True)
    with pytest.raises(T.TxnRecordError, match="Invalid value size"):
        T.decode_marker(short, 0, R.read_header(short))
    other = R.build_batch([(struct.pack(">hh", 0, 5), rec[1])], producer_id=1, producer_epoch=0,
                          is_transactional=True, is_control=True)
    assert T.decode_marker(other, 0, R.read_header(other)) is None        # not a marker type


def test_partition_for_is_kafkas():
    # Utils.abs("my-txn".hashCode()) % 50; the same function as the group coordinator's
    h = 0
    for ch in "my-txn":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    assert T.partition_for("my-txn", 50) == abs(h) % 50
