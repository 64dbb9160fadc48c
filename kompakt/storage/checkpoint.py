"""Checkpoint files in Kafka's text format (CheckpointFile / OffsetCheckpointFile / LeaderEpochCheckpointFile).

Format (UTF-8 text, '\\n' line ends, fields separated by one space):

    line 1      version            "0"  (CURRENT_VERSION of every checkpoint kind we write)
    line 2      entry count        decimal, e.g. "2"
    line 3..    one entry a line   offset checkpoints:       "<topic> <partition> <offset>"   e.g. "orders 0 105823"
                                   leader-epoch-checkpoint:  "<epoch> <start_offset>"         e.g. "3 1200"

Files using it: per log dir `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`cleaner-offset-checkpoint` (first dirty offset, owned by the cleaner); per partition
`leader-epoch-checkpoint`.

Writing (crash-safe, Utils.atomicMoveWithFallback): 1. write `<name>.tmp`, 2. fsync it, 3. rename
over `<name>`, 4. fsync the directory. A crash before 3 leaves the old file intact (a stale `.tmp` is
overwritten by the next write); after 3 the new file is complete.

Reading is tolerant: a missing file is empty; a file that does not parse (wrong version, bad count,
malformed line, torn write) is logged and read as empty, never a crash. The caller then falls back to
the safe value (recovery point 0 = recover everything; log start = first segment), which is what
Kafka's LogManager does with a corrupt checkpoint. `parse()` is the strict form (dump-log uses it).
"""
from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from kompakt.storage import TopicPartition
from kompakt.storage.faults import check_io, crash_point
from kompakt.storage import files as fs
from kompakt.storage.files import fsync_dir  # noqa: F401  (re-exported: callers import it from here)

log = logging.getLogger(__name__)

CURRENT_VERSION = 0
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
TMP_SUFFIX = ".tmp"

_WS = re.compile(r"\s+")
T = TypeVar("T")


class CheckpointCorruptError(ValueError):
    """A checkpoint file that does not parse; the message names the file, line and what was wrong."""


class Formatter(Generic[T]):
    """How one entry is written to and read from a line."""

    def __init__(self, fields: int, to_fields: Callable[[T], Iterable[Any]], from_fields: Callable[[list[str]], T]):
        self.fields, self.to_fields, self.from_fields = fields, to_fields, from_fields

    def to_line(self, entry: T) -> str:
        parts = [str(p) for p in self.to_fields(entry)]
        if len(parts) != self.fields or any(not p or _WS.search(p) for p in parts):
            raise ValueError(f"cannot write checkpoint entry {entry!r}: fields must be non-empty without spaces")
        return " ".join(parts)

    def from_line(self, line: str) -> T:
        parts = line.split()
        if len(parts) != self.fields:
            raise ValueError(f"expected {self.fields} fields")
        return self.from_fields(parts)


def _offset_entry(parts: list[str]) -> tuple[TopicPartition, int]:
    partition, offset = int(parts[1]), int(parts[2])
    if partition < 0:
        raise ValueError("negative partition")
    return TopicPartition(parts[0], partition), offset


OFFSET_FORMATTER: Formatter[tuple[TopicPartition, int]] = Formatter(
    3, lambda e: (e[0][0], e[0][1], e[1]), _offset_entry)
EPOCH_FORMATTER: Formatter[tuple[int, int]] = Formatter(
    2, lambda e: (e[0], e[1]), lambda p: (int(p[0]), int(p[1])))


def parse(text: str, formatter: Formatter[T], *, version: int = CURRENT_VERSION,
          name: str = "checkpoint") -> list[T]:
    """Strict parse of a checkpoint's text; raises CheckpointCorruptError."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if len(lines) < 2:
        raise CheckpointCorruptError(f"{name}: expected a version line and a count line, found {len(lines)} line(s)")
    try:
        found_version = int(lines[0].strip())
    except ValueError:
        raise CheckpointCorruptError(f"{name}: malformed version line {lines[0]!r}") from None
    if found_version != version:
        raise CheckpointCorruptError(f"{name}: unrecognised version {found_version} (expected {version})")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointCorruptError(f"{name}: malformed entry count line {lines[1]!r}") from None
    body = [line for line in lines[2:] if line.strip()]
    if count < 0 or count != len(body):
        raise CheckpointCorruptError(f"{name}: expected {count} entries but found {len(body)}")
    entries = []
    for number, line in enumerate(body, start=3):
        try:
            entries.append(formatter.from_line(line))
        except ValueError as exc:
            raise CheckpointCorruptError(f"{name}: malformed line {number} {line!r} ({exc})") from None
    return entries


def render(entries: Iterable[T], formatter: Formatter[T], *, version: int = CURRENT_VERSION) -> str:
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [formatter.to_line(e) for e in entries]
    return "\n".join(lines) + "\n"


_path_locks: dict[str, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _path_lock(path: str) -> threading.Lock:
    with _path_locks_guard:
        lock = _path_locks.get(path)
        if lock is None:
            lock = _path_locks[path] = threading.Lock()
        return lock


def atomic_write(path: str, data: bytes, mode: int = 0o644, *, sync: bool = True,
                 point: str = "checkpoint_write") -> None:
    """Write `data` to `path` by temp file + fsync + rename + directory fsync (the file gets `mode`).

    Writers of one path are serialised (Kafka's CheckpointFile writes under a lock): they share
    `<path>.tmp`, and two at once would rename each other's half-written temp file into place.
    sync=False skips both fsyncs, for a file that start-up rewrites if a crash loses it (a new
    partition's partition.metadata and first leader epoch: the topic store, synced first, says
    what they hold). `point` names the crash point between the fsync and the rename (faults.py).
    """
    path = os.path.abspath(path)
    with _path_lock(path):
        _atomic_write(path, data, mode, sync, point)


def _atomic_write(path: str, data: bytes, mode: int = 0o644, sync: bool = True,
                  point: str = "checkpoint_write") -> None:
    tmp = path + TMP_SUFFIX
    check_io(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)      # a leftover <path>.tmp keeps its old mode through O_CREAT (0600 files hold secrets)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            fs.fsync(fd)
    finally:
        os.close(fd)
    crash_point(point)
    fs.replace(tmp, path)
    if sync:
        fs.fsync_dir(os.path.dirname(os.path.abspath(path)))


class CheckpointFile(Generic[T]):
    """One checkpoint file: `read()` (tolerant) and `write(entries)` (atomic)."""

    def __init__(self, path: str, formatter: Formatter[T], version: int = CURRENT_VERSION):
        self.path, self.formatter, self.version = path, formatter, version

    def read_strict(self) -> list[T]:
        """Entries, [] if the file is missing; raises CheckpointCorruptError on a bad file."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return []
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointCorruptError(f"{self.path}: not UTF-8 text") from None
        return parse(text, self.formatter, version=self.version, name=self.path)

    def read(self) -> list[T]:
        """Entries; a missing or corrupt file reads as [] (corruption is logged with the reason)."""
        try:
            return self.read_strict()
        except CheckpointCorruptError as exc:
            log.warning("ignoring corrupt checkpoint file, treating it as empty: %s", exc)
            return []
        except OSError as exc:
            log.warning("cannot read checkpoint file %s, treating it as empty: %s", self.path, exc)
            return []

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        atomic_write(self.path, render(entries, self.formatter, version=self.version).encode("utf-8"), sync=sync)


class OffsetCheckpointFile:
    """`topic partition offset` checkpoints as a dict {TopicPartition: offset}."""

    def __init__(self, path: str):
        self.path = path
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(path, OFFSET_FORMATTER)

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())

    def read_strict(self) -> dict[TopicPartition, int]:
        return dict(self._file.read_strict())

    def write(self, offsets: Mapping[Any, int]) -> None:
        entries = sorted((TopicPartition(*tp), int(off)) for tp, off in offsets.items())
        self._file.write(entries)


class LeaderEpochCheckpointFile:
    """`epoch start_offset` lines as a list of (epoch, start_offset), in file order."""

    def __init__(self, path: str):
        self.path = path
        self._file: CheckpointFile[tuple[int, int]] = CheckpointFile(path, EPOCH_FORMATTER)

    def read(self) -> list[tuple[int, int]]:
        return self._file.read()

    def read_strict(self) -> list[tuple[int, int]]:
        return self._file.read_strict()

    def write(self, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
        self._file.write([(int(e), int(o)) for e, o in entries], sync=sync)
