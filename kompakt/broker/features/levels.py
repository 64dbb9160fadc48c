"""The feature levels this node supports, and the finalized levels UpdateFeatures changes.

SUPPORTED is what ApiVersions advertises as SupportedFeatures: feature -> (min, max). Kafka 4.0
(the release whose API table Kompakt advertises, docs/compatibility.md) supports, and a fresh
4.0 cluster formatted with `--standalone` finalizes:
    metadata.version 7-25, 25 (server-common MetadataVersion: MINIMUM_VERSION IBP_3_3_IV3 = 7,
        LATEST_PRODUCTION IBP_4_0_IV3 = 25)                          Kompakt: the same
    group.version 0-1, 1 (GV_1: KIP-848 consumer groups)             Kompakt: the same
    transaction.version 0-2, 2 (TransactionVersion.LATEST_PRODUCTION TV_2, whose bootstrap
        metadata.version 4.0-IV2 is below 25)                        Kompakt: the same. 1 writes
        `__transaction_state` values in the flexible TransactionLogValue v1 (v0 at level 0);
        2 adds nothing a broker does by itself: clients seeing it finalized use transaction
        version 2 (KIP-890 part 2: EndTxn v5, Produce v12, TxnOffsetCommit v5, an epoch bump per
        transaction), which Kafka and Kompakt serve by request version at any level; the
        coordinator's own aborts (fence, timeout) bump the epoch at level 2 (broker/txn)
    kraft.version 0-1, 1 with --standalone (dynamic quorum, KIP-853) Kompakt: the same (its
        DescribeQuorum answers as a standalone quorum's single voter)
    eligible.leader.replicas.version 0-1 (KIP-966)                   Kompakt: 0-0, 0 (one node has
        no eligible leaders; DescribeTopicPartitions sends empty ELR lists)

FeatureLevels holds the finalized level of every feature (0 = not enabled: Kafka keeps no record
of a feature at level 0, so ApiVersions lists only levels above 0, and metadata.version) and the
finalized-features epoch, which grows by one with every applied update (Kafka's epoch is the
metadata log offset of the last feature change, which also only grows).

File `kompakt-features.json` in the first log dir (metadata/state_files.StateFile: temp file, fsync,
rename, fsync dir, CRC32C of the body): {"epoch": int, "levels": {feature: level}}. A change is
one whole-file write before memory changes and before the answer, so a crash leaves the old
levels or the new and an acknowledged change survives a restart. No file: the defaults above,
epoch 1 (a freshly formatted node). A node that has the file keeps its levels, as a Kafka
cluster keeps its finalized levels across an upgrade (an older Kompakt saved transaction.version
0: `kafka-features.sh upgrade --feature transaction.version=2` moves it). A stored level this build does not support (a file from a
newer Kompakt) stops the start with the file and the feature named, as a Kafka node refuses to
start with a finalized level it does not support.
"""
from __future__ import annotations

import asyncio
import logging

from kompakt.broker.metadata.store_file import StoreCorruptError

log = logging.getLogger(__name__)

METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
KRAFT_VERSION = "kraft.version"
ELR_VERSION = "eligible.leader.replicas.version"

# feature -> (supported min, supported max); see the docstring for Kafka 4.0's
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (7, 25),
    GROUP_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
    KRAFT_VERSION: (0, 1),
    ELR_VERSION: (0, 0),
}
DEFAULT_LEVELS: dict[str, int] = {
    METADATA_VERSION: 25, GROUP_VERSION: 1, TRANSACTION_VERSION: 2, KRAFT_VERSION: 1, ELR_VERSION: 0,
}
INITIAL_EPOCH = 1


class FeatureLevels:
    """The finalized levels and their epoch; `apply` persists, then swaps memory."""

    def __init__(self, store=None):
        self.store = store                      # metadata/state_files.StateFile, or None (in memory)
        self.levels: dict[str, int] = dict(DEFAULT_LEVELS)
        self.epoch = INITIAL_EPOCH
        self._lock: asyncio.Lock | None = None

    def load(self) -> None:
        body = self.store.load() if self.store is not None else None
        if body is None:
            return
        try:
            epoch = int(body["epoch"])
            stored = {str(name): int(level) for name, level in body["levels"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreCorruptError(f"{self.store.path} is not a valid feature levels file ({exc}); restore "
                                    f"it from a backup or remove it to start with the default levels") from None
        for name, level in stored.items():
            lo, hi = SUPPORTED.get(name, (0, 0))
            if not lo <= level <= hi:
                raise StoreCorruptError(f"{self.store.path}: finalized {name} level {level} is not supported by "
                                        f"this Kompakt (it supports {lo}-{hi}); run the Kompakt that set it")
        self.levels = {**DEFAULT_LEVELS, **stored}
        self.epoch = epoch
        log.info("finalized features (epoch %d): %s", self.epoch, self.levels)

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def finalized(self) -> dict[str, int]:
        """What ApiVersions lists: metadata.version and every feature above level 0."""
        return {name: level for name, level in self.levels.items() if level > 0 or name == METADATA_VERSION}

    async def update(self, decide, validate_only: bool = False):
        """Run `decide(levels)` (features.update.decide bound to the request) against the current
        levels under the lock, so concurrent updates are checked one after another: it returns
        (refusal, changes). Unless refused or `validate_only`, save the whole new set with the
        next epoch (in a worker thread: the save fsyncs), then swap it in. Returns the refusal."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            refusal, changes = decide(dict(self.levels))
            if refusal is not None or validate_only or not changes:
                return refusal
            levels = {**self.levels, **changes}
            epoch = self.epoch + 1
            if self.store is not None:
                await asyncio.to_thread(self.store.save, {"epoch": epoch, "levels": levels})
            self.levels, self.epoch = levels, epoch
            log.info("finalized features changed (epoch %d): %s", epoch, changes)
            return None
