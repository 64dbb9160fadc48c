"""Log dir housekeeping for the LogManager: validation, the .lock, meta.properties, the clean-shutdown
marker, and partition dir names.

Files in each log dir (Kafka's names and formats):
    .lock                  empty; held with fcntl.flock(LOCK_EX | LOCK_NB) for the life of the broker,
                           so a second broker (or manager) on the dir fails naming the dir
    meta.properties        Java properties, written like Kafka 4's MetaProperties (v1):
                               #
                               #<date>
                               cluster.id=<22-char Kafka uuid>
                               directory.id=<22-char Kafka uuid, one per dir>
                               node.id=<node.id>
                               version=1
                           every dir must agree on cluster.id and node.id with each other and the config
    .kafka_cleanshutdown   JSON {"version":0,"brokerEpoch":-1} (CleanShutdownFileHandler; no broker
                           epoch on a single node). Written last at clean shutdown; read *and deleted*
                           (dir fsynced) before loading, so a crash while loading counts as unclean.
Partition dirs: `<topic>-<n>`; deleted `<topic>-<n>.<uuid hex>-delete`; set aside
`<topic>-<n>.<uuid hex>-stray`; the topic is cut so the name fits 255 bytes (logDeleteDirName).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time as _time
import uuid

from kompakt.config.broker_config import read_properties
from kompakt.protocol.errors import InvalidTopicExceptionError
from kompakt.storage import TopicPartition
from kompakt.storage.checkpoint import atomic_write, fsync_dir
from kompakt.storage.topic_store import random_topic_id, uuid_to_str, validate_topic_name
from kompakt.storage import files as fs

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES_FILE = "meta.properties"
META_PROPERTIES_VERSION = 1
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
FUTURE_DIR_SUFFIX = "-future"


class LogDirError(RuntimeError):
    """A log dir that cannot be used (inconsistent meta.properties, duplicate partitions...)."""


class LogDirLockedError(LogDirError):
    """Another process (or manager) holds the dir's .lock."""


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """`<topic>-<n>` -> TopicPartition; None if the name is not a live partition dir."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicExceptionError:
        return None
    return TopicPartition(topic, int(part))


def unique_dir_name(path: str, suffix: str) -> str:
    """`<topic>-<n>.<uuid hex><suffix>` beside `path`, the topic cut so the name fits 255 bytes
    (Kafka's logDeleteDirName: a 249-character topic must still be deletable)."""
    path = os.path.normpath(path)
    name = os.path.basename(path)
    topic, _, partition = name.rpartition("-")
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return os.path.join(os.path.dirname(path), topic[: max(0, 255 - len(tail))] + tail)


def create_and_validate_dirs(dirs: list[str]) -> tuple[list[str], list[str]]:
    """(live, offline): create missing dirs; refuse duplicates; an unusable dir goes offline
    (logged) unless every dir is unusable."""
    seen: dict[str, str] = {}
    live, offline = [], []
    for d in dirs:
        canonical = os.path.realpath(d)
        if canonical in seen:
            raise LogDirError(f"Duplicate log directory found: {d} and {seen[canonical]} are the same directory")
        seen[canonical] = d
        try:
            os.makedirs(d, exist_ok=True)
            if not os.path.isdir(d) or not os.access(d, os.R_OK | os.W_OK | os.X_OK):
                raise OSError(f"{d} is not a readable, writable directory")
            live.append(os.path.abspath(d))
        except OSError as exc:
            log.error("log dir %s is unusable and taken offline: %s", d, exc)
            offline.append(d)
    if not live:
        raise LogDirError(f"None of the specified log dirs from {','.join(dirs)} can be created or validated")
    return live, offline


def lock_dir(d: str) -> int:
    """Take the dir's .lock; returns the fd to keep open. Raises LogDirLockedError naming the dir."""
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LogDirLockedError(
            f"Failed to acquire lock on file {LOCK_FILE} in {d}. A Kafka instance (another "
            "Kompakt broker) in another process or thread is using this directory.") from None
    return fd


def unlock_dir(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def load_meta_properties(dirs: list[str], configured_cluster_id: str | None,
                         node_id: int) -> tuple[str, dict[str, str]]:
    """Check every dir's meta.properties agree with each other and the config, write missing or
    outdated ones; returns (cluster id, {dir: directory id})."""
    found: dict[str, dict[str, str]] = {}
    for d in dirs:
        path = os.path.join(d, META_PROPERTIES_FILE)
        if os.path.exists(path):
            try:
                found[d] = read_properties(path)
            except (OSError, ValueError) as exc:   # unreadable, or binary (read_properties' ConfigError)
                raise LogDirError(f"Cannot read {path}: {exc}") from None
    cluster_ids = {p.get("cluster.id") for p in found.values() if p.get("cluster.id")}
    if len(cluster_ids) > 1:
        raise LogDirError(f"Log dirs disagree on cluster.id: {sorted(cluster_ids)} "
                          f"(meta.properties in {', '.join(sorted(found))})")
    stored = next(iter(cluster_ids), None)
    if configured_cluster_id and stored and configured_cluster_id != stored:
        raise LogDirError(f"Invalid cluster.id in {', '.join(sorted(found))}: expected {configured_cluster_id}, "
                          f"but read {stored}")
    cluster_id = stored or configured_cluster_id or uuid_to_str(random_topic_id())
    for d, props in found.items():
        stored_node = props.get("node.id", props.get("broker.id"))
        if stored_node is not None and int(stored_node) != node_id:
            raise LogDirError(f"Stored node id {stored_node} in {d}/{META_PROPERTIES_FILE} doesn't match "
                              f"node.id {node_id}")
    directory_ids = {}
    for d in dirs:
        props = found.get(d, {})
        directory_id = props.get("directory.id") or uuid_to_str(random_topic_id())
        directory_ids[d] = directory_id
        wanted = {"cluster.id": cluster_id, "directory.id": directory_id,
                  "node.id": str(node_id), "version": str(META_PROPERTIES_VERSION)}
        if {k: props.get(k) for k in wanted} != wanted:
            stamp = _time.strftime("%a %b %d %H:%M:%S UTC %Y", _time.gmtime())
            text = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in sorted(wanted.items()))
            atomic_write(os.path.join(d, META_PROPERTIES_FILE), text.encode("utf-8"))
    return cluster_id, directory_ids


def read_and_clear_clean_shutdown(d: str) -> bool:
    """Whether the dir's last shutdown was clean; the marker is deleted at once (KAFKA-10471).
    The LogManager logs the outcome once it knows how many logs the dir holds."""
    marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
    if not os.path.exists(marker):
        return False
    fs.unlink(marker)
    fsync_dir(d)
    return True


def write_clean_shutdown(d: str) -> None:
    atomic_write(os.path.join(d, CLEAN_SHUTDOWN_FILE), json.dumps({"version": 0, "brokerEpoch": -1}).encode("ascii"))
