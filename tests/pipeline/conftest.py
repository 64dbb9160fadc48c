"""Shared fixtures for the pipeline tests: log dirs written by the storage engine's LogSegment
(Kafka's layout with real indexes) and a plain-Python model of what compaction keeps. The
SparkSession (`spark`) is the suite's one, in tests/conftest.py."""
from __future__ import annotations

import os

from kompakt.protocol import records as R


def write_partition(log_dir: str, topic: str, partition: int, batches, *, segment_bytes: int = 4096,
                    index_interval_bytes: int = 256, first_offset: int = 0) -> str:
    """Write batches (lists of build_batch kwargs-with-`records`) as segments via LogSegment.

    Offsets are assigned consecutively from `first_offset`, rolling a new segment when the active
    one would exceed `segment_bytes`, the way the log does. Returns the partition dir.
    """
    from kompakt.storage.segment import LogSegment

    pdir = os.path.join(log_dir, f"{topic}-{partition}")
    os.makedirs(pdir, exist_ok=True)
    offset = first_offset
    seg = LogSegment(pdir, offset, index_interval_bytes=index_interval_bytes)
    for spec in batches:
        spec = dict(spec)
        recs = spec.pop("records")
        offset = spec.pop("base_offset", offset)  # a later base offset leaves a gap, as compaction does
        roll = spec.pop("roll", False)
        data = R.build_batch(recs, base_offset=offset, **spec)
        h = R.read_header(data)
        if seg.size > 0 and (roll or seg.size + len(data) > segment_bytes):
            seg.on_become_inactive()
            seg.close()
            seg = LogSegment(pdir, offset, index_interval_bytes=index_interval_bytes)
        seg.append(h.last_offset, h.max_timestamp, h.last_offset, data)
        offset = h.next_offset
    seg.flush()
    seg.close()
    return pdir


def keyed_batches(n_records: int, n_keys: int, *, per_batch: int = 10, codec: int = 0,
                  tombstone_every: int = 0, keyless_every: int = 0, base_ts: int = 1_700_000_000_000):
    """Deterministic batches: record i has key k(i % n_keys), value v<i>, timestamp base_ts + i."""
    out = []
    for start in range(0, n_records, per_batch):
        recs = []
        for i in range(start, min(n_records, start + per_batch)):
            key = None if keyless_every and i % keyless_every == keyless_every - 1 else b"k%d" % (i % n_keys)
            value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"v%d" % i
            recs.append((key, value, [("i", str(i).encode())], base_ts + i))
        out.append(dict(records=recs, compression=codec))
    return out


def model_compact(rows, end: int):
    """What compaction keeps of (offset, key, value) rows below `end` (tombstones still kept,
    they have no horizon yet): the latest offset per key, keyless records dropped."""
    latest = {}
    for off, key, _ in rows:
        if off < end and key is not None:
            latest[key] = off
    keep = set(latest.values())
    return [(o, k, v) for o, k, v in rows if o >= end or o in keep]


def txn_batches(base_ts: int = 1_700_000_000_000):
    """A log with a committed and an aborted transaction of producer 7 interleaved with plain
    records: offsets 0-1 plain, 2-3 txn A (committed at 6), 4-5 txn B of producer 8 (aborted at 7),
    6 COMMIT marker of 7, 7 ABORT marker of 8, 8-9 plain."""
    def marker(kind):  # control record key: version 0, type (0 abort, 1 commit); value: version, epoch
        import struct
        return [(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), [], base_ts)]

    return [
        dict(records=[(b"a", b"1", [], base_ts), (b"b", b"1", [], base_ts)]),
        dict(records=[(b"a", b"2", [], base_ts), (b"c", b"2", [], base_ts)], producer_id=7, producer_epoch=0,
             base_sequence=0, is_transactional=True),
        dict(records=[(b"a", b"X", [], base_ts), (b"d", b"X", [], base_ts)], producer_id=8, producer_epoch=0,
             base_sequence=0, is_transactional=True),
        dict(records=marker(1), producer_id=7, producer_epoch=0, is_transactional=True, is_control=True),
        dict(records=marker(0), producer_id=8, producer_epoch=0, is_transactional=True, is_control=True),
        dict(records=[(b"e", b"3", [], base_ts), (None, b"3", [], base_ts)]),
    ]


def stream_once(spark, bootstrap: str, topic: str, out: str, ckpt: str) -> None:
    """One availableNow run of the `kompakt-stream` source into Parquet at `out`, resuming from `ckpt`."""
    q = (spark.readStream.format("kompakt-stream").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").load()
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None


def load_integration_fixtures():
    """The broker fixtures of tests/integration/conftest.py (contract in docs/contracts.md)."""
    import importlib.util
    import sys
    from pathlib import Path

    integration = Path(__file__).resolve().parents[1] / "integration"
    if str(integration) not in sys.path:     # its `from broker_process import ...`, when run alone
        sys.path.append(str(integration))
    path = integration / "conftest.py"
    spec = importlib.util.spec_from_file_location("kompakt_integration_conftest_for_pipeline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_integration = load_integration_fixtures()
start_broker = _integration.start_broker
