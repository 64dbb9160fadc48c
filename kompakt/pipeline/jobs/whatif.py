"""`kompakt pipeline whatif`: what other compaction settings would do to a topic, from its own records.

Role: read each partition's batches (headers, keys and offsets; read-only, never touching the log
dirs' files otherwise), then replay them twice through the cleaner's own rules
(kompakt.cleaner.whatif): under the topic's current settings and under the current ones with
`--set key=value` applied, and report both side by side, per partition, with a PNG chart. Spark
runs one task per partition (the replay of a partition is sequential by nature); the same
functions serve the admin API for one partition of a live broker, without Spark
(`GET /v1/partitions/{topic}/{partition}/whatif`), on a bounded sample.

Settings that may be set: the topic keys the replay uses (WHATIF_TOPIC_KEYS: segment.bytes,
internal.segment.bytes, segment.ms, segment.index.bytes, index.interval.bytes,
min.cleanable.dirty.ratio, min/max.compaction.lag.ms, delete.retention.ms) validated like
CreateTopics does, and the cleaner's broker keys (WHATIF_BROKER_KEYS: log.cleaner.backoff.ms,
log.cleaner.dedupe.buffer.size, log.cleaner.threads, log.cleaner.io.buffer.load.factor). The
current settings are the topic's as the log dir's topic metadata records them (Kafka's defaults
when there is none) and Kafka's defaults for the broker keys unless `current` ones are given.

Sample: `max_records` keeps the newest whole batches holding at most that many records (at least one
batch); the replay starts from an empty log at the first kept batch's timestamp. Where the sample
starts is found from the newest segments' batch headers, and segments wholly before it are not read
(only the aborted-transaction scan walks every segment's batch headers). A log already
compacted holds fewer records than were produced: the replay shows what the settings do to the
traffic the log still holds.
"""
from __future__ import annotations

import sys
import time

from kompakt.pipeline import reader as rd

WHATIF_TOPIC_KEYS = ("segment.bytes", "internal.segment.bytes", "segment.ms", "segment.index.bytes",
                     "index.interval.bytes", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
                     "max.compaction.lag.ms", "delete.retention.ms")
WHATIF_BROKER_KEYS = ("log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.threads",
                      "log.cleaner.io.buffer.load.factor")
SUMMARY_KEYS = ("cleans", "bytes_read", "bytes_written", "disk_bytes_end", "disk_bytes_mean", "disk_bytes_max",
                "oldest_uncleaned_age_ms_mean", "oldest_uncleaned_age_ms_max", "tombstones_removed",
                "tombstones_still_visible")


def parse_sets(pairs) -> dict:
    """`key=value` strings -> {key: value}; an unknown key or a missing `=` is a clear ValueError."""
    out = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise ValueError(f"--set {pair!r}: expected key=value, e.g. --set min.cleanable.dirty.ratio=0.1")
        key, value = (x.strip() for x in pair.split("=", 1))
        if key not in WHATIF_TOPIC_KEYS and key not in WHATIF_BROKER_KEYS:
            raise ValueError(f"--set {key}: the replay does not use it; settable: "
                             f"{', '.join(WHATIF_TOPIC_KEYS + WHATIF_BROKER_KEYS)}")
        out[key] = value
    return out


def settings_pair(topic_overrides: dict, sets: dict, broker_config=None):
    """(current, proposed) kompakt.cleaner.whatif.Settings: the topic's overrides over the broker's
    defaults (a BrokerConfig, or None for Kafka's) and the broker's cleaner keys, then the same with
    `sets` applied. Bad values raise ValueError naming them."""
    from kompakt.config.broker_config import BROKER_KEYS, ConfigError
    from kompakt.config.topic_config import LogConfig, validate_topic_configs
    from kompakt.protocol.errors import InvalidConfigError

    broker = {k: str(broker_config[k]) for k in WHATIF_BROKER_KEYS} if broker_config is not None else {}
    topic_sets = {k: v for k, v in sets.items() if k in WHATIF_TOPIC_KEYS}
    broker_sets = {k: v for k, v in sets.items() if k in WHATIF_BROKER_KEYS}

    def build(overrides: dict, broker_values: dict, label: str):
        try:
            # the stored overrides as the broker loads them (a stored value today's rules refuse
            # is taken as stored); the --set values alone are held to today's rules
            validate_topic_configs(topic_sets)
            cfg = LogConfig.from_stored(overrides, broker_config)
            values = {k: BROKER_KEYS[k].parse(broker_values.get(k, BROKER_KEYS[k].default))
                      for k in WHATIF_BROKER_KEYS}
        except (InvalidConfigError, ConfigError) as exc:
            raise ValueError(str(exc)) from None
        return _settings(cfg, values, label)

    current = build(dict(topic_overrides), broker, "current")
    proposed = build({**topic_overrides, **topic_sets}, {**broker, **broker_sets},
                     "proposed: " + (", ".join(f"{k}={v}" for k, v in sets.items()) or "no change"))
    return current, proposed


def _settings(cfg, broker_values: dict, label: str):
    from kompakt.cleaner.whatif import Settings
    from kompakt.pipeline.jobs.audit import map_capacity

    capacity = map_capacity(int(broker_values["log.cleaner.dedupe.buffer.size"]),
                            max(1, int(broker_values["log.cleaner.threads"])),
                            float(broker_values["log.cleaner.io.buffer.load.factor"]))
    return Settings(cfg, backoff_ms=int(broker_values["log.cleaner.backoff.ms"]), map_capacity=capacity, label=label)


def read_batches(partition_dir: str, max_records: int | None = None, log_start: int | None = None) -> list:
    """The partition's batches as kompakt.cleaner.whatif.InputBatch (keys and offsets only), the
    newest `max_records` records' worth of whole batches when given. Read-only.

    Records below the log start (`log_start`, else the log dir's checkpoint) are not replayed:
    DeleteRecords or retention removed them, they are no traffic of the log any more."""
    from kompakt.cleaner.whatif import InputBatch
    from kompakt.protocol import records as R

    if log_start is None:
        found = rd.find_partitions(partition_dir)
        log_start = rd.partition_log_start(found[0]) if found else None
    segs = rd.list_segments(partition_dir)
    chunks = [rd.Chunk(s.log_path, s.base_offset, 0, s.size, i == len(segs) - 1) for i, s in enumerate(segs)]
    aborted, _ = rd.scan_transactions(segs)
    start = None if max_records is None else _sample_start(segs, max_records)
    out = []
    for i, c in enumerate(chunks):
        if start is not None and i + 1 < len(segs) and segs[i + 1].base_offset <= start:
            continue          # wholly before the sample: not read (a sample of a large log stays cheap)
        for bv in rd.iter_chunk_batches(c, corrupt="skip"):
            h = bv.header
            if (start is not None and h.base_offset < start) or (log_start is not None and h.last_offset < log_start):
                continue
            recs = [] if h.is_control else [(o, k, t) for o, k, t in R.iter_keys_offsets(bv.buf, bv.position, h)
                                            if log_start is None or o >= log_start]
            out.append(InputBatch(h.base_offset, h.last_offset, h.size, h.max_timestamp, recs, h.is_control,
                                  bool(h.is_transactional and not h.is_control and aborted
                                       and rd.is_aborted(aborted, h.producer_id, h.base_offset))))
    return out


def _sample_start(segs, max_records: int) -> int | None:
    """The base offset of the oldest batch among the newest `max_records` records' whole batches,
    from batch headers, newest segment first (older segments are not read)."""
    from kompakt.cleaner.batch_ops import H_BASE_OFFSET, H_COUNT, walk_headers

    kept, start = 0, None
    for seg in reversed(segs):
        buf, f = rd.open_planned(seg.log_path, seg.ino)
        try:
            counts = [(h[H_BASE_OFFSET], h[H_COUNT]) for _, h in walk_headers(buf, 0, len(buf))]
        finally:
            if hasattr(buf, "close"):
                buf.close()
            f.close()
        for base, n in reversed(counts):
            if kept + n > max_records and kept:
                return start
            kept += n
            start = base
    return start


def compare(batches: list, current, proposed, tp) -> dict:
    """Both replays of one partition and the proposed-minus-current difference of their summaries."""
    from kompakt.cleaner.whatif import replay

    t0 = time.monotonic()
    a = replay(batches, current, tp)
    b = replay(batches, proposed, tp)
    diff = {k: _minus(b["summary"].get(k), a["summary"].get(k)) for k in SUMMARY_KEYS}
    return {"topic": tp[0], "partition": tp[1], "records": a["summary"].get("records", 0),
            "batches": len(batches), "current": a, "proposed": b, "difference": diff,
            "seconds": round(time.monotonic() - t0, 3)}


def _minus(x, y):
    return x - y if isinstance(x, (int, float)) and isinstance(y, (int, float)) else None


def whatif_partition(part: rd.PartitionDir, current, proposed, max_records: int | None = None) -> dict:
    return compare(read_batches(part.path, max_records), current, proposed, (part.topic, part.partition))


def whatif(spark, paths, topic: str, sets: dict, *, partition: int | None = None, topic_overrides=None,
           max_records: int | None = None, progress=None) -> list:
    """One report per partition of `topic` under `paths` (see compare); Spark runs one task each."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    parts = rd.find_partitions(paths, {topic}, {partition} if partition is not None else None)
    if not parts:
        raise FileNotFoundError(f"no partitions of {topic} under {paths}")
    current, proposed = settings_pair(topic_overrides or {}, sets)
    say(f"whatif {topic}: {len(parts)} partition(s), {proposed.label}")

    def run(part):
        return whatif_partition(rd.PartitionDir(*part), current, proposed, max_records)

    jobs = [tuple(p) for p in parts]
    return spark.sparkContext.parallelize(jobs, len(jobs)).map(run).collect()


def format_table(reports: list) -> str:
    """One line per partition and setting: the summary figures side by side."""
    head = ("PARTITION", "SETTINGS", "CLEANS", "READ MB", "WRITTEN MB", "DISK END MB", "DISK MAX MB",
            "OLDEST UNCLEANED MAX", "TOMBSTONE VISIBLE MEDIAN")
    rows = [head]
    for r in reports:
        for side in ("current", "proposed"):
            s = r[side]["summary"]
            vis = (s.get("tombstone_visible_ms") or {}).get("median")
            rows.append((f"{r['topic']}-{r['partition']}", side, str(s.get("cleans", 0)),
                         _mb(s.get("bytes_read")), _mb(s.get("bytes_written")), _mb(s.get("disk_bytes_end")),
                         _mb(s.get("disk_bytes_max")), _dur(s.get("oldest_uncleaned_age_ms_max")), _dur(vis)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1048576:.2f}"


def _dur(ms) -> str:
    if ms is None:
        return "-"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            return f"{ms / size:.1f}{unit}"
    return f"{ms}ms"


