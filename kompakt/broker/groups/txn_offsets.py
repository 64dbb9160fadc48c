"""Transactional offset commits: TxnOffsetCommit, and what a COMMIT/ABORT marker does to them.

Role: Kafka's pendingTransactionalOffsetCommits, beside the GroupCoordinator (`coordinator.txn_offsets`).
A transactional producer commits a consumer group's offsets inside its transaction
(send_offsets_to_transaction): the records are appended to the group's `__consumer_offsets`
partition as a transactional batch with the producer's id and epoch (the same OffsetCommit key
and value as a plain commit), and held here as *pending*: OffsetFetch does not see them, and
answers UNSTABLE_OFFSET_COMMIT for those partitions when asked with require_stable. When the
transaction coordinator writes the transaction's marker to that partition (markers.py calls
`complete`), COMMIT makes them the group's committed offsets and ABORT drops them.

Ordering (Kafka's CommitRecordMetadataAndOffset.olderThan): the last record appended wins. A
plain commit appended after a transactional one for the same partition is not overwritten when
the transaction commits later (`on_offsets_committed` marks the pending entry superseded); on
replay the record offsets decide.

While __consumer_offsets loads: COORDINATOR_LOAD_IN_PROGRESS, nothing appended (the group's
generation and members are not known yet). Validation (Kafka's validateOffsetCommit for
transactional commits): an unknown group is created
as a simple group when generation_id < 0, else ILLEGAL_GENERATION; with a member id, generation
or instance id the member must exist (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) and the generation
match (ILLEGAL_GENERATION); unlike plain commits, no member is needed in a non-empty group
(a KIP-848 group too), and a KIP-848 member's stale epoch answers ILLEGAL_GENERATION.
KIP-890: the producer's first transactional write to the partition needs the transaction
coordinator's word that the partition was added (AddOffsetsToTxn), else TRANSACTION_ABORTABLE
(INVALID_TXN_STATE before v4); from v5 (transaction version 2, where the client sends no
AddOffsetsToTxn) the partition is added to the transaction here instead (Kafka's addPartition
for TxnOffsetCommit v5), INVALID_PRODUCER_EPOCH for a fenced producer, CONCURRENT_TRANSACTIONS
while its previous transaction's markers are being written.

Deletion (Kafka 4's OffsetMetadataManager): DeleteGroups, OffsetDelete and a deleted topic write
an offset tombstone for a partition with a committed *or* a pending transactional offset, and a
tombstone drops the pending offsets of that partition from every open transaction
(`on_offsets_deleted`, and the same on replay), so the transaction's COMMIT marker later brings
nothing back. Expiry skips partitions with pending offsets (and a group holding some stays).

Replay (`load`, after the group coordinator's replay of plain records): a partition with
transactional batches is read again in log order; pending entries per producer are applied at a
COMMIT marker when newer than what is loaded, dropped at an ABORT or by a later tombstone of
their key, and left pending when no marker follows (the transaction coordinator finishes those
transactions).

Invariant: pending entries exist only for transactional records in the log without a marker
after them; committed offsets change only by an appended or replayed record.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from kompakt.broker.groups.group import GroupState
from kompakt.broker.groups.membership import storage_error_to_coordinator_error
from kompakt.broker.groups.offsets import OffsetAndMetadata
from kompakt.broker.coordinator_common.internal_topic import iter_log_batches
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr
from kompakt.protocol import records as rec
from kompakt.protocol import txn_records as tr
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.storage import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
READ_BYTES = 1 << 20
# verification failures as TxnOffsetCommit answers them (Kafka's AddPartitionsToTxnManager turns
# PRODUCER_FENCED into INVALID_PRODUCER_EPOCH; the group coordinator's maybeConvertOffsetCommitError
# / CoordinatorOperationExceptionHelper leave the coordinator's other codes, CONCURRENT_TRANSACTIONS
# included, as they are: clients retry them)
_VERIFY_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH}
FIRST_TV2_VERSION = 5          # TxnOffsetCommit v5: the client uses transaction version 2


@dataclass
class Pending:
    om: OffsetAndMetadata
    record_offset: int
    superseded: bool = False


class TxnOffsets:
    def __init__(self, coordinator):
        self.gc = coordinator
        self.pending: dict[int, dict[str, dict[tuple[str, int], Pending]]] = {}   # pid -> group -> tp
        self.committed_total = 0

    # ---- queries -------------------------------------------------------------------------------
    def has_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in groups.get(group_id, ()) for groups in self.pending.values())

    def pending_count(self) -> int:
        return sum(len(tps) for groups in self.pending.values() for tps in groups.values())

    def pending_partitions(self, group_id: str) -> set:
        """The partitions with a pending transactional offset of `group_id`, any producer."""
        return {tp for groups in self.pending.values() for tp in groups.get(group_id, ())}

    def groups_with_pending(self) -> set:
        return {group_id for groups in self.pending.values() for group_id in groups}

    # ---- TxnOffsetCommit -----------------------------------------------------------------------
    def commit(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
               generation_id: int, member_id: str, group_instance_id: str | None,
               partitions: list[tuple[str, int, int, int, str | None]], api_version: int) -> dict:
        """{(topic, partition): code} for (topic, partition, offset, leader epoch, metadata)."""
        tps = [(t, p) for t, p, *_ in partitions]
        if self.gc.loading:         # the group is not read yet: its generation and members unknown
            return {tp: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for tp in tps}
        try:
            self._validate(group_id, generation_id, member_id, group_instance_id)
        except KafkaError as exc:
            return {tp: exc.code for tp in tps}
        gc = self.gc
        now = gc.time_ms()
        max_metadata = gc.config["offset.metadata.max.bytes"]
        codes: dict = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic, partition, offset, epoch, metadata in partitions:
            metadata = metadata or ""
            if gr.java_string_length(metadata) > max_metadata:
                codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted.pop((topic, partition), None)
            accepted[(topic, partition)] = OffsetAndMetadata(offset, epoch, metadata, now, -1)
        if not accepted:
            return codes
        code = self._append(transactional_id, group_id, producer_id, producer_epoch, accepted, api_version)
        for tp in accepted:
            codes[tp] = code
        return codes

    def _validate(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> None:
        gc = self.gc
        if not group_id:
            raise errors.InvalidGroupIdError("group id must not be empty")
        consumer_group = gc.consumer_groups.get(group_id)
        if consumer_group is not None:      # a KIP-848 group: member epoch checks
            try:
                gc.validate_consumer_offset_commit(consumer_group, member_id, generation_id, 9,
                                                   transactional=True, instance_id=group_instance_id)
            except errors.StaleMemberEpochError as exc:   # Kafka: a producer knows generations
                raise errors.IllegalGenerationError(str(exc)) from None
            return
        group = gc.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                raise errors.IllegalGenerationError(f"group {group_id} has no generation {generation_id}")
            gc.ensure_simple_group(group_id)
            return
        if group.is_state(GroupState.DEAD):
            raise errors.CoordinatorNotAvailableError()
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return
        if generation_id >= 0 or member_id or group_instance_id is not None:
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise errors.IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id}'s generation {group.generation_id}")

    def _append(self, tid: str, group_id: str, pid: int, epoch: int, accepted: dict, api_version: int) -> int:
        gc = self.gc
        tp = TopicPartition(OFFSETS_TOPIC, gc.topic.partition_for(group_id))
        lg = gc.broker.log_manager.get_log(tp)
        if lg is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            guard = lg.start_verification(pid, epoch)
        except KafkaError as exc:               # an epoch older than the partition's
            return ErrorCode(exc.code)
        if guard is not None and api_version >= FIRST_TV2_VERSION:
            code = gc.broker.txn.add_partitions(tid, pid, epoch, [tuple(tp)], client_tv=2)
            if code:
                return _VERIFY_ERRORS.get(code, code)
        elif guard is not None and gc.config["transaction.partition.verification.enable"]:
            code = gc.broker.txn.verify(tid, pid, epoch, [tuple(tp)])[tuple(tp)]
            if code == ErrorCode.TRANSACTION_ABORTABLE and api_version < 4:
                code = ErrorCode.INVALID_TXN_STATE
            if code:
                return _VERIFY_ERRORS.get(code, code)
        records = [(gr.encode_offset_commit_key(group_id, t, p),
                    gr.encode_offset_commit_value(om.offset, om.metadata, om.commit_timestamp_ms,
                                                  leader_epoch=om.leader_epoch))
                   for (t, p), om in accepted.items()]
        batch = rec.build_batch(records, base_timestamp=gc.time_ms(), producer_id=pid, producer_epoch=epoch,
                                base_sequence=-1, is_transactional=True)
        try:
            info = gc.broker.log_manager.append_as_leader(tp, batch, origin="coordinator",
                                                           verification_guard=guard)
        except KafkaError as exc:
            log.info("transactional offset commit of group %s (producer %d) failed: %s", group_id, pid, exc)
            return storage_error_to_coordinator_error(exc)
        groups = self.pending.setdefault(pid, {}).setdefault(group_id, {})
        for i, (key, om) in enumerate(accepted.items()):
            groups[key] = Pending(om, info.first_offset + i)
        return ErrorCode.NONE

    # ---- markers and plain commits ---------------------------------------------------------------
    def complete(self, producer_id: int, partition: int, commit: bool) -> int:
        """A marker of `producer_id` was written to __consumer_offsets-`partition`; returns how
        many offsets became visible."""
        groups = self.pending.get(producer_id)
        if not groups:
            return 0
        n = 0
        for group_id in [g for g in groups if self.gc.topic.partition_for(g) == partition]:
            entries = groups.pop(group_id)
            if not commit:
                continue
            committed = self.gc.offsets.setdefault(group_id, {})
            for tp, entry in entries.items():
                if not entry.superseded:
                    committed[tp] = entry.om
                    n += 1
            self.gc.ensure_simple_group(group_id)
        if not groups:
            del self.pending[producer_id]
        self.committed_total += n
        return n

    def on_offsets_deleted(self, group_id: str, tps) -> None:
        """Tombstones for these partitions of the group were appended (DeleteGroups, OffsetDelete,
        a deleted topic): every open transaction's pending offset for them is dropped, as Kafka's
        replay of an offset tombstone does, so a later COMMIT marker brings none of them back."""
        tps = set(tps)
        for pid in list(self.pending):
            groups = self.pending[pid]
            entries = groups.get(group_id)
            if entries:
                for tp in tps & entries.keys():
                    del entries[tp]
                if not entries:
                    del groups[group_id]
            if not groups:
                del self.pending[pid]

    def on_offsets_committed(self, group_id: str, tps) -> None:
        """A plain commit landed after any pending transactional one for these partitions."""
        for groups in self.pending.values():
            entries = groups.get(group_id)
            if entries:
                for tp in tps:
                    if tp in entries:
                        entries[tp].superseded = True

    # ---- replay ----------------------------------------------------------------------------------
    def load(self) -> int:
        """Apply the transactional commits of __consumer_offsets (see the module docstring);
        returns how many offsets are left pending."""
        topic = self.gc.topic
        if not topic.exists():
            return 0
        lm = self.gc.broker.log_manager
        for partition in range(topic.num_partitions):
            lg = lm.get_log(TopicPartition(OFFSETS_TOPIC, partition))
            if lg is not None and _has_transactional_batches(lg):
                self._load_partition(lg)
        return self.pending_count()

    def _load_partition(self, lg) -> None:
        loaded: dict[tuple, tuple[int, OffsetAndMetadata | None, bool]] = {}   # key -> (offset, om, from txn)
        pending: dict[int, dict[tuple, Pending]] = {}
        for data, pos, h in iter_log_batches(lg, READ_BYTES):
            if h.is_control:
                marker = tr.decode_marker(data, pos, h) if h.producer_id >= 0 else None
                entries = pending.pop(h.producer_id, {}) if marker is not None else {}
                if marker is not None and marker[0] == tr.COMMIT:
                    for key, p in entries.items():
                        current = loaded.get(key)
                        if current is None or current[0] < p.record_offset:
                            loaded[key] = (p.record_offset, p.om, True)
                continue
            for i, r in enumerate(rec.decode_records(data, pos, h)):
                key = _offset_key(r.key)
                if key is None:
                    continue
                offset = h.base_offset + r.offset_delta
                value = gr.decode_value(gr.decode_key(bytes(r.key)), None if r.value is None else bytes(r.value))
                om = None if value is None else OffsetAndMetadata(
                    value["offset"], value["leader_epoch"], value["metadata"], value["commit_timestamp"],
                    value["expire_timestamp"])
                if h.is_transactional:
                    if om is not None:
                        pending.setdefault(h.producer_id, {})[key] = Pending(om, offset)
                elif om is None:
                    loaded.pop(key, None)
                    for entries in pending.values():       # a tombstone ends pending ones too
                        entries.pop(key, None)
                else:
                    loaded[key] = (offset, om, False)
        gc = self.gc
        for (group_id, tp), (_, om, from_txn) in loaded.items():
            if from_txn:
                gc.offsets.setdefault(group_id, {})[tp] = om
                gc.ensure_simple_group(group_id)
        for pid, entries in pending.items():
            for (group_id, tp), p in entries.items():
                self.pending.setdefault(pid, {}).setdefault(group_id, {})[tp] = p
                gc.ensure_simple_group(group_id)


def _offset_key(raw) -> tuple | None:
    if raw is None:
        return None
    try:
        key = gr.decode_key(bytes(raw))
    except gr.GroupRecordError:
        return None
    if key["type"] != "offset_commit":
        return None
    return key["group"], (key["topic"], key["partition"])


def _has_transactional_batches(lg) -> bool:
    for seg in lg.segments:
        for _, hdr in seg.iter_headers():
            if hdr[5] & rec.TRANSACTIONAL_MASK:          # hdr[5]: the attributes
                return True
    return False
