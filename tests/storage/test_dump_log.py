"""`kompakt dump-log`: golden text for a small log and its indexes, --json, checkpoints, problems."""
import io
import json
import os
import struct

import pytest

from kompakt.protocol import records as R
from kompakt.storage import dump_log
from kompakt.storage.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile

TS = 1_700_000_000_000


def run(*argv):
    import argparse
    parser = argparse.ArgumentParser()
    dump_log.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = dump_log.run(parser.parse_args([str(a) for a in argv]), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def segment(tmp_path):
    """Three batches at offsets 0-1, 2 (idempotent), 3 (COMMIT marker), then 5 torn bytes."""
    b1 = R.build_batch([(b"k1", b"v1"), (b"k2", None, [("h", b"x")])], base_offset=0, base_timestamp=TS)
    b2 = R.build_batch([(b"k3", b"v3")], base_offset=2, base_timestamp=TS + 5, producer_id=7,
                       producer_epoch=1, base_sequence=0)
    marker_key = struct.pack(">hh", 0, 1)  # version 0, COMMIT
    marker_value = struct.pack(">hi", 0, 4)  # version 0, coordinatorEpoch 4
    b3 = R.build_batch([(marker_key, marker_value)], base_offset=3, base_timestamp=TS + 9, producer_id=7,
                       producer_epoch=1, is_transactional=True, is_control=True)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b1 + b2 + b3 + b"\x00" * 5)
    # index: offset 2 at the position of batch 2; time index: (TS+5, 2), (TS+9, 3)
    (tmp_path / "00000000000000000000.index").write_bytes(struct.pack(">ii", 2, len(b1)) + b"\x00" * 16)
    (tmp_path / "00000000000000000000.timeindex").write_bytes(
        struct.pack(">qi", TS + 5, 2) + struct.pack(">qi", TS + 9, 3) + b"\x00" * 24)
    return tmp_path, len(b1), len(b2), len(b3)


def test_golden_log_text(segment):
    d, s1, s2, s3 = segment
    b = [R.read_header(open(d / "00000000000000000000.log", "rb").read(), p) for p in (0, s1, s1 + s2)]
    code, out, err = run(d / "00000000000000000000.log", "--deep-iteration", "--print-data-log")
    assert code == 0 and err == ""
    expected = f"""Dumping {d}/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {TS} size: {s1} magic: 2 compresscodec: none crc: {b[0].crc} isvalid: true
| offset: 0 CreateTime: {TS} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k1 payload: v1
| offset: 1 CreateTime: {TS} keySize: 2 valueSize: -1 sequence: -1 headerKeys: [h] key: k2
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 0 lastSequence: 0 producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: {s1} CreateTime: {TS + 5} size: {s2} magic: 2 compresscodec: none crc: {b[1].crc} isvalid: true
| offset: 2 CreateTime: {TS + 5} keySize: 2 valueSize: 2 sequence: 0 headerKeys: [] key: k3 payload: v3
baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: {s1 + s2} CreateTime: {TS + 9} size: {s3} magic: 2 compresscodec: none crc: {b[2].crc} isvalid: true
| offset: 3 CreateTime: {TS + 9} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 4
Found 5 invalid bytes at the end of 00000000000000000000.log
"""
    assert out == expected
    assert s1 == 85  # 61-byte header + two records; pins the golden layout


def test_shallow_and_max_bytes(segment):
    d, s1, s2, s3 = segment
    code, out, _ = run(d / "00000000000000000000.log", "--max-bytes", s1 + 10)
    lines = out.splitlines()
    assert len(lines) == 3 and lines[2].startswith("baseOffset: 0 lastOffset: 1")
    assert "invalid bytes" not in out  # Kafka only reports trailing bytes when reading the whole file


def test_crc_flip_reports_invalid(segment):
    d, s1, *_ = segment
    path = d / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[s1 - 1] ^= 0xFF  # last byte of the first batch's records
    path.write_bytes(bytes(data))
    _, out, _ = run(path)
    assert "lastOffset: 1" in out.splitlines()[2] and out.splitlines()[2].endswith("isvalid: false")
    assert out.splitlines()[3].endswith("isvalid: true")


def test_json(segment):
    d, s1, s2, s3 = segment
    code, out, _ = run(d / "00000000000000000000.log", "--json", "--deep-iteration")
    doc = json.loads(out)
    assert doc["type"] == "log" and doc["start_offset"] == 0 and doc["trailing_invalid_bytes"] == 5
    assert [b["baseOffset"] for b in doc["batches"]] == [0, 2, 3]
    assert [r["offset"] for b in doc["batches"] for r in b["records"]] == [0, 1, 2, 3]
    assert doc["batches"][2]["records"][0]["endTxnMarker"] == "COMMIT"
    assert "key" not in doc["batches"][0]["records"][0]  # no --print-data-log


def test_indexes_and_verification(segment):
    d, s1, *_ = segment
    code, out, err = run(d / "00000000000000000000.index", d / "00000000000000000000.timeindex")
    assert out.splitlines() == [
        f"Dumping {d}/00000000000000000000.index", f"offset: 2 position: {s1}",
        f"Dumping {d}/00000000000000000000.timeindex", f"timestamp: {TS + 5} offset: 2",
        f"timestamp: {TS + 9} offset: 3"]
    assert err == ""
    # a bad entry: offset 1 does not end the batch at that position
    (d / "00000000000000000000.index").write_bytes(struct.pack(">ii", 1, s1))
    code, out, err = run(d / "00000000000000000000.index", "--verify-index-only")
    assert out.splitlines() == [f"Dumping {d}/00000000000000000000.index"]
    assert err.splitlines() == [f"Mismatches in :{d}/00000000000000000000.index", "  Index offset: 1, log offset: 2"]


def test_index_sanity_check(segment):
    d, *_ = segment
    _, out, _ = run(d / "00000000000000000000.index", "--index-sanity-check")
    assert out.splitlines()[1] == f"{d}/00000000000000000000.index passed sanity check."
    (d / "00000000000000000000.index").write_bytes(b"\x00" * 9)
    _, out, _ = run(d / "00000000000000000000.index", "--index-sanity-check")
    assert "is corrupt, found 9 bytes" in out


def test_empty_preallocated_index(tmp_path):
    (tmp_path / "00000000000000000100.index").write_bytes(b"\x00" * 80)
    _, out, _ = run(tmp_path / "00000000000000000100.index")
    assert out.splitlines()[1] == f"{tmp_path}/00000000000000000100.index is empty."


def test_preallocated_time_index_of_a_live_partition_is_empty(segment):
    # a running broker's active segment: .timeindex all zeros until its first entry; dumping the
    # partition must not report a timestamp mismatch or an offset missing from the log
    d, *_ = segment
    (d / "00000000000000000000.timeindex").write_bytes(b"\x00" * 12 * 100)
    code, out, err = run(d / "00000000000000000000.timeindex")
    assert code == 0 and out.splitlines()[1] == f"{d}/00000000000000000000.timeindex is empty."
    assert err == ""


def test_checkpoints_and_directory(tmp_path):
    OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).write({("orders", 0): 42})
    LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint")).write([(0, 0), (2, 17)])
    (tmp_path / "log-start-offset-checkpoint").write_bytes(b"garbage")
    (tmp_path / "notes.txt").write_text("hello")
    code, out, err = run(tmp_path)
    assert out.splitlines() == [
        f"Dumping {tmp_path}/leader-epoch-checkpoint", "version: 0 entries: 2",
        "epoch: 0 startOffset: 0", "epoch: 2 startOffset: 17",
        f"Dumping {tmp_path}/log-start-offset-checkpoint",
        f"Dumping {tmp_path}/notes.txt",
        f"Dumping {tmp_path}/recovery-point-offset-checkpoint", "version: 0 entries: 1",
        "topic: orders partition: 0 offset: 42"]
    assert "Corrupt checkpoint" in err and f"Ignoring unknown file {tmp_path}/notes.txt" in err


def test_offsets_decoder(tmp_path):
    from kompakt.protocol import group_records as G
    key = G.encode_offset_commit_key("g", "t", 3)
    value = G.encode_offset_commit_value(42, "meta", TS)
    batch = R.build_batch([(key, value), (key, None)], base_offset=0, base_timestamp=TS)
    (tmp_path / "00000000000000000000.log").write_bytes(batch)
    _, out, _ = run(tmp_path / "00000000000000000000.log", "--offsets-decoder")
    rec = [line for line in out.splitlines() if line.startswith("|")]
    assert rec[0].endswith('key: {"type":"1","data":{"group":"g","topic":"t","partition":3}} '
                           'payload: {"version":"3","data":{"offset":42,"leaderEpoch":-1,"metadata":"meta",'
                           f'"commitTimestamp":{TS}}}}}')
    assert rec[1].endswith("payload: <DELETE>")


def test_transaction_log_decoder(tmp_path):
    from kompakt.protocol import txn_records as T
    key = T.encode_key("tx")
    value = T.encode_value(producer_id=7, producer_epoch=2, timeout_ms=60000, state=1,
                           partitions={"t": [0, 3]}, last_update_ms=TS, start_ms=TS - 5)
    batch = R.build_batch([(key, value), (key, None), (b"\x00\x09", b"")], base_offset=0, base_timestamp=TS)
    (tmp_path / "00000000000000000000.log").write_bytes(batch)
    _, out, _ = run(tmp_path / "00000000000000000000.log", "--transaction-log-decoder")
    rec = [line for line in out.splitlines() if line.startswith("|")]
    assert rec[0].endswith('key: {"type":"0","data":{"transactionalId":"tx"}} payload: {"version":"0","data":'
                           '{"producerId":7,"producerEpoch":2,"transactionTimeoutMs":60000,"transactionStatus":1,'
                           '"transactionPartitions":[{"topic":"t","partitionIds":[0,3]}],'
                           f'"transactionLastUpdateTimestampMs":{TS},"transactionStartTimestampMs":{TS - 5}}}}}')
    assert rec[1].endswith("payload: <DELETE>")
    assert "Unknown record type 9 at offset 2, skipping." in rec[2]


def test_snapshot(tmp_path):
    from kompakt.storage.producer_state import ProducerStateEntry, encode_snapshot
    e = ProducerStateEntry(7, 1)
    e.add_batch(1, 4, 10, 2, TS)
    (tmp_path / "00000000000000000011.snapshot").write_bytes(encode_snapshot([e]))
    _, out, _ = run(tmp_path / "00000000000000000011.snapshot")
    assert out.splitlines()[1] == (f"producerId: 7 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: -1 "
                                   f"lastTimestamp: {TS} firstSequence: 2 lastSequence: 4 lastOffset: 10 "
                                   f"offsetDelta: 2 timestamp: {TS}")


def test_missing_file_is_an_error(tmp_path):
    code, _, err = run(tmp_path / "00000000000000000000.log")
    assert code == 1 and "Cannot dump" in err
    # a mistyped partition dir (no suffix to go by) is an error too, not an "unknown file" skipped
    code, _, err = run(tmp_path / "users-0")
    assert code == 1 and f"Cannot dump {tmp_path}/users-0: no such file or directory" in err
    assert "Ignoring" not in err


def test_cli_entry(segment):
    from kompakt.cli import main
    d, *_ = segment
    assert main(["dump-log", str(d / "00000000000000000000.index")]) == 0


def test_partition_written_by_the_log_manager_verifies_clean(tmp_path):
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.storage.log_manager import LogManager
    m = LogManager(BrokerConfig({"log.dirs": str(tmp_path), "log.segment.bytes": "1000",
                                 "log.index.interval.bytes": "100"}))
    m.startup()
    m.create_topic("t", 1)
    for i in range(30):
        m.append_as_leader(("t", 0), R.build_batch([(b"k%d" % i, b"v" * 20)], base_timestamp=TS + i))
    try:
        code, out, err = run(tmp_path / "t-0", "--verify-index-only")  # active segment: preallocated indexes
        assert code == 0 and err == ""
        code, out, err = run(tmp_path / "t-0" / "00000000000000000000.index")
        entries = [line for line in out.splitlines() if line.startswith("offset: ")]
        assert len(entries) >= 3 and err == ""
    finally:
        m.shutdown()
    code, out, err = run(tmp_path / "t-0", "--index-sanity-check")  # closed: trimmed indexes
    logs = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")]
    assert len(logs) >= 2 and out.count("passed sanity check.") == 2 * len(logs) and err == ""


def test_files_option_deleted_suffix_and_skip_metadata(segment):
    d, *_ = segment
    os.rename(d / "00000000000000000000.log", d / "00000000000000000000.log.deleted")
    code, out, err = run("--files", f"{d}/00000000000000000000.log.deleted", "--print-data-log",
                         "--skip-record-metadata")
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert records[:3] == ["| key: k1 payload: v1", "| key: k2", "| key: k3 payload: v3"]
    assert out.splitlines()[1] == "Log starting offset: 0"


def test_txn_index(tmp_path):
    (tmp_path / "00000000000000000000.txnindex").write_bytes(struct.pack(">hqqqq", 0, 7, 3, 9, 12) + b"\x00")
    code, out, err = run(tmp_path / "00000000000000000000.txnindex")
    assert out.splitlines()[1] == "version: 0 producerId: 7 firstOffset: 3 lastOffset: 9 lastStableOffset: 12"
    assert "not a multiple of 34" in err


def test_compressed_and_log_append_time_batches(tmp_path):
    b = R.build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, base_timestamp=TS,
                      compression=R.COMPRESSION_GZIP)
    b2 = bytearray(R.build_batch([(b"c", b"3")], base_offset=2, base_timestamp=TS))
    R.patch_max_timestamp_log_append(b2, 0, TS + 77)
    (tmp_path / "00000000000000000000.log").write_bytes(b + bytes(b2))
    _, out, _ = run(tmp_path / "00000000000000000000.log", "--deep-iteration")
    lines = out.splitlines()
    assert "compresscodec: gzip" in lines[2] and "isvalid: true" in lines[2]
    assert lines[3].startswith("| offset: 0 CreateTime: ") and lines[4].startswith("| offset: 1 ")
    assert f"LogAppendTime: {TS + 77}" in lines[5] and "compresscodec: none" in lines[5]
    assert lines[6].startswith(f"| offset: 2 LogAppendTime: {TS + 77} ")


def test_topic_store_and_meta_properties(tmp_path):
    import uuid
    from kompakt.storage.topic_store import TopicMeta, TopicStore
    u = uuid.UUID("00000000-0000-0000-0000-000000000002")
    TopicStore(str(tmp_path)).save({"t": TopicMeta("t", u, 3, {"cleanup.policy": "compact"})})
    (tmp_path / "meta.properties").write_text("#\nversion=1\nnode.id=1\ncluster.id=abc\n")
    code, out, err = run(tmp_path / "kompakt-topics.json", tmp_path / "meta.properties")
    assert out.splitlines() == [
        f"Dumping {tmp_path}/kompakt-topics.json",
        "topic: t topicId: AAAAAAAAAAAAAAAAAAAAAg partitions: 3 configs: cleanup.policy=compact",
        f"Dumping {tmp_path}/meta.properties", "cluster.id=abc", "node.id=1", "version=1"]
    assert err == ""


def test_a_reader_that_leaves_early_gets_no_traceback(segment):
    # `kompakt dump-log DIR | head -1`: the command must end quietly when the pipe closes.
    import subprocess
    import sys
    d, *_ = segment
    for i in range(1, 200):   # enough output to outlast the pipe's buffer
        (d / f"{i:020d}.log").write_bytes((d / "00000000000000000000.log").read_bytes())
    proc = subprocess.Popen([sys.executable, "-m", "kompakt", "dump-log", str(d), "--deep-iteration"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()               # the reader leaves, as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert first.startswith(b"Dumping ")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
