"""Adopt a pipeline-compacted staging dir into a live partition Log through its crash-safe swap.

Role: the only way `kompakt pipeline compact` output enters a log. Called by the admin endpoint
and `kompakt admin adopt` on a running broker (with cleaning of the partition paused by the
caller, so the cleaner and retention cannot change the segments meanwhile), and by the offline
`kompakt compact-adopt` (broker stopped). Never imports pyspark.

Steps, and what happens if the process dies after each:
1. check the manifest (staging/compact.json: topic, partition, end, source_segments) against the
   log: the segments below `end` must be exactly the ones compacted (same base offsets and sizes)
   and `end` must not reach into the active segment; otherwise refuse (StaleStagingError), the
   staging dir and the log untouched.
2. copy each staged segment's .log/.index/.timeindex into the partition dir as `*.cleaned` and
   fsync them -> crash: loading deletes `.cleaned` files; the log is unchanged.
3. under the log's lock, re-check step 1 (a roll or retention may have happened while copying),
   open the copies as LogSegments and call `Log.replace_segments(new, old)`: its own numbered
   steps (.cleaned -> .swap -> live, old -> .deleted, fsync dir) make the swap roll back or
   forward on any crash.
Returns a summary whose `first_dirty_offset` (= end) the caller may write to the cleaner
checkpoint: everything below it is now clean.
"""
from __future__ import annotations

import json
import os
import shutil

from kompakt.protocol.errors import KafkaStorageErrorError
from kompakt.storage import files as fs

MANIFEST = "compact.json"
CLEANED = ".cleaned"
STAGED_SUFFIXES = (".log", ".index", ".timeindex")


class StaleStagingError(KafkaStorageErrorError):
    """The staging dir does not match the live log (it changed since `compact` ran, or the dir is
    incomplete); run `kompakt pipeline compact` again."""


def read_manifest(staging_dir: str) -> dict:
    path = os.path.join(staging_dir, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise StaleStagingError(f"{staging_dir} has no {MANIFEST}: the compaction did not finish, or found "
                                f"nothing to compact (only the active segment); nothing to adopt") from None
    for key in ("topic", "partition", "start", "end", "source_segments", "segments"):
        if key not in manifest:
            raise StaleStagingError(f"{path} lacks {key!r}")
    return manifest


def _check(log, manifest: dict) -> list:
    tp = getattr(log, "tp", None)
    if tp is not None and (tp[0], tp[1]) != (manifest["topic"], manifest["partition"]):
        raise StaleStagingError(f"staging holds {manifest['topic']}-{manifest['partition']}, the log is {tp[0]}-{tp[1]}")
    end = manifest["end"]
    segs = list(log.segments)
    old = [s for s in segs if s.base_offset < end]
    if log.active_segment.base_offset < end:
        raise StaleStagingError(f"staged range ends at {end}, past the active segment's base "
                                f"{log.active_segment.base_offset}: the active segment is never replaced")
    have = [[s.base_offset, s.size] for s in old]
    want = [list(x) for x in manifest["source_segments"]]
    if have != want:
        raise StaleStagingError(f"segments below {end} changed since compaction: log has {have[:5]}..., "
                                f"staging was made from {want[:5]}...; compact again")
    return old


def adopt_staging(log, staging_dir: str) -> dict:
    """Swap the staged segments in for the log's segments below the staged `end` (see module doc)."""
    from kompakt.storage.segment import LogSegment

    manifest = read_manifest(staging_dir)
    with log.lock:
        _check(log, manifest)                                     # step 1
    copied: list[str] = []
    bases = [b for b, _ in manifest["segments"]]
    try:
        for b in bases:                                           # step 2
            for suffix in STAGED_SUFFIXES:
                src = os.path.join(staging_dir, f"{b:020d}{suffix}")
                dst = os.path.join(log.dir, f"{b:020d}{suffix}{CLEANED}")
                if not os.path.exists(src):
                    raise StaleStagingError(f"staged file {src} is missing")
                shutil.copyfile(src, dst)
                copied.append(dst)
                fs.fsync_path(dst)
        with log.lock:                                            # step 3
            old = _check(log, manifest)
            cfg = log.config
            new = [LogSegment(log.dir, b, suffix=CLEANED,
                              index_interval_bytes=getattr(cfg, "index_interval_bytes", 4096),
                              max_index_size=getattr(cfg, "segment_index_bytes", 10 * 1024 * 1024))
                   for b in bases]
            for seg in new:
                seg.flush()
            log.replace_segments(new, old)
    except BaseException:
        for path in copied:
            if os.path.exists(path):
                fs.unlink(path)
        raise
    return dict(topic=manifest["topic"], partition=manifest["partition"], replaced=len(manifest["source_segments"]),
                segments=len(bases), first_dirty_offset=manifest["end"], records=manifest.get("records_out"),
                bytes_before=sum(s for _, s in manifest["source_segments"]),
                bytes_after=sum(s for _, s in manifest["segments"]))
