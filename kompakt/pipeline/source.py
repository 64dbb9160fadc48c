"""The `kompakt` PySpark data source: Kafka log dirs as DataFrames.

    spark.read.format("kompakt").load("/var/lib/kompakt")          # a log dir, a partition dir,
    spark.read.format("kompakt").load("/var/lib/kompakt/orders")   # or <log dir>/<topic>

Rows are the records a Kafka consumer reads (issue 10: transaction markers never surface as
records), so a `count()` of a transactional topic is what a consumer counts; control records
(COMMIT/ABORT markers) are rows only with include_control=true.

Schema (`SCHEMA`): topic, partition, offset, timestamp (ms since the epoch, Kafka's unit; the
batch's maxTimestamp for LogAppendTime batches, as consumers see it), timestamp_type (0 create,
1 log-append), key, value, headers (array of (key, value)), is_tombstone (null value, not a
control record), is_control (false unless include_control=true), producer_id, batch_base_offset,
segment (the .log file's path).
A user schema (`.schema(...)`) may select any subset of these plus the extras of
`reader.RecordRow`: delete_horizon_ms, is_transactional, compression, record_bytes (batch bytes
per record: the share of disk a record holds), batch_position, is_aborted (needs mark_aborted=true).

Options:
    corrupt            fail (default: a CorruptSegmentError naming file and position) | skip
                       (skip the batch, count it, log a warning, resume at the next index boundary)
    isolation          read_uncommitted (default: every data record, aborted ones included) |
                       read_committed (Kafka's consumer rule: no aborted records, nothing at or
                       past the last stable offset)
    include_control    false (default: control records are never rows, in either isolation, as
                       for a consumer) | true (transaction markers are rows too, is_control=true;
                       under read_committed those below the last stable offset; the audit and
                       verify jobs read with it; not with keyed_only)
    mark_aborted       true: scan transactions while planning so `is_aborted` is filled in
    as_of_offset       only records with offset <= N
    as_of_timestamp    only records with timestamp <= T (ms)
    topic, partition   comma-separated restrictions (same effect as pushed-down filters)
    keyed_only         true: only records with a key in data batches whose transaction did not
                       abort, columns key / offset / batch_base_offset only (exact compaction's
                       input, jobs/compact.py); read by compiled code into Arrow buffers
                       (pipeline/keyscan.py), millions of rows a second
    split_bytes        target bytes per Spark partition (default 32 MiB)
    batch_rows         rows per Arrow RecordBatch (default 8192)
    log_start          checkpoint (default: no records below the partition's log start offset, read
                       from its log dir's log-start-offset-checkpoint, as no consumer reads them
                       after DeleteRecords or retention moved it) | ignore (every record on disk;
                       keyed_only always reads them all: the cleaner keeps them too)
    pushdown           true (default) | false (needs spark.sql.python.filterPushdown.enabled,
                       which `register(spark)` sets)

Filter pushdown: =, IN, <, <=, >, >= on topic, partition, offset, timestamp. Topic and partition
prune partition dirs; offset ranges seek with the `.index`; a lower timestamp bound skips closed
segments by their last `.timeindex` entry and seeks inside segments. Pushed filters are then
applied exactly while reading, so Spark need not re-check them.

Invariants: every partition of the plan is a run of whole batches (reader.plan_splits), so each
record is read exactly once; no pyspark import leaves kompakt.pipeline (the broker never pays for it).
"""
from __future__ import annotations

import logging
import sys
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, GreaterThan,
                                    GreaterThanOrEqual, In, InputPartition, LessThan,
                                    LessThanOrEqual)
from pyspark.sql.types import StructType

from kompakt.pipeline import keyscan
from kompakt.pipeline import reader as rd

log = logging.getLogger("kompakt.pipeline.source")

SCHEMA = ("topic string, partition int, offset long, timestamp long, timestamp_type int, "
          "key binary, value binary, headers array<struct<key:string,value:binary>>, "
          "is_tombstone boolean, is_control boolean, producer_id long, batch_base_offset long, "
          "segment string")

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_TYPES = {
    "topic": pa.string(), "partition": pa.int32(), "offset": pa.int64(), "timestamp": pa.int64(),
    "timestamp_type": pa.int32(), "key": pa.binary(), "value": pa.binary(), "headers": _HEADER_TYPE,
    "is_tombstone": pa.bool_(), "is_control": pa.bool_(), "producer_id": pa.int64(),
    "batch_base_offset": pa.int64(), "segment": pa.string(), "delete_horizon_ms": pa.int64(),
    "is_transactional": pa.bool_(), "compression": pa.int32(), "record_bytes": pa.float64(),
    "batch_position": pa.int64(), "is_aborted": pa.bool_(),
}
_FIELD_INDEX = {name: i for i, name in enumerate(rd.RecordRow._fields)}


def register(spark) -> None:
    """Register the `kompakt` format on a session and enable Python filter pushdown."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KompaktDataSource)


class SplitPartition(InputPartition):
    def __init__(self, split: rd.Split | None):
        super().__init__(None)
        self.split = split

    def __repr__(self) -> str:
        s = self.split
        return "SplitPartition(empty)" if s is None else f"SplitPartition({s.topic}-{s.partition}, {len(s.chunks)} chunks, {s.bytes} B)"


class ReadOptions:
    """Options parsed once on the driver; picklable (sent to every read task)."""

    def __init__(self, options):
        o = {k.lower(): v for k, v in dict(options).items()}
        self.paths = o.get("path") or o.get("paths")
        if not self.paths:
            raise ValueError("the kompakt data source needs a path: .load('/log/dir')")
        self.corrupt = o.get("corrupt", "fail").lower()
        if self.corrupt not in ("fail", "skip"):
            raise ValueError(f"corrupt={self.corrupt!r}: use fail or skip")
        isolation = o.get("isolation", "read_uncommitted").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation={isolation!r}: use read_committed or read_uncommitted")
        self.read_committed = isolation == "read_committed"
        # mark_aborted: plan with the transaction scan so rows carry is_aborted (compact, audit)
        self.keyed_only = o.get("keyed_only", "false").lower() == "true"
        if self.keyed_only and self.corrupt == "skip":
            raise ValueError("keyed_only stops at a corrupt batch: use corrupt=fail with it")
        # include_control: markers as rows (audit, verify); a consumer never sees them as records
        include_control = o.get("include_control", "false").lower()
        if include_control not in ("true", "false"):
            raise ValueError(f"include_control={include_control!r}: use true or false")
        self.include_control = include_control == "true"
        if self.keyed_only and self.include_control:
            raise ValueError("keyed_only reads keyed data records only: drop include_control=true")
        self.scan_transactions = (self.read_committed or self.keyed_only
                                  or o.get("mark_aborted", "false").lower() == "true")
        self.split_bytes = int(o.get("split_bytes", rd.DEFAULT_SPLIT_BYTES))
        self.batch_rows = int(o.get("batch_rows", 8192))
        self.topics = set(o["topic"].split(",")) if o.get("topic") else None
        self.partitions = {int(p) for p in o["partition"].split(",")} if o.get("partition") else None
        self.bounds = rd.Bounds()
        if o.get("as_of_offset") is not None:
            self.bounds.max_offset = int(o["as_of_offset"])
        if o.get("as_of_timestamp") is not None:
            self.bounds.max_timestamp = int(o["as_of_timestamp"])
        self.pushdown = o.get("pushdown", "true").lower() != "false"
        log_start = o.get("log_start", "checkpoint").lower()
        if log_start not in ("checkpoint", "ignore"):
            raise ValueError(f"log_start={log_start!r}: use checkpoint or ignore")
        self.log_start = log_start == "checkpoint" and not self.keyed_only


class KompaktDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kompakt"

    def schema(self):
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions(self.options)
        cls = KompaktPushdownReader if opts.pushdown else KompaktReader
        return cls(schema, opts)

    def simpleStreamReader(self, schema: StructType):
        raise NotImplementedError("stream a live topic with format('kompakt-stream') "
                                  "(kompakt.pipeline.streaming); this format reads log dirs")


def _tighten(cur, new, pick):
    return new if cur is None else pick(cur, new)


class KompaktReader(DataSourceReader):
    def __init__(self, schema: StructType, opts: ReadOptions):
        self.columns = [f.name for f in schema.fields]
        unknown = [c for c in self.columns if c not in ARROW_TYPES]
        if unknown:
            raise ValueError(f"kompakt data source has no column(s) {unknown}; choose from {sorted(ARROW_TYPES)}")
        self.opts = opts

    # -- planning (driver) --------------------------------------------------------------
    def partitions(self):
        o = self.opts
        parts = rd.find_partitions(o.paths, o.topics, o.partitions)
        splits = rd.plan_splits(parts, o.bounds, o.split_bytes, o.scan_transactions, o.log_start)
        if not splits:
            return [SplitPartition(None)]
        return [SplitPartition(s) for s in splits]

    # -- reading (executors) ------------------------------------------------------------
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        split = partition.split
        if split is None:
            return
        o = self.opts
        if o.keyed_only:
            yield from keyscan.iter_keyed_batches(split, self.columns, o.bounds, read_committed=o.read_committed)
            return
        stats = rd.ReadStats()
        idx = [_FIELD_INDEX[c] for c in self.columns]
        schema = pa.schema([(c, ARROW_TYPES[c]) for c in self.columns])
        rows: list = []
        light = set(self.columns) <= rd.LIGHT_COLUMNS
        for row in rd.iter_split_records(split, corrupt=o.corrupt, read_committed=o.read_committed,
                                         bounds=o.bounds, stats=stats, light=light,
                                         control=o.include_control):
            rows.append(row)
            if len(rows) >= o.batch_rows:
                yield _to_batch(rows, idx, self.columns, schema)
                rows = []
        if rows:
            yield _to_batch(rows, idx, self.columns, schema)
        if stats.corrupt_batches:
            msg = (f"kompakt: skipped {stats.corrupt_batches} corrupt batch(es) in "
                   f"{split.topic}-{split.partition}: {stats.corrupt_positions[:10]}")
            log.warning(msg)
            print(msg, file=sys.stderr)


def _to_batch(rows, idx, columns, schema) -> pa.RecordBatch:
    arrays = []
    for i, name in zip(idx, columns):
        col = [r[i] for r in rows]
        if name == "headers":
            col = [[{"key": k, "value": v} for k, v in hs] for hs in col]
        arrays.append(pa.array(col, type=ARROW_TYPES[name]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class KompaktPushdownReader(KompaktReader):
    def pushFilters(self, filters):
        o = self.opts
        b = o.bounds
        for f in filters:
            attr = getattr(f, "attribute", None)
            col = attr[0] if attr is not None and len(attr) == 1 else None
            if col == "topic" and isinstance(f, (EqualTo, In)):
                vals = {f.value} if isinstance(f, EqualTo) else set(f.value)
                o.topics = vals if o.topics is None else o.topics & vals
            elif col == "partition" and isinstance(f, (EqualTo, In)):
                vals = {int(f.value)} if isinstance(f, EqualTo) else {int(v) for v in f.value}
                o.partitions = vals if o.partitions is None else o.partitions & vals
            elif col in ("offset", "timestamp") and isinstance(
                    f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                v = int(f.value)
                lo = hi = None
                if isinstance(f, EqualTo):
                    lo = hi = v
                elif isinstance(f, GreaterThan):
                    lo = v + 1
                elif isinstance(f, GreaterThanOrEqual):
                    lo = v
                elif isinstance(f, LessThan):
                    hi = v - 1
                else:
                    hi = v
                if col == "offset":
                    if lo is not None:
                        b.min_offset = _tighten(b.min_offset, lo, max)
                    if hi is not None:
                        b.max_offset = _tighten(b.max_offset, hi, min)
                else:
                    if lo is not None:
                        b.min_timestamp = _tighten(b.min_timestamp, lo, max)
                    if hi is not None:
                        b.max_timestamp = _tighten(b.max_timestamp, hi, min)
            else:
                yield f
