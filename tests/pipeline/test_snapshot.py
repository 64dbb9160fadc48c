"""`snapshot` against a dict model: latest committed value per key, tombstoned keys absent."""
from __future__ import annotations

import pytest

from kompakt.pipeline.jobs.snapshot import snapshot, snapshot_frame

from .conftest import keyed_batches, txn_batches, write_partition

pytestmark = pytest.mark.spark
T0 = 1_700_000_000_000


def _model(records, max_offset=None, max_ts=None):
    state = {}
    for off, ts, key, value in records:
        if key is None or (max_offset is not None and off > max_offset) or (max_ts is not None and ts > max_ts):
            continue
        if value is None:
            state.pop(key, None)
        else:
            state[key] = (value, off)
    return state


def test_snapshot_matches_model_as_of_now_offset_and_timestamp(spark, tmp_path):
    batches = keyed_batches(400, 60, tombstone_every=7, keyless_every=31)
    write_partition(str(tmp_path), "s", 0, batches, segment_bytes=5000)
    write_partition(str(tmp_path), "s", 1, keyed_batches(50, 10), segment_bytes=5000)
    records = [(i, T0 + i, k, v) for i, (k, v, _, _) in enumerate(r for b in batches for r in b["records"])]
    out = str(tmp_path / "out")
    res = snapshot(spark, str(tmp_path), "s", out)
    table = spark.read.parquet(out).collect()
    assert {r.key: (r.value, r.offset) for r in table if r.partition == 0} == _model(records)
    assert res["keys"] == len(table) == len(_model(records)) + 10
    assert spark.read.parquet(out).columns == ["key", "value", "headers", "partition", "offset", "timestamp"]
    for kw, model in [({"as_of_offset": 150}, _model(records, max_offset=150)),
                      ({"as_of_timestamp": T0 + 99}, _model(records, max_ts=T0 + 99))]:
        got = {r.key: (r.value, r.offset) for r in snapshot_frame(spark, str(tmp_path), "s", **kw).collect()
               if r.partition == 0}
        assert got == model, kw


def test_snapshot_reads_committed_only(spark, tmp_path):
    write_partition(str(tmp_path), "tx", 0, txn_batches())
    snapshot(spark, str(tmp_path), "tx", str(tmp_path / "o"))
    got = {r.key: r.value for r in spark.read.parquet(str(tmp_path / "o")).collect()}
    assert got == {b"a": b"2", b"b": b"1", b"c": b"2", b"e": b"3"}  # aborted a=X, d=X absent


def test_snapshot_cli(spark, tmp_path, capsys):
    from kompakt import cli

    write_partition(str(tmp_path / "logs"), "s", 0, keyed_batches(30, 4))
    out = str(tmp_path / "table")
    assert cli.main(["pipeline", "snapshot", str(tmp_path / "logs"), "--topic", "s", "--output", out,
                     "--as-of-offset", "9"]) == 0
    got = {r.key: r.value for r in spark.read.parquet(out).collect()}
    assert got == {b"k0": b"v8", b"k1": b"v9", b"k2": b"v6", b"k3": b"v7"}
    assert "snapshot s: 4 keys" in capsys.readouterr().out
    assert cli.main(["pipeline", "snapshot", str(tmp_path / "nowhere"), "--topic", "s", "--output", out]) == 1
