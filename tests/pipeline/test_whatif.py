"""`kompakt pipeline whatif` over real log dirs: the known answer of a constructed log (see
tests/cleaner/test_whatif.py for its derivation), JSON and PNG outputs, and a log dir left exactly
as it was (every file's bytes and times checksummed before and after)."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from kompakt import cli
from kompakt.protocol import records as R

from .conftest import write_partition

T0 = 1_700_000_000_000


def batches():
    """200 one-record batches, one per second, keys cycling over 5, all of the same size."""
    return [dict(records=[(b"k%d" % (i % 5), b"v%03d" % i, [], T0 + i * 1000)], base_timestamp=T0 + i * 1000)
            for i in range(200)]


def batch_size():
    return len(R.build_batch([(b"k0", b"v000", [], T0)], base_timestamp=T0))


def fingerprint(root: str) -> dict:
    """Every file under root: its bytes' SHA-256, size and modification time."""
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (hashlib.sha256(open(p, "rb").read()).hexdigest(), st.st_size,
                                             st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("whatif"))
    for p in (0, 1):
        write_partition(d, "wi", p, batches(), segment_bytes=3000)
    return d


@pytest.mark.spark
def test_cli_replays_every_partition_with_the_known_answer(spark, log_dir, tmp_path, capsys):
    s = batch_size()
    before = fingerprint(log_dir)
    out, png = str(tmp_path / "whatif.json"), str(tmp_path / "whatif.png")
    assert cli.main(["pipeline", "whatif", log_dir, "--topic", "wi", "--set", f"internal.segment.bytes={10 * s}",
                     "--set", "min.cleanable.dirty.ratio=0.01", "--set", "log.cleaner.backoff.ms=1000",
                     "--output", out, "--chart", png]) == 0
    assert fingerprint(log_dir) == before          # read, never written
    reports = json.load(open(out))
    assert [r["partition"] for r in reports] == [0, 1]
    for r in reports:
        cur, new = r["current"]["summary"], r["proposed"]["summary"]
        # no topic metadata in the dir: Kafka's defaults, a 1 GiB segment never rolls, nothing is cleaned
        assert cur["cleans"] == 0 and cur["disk_bytes_end"] == 200 * s
        assert (new["cleans"], new["bytes_read"], new["bytes_written"]) == (19, 280 * s, 95 * s)
        assert new["disk_bytes_end"] == 15 * s and new["oldest_uncleaned_age_ms_max"] == 10_000
        assert r["difference"]["disk_bytes_end"] == 15 * s - 200 * s
        assert len(r["proposed"]["timeline"]) == len(r["current"]["timeline"]) > 100
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "wi-0" in table and "proposed" in table and "whatif wi: 2 partitions, 400 records" in table


def test_bounded_sample_keeps_the_newest_records(log_dir, monkeypatch):
    from kompakt.pipeline import reader as rd
    from kompakt.pipeline.jobs.whatif import read_batches

    read = []
    real = rd.iter_chunk_batches
    monkeypatch.setattr(rd, "iter_chunk_batches", lambda c, **kw: read.append(c.base_offset) or real(c, **kw))
    got = read_batches(os.path.join(log_dir, "wi-0"), max_records=50)
    assert [b.base_offset for b in got] == list(range(150, 200))
    assert got[0].records == [(150, b"k0", False)] and got[0].max_timestamp == T0 + 150_000
    # only the segments holding the sample are read, not the whole partition
    bases = [s.base_offset for s in rd.list_segments(os.path.join(log_dir, "wi-0"))]
    first = max(b for b in bases if b <= 150)
    assert read == [b for b in bases if b >= first] and len(read) < len(bases)


def test_bad_settings_are_refused_before_spark(log_dir, capsys):
    assert cli.main(["pipeline", "whatif", log_dir, "--topic", "wi", "--set", "retention.ms=5"]) == 1
    assert "the replay does not use it" in capsys.readouterr().err
    assert cli.main(["pipeline", "whatif", log_dir, "--topic", "wi", "--set", "min.cleanable.dirty.ratio=2"]) == 1
    assert "min.cleanable.dirty.ratio" in capsys.readouterr().err
    assert cli.main(["pipeline", "whatif", log_dir, "--topic", "nope"]) == 1


def test_records_below_the_log_start_are_not_replayed(tmp_path):
    # DeleteRecords moved the log start to 120: the replay is of the traffic the log still holds
    from kompakt.pipeline import reader as rd
    from kompakt.pipeline.jobs.whatif import read_batches

    write_partition(str(tmp_path), "wi", 0, batches(), segment_bytes=20 * batch_size())
    with open(tmp_path / rd.LOG_START_CHECKPOINT, "w") as f:
        f.write("0\n1\nwi 0 120\n")
    got = read_batches(str(tmp_path / "wi-0"))
    assert [b.base_offset for b in got] == list(range(120, 200))
    assert [b.base_offset for b in read_batches(str(tmp_path / "wi-0"), log_start=0)] == list(range(200))
