"""`kompakt pipeline compact`: exact compaction of one partition by Spark's shuffle.

Role: what the broker's cleaner does in several bounded passes (its offset map holds ~5 M keys per
128 MiB, seed 000), done in one pass with no key limit and no hash collisions: Spark groups the
full key bytes (hash aggregation that spills to disk rather than fails) to find each key's latest
offset; then each task rewrites its run of batches with the cleaner's own per-batch rule
(`kompakt.cleaner.cleaner.Cleaner._filter` over `batch_ops.filter_batch`: latest offset per key, keyless records dropped,
tombstones kept and stamped with a KIP-534 delete horizon until it passes, offsets, order, base
offsets and producer fields unchanged; aborted data, markers and each producer's last batch as
`Cleaner._filter` decides); the driver then writes Kafka-format segments with their
indexes through the storage engine's `LogSegment` into a staging dir.

Range compacted: [first segment base, end) where end is the base offset of the active (last)
segment, lowered to a segment base at or below the last stable offset when a transaction is open:
exactly the range the cleaner may clean (`firstUncleanableOffset`), whole segments only so that
adoption replaces whole segments. Records at or past `end` are neither read for keys nor written.

Staging dir layout (input to `kompakt.pipeline.adopt.adopt_staging`):

    <staging>/<20-digit base offset>.log|.index|.timeindex   the compacted segments
    <staging>/compact.json                                    manifest: topic, partition, start,
        end, source_segments [[base offset, size], ...] (adoption checks the live log still has
        exactly these), now_ms, delete_retention_ms, counts
    <staging>/.parts/                                         task output, removed when done

Steps (a crash leaves a staging dir without compact.json, which adoption refuses):
1. plan the range and the buckets of offsets: bucket(o) = (o - start) // width; a batch belongs
   to the bucket of its base offset;
2. Spark: the read tasks scan the keys with compiled code straight into Arrow batches (the
   source's keyed_only read, pipeline/keyscan.py); latest offset per key (shuffle on the key
   bytes) written as Parquet partitioned by the offset's bucket (`.parts/retained/bucket=N/`);
   then one task per bucket (all of them: a bucket with nothing retained may still keep control
   batches) reads its offsets with pyarrow (and the next buckets' when its last batch reaches into
   them) into an exact offset set and filters the bucket's batches with the compiled filter into
   `.parts/bucket-N.bin`;
3. driver: append the parts in bucket order into LogSegments (roll at segment_bytes), close them
   (trims indexes, writes the final time index entry), write compact.json, remove .parts.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import struct
import sys
import time
from dataclasses import asdict, dataclass, field

from kompakt.pipeline import reader as rd

MANIFEST = "compact.json"
PARTS_DIR = ".parts"
DEFAULT_BUCKET_BYTES = 16 * 1024 * 1024


class _Row:  # a collected bucket result with attribute access
    def __init__(self, **kw):
        self.__dict__.update(kw)


@dataclass
class CompactPlan:
    topic: str
    partition: int
    partition_dir: str
    start: int
    end: int
    source_segments: list = field(default_factory=list)
    buckets: int = 1
    width: int = 1
    markers: dict = field(default_factory=dict)        # cleaner.prescan: {pid: ([offsets], [types])}
    producers: dict = field(default_factory=dict)      # cleaner.prescan: {pid: (last offset, epoch)}
    transactions: list = field(default_factory=list)   # [(pid, first offset, marker offset)]


@dataclass
class CompactResult:
    topic: str
    partition: int
    start: int
    end: int
    staging_dir: str
    segments: list
    records_in: int = 0
    records_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    tombstones: int = 0
    keyless: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    now_ms: int = 0
    delete_retention_ms: int = 0
    seconds: float = 0.0


def plan(partition_dir: rd.PartitionDir, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
         buckets: int | None = None, include_active: bool = False) -> CompactPlan | None:
    segs = rd.list_segments(partition_dir.path)
    if not segs:
        return None
    _, lso = rd.scan_transactions(segs)
    end = segs[-1].base_offset
    if include_active:
        end = _next_offset(segs[-1]) or end
    if lso is not None:
        end = min(end, max([s.base_offset for s in segs if s.base_offset <= lso] or [segs[0].base_offset]))
    start = segs[0].base_offset
    source = [s for s in segs if s.base_offset < end] if not include_active or lso is not None else list(segs)
    if not source or end <= start:
        return None
    total = sum(s.size for s in source)
    nb = buckets or max(1, math.ceil(total / bucket_bytes))
    width = max(1, math.ceil((end - start) / nb))
    nb = math.ceil((end - start) / width)
    from kompakt.cleaner.cleaner import SegmentInfo, prescan

    markers, producers = prescan([SegmentInfo(s.base_offset, s.log_path, s.size) for s in segs])
    return CompactPlan(partition_dir.topic, partition_dir.partition, partition_dir.path, start, end,
                       [[s.base_offset, s.size] for s in source], nb, width, markers, producers,
                       transactions(segs))


def _next_offset(seg: rd.Segment) -> int | None:
    last = None
    for bv in rd.iter_chunk_batches(rd.Chunk(seg.log_path, seg.base_offset, 0, seg.size, True)):
        last = bv.header.next_offset
    return last


class _ExactOffsetMap:
    """The cleaner's map interface answering from Spark's exact result instead of MD5 slots.

    For the compiled filter (batch_ops._native_filter -> km_filter) it is an exact offset set:
    `address` points at int64 base, int64 nbits, then one bit per offset of [base, base + nbits),
    set for the retained offsets, and `slots` is -1 (kompakt/native/cleaner.c's in_offset_set).
    The Python filter asks get_many(digests of the keyed records of the batch being filtered, in
    order) and keeps a record iff its offset >= the answer; we answer the record's own offset when
    Spark chose it as its key's latest, else offset + 1 (a later record has the key). Digests are
    not used. `add` grows the covered range as a bucket's batches reach into the next buckets.
    """
    slots = -1

    def __init__(self, latest_offset: int, lo: int):
        self.latest_offset = latest_offset
        self.lo, self.nbits = lo, 0
        self.buffer = None
        self.native_io = (ctypes.c_int64 * 8)()
        self.probes = self.lookups = 0
        self.batch = None               # (bytes, header) being filtered, for get_many
        self._resize(0)

    @property
    def covered(self) -> int:
        """The last offset the set answers for."""
        return self.lo + self.nbits - 1

    def _resize(self, nbits: int) -> None:
        old, old_bytes = self.buffer, (self.nbits + 7) // 8
        self.buffer = ctypes.create_string_buffer(16 + (nbits + 7) // 8)
        if old is not None:
            ctypes.memmove(ctypes.addressof(self.buffer) + 16, ctypes.addressof(old) + 16, old_bytes)
        self.nbits = nbits
        struct.pack_into("=qq", self.buffer, 0, self.lo, nbits)
        self.address = ctypes.addressof(self.buffer)

    def add(self, retained, upto: int) -> None:
        """Cover offsets up to `upto`, setting the bits of `retained` (all within the new range)."""
        if upto > self.covered:
            self._resize(upto - self.lo + 1)
        _set_bits(self, retained)

    def __contains__(self, offset: int) -> bool:
        d = offset - self.lo
        return 0 <= d < self.nbits and bool(self.buffer.raw[16 + (d >> 3)] >> (d & 7) & 1)

    def get_many(self, digests) -> list[int]:
        from kompakt.protocol import records as R

        batch, h = self.batch
        answers = [o if o in self else o + 1 for o, k, _ in R.iter_keys_offsets(batch, 0, h) if k is not None]
        if len(digests) != len(answers):
            raise AssertionError(f"{len(digests)} keyed records, {len(answers)} answers")
        return answers


def _set_bits(omap: _ExactOffsetMap, retained) -> None:
    """Set the retained offsets' bits: a pyarrow int64 array in C (km_offsets_to_bits), else Python."""
    from kompakt import native

    arr = retained.combine_chunks() if hasattr(retained, "combine_chunks") else retained
    if native.LIB is not None and hasattr(arr, "buffers") and arr.null_count == 0 and len(arr):
        data = arr.buffers()[1]
        outside = native.LIB.km_offsets_to_bits(data.address + 8 * arr.offset, len(arr), omap.lo, omap.nbits,
                                                omap.address + 16)
    else:
        bits = bytearray(omap.buffer.raw[16:])
        outside = 0
        for o in (arr.to_pylist() if hasattr(arr, "to_pylist") else arr):
            d = o - omap.lo
            if 0 <= d < omap.nbits:
                bits[d >> 3] |= 1 << (d & 7)
            else:
                outside += 1
        ctypes.memmove(omap.address + 16, bytes(bits), len(bits))
    if outside:
        raise AssertionError(f"{outside} retained offsets outside [{omap.lo}, {omap.covered}]")


def bucket_range(plan_: CompactPlan, bucket: int) -> tuple[int, int]:
    """The offsets [lo, hi] of a bucket: its batches have their base there, and so do its retained
    offsets (Spark's result is partitioned by the offset's own bucket)."""
    lo = plan_.start + bucket * plan_.width
    return lo, min(plan_.end, lo + plan_.width) - 1


def filter_bucket(plan_: CompactPlan, bucket: int, load_retained, out_path: str, *, now_ms: int,
                  delete_retention_ms: int) -> dict:
    """Rewrite the batches whose base offset falls in `bucket`, keeping the retained offsets.

    `load_retained(b)` gives bucket b's retained offsets (pyarrow int64 array or list); a batch
    reaching past the bucket loads the next ones. Each batch goes through the cleaner's own
    per-batch decision (`Cleaner._filter`: aborted data dropped, markers kept until their
    transaction is gone and their horizon passed, each producer's last batch kept even if emptied,
    tombstones stamped) with `_ExactOffsetMap` in place of the MD5 map: the compiled filter when
    the native seam is loaded. A transaction with batches before the bucket and its marker in it
    counts as read (`TxnCleanState.seed`), exactly as in the cleaner's single pass over the range.
    """
    from kompakt.cleaner.cleaner import ABORT_MARKER, Cleaner, TxnCleanState

    lo, hi = bucket_range(plan_, bucket)
    omap = _ExactOffsetMap(plan_.end - 1, lo)
    next_bucket = [bucket]

    def cover(last: int) -> None:
        while omap.covered < min(last, plan_.end - 1) and next_bucket[0] < plan_.buckets:
            omap.add(load_retained(next_bucket[0]), bucket_range(plan_, next_bucket[0])[1])
            next_bucket[0] += 1

    cleaner = Cleaner(0, omap)
    txn_state = TxnCleanState()
    for pid, first, marker in plan_.transactions:
        if first < lo <= marker:
            offs, types = plan_.markers.get(pid, ([], []))
            kind = types[offs.index(marker)] if marker in offs else -1
            txn_state.seed(pid, first, kind == ABORT_MARKER)
    stats = dict(bucket=bucket, path=out_path, batches_in=0, batches_out=0, records_in=0,
                 records_out=0, tombstones=0, keyless=0, bytes_out=0)
    segs = [rd.Segment(b, os.path.join(plan_.partition_dir, f"{b:020d}.log"), size)
            for b, size in plan_.source_segments]
    chunks = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else plan_.end
        chunks += rd.segment_chunks(seg, nxt, False, rd.Bounds(lo, hi), 1 << 62)
    with open(out_path, "wb") as out:
        for chunk in chunks:
            for bv in rd.iter_chunk_batches(chunk):
                h = bv.header
                if h.base_offset < lo:
                    continue
                if h.base_offset > hi:
                    break
                stats["batches_in"] += 1
                stats["records_in"] += h.records_count
                batch = bytes(bv.buf[bv.position:bv.position + h.size])
                cover(h.last_offset)
                omap.batch = (batch, h)
                res = cleaner._filter(batch, h, plan_.markers, plan_.producers, txn_state, now_ms,
                                      delete_retention_ms, plan_.end, None)
                stats["keyless"] += res.keyless
                if res.output is None:
                    continue
                out.write(res.output)
                stats["batches_out"] += 1
                stats["records_out"] += res.retained
                stats["tombstones"] += res.tombstones
                stats["bytes_out"] += len(res.output)
    return stats


def transactions(segs) -> list[tuple[int, int, int]]:
    """(producer id, first offset, marker offset) of every finished transaction, from headers."""
    open_first: dict[int, int] = {}
    out = []
    for seg in segs:
        for bv in rd.iter_chunk_batches(rd.Chunk(seg.log_path, seg.base_offset, 0, seg.size, True)):
            h = bv.header
            if not h.is_transactional:
                continue
            if h.is_control:
                out.append((h.producer_id, open_first.pop(h.producer_id, h.base_offset), h.base_offset))
            else:
                open_first.setdefault(h.producer_id, h.base_offset)
    return out


def compact(spark, paths, topic: str, partition: int, output: str, *, now_ms: int | None = None,
            delete_retention_ms: int = 86_400_000, segment_bytes: int = 1 << 30,
            index_interval_bytes: int = 4096, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
            buckets: int | None = None, include_active: bool = False, progress=None) -> CompactResult:
    """Compact `topic`-`partition` found under `paths` into the staging dir `output`."""
    from pyspark.sql import functions as F

    from kompakt.storage.segment import LogSegment

    t0 = time.time()
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    parts = rd.find_partitions(paths, {topic}, {partition})
    if not parts:
        raise FileNotFoundError(f"no partition dir {topic}-{partition} under {paths}")
    p = plan(parts[0], bucket_bytes=bucket_bytes, buckets=buckets, include_active=include_active)
    if os.path.exists(output) and os.listdir(output):
        raise FileExistsError(f"staging dir {output} is not empty; remove it or name another")
    os.makedirs(os.path.join(output, PARTS_DIR), exist_ok=True)
    result = CompactResult(topic, partition, 0, 0, os.path.abspath(output), [], now_ms=now_ms,
                           delete_retention_ms=delete_retention_ms)
    if p is None:
        say(f"compact {topic}-{partition}: nothing cleanable (only the active segment)")
        shutil.rmtree(os.path.join(output, PARTS_DIR))
        return result
    result.start, result.end = p.start, p.end
    result.bytes_in = sum(size for _, size in p.source_segments)
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    say(f"compact {topic}-{partition}: offsets [{p.start}, {p.end}) in {len(p.source_segments)} segments, "
        f"{result.bytes_in} bytes, {p.buckets} buckets")

    # 2. latest offset per key by Spark's shuffle, then one filtering task per bucket
    # keyed records of data batches whose transaction did not abort: Arrow batches filled by compiled
    # code in the read tasks (pipeline/keyscan.py), so no Python runs per record
    df = (spark.read.format("kompakt")
          .schema("key binary, offset long")
          .option("keyed_only", "true").option("as_of_offset", str(p.end - 1))
          .option("split_bytes", str(max(1 << 20, min(rd.DEFAULT_SPLIT_BYTES, result.bytes_in // (2 * parallelism) + 1))))
          .load(p.partition_dir))
    # max(offset) alone (no struct with the batch's base: half the aggregation's time); a retained
    # offset's bucket is its own, and a filter task whose last batch reaches into the next bucket
    # loads that bucket's offsets too (filter_bucket)
    latest = (df.groupBy("key").agg(F.max("offset").alias("offset"))
              .select(F.floor((F.col("offset") - p.start) / p.width).cast("long").alias("bucket"), "offset"))
    parts_dir = os.path.abspath(os.path.join(output, PARTS_DIR))
    retained_dir = os.path.join(parts_dir, "retained")
    say(f"compact {topic}-{partition}: shuffling keys")
    # the retained offsets go to Parquet, one dir per bucket, written by the JVM (no Python rows)
    latest.repartition("bucket").write.partitionBy("bucket").parquet(retained_dir)
    say(f"compact {topic}-{partition}: filtering batches ({time.time() - t0:.1f}s so far)")
    plan_ = p

    def load(b):
        import pyarrow.parquet as pq

        d = os.path.join(retained_dir, f"bucket={b}")
        return pq.read_table(d, columns=["offset"]).column("offset") if os.path.isdir(d) else []

    def run_bucket(b):
        path = os.path.join(parts_dir, f"bucket-{b:06d}.bin")
        return filter_bucket(plan_, b, load, path, now_ms=now_ms, delete_retention_ms=delete_retention_ms)

    # every bucket runs, also those with nothing retained (their control batches may stay)
    rows = spark.sparkContext.parallelize(range(p.buckets), p.buckets).map(run_bucket).collect()
    rows = [_Row(**r) for r in rows]
    rows = sorted(rows, key=lambda r: r.bucket)
    if len(rows) != p.buckets:
        raise RuntimeError(f"expected {p.buckets} bucket results, got {len(rows)}")
    for r in rows:
        for k in ("batches_in", "batches_out", "records_in", "records_out", "tombstones", "keyless", "bytes_out"):
            setattr(result, k, getattr(result, k) + getattr(r, k))

    # 3. segments with indexes through the storage engine's writer
    say(f"compact {topic}-{partition}: writing segments ({result.records_out} of {result.records_in} records kept, "
        f"{time.time() - t0:.1f}s so far)")
    result.segments = write_segments(output, [r.path for r in rows], p.start, segment_bytes,
                                     index_interval_bytes, LogSegment)
    result.seconds = round(time.time() - t0, 3)
    manifest = dict(asdict(result), source_dir=p.partition_dir, source_segments=p.source_segments,
                    format=1)
    tmp = os.path.join(output, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(output, MANIFEST))
    shutil.rmtree(parts_dir)
    say(f"compact {topic}-{partition}: {result.records_in} -> {result.records_out} records, "
        f"{result.bytes_in} -> {result.bytes_out} bytes in {result.seconds}s; staged in {output}")
    return result


def write_segments(output: str, part_paths: list[str], first_base: int, segment_bytes: int,
                   index_interval_bytes: int, segment_cls) -> list[list[int]]:
    """Append the batches of the part files, in order, into segments in `output`; [[base, size]]."""
    from kompakt.protocol import records as R

    done: list[list[int]] = []
    seg = segment_cls(output, first_base, index_interval_bytes=index_interval_bytes)

    def close(s):
        s.on_become_inactive()
        s.flush()
        s.close()
        done.append([s.base_offset, s.size])

    for path in part_paths:
        with open(path, "rb") as f:
            data = f.read()
        for pos, h in R.iter_batches(data):
            if seg.size > 0 and (seg.size + h.size > segment_bytes
                                 or not seg.can_convert_to_relative_offset(h.last_offset)):
                close(seg)
                seg = segment_cls(output, h.base_offset, index_interval_bytes=index_interval_bytes)
            seg.append(h.last_offset, h.max_timestamp, h.last_offset, data[pos:pos + h.size])
        del data
    close(seg)
    return done
