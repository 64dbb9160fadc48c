"""`kompakt compact-adopt LOG_DIR STAGING_DIR`: adopt pipeline output offline (broker stopped).

Steps: take the log dir's `.lock` (the broker holds it with flock while it runs, so this refuses
to touch a live broker's files: use `kompakt admin adopt` then); require the clean-shutdown marker
(after a crash the broker must recover the log first: we open it without recovery); open the partition's Log with
its topic's config and the dir's log-start checkpoint; `adopt_staging` (crash-safe swap, see
adopt.py); advance the partition's entry in `cleaner-offset-checkpoint` to the staged end (the
range is clean now, so the broker's cleaner will not redo it); close the log; release the lock.
A crash at any point leaves a dir the broker's loader completes or rolls back.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys

LOCK_FILE = ".lock"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def add_arguments(parser) -> None:
    parser.add_argument("log_dir", help="the broker's log dir holding the partition")
    parser.add_argument("staging_dir", help="output of `kompakt pipeline compact`")
    parser.add_argument("--config", help="server.properties (for log.* defaults of the topic config)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def adopt_offline(log_dir: str, staging_dir: str, config_path: str | None = None) -> dict:
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.config.topic_config import LogConfig
    from kompakt.pipeline.adopt import adopt_staging, read_manifest
    from kompakt.storage import TopicPartition
    from kompakt.storage.checkpoint import OffsetCheckpointFile
    from kompakt.storage.log import Log

    manifest = read_manifest(staging_dir)
    tp = TopicPartition(manifest["topic"], manifest["partition"])
    pdir = os.path.join(log_dir, f"{tp.topic}-{tp.partition}")
    if not os.path.isdir(pdir):
        raise FileNotFoundError(f"no partition dir {pdir}")
    lock_fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{log_dir} is locked by a running broker; stop it, or adopt online "
                               "with `kompakt admin adopt`") from None
        try:
            from kompakt.storage.log_dirs import CLEAN_SHUTDOWN_FILE
        except ImportError:
            CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
        if not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)):
            raise RuntimeError(f"{log_dir} has no {CLEAN_SHUTDOWN_FILE}: the broker did not shut down cleanly; "
                               "start it once (it recovers the logs), stop it, then adopt")
        broker = BrokerConfig.load(config_path) if config_path else None
        overrides = {}
        try:
            from kompakt.storage.topic_store import TopicStore
            topics = TopicStore(log_dir).load()[0]
            meta = topics.get(tp.topic)
            overrides = dict(getattr(meta, "configs", {}) or {})
        except Exception:  # no or unreadable topic store: Kafka's defaults are safe for a swap
            overrides = {}
        cfg = LogConfig.from_stored(overrides, broker)   # as the broker loads it: stored, not re-judged
        start = OffsetCheckpointFile(os.path.join(log_dir, LOG_START_CHECKPOINT)).read().get(tp)
        log = Log.open(pdir, cfg, log_start_offset=start, tp=tp)
        try:
            summary = adopt_staging(log, staging_dir)
        finally:
            log.close()
        ckpt = OffsetCheckpointFile(os.path.join(log_dir, CLEANER_CHECKPOINT))
        offsets = ckpt.read()
        if offsets.get(tp, -1) < summary["first_dirty_offset"]:
            offsets[tp] = summary["first_dirty_offset"]
            ckpt.write(offsets)
        return summary
    finally:
        os.close(lock_fd)  # closing the fd releases the flock


def run(args) -> int:
    try:
        summary = adopt_offline(args.log_dir, args.staging_dir, args.config)
    except Exception as e:  # one clear line, nothing changed (see adopt.py's steps)
        print(f"compact-adopt: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"adopted {summary['topic']}-{summary['partition']}: {summary['replaced']} segments "
              f"({summary['bytes_before']} B) -> {summary['segments']} ({summary['bytes_after']} B); "
              f"clean below offset {summary['first_dirty_offset']}")
    return 0
