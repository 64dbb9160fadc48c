"""Leader-epoch cache of one partition, persisted as `leader-epoch-checkpoint`.

Role: remember at which offset each leader epoch started, to answer OffsetForLeaderEpoch (the end
offset of an epoch) and to keep the partitionLeaderEpoch of appended batches meaningful across
restarts. On a single node the epoch changes only when the operator says so, but clients read it.

On-disk format (Kafka's `LeaderEpochCheckpointFile`, text, '\\n' line ends):

    0                      version (always 0)
    <count>                number of entries
    <epoch> <startOffset>  one line per entry, epochs and offsets strictly increasing

Read and written with `kompakt.storage.checkpoint.LeaderEpochCheckpointFile` (temp file + fsync +
rename + fsync of the directory, so a crash leaves either the old or the new file). A file that does
not parse is logged and treated as empty (the cache is rebuilt from the batches replayed at load).

Invariants: entries strictly increase in epoch and start offset; `assign` only appends a new
entry for an epoch larger than the latest; truncation keeps entries below the truncation point.
"""
from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right

from kompakt.storage.checkpoint import LEADER_EPOCH_CHECKPOINT_FILE, CheckpointCorruptError, LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILENAME = LEADER_EPOCH_CHECKPOINT_FILE
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Epoch -> start offset, newest last; every change rewrites the checkpoint file."""

    def __init__(self, dir: str | None):
        self.dir = dir
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self.unreadable = False     # the file existed but did not parse (e.g. empty after a power cut)
        if dir is not None:
            self._load()

    @property
    def path(self) -> str | None:
        return None if self.dir is None else os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT_FILENAME)

    def _load(self) -> None:
        path = self.path
        try:
            entries = LeaderEpochCheckpointFile(path).read_strict()
        except (CheckpointCorruptError, OSError) as exc:
            log.warning("ignoring unreadable leader epoch checkpoint, treating it as empty: %s", exc)
            entries, self.unreadable = [], True
        for epoch, offset in entries:
            if self._epochs and (epoch <= self._epochs[-1] or offset < self._offsets[-1]):
                log.warning("ignoring out-of-order leader epoch entry %d %d in %s", epoch, offset, path)
                continue
            self._epochs.append(epoch)
            self._offsets.append(offset)

    def _flush(self, sync: bool = True) -> None:
        if self.dir is not None and os.path.isdir(self.dir):
            LeaderEpochCheckpointFile(self.path).write(self.entries(), sync=sync)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, sync: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the latest epoch
        (sync=False: no fsync, for a new empty log whose entry start-up would assign again)."""
        if epoch < 0:
            return False
        if self._epochs and epoch <= self._epochs[-1]:
            return False
        if self._offsets and start_offset < self._offsets[-1]:
            # A newer epoch cannot start before the previous one: drop the conflicting entries.
            i = bisect_left(self._offsets, start_offset)
            del self._epochs[i:]
            del self._offsets[i:]
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._flush(sync)
        return True

    def epoch_for_offset(self, offset: int) -> int:
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) per Kafka's LeaderEpochFileCache.endOffsetFor."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int, *, keep_current: bool = False) -> None:
        """Drop entries starting at or after end_offset (the log was truncated to end_offset).

        keep_current (loading a log): the latest entry may start exactly at end_offset: the
        current leader epoch, which has no record yet and which Kafka's makeLeader assigns at the
        log end offset again at start-up; keeping it spares a checkpoint write per empty partition.
        """
        i = bisect_left(self._offsets, end_offset)
        if keep_current and i == len(self._offsets) - 1 and self._offsets[i] == end_offset:
            return
        if i < len(self._offsets):
            del self._epochs[i:]
            del self._offsets[i:]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to start_offset: the epoch covering it now starts there."""
        i = bisect_right(self._offsets, start_offset) - 1
        if i < 0 or (i == 0 and self._offsets[0] == start_offset):
            return
        epoch = self._epochs[i]
        del self._epochs[:i + 1]
        del self._offsets[:i + 1]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._flush()

    def clear_and_flush(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._flush()

    def update_dir(self, new_dir: str) -> None:
        self.dir = new_dir

