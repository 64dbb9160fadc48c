"""A coordinator's compacted internal topic (`__consumer_offsets`, `__transaction_state`): created on
first use, with Kafka's enforced configs, and looked up partition by partition.

Role: what the group and transaction coordinators share about their topics: whether the topic is
there (every partition log, not just the name: LogManager registers a topic before it creates
the partition dirs), its partition count (the topic's actual count once it exists, so a restart
with another `*.num.partitions` still finds every key), and its creation, off the event loop
when asked by a request (FindCoordinator, Kafka's trigger) since creating dozens of partition
dirs with their fsyncs must not stall every other client.

Configs: cleanup.policy=compact, the coordinator's compression.type, and segment.bytes from the
coordinator's `*.segment.bytes` key (below 1 MiB, which Kafka 4 refuses for segment.bytes, the
value goes to its testing-only internal.segment.bytes, which replaces segment.bytes as the roll
size). A creation that races another one (TOPIC_ALREADY_EXISTS) is success.
"""
from __future__ import annotations

import asyncio
import logging

from kompakt.protocol import errors
from kompakt.protocol import records as rec
from kompakt.storage import TopicPartition

log = logging.getLogger(__name__)

MIN_SEGMENT_BYTES = 1 << 20   # Kafka 4's floor of the segment.bytes topic config


class InternalTopic:
    def __init__(self, log_manager, config, name: str, partitions_key: str, segment_bytes_key: str,
                 compression_type: str):
        self.log_manager = log_manager
        self.config = config
        self.name = name
        self._partitions_key = partitions_key
        self._segment_bytes_key = segment_bytes_key
        self._compression_type = compression_type
        self._create_lock: asyncio.Lock | None = None
        self._ready = False

    def exists(self) -> bool:
        """The topic and *every* partition log exist (a partition whose log dir was offline at
        start-up exists too: it answers KAFKA_STORAGE_ERROR, its coordinator is not available,
        and the others load and serve)."""
        if self._ready:
            return True
        lm = self.log_manager
        meta = lm.topics.get(self.name)
        if meta is not None and all(lm.get_log(TopicPartition(self.name, p)) is not None
                                    or lm.is_offline((self.name, p)) for p in range(meta.partitions)):
            self._ready = True
        return self._ready

    @property
    def num_partitions(self) -> int:
        meta = self.log_manager.topics.get(self.name)
        return meta.partitions if meta is not None else self.config[self._partitions_key]

    async def ensure_async(self) -> None:
        """Create the topic in a thread if it does not exist yet."""
        if self.exists():
            return
        if self._create_lock is None:
            self._create_lock = asyncio.Lock()
        async with self._create_lock:
            if not self.exists():
                await asyncio.to_thread(self.ensure)

    def ensure(self) -> None:
        """Create the topic if it does not exist yet (synchronous fallback of the first write)."""
        if self.exists():
            return
        segment_bytes = self.config[self._segment_bytes_key]
        segment_key = "segment.bytes" if segment_bytes >= MIN_SEGMENT_BYTES else "internal.segment.bytes"
        configs = {"cleanup.policy": "compact", segment_key: str(segment_bytes),
                   "compression.type": self._compression_type}
        try:
            self.log_manager.create_topic(self.name, self.config[self._partitions_key], configs)
        except errors.KafkaError as exc:
            if exc.code != errors.ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            return   # created meanwhile (or being created by a request's thread)
        log.info("created %s with %d partitions", self.name, self.num_partitions)


def iter_log_batches(lg, read_bytes: int):
    """(buffer, position, header) of every batch of a partition log, from its start to its end
    (reads of `read_bytes`): how both coordinators replay their topics."""
    offset = lg.log_start_offset
    end = lg.log_end_offset
    while offset < end:
        data = lg.read(offset, read_bytes).records
        if not data:
            break
        progressed = False
        for pos, header in rec.iter_batches(data):
            if header.next_offset <= offset:
                continue
            progressed = True
            offset = header.next_offset
            yield data, pos, header
        if not progressed:
            break
