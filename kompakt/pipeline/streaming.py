"""Streaming reads of a live broker's topic through the Kafka protocol: format `kompakt-stream`.

    (spark.readStream.format("kompakt-stream")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "orders")
        .option("startingOffsets", "earliest").load()
        .writeStream.option("checkpointLocation", ckpt).trigger(availableNow=True)...)

Why: the Spark Kafka connector jar cannot be fetched here; kafka-python (already a dependency of
Kompakt) speaks the protocol from the Python workers instead.

Offsets: a dict {"<partition>": next offset to read} (Spark checkpoints it, so a restarted query
resumes exactly). `latestOffset` is each partition's end offset (ListOffsets latest; with
isolation=read_committed the last stable offset), capped by `maxOffsetsPerTrigger` spread over the
partitions; `prepareForTriggerAvailableNow` freezes the end offsets at query start so an
availableNow run finishes. Each micro-batch task reads one partition's [start, end) with an
assigned (group-less) consumer and stops once its position reaches `end`: compacted topics and
transaction markers leave offset gaps, so the position, not the last offset seen, ends the read.
A range starting below the partition's log start (deleted since it was checkpointed) is read from
the log start: the deleted records are gone, the rest is read.

Schema: topic, partition, offset, timestamp, timestamp_type, key, value, headers, is_tombstone.
Options: kafka.bootstrap.servers (required), subscribe (one topic), startingOffsets
(earliest | latest | JSON {"0": 42}), maxOffsetsPerTrigger, isolation (read_uncommitted |
read_committed), pollTimeoutMs (per task, default 30000).
"""
from __future__ import annotations

import json
import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

STREAM_SCHEMA = ("topic string, partition int, offset long, timestamp long, timestamp_type int, "
                 "key binary, value binary, headers array<struct<key:string,value:binary>>, "
                 "is_tombstone boolean")
_ARROW = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.int64()), ("timestamp_type", pa.int32()), ("key", pa.binary()),
                    ("value", pa.binary()),
                    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                    ("is_tombstone", pa.bool_())])


def register_stream(spark) -> None:
    spark.dataSource.register(KompaktStreamDataSource)


class RangePartition(InputPartition):
    def __init__(self, partition: int, start: int, end: int):
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


def _consumer(bootstrap: str, isolation: str):
    from kafka import KafkaConsumer

    # auto_offset_reset=earliest: a range starting below the log start (retention or DeleteRecords
    # moved it since the offset was checkpointed) reads from the log start, as a consumer can; the
    # default (latest) jumped past the end of the range and lost the records still there
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest",
                         isolation_level=isolation, client_id="kompakt-pipeline-stream",
                         request_timeout_ms=30000)


class KompaktStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kompakt-stream"

    def schema(self):
        return STREAM_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return KompaktStreamReader(self.options)


class KompaktStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options):
        o = {k.lower(): v for k, v in dict(options).items()}
        self.bootstrap = o.get("kafka.bootstrap.servers") or o.get("bootstrap")
        self.topic = o.get("subscribe") or o.get("topic")
        if not self.bootstrap or not self.topic:
            raise ValueError("kompakt-stream needs options kafka.bootstrap.servers and subscribe")
        self.starting = o.get("startingoffsets", "earliest")
        self.max_per_trigger = int(o["maxoffsetspertrigger"]) if o.get("maxoffsetspertrigger") else None
        self.isolation = o.get("isolation", "read_uncommitted")
        self.poll_timeout_ms = int(o.get("polltimeoutms", 30000))
        self.frozen_end: dict | None = None

    # -- driver side -------------------------------------------------------------------------
    def _bounds(self) -> tuple[dict, dict]:
        from kafka import TopicPartition

        c = _consumer(self.bootstrap, self.isolation)
        try:
            deadline = time.monotonic() + 30
            parts = c.partitions_for_topic(self.topic)
            while not parts and time.monotonic() < deadline:
                time.sleep(0.2)
                parts = c.partitions_for_topic(self.topic)
            if not parts:
                raise ValueError(f"topic {self.topic!r} not found at {self.bootstrap}")
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            low = c.beginning_offsets(tps)
            high = c.end_offsets(tps)
            return ({str(tp.partition): low[tp] for tp in tps}, {str(tp.partition): high[tp] for tp in tps})
        finally:
            c.close()

    def initialOffset(self) -> dict:
        low, high = self._bounds()
        if self.starting == "latest":
            return high
        if self.starting == "earliest":
            return low
        given = json.loads(self.starting)
        return {p: int(given.get(p, low[p])) for p in low}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.frozen_end = self._bounds()[1]

    def latestOffset(self, start: dict, limit) -> dict:
        end = dict(self.frozen_end) if self.frozen_end is not None else self._bounds()[1]
        out = {}
        for p, hi in end.items():
            lo = int(start.get(p, 0))
            out[p] = max(lo, hi)
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
            share = max(1, budget // max(1, len(out)))
            out = {p: min(hi, int(start.get(p, 0)) + share) for p, hi in out.items()}
        return out

    def reportLatestOffset(self):
        return self.frozen_end

    def partitions(self, start: dict, end: dict):
        return [RangePartition(int(p), int(start.get(p, 0)), int(hi))
                for p, hi in sorted(end.items(), key=lambda kv: int(kv[0])) if int(hi) > int(start.get(p, 0))]

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the broker

    # -- executor side -----------------------------------------------------------------------
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, partition.partition)
        c = _consumer(self.bootstrap, self.isolation)
        rows: list = []
        try:
            c.assign([tp])
            c.seek(tp, partition.start)
            deadline = time.monotonic() + self.poll_timeout_ms / 1000
            while c.position(tp) < partition.end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.topic}-{partition.partition}: position {c.position(tp)} "
                                       f"did not reach {partition.end} within {self.poll_timeout_ms} ms")
                for msgs in c.poll(timeout_ms=500).values():
                    for m in msgs:
                        if m.offset >= partition.end:
                            break
                        rows.append((self.topic, partition.partition, m.offset, m.timestamp, m.timestamp_type,
                                     m.key, m.value, [{"key": k, "value": v} for k, v in (m.headers or [])],
                                     m.value is None))
                    if len(rows) >= 4096:
                        yield _batch(rows)
                        rows = []
        finally:
            c.close()
        if rows:
            yield _batch(rows)


def _batch(rows) -> pa.RecordBatch:
    cols = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(col, type=f.type) for col, f in zip(cols, _ARROW)], schema=_ARROW)
