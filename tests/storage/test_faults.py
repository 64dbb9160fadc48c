"""The test-only fault seams (kompakt/storage/faults.py), each armed in a child process."""
import os
import signal
import subprocess
import sys
import textwrap

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
