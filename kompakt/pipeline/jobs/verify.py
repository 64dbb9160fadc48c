"""`kompakt pipeline verify`: check a compacted partition, or every partition of a topic, against
compaction's guarantees: the checks the cleaner runs live before each swap
(kompakt.cleaner.guarantees.CHECKS, same names), here over whole partitions.

Always (pure Python over the compacted partition, every batch):
  * crc           every batch's CRC-32C is valid and every record decodes;
  * order         offsets strictly increase, batch after batch and record after record.
With `--source DIR` (the partition before compaction) over the compacted range [start, end)
(start/end from the staging dir's compact.json, else the source's log start and active segment
base), as Spark joins:
  * changed       every compacted record exists in the source at the same offset with the same
                  key, value, headers and timestamp (compaction removes, never rewrites);
  * latest        each key's latest committed record in the source is still there, unless it
                  is a tombstone whose batch carried a delete horizon that has passed at --now;
  * tombstone     a tombstone removed before its horizon is a violation of its own kind;
  * marker        a COMMIT/ABORT marker removed while a batch of its transaction is still in the
                  compacted partition (seed 001: markers stay until their transaction's batches
                  are gone; pure Python over batch headers, `marker_violations`).
Reported, not violations (the cleaner may legitimately leave them after a partial pass):
superseded records still present, aborted records still present.
A PATH holding several partitions of one topic (a log dir with --topic) is verified partition by
partition (--source then names the log dir before compaction); the report lists each partition's
and sums them. Consumer groups are not known here: a tombstone that kompakt.tombstone.retention.
groups kept past its horizon is not a violation, nor is one removed after its horizon.
"""
from __future__ import annotations

import json
import os
import sys
import time

from kompakt.cleaner import guarantees
from kompakt.pipeline import reader as rd

COLUMNS = ("offset long, key binary, value binary, headers array<struct<key:string,value:binary>>, "
           "timestamp long, is_tombstone boolean, is_control boolean, is_aborted boolean, "
           "delete_horizon_ms long")


CHECKS = {**guarantees.CHECKS,
          "marker": "a transaction marker stays while a batch of its transaction remains"}


def integrity(part: rd.PartitionDir) -> dict:
    """CRC and order checks of one partition dir."""
    stats = rd.ReadStats()
    violations = []
    prev = -1
    segs = rd.list_segments(part.path)
    for i, seg in enumerate(segs):
        chunk = rd.Chunk(seg.log_path, seg.base_offset, 0, seg.size, i == len(segs) - 1)
        split = rd.Split(part.topic, part.partition, [chunk])
        try:
            for row in rd.iter_split_records(split, corrupt="skip", stats=stats):
                if row.offset <= prev:
                    violations.append(dict(kind="order", offset=row.offset, previous=prev, segment=seg.log_path))
                prev = row.offset
        except rd.R.CorruptRecordError as e:
            violations.append(dict(kind="crc", segment=seg.log_path, error=str(e)))
    for path, pos in stats.corrupt_positions:
        violations.append(dict(kind="crc", segment=path, position=pos))
    return dict(records=stats.records, batches=stats.batches, corrupt_batches=stats.corrupt_batches,
                violations=violations)


def verify(spark, target: str, *, source: str | None = None, topic: str | None = None,
           partition: int | None = None, now_ms: int | None = None, start: int | None = None,
           end: int | None = None, max_examples: int = 20, progress=None) -> dict:
    """One partition's report; with several partitions of one topic under `target`, the topic's
    (each partition's report under "partitions", violations tagged with their partition)."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    parts = rd.find_partitions(target, {topic} if topic else None, {partition} if partition is not None else None)
    manifest = None
    mpath = os.path.join(target, rd.STAGING_MANIFEST)
    if os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    if not parts:
        raise FileNotFoundError(f"no partitions{' of ' + topic if topic else ''} under {target}")
    if len(parts) == 1:
        return _verify_partition(spark, parts[0], source, now_ms, manifest, start, end, max_examples, say)
    if len({p.topic for p in parts}) != 1:
        raise ValueError(f"{target} holds partitions of {len({p.topic for p in parts})} topics: "
                         "name one with --topic (and --partition for one partition)")
    if start is not None or end is not None:
        raise ValueError("an offset range applies to one partition: give --partition")
    reports = [_verify_partition(spark, part, source, now_ms, None, None, None, max_examples, say)
               for part in parts]
    out = dict(topic=parts[0].topic, now_ms=now_ms, checks=CHECKS, partitions=reports,
               violations=[dict(v, partition=r["partition"]) for r in reports for v in r["violations"]])
    for key in ("records", "batches", "corrupt_batches", "changed_records", "missing_latest", "superseded_kept",
                "aborted_kept", "removed_tombstones"):
        if any(key in r for r in reports):
            out[key] = sum(r.get(key, 0) for r in reports)
    out["ok"] = all(r["ok"] for r in reports)
    return out


def _verify_partition(spark, part, source, now_ms, manifest, start, end, max_examples, say) -> dict:
    say(f"verify {part.topic}-{part.partition}: CRCs and order")
    report = dict(topic=part.topic, partition=part.partition, now_ms=now_ms, **integrity(part))
    if source is None:
        report["ok"] = not report["violations"]
        return report
    src = rd.find_partitions(source, {part.topic}, {part.partition})
    if len(src) != 1:
        raise FileNotFoundError(f"no partition {part.topic}-{part.partition} under {source}")
    src_segs = rd.list_segments(src[0].path)
    if manifest:
        start = manifest["start"] if start is None else start
        end = manifest["end"] if end is None else end
    start = src_segs[0].base_offset if start is None else start
    end = src_segs[-1].base_offset if end is None else end
    report.update(start=start, end=end)
    say(f"verify {part.topic}-{part.partition}: against {src[0].path} over offsets [{start}, {end})")
    from pyspark.sql import functions as F

    def load(path):
        # log_start=ignore: compaction keeps records below the log start offset, compare them all;
        # include_control: a marker the compaction changed or dropped is a finding too
        return (spark.read.format("kompakt").schema(COLUMNS).option("mark_aborted", "true").option("log_start", "ignore")
                .option("include_control", "true")
                .load(path).where((F.col("offset") >= start) & (F.col("offset") < end)))

    orig = load(src[0].path).alias("o")
    comp = load(part.path).alias("c")
    same = ["offset", "key", "value", "timestamp", "headers", "is_control"]
    changed = comp.join(orig, [comp[c].eqNullSafe(orig[c]) for c in same], "left_anti")
    latest = (orig.where("key IS NOT NULL AND NOT is_control AND NOT is_aborted")
              .groupBy("key").agg(F.max(F.struct("offset", "is_tombstone", "delete_horizon_ms")).alias("l"))
              .select("key", "l.offset", "l.is_tombstone", "l.delete_horizon_ms"))
    missing = latest.join(comp.select("offset"), "offset", "left_anti")
    bad_missing = missing.where(~F.col("is_tombstone") | (F.col("delete_horizon_ms") < 0)
                                | (F.col("delete_horizon_ms") > F.lit(now_ms)))
    superseded = (comp.where("key IS NOT NULL AND NOT is_control").select("offset", "key")
                  .join(latest.select(F.col("key"), F.col("offset").alias("latest")), "key")
                  .where("offset < latest").select("offset", "key"))
    kept_aborted = comp.where("is_aborted AND NOT is_control")
    # every finding in one job: examples (row_number <= max_examples) and totals per kind
    from pyspark.sql import Window

    def tag(frame, kind):
        return frame.select(F.lit(kind).alias("kind"), F.col("offset"), F.col("key"))

    legit_removed = (F.col("is_tombstone") & (F.col("delete_horizon_ms") >= 0)
                     & (F.col("delete_horizon_ms") <= F.lit(now_ms)))
    findings = (tag(changed, "changed")
                .unionByName(tag(bad_missing.where(~F.col("is_tombstone")), "latest"))
                .unionByName(tag(bad_missing.where(F.col("is_tombstone")), "tombstone"))
                .unionByName(tag(missing.where(legit_removed), "removed_tombstone"))
                .unionByName(tag(superseded, "superseded"))
                .unionByName(tag(kept_aborted, "aborted")))
    w = Window.partitionBy("kind").orderBy("offset")
    rows = (findings.withColumn("n", F.row_number().over(w))
            .withColumn("total", F.count(F.lit(1)).over(Window.partitionBy("kind")))
            .where(F.col("n") <= max_examples).collect())
    totals = {r.kind: r.total for r in rows}
    details = {kind: guarantees.CHECKS[kind] for kind in ("changed", "latest", "tombstone")}
    v = report["violations"]
    for r in sorted(rows, key=lambda r: (r.kind, r.offset)):
        if r.kind in details:
            v.append(dict(kind=r.kind, offset=r.offset, key=r.key.hex() if r.key is not None else None,
                          detail=details[r.kind]))
    report["changed_records"] = totals.get("changed", 0)
    report["missing_latest"] = totals.get("latest", 0) + totals.get("tombstone", 0)
    report["superseded_kept"] = totals.get("superseded", 0)
    report["aborted_kept"] = totals.get("aborted", 0)
    report["removed_tombstones"] = totals.get("removed_tombstone", 0)
    v.extend(marker_violations(part.path, src_segs, start, end)[:max_examples])
    report["ok"] = not v
    return report


def marker_violations(compacted_dir: str, source_segs, start: int, end: int) -> list[dict]:
    """Transactional data batches in [start, end) of the compacted partition whose marker (the
    producer's next marker in the source, itself before `end`) the compacted partition lost."""
    from bisect import bisect_right

    from kompakt.cleaner.cleaner import SegmentInfo, prescan
    markers, _ = prescan([SegmentInfo(s.base_offset, s.log_path, s.size) for s in source_segs])
    present, batches = set(), []
    for seg in rd.list_segments(compacted_dir):
        for bv in rd.iter_chunk_batches(rd.Chunk(seg.log_path, seg.base_offset, 0, seg.size, True)):
            h = bv.header
            if h.is_control:
                present.add(h.base_offset)
            elif h.is_transactional and start <= h.base_offset < end:
                batches.append((h.base_offset, h.producer_id))
    out = []
    for base, pid in batches:
        offs = markers.get(pid, ([], []))[0]
        i = bisect_right(offs, base)
        if i < len(offs) and offs[i] < end and offs[i] not in present:
            out.append(dict(kind="marker", offset=offs[i], batch=base,
                            detail="marker removed while a batch of its transaction remains"))
    return out
