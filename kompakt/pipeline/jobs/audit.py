"""`kompakt pipeline audit`: what compaction would gain, per partition.

Per partition (topic, partition):
    records            data records (control records counted apart in control_records)
    bytes              bytes of the partition's segment files
    distinct_keys      distinct non-null keys among committed data records
    duplicate_ratio    1 - distinct_keys / keyed records: the share of keyed records superseded
    tombstones         records with a key and a null value
    keyless            records without a key (a compacted log drops them)
    dirty_ratio        Kafka's cleanable ratio: cleanable bytes / (clean + cleanable bytes), clean =
                       segments below the first dirty offset of the log dir's
                       cleaner-offset-checkpoint, cleanable = from there to the active segment
    projected_records  records left after a perfect compaction once every tombstone's horizon
                       passed: one per key whose latest record is not a tombstone
    projected_bytes    their bytes (each record's share of its batch's bytes)
    cleaner_passes     passes the broker's cleaner needs for the dirty range: distinct dirty keys /
                       (slots of log.cleaner.dedupe.buffer.size / log.cleaner.threads x load factor)
    first_gap_offset / last_gap_offset   where visible compaction starts and ends (-1 = no gap), from
                       batch headers only: a batch starting past its predecessor's end leaves the
                       exact gap [previous end, base offset); a batch holding fewer records than its
                       offset span counts as a gap from its base to its last offset (the missing
                       offsets are inside it; finding them exactly would mean decoding every batch)
    corrupt_batches    batches failing their CRC (or unreadable), skipped by every figure above and
                       listed in corrupt_positions (file@position); the audit never fails on them
The figures come from one Spark aggregation over the `kompakt` source plus a header scan per
partition on the driver (sizes, gaps, checkpoints).
"""
from __future__ import annotations

import json
import math
import os
import sys

from kompakt.pipeline import reader as rd

JSON_KEYS = ("topic", "partition", "records", "bytes", "distinct_keys", "tombstones", "duplicate_ratio",
             "projected_records", "projected_bytes", "cleaner_passes")
DEFAULT_DEDUPE_BUFFER = 134_217_728
DEFAULT_LOAD_FACTOR = 0.9


def map_capacity(dedupe_buffer_size: int, threads: int = 1, load_factor: float = DEFAULT_LOAD_FACTOR) -> int:
    """Keys one cleaner pass can hold: the SkimpyOffsetMap's slots times the load factor."""
    from kompakt.cleaner.offset_map import slots_for_memory

    return max(1, int(slots_for_memory(min(dedupe_buffer_size // threads, 2**31 - 1)) * load_factor))


def header_scan(part: rd.PartitionDir) -> dict:
    """Sizes, offsets, gaps and the dirty split of one partition, from batch headers only."""
    segs = rd.list_segments(part.path)
    log_dir = os.path.dirname(part.path)
    first_dirty = rd.read_cleaner_checkpoint(log_dir).get((part.topic, part.partition))
    # the log start is the checkpointed one when DeleteRecords or retention moved it into a segment
    log_start = max(rd.partition_log_start(part) or 0, segs[0].base_offset if segs else 0)
    out = dict(bytes=sum(s.size for s in segs), segments=len(segs),
               log_start_offset=log_start, log_end_offset=0,
               first_gap_offset=-1, last_gap_offset=-1, first_dirty_offset=log_start,
               active_segment_base=segs[-1].base_offset if segs else 0)
    expected = None
    stats = rd.ReadStats()
    for i, seg in enumerate(segs):
        for bv in rd.iter_chunk_batches(rd.Chunk(seg.log_path, seg.base_offset, 0, seg.size, i == len(segs) - 1),
                                        corrupt="skip", stats=stats):
            h = bv.header
            gap = None
            if expected is not None and h.base_offset > expected:
                gap = (expected, h.base_offset - 1)
            if h.records_count < h.last_offset_delta + 1:
                gap = (gap[0] if gap else h.base_offset, h.last_offset)
            if gap:
                if out["first_gap_offset"] < 0:
                    out["first_gap_offset"] = gap[0]
                out["last_gap_offset"] = gap[1]
            expected = h.next_offset
    out["log_end_offset"] = expected if expected is not None else out["log_start_offset"]
    # Kafka's LogCleanerManager.cleanableOffsets: no checkpoint, one below the log start or past the
    # log end -> the log start
    if first_dirty is not None and log_start <= first_dirty <= out["log_end_offset"]:
        out["first_dirty_offset"] = first_dirty
    out["corrupt_batches"] = stats.corrupt_batches
    out["corrupt_positions"] = [f"{path}@{pos}" for path, pos in stats.corrupt_positions[:20]]
    clean = cleanable = 0
    for i, seg in enumerate(segs[:-1]):  # the active segment is never cleanable
        nxt = segs[i + 1].base_offset
        if nxt <= out["first_dirty_offset"]:
            clean += seg.size
        else:
            cleanable += seg.size
    out["dirty_ratio"] = round(cleanable / (clean + cleanable), 4) if clean + cleanable else 0.0
    return out


def audit(spark, paths, *, topics=None, dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER,
          cleaner_threads: int = 1, load_factor: float = DEFAULT_LOAD_FACTOR, progress=None) -> list[dict]:
    from pyspark.sql import functions as F

    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    parts = rd.find_partitions(paths, topics)
    say(f"audit: {len(parts)} partitions")
    scans = {}
    for p in parts:
        scans[(p.topic, p.partition)] = header_scan(p)
    if not parts:
        return []
    bounds = spark.createDataFrame(
        [(t, n, s["first_dirty_offset"], s["active_segment_base"]) for (t, n), s in scans.items()],
        "topic string, partition int, first_dirty long, active_base long")
    load = ",".join(p.path for p in parts)
    corrupt = sum(s["corrupt_batches"] for s in scans.values())
    if corrupt:
        say(f"audit: {corrupt} corrupt batch(es) skipped and counted (corrupt_batches per partition)")
    # include_control: control_records counts the markers (not rows by default)
    df = (spark.read.format("kompakt").option("corrupt", "skip").option("include_control", "true")
          .schema("topic string, partition int, offset long, key binary, is_tombstone boolean, "
                  "is_control boolean, is_aborted boolean, record_bytes double")
          .option("mark_aborted", "true").load(load))
    # one scan, two shuffles: per key, then per partition (the null key's group holds the keyless)
    ok = ~F.col("is_control") & ~F.col("is_aborted")
    one = F.lit(1)
    per_key = (df.join(F.broadcast(bounds), ["topic", "partition"])
               .groupBy("topic", "partition", "key")
               .agg(F.sum(F.when(~F.col("is_control"), one).otherwise(0)).alias("n_data"),
                    F.sum(F.when(F.col("is_control"), one).otherwise(0)).alias("n_control"),
                    F.sum(F.when(F.col("is_aborted") & ~F.col("is_control"), one).otherwise(0)).alias("n_aborted"),
                    F.sum(F.when(F.col("is_tombstone"), one).otherwise(0)).alias("n_tomb"),
                    F.sum(F.when(ok, one).otherwise(0)).alias("n_ok"),
                    F.max(F.when(ok, F.struct("offset", "is_tombstone", "record_bytes"))).alias("latest"),
                    F.max(F.when(ok & (F.col("offset") >= F.col("first_dirty")) & (F.col("offset") < F.col("active_base")), 1)
                          .otherwise(0)).alias("dirty")))
    keyed = F.col("key").isNotNull() & F.col("latest").isNotNull()
    live = keyed & ~F.col("latest.is_tombstone")
    parts_df = per_key.groupBy("topic", "partition").agg(
        F.sum("n_data").alias("records"), F.sum("n_control").alias("control_records"),
        F.sum("n_aborted").alias("aborted_records"), F.sum("n_tomb").alias("tombstones"),
        F.sum(F.when(F.col("key").isNull(), F.col("n_data")).otherwise(0)).alias("keyless"),
        F.sum(F.when(F.col("key").isNotNull(), F.col("n_ok")).otherwise(0)).alias("keyed"),
        F.sum(F.when(keyed, one).otherwise(0)).alias("distinct_keys"),
        F.sum(F.when(live, one).otherwise(0)).alias("projected_records"),
        F.sum(F.when(live, F.col("latest.record_bytes")).otherwise(0.0)).alias("projected_bytes"),
        F.sum(F.when(keyed, F.col("dirty")).otherwise(0)).alias("dirty_keys"))
    say("audit: aggregating keys")
    rows = {(r.topic, r.partition): r.asDict() for r in parts_df.collect()}
    capacity = map_capacity(dedupe_buffer_size, cleaner_threads, load_factor)
    out = []
    for p in parts:
        r = rows.get((p.topic, p.partition), {})
        s = scans[(p.topic, p.partition)]
        keyed = r.get("keyed") or 0
        distinct = r.get("distinct_keys") or 0
        dirty_keys = r.get("dirty_keys") or 0
        out.append(dict(
            topic=p.topic, partition=p.partition, records=r.get("records") or 0, bytes=s["bytes"],
            distinct_keys=distinct, tombstones=r.get("tombstones") or 0,
            duplicate_ratio=round(1 - distinct / keyed, 4) if keyed else 0.0,
            projected_records=r.get("projected_records") or 0,
            projected_bytes=int(round(r.get("projected_bytes") or 0)),
            cleaner_passes=math.ceil(dirty_keys / capacity) if dirty_keys else 0,
            keyless=r.get("keyless") or 0, control_records=r.get("control_records") or 0,
            aborted_records=r.get("aborted_records") or 0, dirty_keys=dirty_keys,
            map_capacity=capacity, dirty_ratio=s["dirty_ratio"],
            first_dirty_offset=s["first_dirty_offset"], first_gap_offset=s["first_gap_offset"],
            last_gap_offset=s["last_gap_offset"], log_start_offset=s["log_start_offset"],
            log_end_offset=s["log_end_offset"], segments=s["segments"],
            corrupt_batches=s["corrupt_batches"], corrupt_positions=s["corrupt_positions"]))
    return out


TABLE_COLUMNS = (("topic", 16), ("partition", 4), ("records", 10), ("bytes", 12), ("distinct_keys", 10),
                 ("duplicate_ratio", 7), ("tombstones", 9), ("keyless", 7), ("dirty_ratio", 6),
                 ("projected_records", 10), ("projected_bytes", 12), ("cleaner_passes", 6),
                 ("last_gap_offset", 10))
HEADINGS = {"topic": "topic", "partition": "part", "records": "records", "bytes": "bytes",
            "distinct_keys": "keys", "duplicate_ratio": "dup", "tombstones": "tombst", "keyless": "keyless",
            "dirty_ratio": "dirty", "projected_records": "proj.rec", "projected_bytes": "proj.bytes",
            "cleaner_passes": "passes", "last_gap_offset": "last.gap"}


def format_table(rows: list[dict]) -> str:
    lines = [" ".join(HEADINGS[c].rjust(w) if c != "topic" else HEADINGS[c].ljust(w) for c, w in TABLE_COLUMNS)]
    for r in rows:
        cells = []
        for c, w in TABLE_COLUMNS:
            v = r[c]
            s = f"{v:.3f}" if isinstance(v, float) else str(v)
            cells.append(s.ljust(w) if c == "topic" else s.rjust(w))
        lines.append(" ".join(cells))
    return "\n".join(lines)


def write_json(rows: list[dict], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, path)
