"""The cleaner's retain rules as pure functions: which record a clean keeps, when a tombstone goes.

Role: the one place these decisions are written in Python. `batch_ops` (the per-batch seam of a
real clean), the pipeline's exact compaction, the guarantee check (`guarantees.py`) and the
what-if replay (`whatif.py`) all call them; `kompakt/native/cleaner.c` is the compiled twin of
`record_fate` (tests/cleaner/test_native.py holds both to the same output, byte for byte) and
hands every batch whose tombstones the group-safe horizon holds back to the Python path, so the
group-safe part of `tombstones_removable` has no compiled copy.

Rules (Kafka's Cleaner.shouldRetainRecord, KIP-534 delete horizons, plus Kompakt's group-safe
horizon), per record of a data batch:
  * offset > latest mapped offset           -> KEEP (past the range this pass mapped)
  * no key                                  -> DROP_KEYLESS
  * offset < the map's offset for its key   -> DROP_SUPERSEDED (a later record has the key)
  * null value, and tombstones_removable()  -> DROP_TOMBSTONE
  * otherwise                               -> KEEP
Per batch (tombstones and transaction markers alike): removable once the batch carries a delete
horizon (stamped at the first clean that kept it: now + delete.retention.ms), the horizon has
passed, and the batch ends below the group-safe horizon offset: the smallest offset committed by
the consumer groups named in `kompakt.tombstone.retention.groups` (LONG_MAX when the topic names
none, which is Kafka's rule unchanged). A batch whose horizon passed but which the group-safe
horizon keeps is "held back" (counted, shown per partition).

Invariant: no clock, no I/O, no state; every input is an argument.
"""
from __future__ import annotations

LONG_MAX = 2**63 - 1
NO_GROUP_HORIZON = LONG_MAX

KEEP, DROP_KEYLESS, DROP_SUPERSEDED, DROP_TOMBSTONE = range(4)


def delete_horizon(now_ms: int, delete_retention_ms: int) -> int:
    """The delete horizon a clean stamps on a batch that keeps tombstones (or a marker that may go)."""
    return now_ms + delete_retention_ms


def horizon_passed(has_horizon: bool, horizon_ms: int, now_ms: int) -> bool:
    """Kafka's rule alone: the batch's stamped delete horizon is at or before now."""
    return bool(has_horizon) and horizon_ms <= now_ms


def tombstones_removable(has_horizon: bool, horizon_ms: int, last_offset: int, now_ms: int,
                         group_horizon_offset: int = NO_GROUP_HORIZON) -> bool:
    """May a batch's tombstones (or a transaction marker) be removed now?"""
    return horizon_passed(has_horizon, horizon_ms, now_ms) and last_offset < group_horizon_offset


def held_back(has_horizon: bool, horizon_ms: int, last_offset: int, now_ms: int,
              group_horizon_offset: int = NO_GROUP_HORIZON) -> bool:
    """Kafka would remove this batch's tombstones now; a consumer group has not read past it yet."""
    return horizon_passed(has_horizon, horizon_ms, now_ms) and last_offset >= group_horizon_offset


def record_fate(offset: int, latest_mapped: int, has_key: bool, map_offset: int, tombstone: bool,
                removable: bool) -> int:
    """What a clean does with one record of a data batch (`map_offset` -1: key not in the map)."""
    if offset > latest_mapped:
        return KEEP
    if not has_key:
        return DROP_KEYLESS
    if offset < map_offset:
        return DROP_SUPERSEDED
    if tombstone and removable:
        return DROP_TOMBSTONE
    return KEEP
