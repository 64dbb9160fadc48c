"""The internal topic `__consumer_offsets`: where group state is written and read back from.

Role: the coordinator's only seam to storage. `append(group_id, records)` writes one record batch
of (key, value) pairs (value None = tombstone) to the group's partition and returns only after
`Log.append_as_leader` has accepted it (synchronously, on the event loop: these batches are a
few hundred bytes, and a synchronous append keeps every group change atomic with respect to
other requests - Kafka needs purgatories and re-checks for the same guarantee); `replay()` reads every partition from its log start
offset to its end and yields, per key, the last record (decoded), in the order of those last
records. The topic is created on first
write with `offsets.topic.num.partitions` partitions, `cleanup.policy=compact` and
`segment.bytes=offsets.topic.segment.bytes` (below 1 MiB: `internal.segment.bytes`, Kafka 4's
testing-only key), so our own log cleaner keeps it small: only the
latest commit per (group, topic, partition) and the latest metadata per group survive, and
tombstones disappear after delete.retention.ms.

Record layout: the key and value bytes of kompakt.protocol.group_records (Kafka's schemas), in
ordinary magic-v2 batches (uncompressed, CreateTime = the coordinator's clock, no producer id),
exactly as Kafka 4's coordinator writes them.

Invariants: a group's records always go to partition `partition_for(group, partitions)`, where
`partitions` is the topic's actual partition count (so a restart with a different
`offsets.topic.num.partitions` still finds every group); records that fail to decode are
logged and skipped on replay, never fatal (the rest of the state still loads).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator

from kompakt.broker.coordinator_common.internal_topic import InternalTopic, iter_log_batches
from kompakt.protocol import errors
from kompakt.protocol import group_records as gr
from kompakt.protocol import records as rec
from kompakt.storage import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
REPLAY_READ_BYTES = 1 << 20
# A record's own framing in a v2 batch (length, attributes, timestamp and offset deltas, key and
# value lengths, header count as varints) never exceeds this many bytes.
RECORD_OVERHEAD_BOUND = 24


class PartialAppendError(errors.KafkaError):
    """An append that stopped at a failed batch; the first `appended` records are in the log."""

    def __init__(self, cause: errors.KafkaError, appended: int):
        super().__init__(str(cause))
        self.code = cause.code
        self.appended = appended


class OffsetsTopic(InternalTopic):
    def __init__(self, log_manager, config, time_ms: Callable[[], int]):
        super().__init__(log_manager, config, OFFSETS_TOPIC, "offsets.topic.num.partitions",
                         "offsets.topic.segment.bytes", "producer")
        self.time_ms = time_ms

    def partition_for(self, group_id: str) -> int:
        return gr.partition_for(group_id, self.num_partitions)

    # -- writes ------------------------------------------------------------------------------

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append the records to the group's partition, in as few batches as max.message.bytes
        allows (one, unless a request commits hundreds of partitions with large metadata);
        returns how many were appended (all of them).

        Raises PartialAppendError (a KafkaError) when a batch fails: its `appended` records,
        a prefix of `records`, are in the log; the caller applies exactly those."""
        if not records:
            return 0
        self.ensure()
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        appended = 0
        for chunk in self._chunks(records):
            batch = rec.build_batch(chunk, base_timestamp=self.time_ms())
            try:
                # LogManager.append_as_leader also wakes fetch long-polls on the partition.
                self.log_manager.append_as_leader(tp, batch, origin="coordinator")
            except errors.KafkaError as exc:
                raise PartialAppendError(exc, appended) from exc
            appended += len(chunk)
        return appended

    def _chunks(self, records: list[tuple[bytes, bytes | None]]):
        limit = self._max_batch_bytes()
        chunk: list = []
        size = rec.BATCH_OVERHEAD
        for key, value in records:
            cost = len(key) + (len(value) if value is not None else 0) + RECORD_OVERHEAD_BOUND
            if chunk and size + cost > limit:
                yield chunk
                chunk, size = [], rec.BATCH_OVERHEAD
            chunk.append((key, value))
            size += cost
        if chunk:
            yield chunk

    def _max_batch_bytes(self) -> int:
        log_config = getattr(self.log_manager, "log_config", None)
        if log_config is not None:
            try:
                return log_config(OFFSETS_TOPIC).max_message_bytes
            except (KeyError, AttributeError):
                pass
        return self.config["message.max.bytes"]

    # -- reads -------------------------------------------------------------------------------

    def replay(self) -> Iterator[tuple[dict, dict | None]]:
        """Every (decoded key, decoded value or None) of every partition, in log order."""
        if not self.exists():
            return
        for partition in range(self.num_partitions):
            partition_log = self.log_manager.get_log(TopicPartition(OFFSETS_TOPIC, partition))
            if partition_log is not None:
                yield from self._replay_partition(partition_log, partition)

    def _replay_partition(self, partition_log, partition: int) -> Iterator[tuple[dict, dict | None]]:
        # Only the last record of each key matters (exactly what compaction would keep), so the
        # raw bytes are deduplicated first and only the survivors are decoded, in the order of
        # their last occurrence - which keeps group and offset records in their relative order.
        latest: dict[bytes, bytes | None] = {}
        for record in self._raw_records(partition_log):
            if record.key is None:
                log.warning("%s-%d: record without key skipped", OFFSETS_TOPIC, partition)
                continue
            key = bytes(record.key)
            latest.pop(key, None)
            latest[key] = record.value
        for key, value in latest.items():
            decoded = self._decode(key, value, partition)
            if decoded is not None:
                yield decoded

    @staticmethod
    def _raw_records(partition_log) -> Iterator:
        for data, pos, header in iter_log_batches(partition_log, REPLAY_READ_BYTES):
            if header.is_control or header.is_transactional:
                # transactional commits are replayed by txn_offsets.py (markers decide)
                continue
            yield from rec.decode_records(data, pos, header)

    @staticmethod
    def _decode(key: bytes, value: bytes | None, partition: int):
        try:
            decoded_key = gr.decode_key(key)
            if decoded_key["type"] == "unknown":
                return None
            return decoded_key, gr.decode_value(decoded_key, value)
        except gr.GroupRecordError as exc:
            log.warning("%s-%d: undecodable record skipped: %s", OFFSETS_TOPIC, partition, exc)
            return None
