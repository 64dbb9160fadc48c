"""The internal topic `__transaction_state`: where the transaction coordinator writes and reloads.

Role: the coordinator's only seam to storage for its own state. `append(transactional_id, value)`
writes one record (value bytes of kompakt.protocol.txn_records, None = tombstone) to the id's
partition and returns once `Log.append_as_leader` accepted it (synchronously, on the event loop:
one small record; a synchronous append keeps each state change atomic with respect to other
requests). `replay()` reads every partition from its log start to its end and returns the last
value of each transactional id (what compaction keeps).

Created on first use (FindCoordinator for a transactional id, Kafka's trigger, or
InitProducerId) with `transaction.state.log.num.partitions` partitions and Kafka's enforced
configs: cleanup.policy=compact, compression.type=uncompressed, segment.bytes =
transaction.state.log.segment.bytes (below 1 MiB: the testing-only internal.segment.bytes).
Records are magic-v2 batches, uncompressed, CreateTime = the coordinator's clock, no producer id,
exactly as Kafka's TransactionStateManager writes them.

Invariants: an id's records always go to `partition_for(id, partitions)` with the topic's actual
partition count; a record that does not decode is logged and skipped on replay, never fatal.
"""
from __future__ import annotations

import logging
from typing import Callable

from kompakt.broker.coordinator_common.internal_topic import InternalTopic, iter_log_batches
from kompakt.protocol import records as rec
from kompakt.protocol import txn_records as tr
from kompakt.storage import TopicPartition

log = logging.getLogger(__name__)

TOPIC = tr.TRANSACTION_STATE_TOPIC
_MAX_CACHED = 100_000


class TransactionStateTopic(InternalTopic):
    def __init__(self, log_manager, config, time_ms: Callable[[], int]):
        super().__init__(log_manager, config, TOPIC, "transaction.state.log.num.partitions",
                         "transaction.state.log.segment.bytes", "uncompressed")
        self.time_ms = time_ms
        self._cached: dict[str, int] = {}
        self._cached_count = 0

    def partition_for(self, transactional_id: str) -> int:
        # Java's String.hashCode in Python costs ~1 us and every state change asks: remembered
        # per id (for the topic's partition count of the moment; bounded, since ids expire)
        n = self.num_partitions
        if n != self._cached_count or len(self._cached) > _MAX_CACHED:
            self._cached, self._cached_count = {}, n
        partition = self._cached.get(transactional_id)
        if partition is None:
            partition = self._cached[transactional_id] = tr.partition_for(transactional_id, n)
        return partition

    def append(self, transactional_id: str, value: bytes | None) -> None:
        """One record; raises KafkaError (the coordinator maps it to its error codes)."""
        self.ensure()
        tp = TopicPartition(TOPIC, self.partition_for(transactional_id))
        self.log_manager.append_as_leader(tp, tr.state_batch(transactional_id, value, self.time_ms()),
                                          origin="coordinator")

    def replay(self) -> dict[str, dict]:
        """{transactional id: decoded value} of the last record of every id (tombstones drop it)."""
        out: dict[str, dict] = {}
        if not self.exists():
            return out
        for partition in range(self.num_partitions):
            lg = self.log_manager.get_log(TopicPartition(TOPIC, partition))
            if lg is None:
                continue
            for record in _records(lg, self.config["transaction.state.log.load.buffer.size"]):
                if record.key is None:
                    continue
                try:
                    key = tr.decode_key(bytes(record.key))
                    if key["transactional_id"] is None:
                        log.warning("%s-%d: unknown key version %d skipped", TOPIC, partition, key["version"])
                        continue
                    value = tr.decode_value(None if record.value is None else bytes(record.value))
                except tr.TxnRecordError as exc:
                    log.warning("%s-%d: undecodable record skipped: %s", TOPIC, partition, exc)
                    continue
                if value is None:
                    out.pop(key["transactional_id"], None)
                else:
                    out[key["transactional_id"]] = value
        return out


def _records(lg, read_bytes: int):
    for data, pos, header in iter_log_batches(lg, read_bytes):
        if not header.is_control:
            yield from rec.decode_records(data, pos, header)
