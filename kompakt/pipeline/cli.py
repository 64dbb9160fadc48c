"""`kompakt pipeline <job> PATH [PATH ...]`: the PySpark jobs from the command line.

Jobs: audit (table; --output FILE.json, --chart FILE.png), whatif (--topic, --set key=value ...,
--output FILE.json, --chart FILE.png), snapshot (--topic, --output DIR,
--as-of-offset / --as-of-timestamp), compact (--topic, --partition, --output STAGING_DIR),
verify (PATH = compacted partition, staging dir, or log dir with --topic for every partition of
the topic; --source ORIGINAL for the content checks).
PATH is a log dir, a partition dir or <log dir>/<topic>; several may be given.
Every job takes --master (default local[*]) and --conf key=value (repeatable) for Spark, shows
progress on stderr and prints a summary on stdout. Exit status: 0 ok, 1 failure or violations.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="log dir, partition dir or <log dir>/<topic>")
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    a = sub.add_parser("audit", help="per-partition duplicates, tombstones, dirty ratio, projected savings")
    _common(a)
    a.add_argument("--topic", action="append", help="only these topics")
    a.add_argument("--output", help="write the figures as a JSON list to this file")
    a.add_argument("--chart", help="draw duplicates and projected savings into this PNG")
    a.add_argument("--dedupe-buffer-size", type=int, default=134_217_728,
                   help="log.cleaner.dedupe.buffer.size for the cleaner-passes estimate")
    a.add_argument("--cleaner-threads", type=int, default=1, help="log.cleaner.threads")
    s = sub.add_parser("snapshot", help="latest value per key of a topic, as Parquet")
    _common(s)
    s.add_argument("--topic", required=True)
    s.add_argument("--output", required=True, help="Parquet output dir (overwritten)")
    s.add_argument("--as-of-offset", type=int, help="only records with offset <= N")
    s.add_argument("--as-of-timestamp", type=int, help="only records with timestamp <= T (ms)")
    c = sub.add_parser("compact", help="exact compaction of one partition into a staging dir")
    _common(c)
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--output", required=True, help="staging dir (must not exist or be empty)")
    c.add_argument("--delete-retention-ms", type=int,
                   help="delete.retention.ms (default: the topic's, from the log dir's topic metadata, else 1 day)")
    c.add_argument("--segment-bytes", type=int, help="segment.bytes of the output (default: the topic's)")
    c.add_argument("--index-interval-bytes", type=int, help="index.interval.bytes of the output (default: the topic's)")
    c.add_argument("--now-ms", type=int, help="the clock for delete horizons (default: now)")
    c.add_argument("--buckets", type=int, help="filtering tasks (default: one per 16 MiB of log)")
    w = sub.add_parser("whatif", help="replay a topic's records under other compaction settings, side by side")
    _common(w)
    w.add_argument("--topic", required=True)
    w.add_argument("--partition", type=int, help="only this partition")
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting to try (repeatable): topic keys such as min.cleanable.dirty.ratio, segment.ms, "
                        "segment.bytes, min/max.compaction.lag.ms, delete.retention.ms, or the cleaner's "
                        "log.cleaner.backoff.ms / log.cleaner.dedupe.buffer.size")
    w.add_argument("--max-records", type=int, help="replay only each partition's newest N records")
    w.add_argument("--output", help="write the reports (timelines and summaries) as JSON to this file")
    w.add_argument("--chart", help="draw disk use and freshness over time into this PNG")
    v = sub.add_parser("verify", help="check a compacted partition, or a topic, against the guarantees")
    _common(v)
    v.add_argument("--source", help="the partition (or its log dir) before compaction")
    v.add_argument("--topic")
    v.add_argument("--partition", type=int)
    v.add_argument("--now-ms", type=int, help="the clock for delete horizons (default: now)")
    v.add_argument("--output", help="write the report as JSON to this file")


def topic_log_config(paths, topic: str):
    """The topic's LogConfig from the topic metadata the broker keeps in its log dir, or None.
    Loaded as the broker loads it (LogConfig.from_stored): a stored value today's rules refuse
    (e.g. min.compaction.lag.ms above max) is taken as stored, one that no longer parses is left
    out with a warning on stderr, never a failed job."""
    import os

    from kompakt.config.topic_config import LogConfig
    from kompakt.storage.topic_store import TopicStore

    for path in paths:
        path = os.path.normpath(path)
        for d in (path, os.path.dirname(path)):
            try:
                meta = TopicStore(d).load_strict()[0].get(topic)
            except Exception:  # not a log dir, or unreadable: try the next candidate
                continue
            if meta is not None:
                return LogConfig.from_stored(dict(meta.configs), on_dropped=_warn_dropped(topic))
    return None


def _warn_dropped(topic: str):
    def warn(key, value, exc):
        print(f"warning: ignoring stored config {key}={value} of topic {topic}: {exc}", file=sys.stderr)
    return warn


def _session(args):
    from kompakt.pipeline.spark import get_session, parse_conf

    return get_session(args.master, parse_conf(args.conf), app_name=f"kompakt-{args.job}")


def run(args) -> int:
    t0 = time.time()
    try:
        return _run(args, t0)
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"kompakt pipeline {args.job}: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        if (e.name or "").split(".")[0] not in ("pyspark", "pyarrow"):
            raise
        # `pip install .` leaves the spark extra out: say how to get it, not a traceback
        print(f"kompakt pipeline {args.job}: needs PySpark ({e}); install it with "
              f"pip install 'kompakt[spark]' (from a checkout: pip install '.[spark]'; Java 17 too)", file=sys.stderr)
        return 1


def _run(args, t0: float) -> int:
    paths = ",".join(args.paths)
    if args.job in ("audit", "snapshot", "compact", "whatif"):
        from kompakt.pipeline.reader import find_partitions

        # check the paths on the driver first: one clear line instead of a Spark planning error
        topics = {args.topic} if isinstance(args.topic, str) else set(args.topic) if args.topic else None
        if not find_partitions(args.paths, topics):
            raise FileNotFoundError(f"no partitions{' of ' + ', '.join(sorted(topics)) if topics else ''} "
                                    f"under {', '.join(args.paths)}")
    if args.job == "audit":
        from kompakt.pipeline.jobs import audit as job

        rows = job.audit(_session(args), paths, topics=set(args.topic) if args.topic else None,
                         dedupe_buffer_size=args.dedupe_buffer_size, cleaner_threads=args.cleaner_threads)
        print(job.format_table(rows))
        if args.output:
            job.write_json(rows, args.output)
        if args.chart:
            from kompakt.pipeline.chart import audit_chart

            with open(args.chart, "wb") as f:
                f.write(audit_chart(rows))
        print(f"audit: {len(rows)} partitions in {time.time() - t0:.1f}s")
        return 0
    if args.job == "snapshot":
        from kompakt.pipeline.jobs.snapshot import snapshot

        res = snapshot(_session(args), paths, args.topic, args.output, as_of_offset=args.as_of_offset,
                       as_of_timestamp=args.as_of_timestamp)
        print(f"snapshot {res['topic']}: {res['keys']} keys -> {res['output']} in {time.time() - t0:.1f}s")
        return 0
    if args.job == "compact":
        from kompakt.pipeline.jobs.compact import compact

        cfg = topic_log_config(args.paths, args.topic)

        def pick(given, attr, default):
            return given if given is not None else getattr(cfg, attr, default) if cfg is not None else default

        drm = pick(args.delete_retention_ms, "delete_retention_ms", 86_400_000)
        seg_bytes = pick(args.segment_bytes, "segment_bytes", 1 << 30)
        interval = pick(args.index_interval_bytes, "index_interval_bytes", 4096)
        print(f"compact {args.topic}-{args.partition}: delete.retention.ms={drm} segment.bytes={seg_bytes} "
              f"index.interval.bytes={interval}" + ("" if cfg is not None else " (no topic metadata found: defaults)"),
              file=sys.stderr)
        res = compact(_session(args), paths, args.topic, args.partition, args.output,
                      now_ms=args.now_ms, delete_retention_ms=drm, segment_bytes=seg_bytes,
                      index_interval_bytes=interval, buckets=args.buckets)
        print(f"compact {res.topic}-{res.partition}: offsets [{res.start}, {res.end}) "
              f"{res.records_in} -> {res.records_out} records, {res.bytes_in} -> {res.bytes_out} bytes, "
              f"{len(res.segments)} segments in {res.staging_dir} ({res.seconds}s)")
        return 0
    if args.job == "whatif":
        from kompakt.pipeline.jobs import whatif as job

        sets = job.parse_sets(args.set)
        if args.max_records is not None and args.max_records < 1:
            raise ValueError("--max-records must be at least 1")
        cfg = topic_log_config(args.paths, args.topic)
        job.settings_pair(cfg.overrides if cfg is not None else {}, sets)   # bad --set values fail before Spark
        reports = job.whatif(_session(args), args.paths, args.topic, sets, partition=args.partition,
                             topic_overrides=cfg.overrides if cfg is not None else {}, max_records=args.max_records)
        reports.sort(key=lambda r: r["partition"])
        print(job.format_table(reports))
        if args.output:
            from kompakt.pipeline.jobs.audit import write_json

            write_json(reports, args.output)
        if args.chart:
            from kompakt.pipeline.chart import whatif_chart

            with open(args.chart, "wb") as f:
                f.write(whatif_chart(reports))
        print(f"whatif {args.topic}: {len(reports)} partitions, {sum(r['records'] for r in reports)} records "
              f"replayed twice in {time.time() - t0:.1f}s")
        return 0
    if args.job == "verify":
        from kompakt.pipeline.jobs.verify import verify

        if len(args.paths) != 1:
            print("verify takes one PATH (a partition dir, a staging dir, or a log dir with --topic)",
                  file=sys.stderr)
            return 1
        spark = _session(args) if args.source else None
        rep = verify(spark, args.paths[0], source=args.source, topic=args.topic, partition=args.partition,
                     now_ms=args.now_ms)
        if args.output:
            with open(args.output, "w") as f:
                json.dump(rep, f, indent=1)
        for v in rep["violations"][:50]:
            print("VIOLATION " + " ".join(f"{k}={v[k]}" for k in v))
        for part in rep.get("partitions", [rep]):
            extra = " ".join(f"{k}={part[k]}" for k in ("superseded_kept", "aborted_kept", "removed_tombstones")
                             if k in part)
            print(f"verify {part['topic']}-{part['partition']}: {part['records']} records, {part['batches']} "
                  f"batches, {len(part['violations'])} violations {extra} -> {'OK' if part['ok'] else 'FAILED'}")
        if "partitions" in rep:
            print(f"verify {rep['topic']}: {len(rep['partitions'])} partitions, {rep['records']} records, "
                  f"{len(rep['violations'])} violations -> {'OK' if rep['ok'] else 'FAILED'}")
        return 0 if rep["ok"] else 1
    raise ValueError(f"unknown job {args.job}")
