"""Crash test: a subprocess appends and flushes, gets SIGKILLed mid-stream; every batch it reported
flushed is there, intact and readable after recovery (and the log still takes appends)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.storage import Log

CHILD = textwrap.dedent("""
    import sys
    from kompakt.config.topic_config import LogConfig
    from kompakt.protocol import records as R
    from kompakt.storage import Log
    cfg = LogConfig.from_overrides({"internal.segment.bytes": "10000", "index.interval.bytes": "512"})
    log = Log.open(sys.argv[1], cfg)
    i = 0
    while True:
        info = log.append_as_leader(R.build_batch([(b"key-%d" % i, b"value-%d-" % i + b"x" * (i % 300))]))
        assert info.first_offset == i
        if i % 3 == 0:
            log.flush()
            sys.stdout.write("%d\\n" % i)   # everything up to and including i is durable
            sys.stdout.flush()
        i += 1
""")


def test_sigkill_during_appends_loses_no_flushed_batch(tmp_path):
    d = str(tmp_path / "crash-0")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, d], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    flushed = -1
    deadline = time.monotonic() + 60
    try:
        while flushed < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            flushed = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert flushed >= 300, proc.stderr.read()
    cfg = LogConfig.from_overrides({"internal.segment.bytes": "10000", "index.interval.bytes": "512"})
    log = Log.open(d, cfg, had_clean_shutdown=False, recovery_point=0)
    assert log.num_segments > 3
    assert log.log_end_offset > flushed
    off = 0
    while off <= flushed:
        data = log.read(off, 64 * 1024).records
        for pos, h in R.iter_batches(data):
            assert R.valid_crc(data, pos, h)
            [rec] = R.decode_records(data, pos, h)
            assert rec.key == b"key-%d" % h.base_offset
            assert rec.value == b"value-%d-" % h.base_offset + b"x" * (h.base_offset % 300)
            assert h.base_offset == off
            off += 1
    end = log.log_end_offset
    assert log.append_as_leader(R.build_batch([(b"after", b"crash")])).first_offset == end
    log.close()
    assert not [n for n in os.listdir(d) if n.endswith((".tmp", ".deleted"))]
