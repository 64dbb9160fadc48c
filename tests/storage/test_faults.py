"""The test-only fault seams (kompakt/storage/faults.py), each armed in a child process."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import KafkaStorageErrorError
from kompakt.storage import faults
from kompakt.storage.log import Log

CHILD = textwrap.dedent("""
    import sys
    from kompakt.config.topic_config import LogConfig
    from kompakt.protocol import records as R
    from kompakt.storage.log import Log
    lg = Log.open(sys.argv[1], LogConfig.from_overrides({"internal.segment.bytes": "2000"}, None))
    for i in range(int(sys.argv[2])):
        try:
            lg.append_as_leader(R.build_batch([(b"k%d" % i, b"v" * 200)]))
            print("ok", i, lg.log_end_offset, flush=True)
        except Exception as exc:
            print("err", i, type(exc).__name__, lg.log_end_offset, flush=True)
""")


def run(tmp_path, env, n=20):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.run([sys.executable, str(script), str(tmp_path / "t-0"), str(n)],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def test_crash_point_kills_at_the_nth_hit(tmp_path):
    out = run(tmp_path, {"TEST_KOMPAKT_CRASH_AT": "segment_roll:2"})
    assert out.returncode == -signal.SIGKILL, out.stderr
    assert "TEST_KOMPAKT_CRASH_AT=segment_roll:2" in out.stderr
    logs = sorted(n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log"))
    assert len(logs) == 3       # the second roll created its segment, then the process died


def test_io_error_from_the_nth_operation_on_a_path(tmp_path):
    out = run(tmp_path, {"TEST_KOMPAKT_IO_ERROR": "t-0/:8"})
    lines = [line.split() for line in out.stdout.splitlines()]
    oks = [line for line in lines if line[0] == "ok"]
    assert 2 <= len(oks) < 8 and lines[:len(oks)] == oks, out       # ok until the 8th operation ...
    failed = lines[len(oks):]
    assert failed and all(line[0] == "err" and line[2] == "KafkaStorageErrorError" for line in failed), out
    assert {line[3] for line in failed} == {str(len(oks))}           # ... then every append fails, none assigned


def test_unarmed_seams_do_nothing(tmp_path):
    out = run(tmp_path, {"TEST_KOMPAKT_CRASH_AT": "", "TEST_KOMPAKT_IO_ERROR": ""}, n=30)
    assert out.returncode == 0 and out.stdout.count("ok") == 30, out.stderr


def test_an_append_whose_index_write_fails_is_undone(tmp_path, monkeypatch):
    """Regression: the segment kept the failed append's bytes, so the next append (same offsets,
    the log end had not moved) landed after them and the offsets appeared twice."""
    lg = Log.open(str(tmp_path / "t-0"), LogConfig.from_overrides({"index.interval.bytes": "1"}))
    for i in range(3):
        lg.append_as_leader(R.build_batch([(b"k%d" % i, b"v%d" % i)]))
    monkeypatch.setattr(faults, "_io", (".index", 1))
    monkeypatch.setattr(faults, "_io_hits", 0)
    with pytest.raises(KafkaStorageErrorError):
        lg.append_as_leader(R.build_batch([(b"lost", b"x")]))
    monkeypatch.setattr(faults, "_io", None)
    assert lg.append_as_leader(R.build_batch([(b"k3", b"v3")])).first_offset == 3
    data = lg.read(0, 1 << 20).records
    got = [(h.base_offset, bytes(r.key)) for _, h in R.iter_batches(data) for r in R.decode_records(data, _, h)]
    assert got == [(0, b"k0"), (1, b"k1"), (2, b"k2"), (3, b"k3")]
    lg.close()


def test_the_cleaner_break_is_read_by_the_one_seam():
    """TEST_KOMPAKT_CLEANER_BREAK lives in faults.py with the other seams: armed only for the
    break it names, read at import (the cleaner's worker processes inherit it)."""
    probe = ("from kompakt.storage import faults; "
             "print(faults.cleaner_break('drop_last_batch'), faults.cleaner_break('other'))")

    def armed(value):
        env = {**os.environ, faults.CLEANER_BREAK_ENV: value}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
        return out.stdout.split()

    assert armed("drop_last_batch") == ["True", "False"]
    assert armed("") == ["False", "False"]
    assert faults.CLEANER_BREAKS == ("drop_last_batch",)


SYNC_CHILD = textwrap.dedent("""
    import os, sys
    from kompakt.storage import files
    for name in ("victim.log", "victim.log", "other.log", "victim.log", "victim.log"):
        fd = os.open(os.path.join(sys.argv[1], name), os.O_WRONLY | os.O_CREAT)
        try:
            files.fdatasync(fd)
            print(name, "ok", flush=True)
        except OSError as exc:
            print(name, os.strerror(exc.errno), "injected" in str(exc), flush=True)
        finally:
            os.close(fd)
""")


def test_sync_error_fails_only_the_nth_sync_of_a_path_with_the_errno_asked(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(SYNC_CHILD)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TEST_KOMPAKT_SYNC_ERROR": "victim:2:ENOSPC"})
    assert out.stdout.splitlines() == ["victim.log ok", f"victim.log {os.strerror(28)} True", "other.log ok",
                                       "victim.log ok", "victim.log ok"], out
