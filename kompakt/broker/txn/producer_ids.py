"""Producer id allocation for InitProducerId: never hand out the same id twice, across crashes.

Role: Kafka's controller hands brokers blocks of 1000 producer ids and records each block in the
metadata log (ProducerIdsRecord) before any id of it is used. A single node does the same with a
small file in the first log dir: the end of the highest block ever reserved is written and fsynced
*before* the first id of that block is returned. After any restart (graceful or SIGKILL) allocation
resumes at that end, so an id handed out before the crash is never handed out again; at most
`block_size - 1` ids are skipped per restart, out of 2**63.

On-disk format (`<first log dir>/producer-id-block`, text like Kafka's checkpoint files):

    line  content
    1     version        "0"
    2     next_block     decimal int64: the first id of the next block to reserve; every id
                         below it may have been handed out, none at or above it has been

Writes are crash-safe: (1) write `producer-id-block.tmp` and fsync it; (2) rename it over
`producer-id-block`; (3) fsync the directory. A crash before (2) leaves the old file (the block
being reserved was never used); after (2) the new one. A `.tmp` left behind is ignored and replaced.

Floor. A log dir copied from a Kafka broker, or one whose block file was lost, may hold producer ids
in its partitions' producer state; `floor` (the largest id seen there + 1) lifts the start so those
ids are not reissued either.

Epochs (KIP-360). A producer that already has an id may ask for an epoch bump by passing its id and
epoch: when that is exactly the id and epoch this process last handed out, it gets the same id with
epoch + 1, which fences its own older in-flight batches. Anything else gets a fresh id with epoch 0:
a stale epoch (two clients must never share an id and epoch), an id issued before a restart (its
epoch is not remembered), an epoch that would pass 32766 (Short.MAX_VALUE - 1). Kafka's
coordinator answers every non-transactional InitProducerId with a fresh id; clients accept both.
The last epochs of at most `MAX_TRACKED` ids are remembered (least recently used dropped).

Invariants: `next_id < reserved_end <= persisted next_block` at all times once an id has been
handed out; the file value never decreases; an (id, epoch) pair is handed out at most once.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

from kompakt.storage.checkpoint import atomic_write

FILE_NAME = "producer-id-block"
VERSION = 0
BLOCK_SIZE = 1000          # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1
MAX_EPOCH = 32767          # Short.MAX_VALUE; an epoch of MAX_EPOCH - 1 cannot be bumped in place
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_TRACKED = 100_000      # ids whose last epoch is remembered for bumps


class ProducerIdFileError(Exception):
    """The block file is unreadable; the message names the file and how to recover."""


def read_block_file(path: str) -> int | None:
    """The persisted `next_block`, or None when the file does not exist."""
    try:
        with open(path, encoding="ascii") as fh:
            lines = fh.read().split()
    except FileNotFoundError:
        return None
    try:
        version, value = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise ProducerIdFileError(
            f"{path} is corrupt ({lines[:2]!r}); it holds the next free producer id block. "
            f"Delete it only if no producer ids were handed out, or write '0\\n<id>\\n' with an id above "
            f"every producer id in use") from None
    if version != VERSION or value < 0:
        raise ProducerIdFileError(f"{path}: unsupported version {version} or negative block {value}")
    return value


def write_block_file(path: str, next_block: int) -> None:
    """Steps (1)-(3) of the module docstring: tmp + fsync, rename, fsync dir."""
    atomic_write(path, f"{VERSION}\n{next_block}\n".encode("ascii"))


class ProducerIdManager:
    """Hands out producer ids from blocks reserved on disk. Thread-safe."""

    def __init__(self, log_dir: str, *, block_size: int = BLOCK_SIZE, floor: int = 0):
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.path = os.path.join(log_dir, FILE_NAME)
        self.block_size = block_size
        self._lock = threading.Lock()
        persisted = read_block_file(self.path)
        self._persisted = persisted if persisted is not None else 0
        self._next_id = max(self._persisted, floor)
        self._reserved_end = self._next_id   # nothing reserved by this process yet
        self._epochs: OrderedDict[int, int] = OrderedDict()   # id -> last epoch handed out

    @property
    def next_id(self) -> int:
        return self._next_id

    @property
    def persisted_next_block(self) -> int:
        return self._persisted

    def needs_reservation(self) -> bool:
        """True when the next `generate()` writes the block file (callers may run it in a thread)."""
        return self._next_id >= self._reserved_end

    def generate(self) -> int:
        """A producer id never returned before (by this or any earlier process on these dirs)."""
        with self._lock:
            return self._generate_locked()

    def _generate_locked(self) -> int:
        if self._next_id >= self._reserved_end:
            end = self._next_id + self.block_size
            if end > MAX_PRODUCER_ID:
                raise OverflowError("producer ids exhausted")
            write_block_file(self.path, end)   # persisted before any id of the block is used
            self._persisted = end
            self._reserved_end = end
        pid = self._next_id
        self._next_id += 1
        return pid

    def init_producer(self, producer_id: int = NO_PRODUCER_ID,
                      producer_epoch: int = NO_PRODUCER_EPOCH) -> tuple[int, int]:
        """InitProducerId for a non-transactional producer: (id, epoch) to hand back.

        The id and epoch we last handed out get the same id with epoch + 1 (KIP-360); anything
        else gets a fresh id with epoch 0. Callers validate that id and epoch are both -1 or both set.
        """
        with self._lock:
            if (producer_id != NO_PRODUCER_ID and self._epochs.get(producer_id) == producer_epoch
                    and 0 <= producer_epoch < MAX_EPOCH - 1):
                answer = producer_id, producer_epoch + 1
            else:
                answer = self._generate_locked(), 0
            self._epochs[answer[0]] = answer[1]
            self._epochs.move_to_end(answer[0])
            if len(self._epochs) > MAX_TRACKED:
                self._epochs.popitem(last=False)
            return answer


def get_manager(broker) -> ProducerIdManager:
    """The broker's ProducerIdManager, created on first use over its first log dir.

    The floor comes from the producer state of the loaded logs when storage exposes it, so ids found
    in partitions (e.g. a dir adopted from a Kafka broker) are never reissued.
    """
    manager = getattr(broker, "producer_ids", None)
    if manager is None:
        manager = ProducerIdManager(broker.config.log_dirs[0], floor=_floor_from_logs(broker))
        broker.producer_ids = manager
    return manager


def _floor_from_logs(broker) -> int:
    log_manager = getattr(broker, "log_manager", None)
    if log_manager is None:
        return 0
    highest = -1
    try:
        logs = log_manager.all_logs()
    except Exception:   # storage not ready: the persisted block is the floor
        return 0
    for log in logs.values():
        state = getattr(log, "producer_state", None)
        producers = getattr(state, "producers", None)
        if isinstance(producers, dict) and producers:
            highest = max(highest, max(int(pid) for pid in producers))
    return highest + 1
