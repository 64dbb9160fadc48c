"""Crash safety: SIGKILL a process appending through a LogManager, restart, and check that every
batch whose append returned and was flushed is there and readable (and the log is usable)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R
from kompakt.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

CHILD = textwrap.dedent("""
    import sys
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.protocol import records as R
    from kompakt.storage.log_manager import LogManager

    log_dir, flush_every = sys.argv[1], int(sys.argv[2])
    m = LogManager(BrokerConfig({"log.dirs": log_dir, "log.segment.bytes": "2000",
                                  "log.index.size.max.bytes": "4096"}))
    m.startup()
    if "crash" not in m.topics:
        m.create_topic("crash", 2, {"internal.segment.bytes": "1500"})
    i = 0
    while True:
        p = i % 2
        plog = m.get_log(("crash", p))
        value = b"value-%08d-" % i + b"x" * (i % 50)
        info = plog.append_as_leader(R.build_batch([(b"key-%d" % i, value)]))
        if i % flush_every == 0:
            plog.flush()
            print("acked", p, info.first_offset, value.decode(), flush=True)
        i += 1
""")


def read_all(plog):
    """offset -> value of every record, reading segment by segment as a consumer would."""
    out = {}
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        assert data, f"no data at offset {offset} below the log end {plog.log_end_offset}"
        for pos, header in R.iter_batches(data):
            assert R.valid_crc(data, pos, header)
            for rec in R.decode_records(data, pos, header):
                out[header.base_offset + rec.offset_delta] = bytes(rec.value)
            offset = header.next_offset
    return out


@pytest.mark.parametrize("flush_every", [1, 3])
def test_sigkill_mid_appends_keeps_every_flushed_batch(tmp_path, flush_every):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log_dir = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, str(script), str(log_dir), str(flush_every)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    try:
        for line in proc.stdout:
            _, p, offset, value = line.split()
            acked.append((int(p), int(offset), value.encode()))
            if len(acked) >= 60:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert len(acked) >= 60, err
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    m = LogManager(BrokerConfig({"log.dirs": str(log_dir), "log.segment.bytes": "2000",
                                 "log.index.size.max.bytes": "4096"}))
    m.startup()
    try:
        assert m.had_clean_shutdown == {str(log_dir): False}
        contents = {p: read_all(m.get_log(("crash", p))) for p in (0, 1)}
        for p, offset, value in acked:
            assert contents[p].get(offset) == value, (p, offset)
        for p in (0, 1):
            plog = m.get_log(("crash", p))
            assert len(plog.segments) > 1  # the run rolled segments, so recovery crossed them
            assert sorted(contents[p]) == list(range(plog.log_start_offset, plog.log_end_offset))
            info = plog.append_as_leader(R.build_batch([(b"after", b"restart")]))
            assert info.first_offset == plog.log_end_offset - 1
    finally:
        m.shutdown()


def test_torn_tail_is_truncated_and_earlier_batches_survive(tmp_path):
    log_dir = tmp_path / "logs"
    cfg = BrokerConfig({"log.dirs": str(log_dir)})
    m = LogManager(cfg)
    m.startup()
    m.create_topic("t", 1)
    for i in range(5):
        m.append_as_leader(("t", 0), R.build_batch([(b"k", b"v%d" % i)]))
    m.shutdown()
    seg = log_dir / "t-0" / "00000000000000000000.log"
    whole = R.build_batch([(b"k", b"torn")], base_offset=5)
    with open(seg, "ab") as fh:  # a write torn by the crash: half a batch at the end
        fh.write(whole[: len(whole) // 2])
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    m2 = LogManager(cfg)
    m2.startup()
    try:
        plog = m2.get_log(("t", 0))
        assert plog.log_end_offset == 5
        assert [read_all(plog)[o] for o in range(5)] == [b"v%d" % i for i in range(5)]
        assert any("truncated" in r for r in m2.repairs)
    finally:
        m2.shutdown()


RETENTION_CHILD = textwrap.dedent("""
    import sys
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.protocol import records as R
    from kompakt.storage.log_manager import LogManager

    log_dir = sys.argv[1]
    m = LogManager(BrokerConfig({"log.dirs": log_dir, "log.index.size.max.bytes": "4096",
                                  "log.segment.delete.delay.ms": "3600000"}))
    m.startup()
    m.create_topic("ret", 1, {"internal.segment.bytes": "600", "retention.bytes": "1500"})
    plog = m.get_log(("ret", 0))
    i = 0
    while True:
        info = plog.append_as_leader(R.build_batch([(b"key-%d" % i, b"value-%08d" % i + b"x" * 30)]))
        plog.flush()
        if i % 5 == 4:
            m.cleanup_logs()           # segments renamed .deleted, unlinks pending for an hour
            m.checkpoint_log_start_offsets()
        print("acked", info.first_offset, plog.log_start_offset, flush=True)
        i += 1
""")


def test_sigkill_during_retention_keeps_everything_above_the_log_start(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(RETENTION_CHILD)
    log_dir = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, str(script), str(log_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acked = []
    try:
        for line in proc.stdout:
            _, offset, start = line.split()
            acked.append((int(offset), int(start)))
            if len(acked) >= 80:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert len(acked) >= 80, err
    part = log_dir / "ret-0"
    assert any(n.endswith(".deleted") for n in os.listdir(part))  # killed with unlinks pending
    m = LogManager(BrokerConfig({"log.dirs": str(log_dir), "log.index.size.max.bytes": "4096"}))
    m.startup()
    try:
        plog = m.get_log(("ret", 0))
        assert not any(n.endswith(".deleted") for n in os.listdir(part))  # removed by recovery
        last_start = acked[-1][1]
        assert plog.log_start_offset >= acked[0][1]
        assert plog.log_start_offset <= last_start or plog.log_start_offset == plog.segments[0].base_offset
        contents = read_all(plog)
        for offset, _ in acked:
            if offset >= plog.log_start_offset:
                assert contents[offset] == b"value-%08d" % offset + b"x" * 30
        assert plog.log_end_offset >= acked[-1][0] + 1
    finally:
        m.shutdown()
