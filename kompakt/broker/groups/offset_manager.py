"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention (Kafka's
OffsetMetadataManager), as a mixin of GroupCoordinator over its groups and `offsets` image.

Who may commit follows ClassicGroup.validateOffsetCommit (see handlers/offset_commit.py); every
accepted commit is appended to __consumer_offsets (one batch per request) before it is
acknowledged or visible to OffsetFetch. Expiry (offsets.py's rule) runs every
offsets.retention.check.interval.ms and writes tombstones; an Empty group left without offsets
dies like Kafka's (group tombstone).

Invariant: `self.offsets` changes only after a successful append, so it always equals what a
replay of the log would build.
"""
from __future__ import annotations

import asyncio
import logging

from kompakt.broker.groups.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from kompakt.broker.groups.membership import storage_error_to_coordinator_error
from kompakt.broker.groups.offsets import (OffsetAndMetadata, expired_consumer_group_offsets,
                                           expired_offsets)
from kompakt.broker.groups.offsets_topic import PartialAppendError
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr
from kompakt.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class OffsetManager:
    """OffsetCommit / OffsetFetch / OffsetDelete / expiry over `self.offsets` and `self.groups`."""

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       group_instance_id: str | None, retention_time_ms: int,
                       partitions: list[tuple[str, int, int, int, str | None, int]],
                       api_version: int) -> dict[tuple[str, int], int]:
        """Validate and append commits of (topic, partition, offset, leader epoch, metadata,
        commit timestamp or -1); returns the error code of each (topic, partition).

        Raises KafkaError when the whole request fails (group or member checks)."""
        if self.loading:
            raise errors.CoordinatorLoadInProgressError("__consumer_offsets is still loading")
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:     # a KIP-848 group: member epoch checks (consumer/admin.py)
            self.validate_consumer_offset_commit(consumer_group, member_id, generation_id, api_version)
            group = None
        else:
            group = self._validate_commit(group_id, generation_id, member_id, group_instance_id, api_version)
        now = self.time_ms()
        max_metadata = self.config["offset.metadata.max.bytes"]
        codes: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        topics = self.broker.log_manager.topics
        for topic, partition, offset, epoch, metadata, commit_ts in partitions:
            tp = (topic, partition)
            metadata = metadata or ""
            if topic not in topics:   # the handler filtered these already; kept for direct callers
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if gr.java_string_length(metadata) > max_metadata:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            commit_at = commit_ts if commit_ts is not None and commit_ts >= 0 else now
            expire_at = commit_at + retention_time_ms if retention_time_ms >= 0 else -1
            accepted.pop(tp, None)   # a partition named twice: the last one wins, in its place
            accepted[tp] = OffsetAndMetadata(offset, epoch, metadata, commit_at, expire_at)
        # one record per accepted partition, in `accepted` order (a partial append lands a prefix)
        records = [(gr.encode_offset_commit_key(group_id, t, p),
                    gr.encode_offset_commit_value(om.offset, om.metadata, om.commit_timestamp_ms,
                                                  leader_epoch=om.leader_epoch,
                                                  expire_timestamp=om.expire_timestamp_ms))
                   for (t, p), om in accepted.items()]
        if records:
            failure = None
            try:
                self.topic.append(group_id, records)
                done = len(records)
            except PartialAppendError as exc:
                failure, done = exc, exc.appended
                log.warning("offset commit of group %s failed to append after %d of %d records: %s",
                            group_id, done, len(records), exc)
            landed = list(accepted.items())[:done]
            self.offsets.setdefault(group_id, {}).update(landed)
            self.txn_offsets.on_offsets_committed(group_id, [tp for tp, _ in landed])
            self.counters["offset_commits_total"] += len(landed)
            for tp, _ in landed:
                codes[tp] = ErrorCode.NONE
            if failure is not None:
                for tp in list(accepted)[done:]:
                    codes[tp] = storage_error_to_coordinator_error(failure)
                return codes
        if group is not None and group.has_member(member_id):
            self._reschedule_heartbeat(group, group.member(member_id))
        return codes

    def ensure_simple_group(self, group_id: str) -> None:
        """A group that only holds offsets (admin tools, manual assignment, transactions) exists
        as an empty classic group - unless the id is a consumer-protocol group."""
        if group_id not in self.groups and group_id not in self.consumer_groups:
            self.groups[group_id] = ClassicGroup(group_id, self.time_ms())

    def _validate_commit(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, api_version: int) -> ClassicGroup:
        if not group_id:
            raise errors.InvalidGroupIdError("group id must not be empty")
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # A "simple" group: the admin client or a consumer with manual assignment.
                self.ensure_simple_group(group_id)
                return self.groups[group_id]
            if api_version >= 9:
                raise errors.GroupIdNotFoundError(f"group {group_id} not found")
            raise errors.IllegalGenerationError(f"group {group_id} has no generation {generation_id}")
        if group.is_state(GroupState.DEAD):
            raise errors.CoordinatorNotAvailableError()
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise errors.IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id}'s generation {group.generation_id}")
        elif not group.is_state(GroupState.EMPTY):
            raise errors.UnknownMemberIdError("only members may commit offsets of a non-empty group")
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            raise errors.RebalanceInProgressError()
        return group

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """Committed offsets of the given partitions (None = not committed), or of all when
        `partitions` is None."""
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    def committed_offsets_of_topic(self, topic: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """{group: {partition: OffsetAndMetadata}} of every group with commits on `topic`. A copy
        built from atomic snapshots (list() of a dict runs under the GIL), so another thread (the
        cleaner's, through broker/groups/tombstone_guard.py) may call it while the loop commits."""
        out: dict[str, dict[int, OffsetAndMetadata]] = {}
        for group_id, committed in list(self.offsets.items()):
            parts = {p: om for (t, p), om in list(committed.items()) if t == topic}
            if parts:
                out[group_id] = parts
        return out

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict]:
        """OffsetDelete: (top-level error, {(topic, partition): error})."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, {}
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, {}
        codes: dict[tuple[str, int], int] = {}
        consumer_group = self.consumer_groups.get(group_id)
        group = self.groups.get(group_id)
        if consumer_group is not None:
            # Kafka: a consumer group keeps the offsets of the topics it subscribes, whatever its state.
            for tp in partitions:
                if consumer_group.is_subscribed_to(tp[0]):
                    codes[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        elif group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        elif not group.is_state(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.NON_EMPTY_GROUP, {}
        else:
            # Kafka's ClassicGroup: subscriptions it cannot read count as every topic
            for tp in partitions:
                if group.is_subscribed_to(tp[0]):
                    codes[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        committed = self.offsets.get(group_id, {})
        # Kafka 4: a tombstone also for a partition with only a pending transactional offset
        doomed = [tp for tp in partitions if tp not in codes
                  and (tp in committed or self.txn_offsets.has_pending(group_id, tp))]
        try:
            self._tombstone_offsets(group_id, doomed)
        except KafkaError as exc:
            return storage_error_to_coordinator_error(exc), {}
        for tp in partitions:
            codes.setdefault(tp, ErrorCode.NONE)
        return ErrorCode.NONE, codes

    def on_topic_deleted(self, topic: str) -> int:
        """Kafka's onPartitionsDeleted: a deleted topic's committed offsets are tombstoned in every
        group (a topic re-created under the same name must not inherit them). Returns how many.
        While __consumer_offsets is still loading, the topic is remembered and done once it is."""
        if self.loading:
            self.deleted_while_loading.add(topic)
            return 0
        removed = 0
        for group_id in sorted(set(self.offsets) | self.txn_offsets.groups_with_pending()):
            # committed offsets, and pending transactional ones (Kafka's onPartitionsDeleted)
            tps = sorted({tp for tp in self.offsets.get(group_id, {}) if tp[0] == topic}
                         | {tp for tp in self.txn_offsets.pending_partitions(group_id) if tp[0] == topic})
            if not tps:
                continue
            try:
                self._tombstone_offsets(group_id, tps)
                removed += len(tps)
            except KafkaError as exc:
                log.warning("could not remove offsets of deleted topic %s from group %s: %s",
                            topic, group_id, exc)
        if removed:
            log.info("removed %d committed offsets of deleted topic %s", removed, topic)
        return removed

    def _tombstone_offsets(self, group_id: str, tps: list[tuple[str, int]]) -> None:
        if not tps:
            return
        try:
            self.topic.append(group_id, [(gr.encode_offset_commit_key(group_id, t, p), None) for t, p in tps])
        except PartialAppendError as exc:
            self._forget_offsets(group_id, tps[:exc.appended])
            raise
        self._forget_offsets(group_id, tps)

    def _forget_offsets(self, group_id: str, tps) -> None:
        """Tombstones of `tps` were appended: forget them, committed and pending."""
        committed = self.offsets.get(group_id, {})
        for tp in tps:
            committed.pop(tp, None)
        if not committed:
            self.offsets.pop(group_id, None)
        self.txn_offsets.on_offsets_deleted(group_id, tps)

    # ============================================================================ retention

    async def _retention_loop(self) -> None:
        interval = self.config["offsets.retention.check.interval.ms"] / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed")

    def expire_offsets(self) -> int:
        """Tombstone expired offsets; Empty groups left with no offsets die. Returns the count."""
        if self.loading:
            return 0
        now = self.time_ms()
        retention_ms = self.config["offsets.retention.minutes"] * 60_000
        total = 0
        for group_id in list(self.groups):
            group = self.groups[group_id]
            expired = expired_offsets(group, self.offsets.get(group_id, {}), now, retention_ms)
            if not self._expire(group_id, expired):
                continue
            total += len(expired)
            if (group.is_state(GroupState.EMPTY) and not group.pending_members
                    and not self.offsets.get(group_id) and not self.txn_offsets.pending_partitions(group_id)):
                self._delete_quietly(group_id, lambda: self._delete_group(group))
        for group_id in list(self.consumer_groups):
            group = self.consumer_groups[group_id]
            expired = expired_consumer_group_offsets(group.is_subscribed_to, self.offsets.get(group_id, {}),
                                                     now, retention_ms)
            if not self._expire(group_id, expired):
                continue
            total += len(expired)
            if (group.is_empty() and not self.offsets.get(group_id)
                    and not self.txn_offsets.pending_partitions(group_id)):
                self._delete_quietly(group_id, lambda: self._delete_consumer_group(group, []))
        return total

    def _expire(self, group_id: str, expired: list) -> bool:
        """Tombstone the expired offsets that no transaction still holds (removes them from
        `expired`); False when the append failed."""
        expired[:] = [tp for tp in expired if not self.txn_offsets.has_pending(group_id, tp)]
        if not expired:
            return True
        try:
            self._tombstone_offsets(group_id, expired)
        except KafkaError as exc:
            log.warning("could not expire offsets of group %s: %s", group_id, exc)
            return False
        log.info("expired %d offsets of group %s", len(expired), group_id)
        self.counters["offsets_expired_total"] += len(expired)
        return True

    @staticmethod
    def _delete_quietly(group_id: str, delete) -> None:
        try:
            delete()
        except KafkaError as exc:
            log.warning("could not delete empty group %s: %s", group_id, exc)
