"""Topic metadata (names, topic ids, partition counts, config overrides), persisted crash-safely.

Kafka keeps this in the KRaft metadata log; a single node keeps one small file in the *first* log
dir, rewritten whole on every change (temp + fsync + rename + dir fsync, see checkpoint.atomic_write).

File `kompakt-topics.json` (UTF-8, one JSON object, keys sorted; written by `encode`):

    {"crc32c": <uint32 of the canonical JSON of "topics" and "deleted_topic_ids">,
     "deleted_topic_ids": ["<kafka uuid>", ...],   # ids deleted whose partition dirs may linger
     "topics": [{"configs": {"cleanup.policy": "compact"}, "name": "orders",
                 "partitions": 3, "topic_id": "<kafka uuid>"}, ...],
     "version": 1}

A Kafka uuid string is the 16 bytes in URL-safe base64 without padding (22 chars), Kafka's Uuid.toString.
The checksum catches a flipped byte; the rename makes a torn write impossible (a crash mid-write
leaves `kompakt-topics.json.tmp`, ignored and overwritten later). A corrupt or missing file is
logged and the LogManager rebuilds what it can from the partition dirs (`partition.metadata`
carries the topic id; configs of such topics fall back to the broker defaults, logged).

Per partition dir, `partition.metadata` (Kafka's PartitionMetadataFile; format and writer in
kompakt.storage.loader): "version: 0\ntopic_id: <kafka uuid>".

Ordering rules that keep the two consistent (the LogManager follows them):
  create: 1. save the store with the topic, 2. create the partition dirs (+ partition.metadata).
          Crash after 1: startup creates the missing partition dirs.
  delete: 1. save the store without the topic and its id in deleted_topic_ids, 2. rename the dirs
          `-delete`. Crash after 1: startup finds dirs whose topic id is deleted and deletes them;
          the id leaves deleted_topic_ids once no dir carries it.
"""
from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import crc32c

from kompakt.protocol.errors import InvalidTopicExceptionError
from kompakt.storage.checkpoint import atomic_write
from kompakt.storage.loader import read_partition_metadata as _read_partition_metadata
from kompakt.storage.loader import topic_id_from_string, topic_id_to_string
from kompakt.storage.loader import write_partition_metadata  # noqa: F401 - re-exported for the LogManager

log = logging.getLogger(__name__)

STORE_FILE = "kompakt-topics.json"
STORE_VERSION = 1

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


class TopicStoreCorruptError(ValueError):
    """The store file exists but cannot be trusted; the message says why."""


# --- Kafka Uuid text form (shared with the loader, which owns partition.metadata) ---------------

uuid_to_str = topic_id_to_string


def uuid_from_str(text: str) -> uuid.UUID:
    text = text.strip()
    if len(text) != 22:
        raise ValueError(f"a Kafka uuid has 22 characters, got {len(text)}: {text!r}")
    return topic_id_from_string(text)


def random_topic_id() -> uuid.UUID:
    """A random id that is never Kafka's reserved ZERO/ONE and whose text does not start with '-'."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_str(u).startswith("-"):
            return u


# --- topic names ------------------------------------------------------------------------------

def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: 1..249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise InvalidTopicExceptionError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicExceptionError(f"Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicExceptionError(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}")
    if not _LEGAL.fullmatch(name):  # fullmatch: "$" would accept a trailing newline
        raise InvalidTopicExceptionError(
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic that differs from `name` only by '.' vs '_' (Kafka refuses both)."""
    key = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == key:
            return other
    return None


# --- partition.metadata (format and writer live in the loader) --------------------------------

def read_partition_metadata(partition_dir: str) -> uuid.UUID | None:
    """The topic id in a partition dir's partition.metadata; None if missing or unreadable (logged)."""
    try:
        return _read_partition_metadata(partition_dir)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("ignoring unreadable partition.metadata in %s: %s", partition_dir, exc)
        return None


# --- the store file ---------------------------------------------------------------------------

def _body(topics: Mapping[str, TopicMeta], deleted: Iterable[uuid.UUID]) -> dict:
    return {
        "deleted_topic_ids": sorted(uuid_to_str(u) for u in deleted),
        "topics": [{"configs": dict(sorted(t.configs.items())), "name": t.name,
                    "partitions": t.partitions, "topic_id": uuid_to_str(t.topic_id)}
                   for t in sorted(topics.values(), key=lambda t: t.name)],
    }


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode(topics: Mapping[str, TopicMeta], deleted: Iterable[uuid.UUID] = ()) -> bytes:
    body = _body(topics, deleted)
    doc = dict(body, version=STORE_VERSION, crc32c=crc32c.crc32c(_canonical(body)))
    return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode("utf-8")


def decode(data: bytes) -> tuple[dict[str, TopicMeta], set[uuid.UUID]]:
    """Parse a store file; raises TopicStoreCorruptError saying what is wrong."""
    try:
        doc = json.loads(data.decode("utf-8"))
        version, crc = doc["version"], doc["crc32c"]
        body = {"deleted_topic_ids": doc["deleted_topic_ids"], "topics": doc["topics"]}
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise TopicStoreCorruptError(f"not a topic store document ({exc.__class__.__name__}: {exc})") from None
    if version != STORE_VERSION:
        raise TopicStoreCorruptError(f"unsupported topic store version {version!r} (expected {STORE_VERSION})")
    actual = crc32c.crc32c(_canonical(body))
    if actual != crc:
        raise TopicStoreCorruptError(f"checksum mismatch (stored {crc}, computed {actual})")
    try:
        topics = {}
        for t in body["topics"]:
            meta = TopicMeta(str(t["name"]), uuid_from_str(t["topic_id"]), int(t["partitions"]),
                             {str(k): str(v) for k, v in t["configs"].items()})
            topics[meta.name] = meta
        deleted = {uuid_from_str(u) for u in body["deleted_topic_ids"]}
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise TopicStoreCorruptError(f"bad topic entry ({exc})") from None
    return topics, deleted


class TopicStore:
    """The store file in one directory: `load()` tolerant, `save()` atomic."""

    def __init__(self, directory: str):
        self.dir = directory
        self.path = os.path.join(directory, STORE_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def load_strict(self) -> tuple[dict[str, TopicMeta], set[uuid.UUID]]:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return {}, set()
        return decode(data)

    def load(self) -> tuple[dict[str, TopicMeta], set[uuid.UUID], bool]:
        """(topics, deleted ids, ok); ok is False when the file was corrupt (logged, read as empty)."""
        try:
            topics, deleted = self.load_strict()
            return topics, deleted, True
        except (TopicStoreCorruptError, OSError) as exc:
            log.error("topic metadata file %s is corrupt (%s); topics will be rebuilt from the "
                      "partition directories and their config overrides are lost", self.path, exc)
            return {}, set(), False

    def save(self, topics: Mapping[str, TopicMeta], deleted: Iterable[uuid.UUID] = ()) -> None:
        atomic_write(self.path, encode(topics, deleted))
