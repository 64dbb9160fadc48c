"""Kafka's rules for an UpdateFeatures request on a single-node KRaft cluster; no I/O.

Kafka 4.0's controller (QuorumController.updateFeatures -> FeatureControlManager.updateFeatures)
checks the updates one by one against the current levels; the first refused one refuses the whole
request (nothing changes, atomically): INVALID_UPDATE_VERSION with
"The update failed for all features since the following feature had an error: " + the reason.
Each update, in Kafka's order:
1. upgrade type not UPGRADE (1), SAFE_DOWNGRADE (2) or UNSAFE_DOWNGRADE (3):
   "Invalid update version L for feature F. The controller does not support the given upgrade type."
2. level < 0: "... A feature version cannot be less than 0."
3. level outside what this node supports (QuorumFeatures.reasonNotSupported; a feature it does
   not know supports 0-0): "... Local controller N only supports versions MIN-MAX", or, when the
   supported max is 0, "... Local controller N does not support this feature." Kompakt appends
   why, for the feature it supports less of than Kafka 4.0 (ELR).
4. level below the current one with UPGRADE: "... Can't downgrade the version of this feature
   without setting the upgrade type to either safe or unsafe downgrade."; above it with a
   downgrade type: "... Can't downgrade to a newer version."
5. metadata.version: a downgrade across a version whose metadata changed (MetadataVersion's
   didMetadataChange, checkIfMetadataChanged) is refused, "Invalid metadata.version L. Refusing
   to perform the requested downgrade because it might delete metadata information." (SAFE) or
   "... Unsafe metadata downgrade is not supported in this version." (UNSAFE); from 25 that
   leaves 23-25 (24 and 25 changed no metadata).
   kraft.version: the quorum's own version (Kafka 4.1+ changes it through the raft client, and
   only upward): any downgrade is "... Can't downgrade the version of this feature."
   Any other feature: Kafka's Features.featureFromName must know it, else "... Feature F not
   found." (so deleting, level 0, an unknown feature is refused too); its dependencies
   (KRaftVersion 1 -> metadata.version 21) always hold in the 23-25 range reachable here.
A level equal to the current one is accepted (Kafka writes the record again).

Level 0 deletes a feature (with a downgrade type): it is no longer listed as finalized.
group.version 0 turns KIP-848 consumer groups off, as in Kafka: ConsumerGroupHeartbeat and
ConsumerGroupDescribe then answer UNSUPPORTED_VERSION (groups/consumer/heartbeat.py).
transaction.version moves freely within 0-2 (TransactionVersion has no dependencies): clients
read it from ApiVersions when they connect (the Java client uses transaction version 2 at 2),
and the transaction coordinator writes its next record in the value version of the new level.
"""
from __future__ import annotations

from dataclasses import dataclass

from kompakt.broker.features.levels import ELR_VERSION, KRAFT_VERSION, METADATA_VERSION, SUPPORTED

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
ALL_FAILED = "The update failed for all features since the following feature had an error: "

# Kafka's features (server-common Features, 4.0): a name not here is "not found"
KNOWN = frozenset(SUPPORTED)

# metadata.version levels whose MetadataVersion says didMetadataChange, 7-25 (IBP_3_3_IV3 ...
# IBP_4_0_IV3): a downgrade across one of these might lose metadata
METADATA_CHANGED = frozenset({7, 8, 11, 13, 14, 15, 17, 23})

# why Kompakt supports less than Kafka 4.0, said after Kafka's reason
KOMPAKT_LIMITS = {
    ELR_VERSION: "Kompakt is a single node and has no eligible leader replicas (KIP-966).",
}


@dataclass(frozen=True)
class Update:
    feature: str
    level: int
    upgrade_type: int


def metadata_changed(current: int, target: int) -> bool:
    """MetadataVersion.checkIfMetadataChanged for a downgrade from `current` to `target`."""
    version = current
    while version not in METADATA_CHANGED and version != target:
        version -= 1
    return version != target


def _reason(update: Update, current: int, node_id: int) -> str | None:
    name, level, kind = update.feature, update.level, update.upgrade_type
    invalid = f"Invalid update version {level} for feature {name}. "
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid + "The controller does not support the given upgrade type."
    if level < 0:
        return invalid + "A feature version cannot be less than 0."
    lo, hi = SUPPORTED.get(name, (0, 0))
    if not lo <= level <= hi:
        why = (f"Local controller {node_id} does not support this feature." if hi == 0 else
               f"Local controller {node_id} only supports versions {lo}-{hi}")
        return invalid + why + (f" ({KOMPAKT_LIMITS[name]})" if name in KOMPAKT_LIMITS else "")
    if level < current and kind == UPGRADE:
        return invalid + ("Can't downgrade the version of this feature without setting the upgrade type to "
                          "either safe or unsafe downgrade.")
    if level > current and kind != UPGRADE:
        return invalid + "Can't downgrade to a newer version."
    if name == METADATA_VERSION:
        if level < current and metadata_changed(current, level):
            if kind == UNSAFE_DOWNGRADE:
                return f"Invalid metadata.version {level}. Unsafe metadata downgrade is not supported in this version."
            return (f"Invalid metadata.version {level}. Refusing to perform the requested downgrade because it "
                    f"might delete metadata information.")
        return None
    if name == KRAFT_VERSION:
        return invalid + "Can't downgrade the version of this feature." if level < current else None
    if name not in KNOWN:
        return invalid + f"Feature {name} not found."
    return None


def decide(levels: dict[str, int], updates: list[Update], node_id: int) -> tuple[str | None, dict[str, int]]:
    """(the refusal message, Kafka's whole top-level text, or None; the new levels to finalize)."""
    changes: dict[str, int] = {}
    for update in updates:
        reason = _reason(update, levels.get(update.feature, 0), node_id)
        if reason is not None:
            return ALL_FAILED + reason, {}
        changes[update.feature] = update.level
    return None, changes
