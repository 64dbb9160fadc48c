"""Figures read at scrape time from the objects that own them: logs, cleaner, groups,
transactions, limits, authentications, TLS bytes.

Role: `LiveCollector` is registered by `Metrics.attach(broker)`; it reads state that lives in other
objects at scrape time, so the hot path pays nothing. It reads, never locks: a scrape must not wait
for a cleaner swap holding a log's lock. Its per-partition families (~16 series per partition) are
written as exposition text by `TextGauge` after the registry's output (`partition_text`), not
through prometheus-client's samples.

What LiveCollector reads (duck-typed; dicts or objects with these attribute names both work):
- `broker.log_manager.all_logs() -> {TopicPartition: Log}`; from each `Log`: `segments` (each with
  `.size`), `log_start_offset`, `log_end_offset`, `config.compact` (optional).
- `broker.cleaner.status()` -> mapping with any of: `max_dirty_percent` (0..100),
  `max_clean_time_secs`, `max_compaction_delay_secs`, `max_buffer_utilization_percent` (0..100),
  `cleaner_recopy_percent` (0..100), `uncleanable_partitions_count` (`{log_dir: n}` or int),
  `uncleanable_bytes` (`{log_dir: bytes}` or int), `dead_thread_count`, `time_since_last_run_ms`,
  `workers` (int or list), and cumulative counters `cleanings_total`, `bytes_read_total`,
  `bytes_written_total`, `messages_read_total`, `messages_written_total`.
- `broker.cleaner.partition_status(tp)` -> mapping (or None) with any of: `state`, `dirty_ratio`
  (0..1), `cleaner_point` (or `first_dirty_offset`), `last_clean_time_ms` (epoch ms),
  `last_clean_duration_ms`, `records_after_last_clean`, `distinct_keys_after_last_clean`,
  `tombstones_retained`, `paused_count`, `uncleanable_reason`.
- `broker.log_manager.stats()` and `broker.groups.stats()` (families appended by their owners).
A missing key is simply not exported; a collector failure is logged and never fails the scrape.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.utils import floatToGoString

from kompakt.broker.observability.names import (CONNECTIONS_REFUSED, AUTHENTICATIONS, TLS_BYTES, REQUEST_QUEUE_BYTES,
    LOG_SIZE, LOG_SEGMENTS, LOG_START_OFFSET, LOG_END_OFFSET, LOG_PARTITIONS, LOG_LSO_LAG,
    LOG_ONGOING_TRANSACTIONS, TRANSACTIONS, TRANSACTIONS_COMMITTED, TRANSACTIONS_ABORTED,
    TRANSACTIONS_TIMED_OUT, TRANSACTIONS_FENCED, TRANSACTIONAL_IDS_EXPIRED, TRANSACTION_COORDINATOR_LOAD,
    TRANSACTIONS_PENDING_OFFSETS, LOG_MANAGER_OFFLINE_DIRS, LOG_MANAGER_STARTUP,
    LOG_MANAGER_PENDING_DELETIONS, LOG_RETENTION_DELETED_SEGMENTS, LOG_RETENTION_DELETED_BYTES, LOG_FLUSHES,
    LOG_DIR_MOVES, LOG_DIR_MOVE_MAX_LAG, LOG_DIR_MOVES_COMPLETED, LOG_GROUP_COMMIT_ROUNDS,
    LOG_GROUP_COMMIT_SYNCED_LOGS, LOG_GROUP_COMMIT_ACKS, LOG_GROUP_COMMIT_TIME, LOG_GROUP_COMMIT_MAX_ACKS,
    LOG_GROUP_COMMIT_WAIT, LOG_GROUP_COMMIT_QUEUE, LOG_GROUP_COMMIT_ANSWER_LAG,
    GROUPS, CONSUMER_GROUPS, CONSUMER_GROUP_MEMBERS, GROUP_MEMBERS, GROUP_COMMITTED_OFFSETS,
    GROUP_REBALANCES, GROUP_MEMBERS_EXPIRED, GROUP_OFFSET_COMMITS, GROUP_OFFSETS_EXPIRED, LOG_FLUSH_TIME,
    LOG_DELETED_DIRS, CLEANER_MAX_DIRTY_RATIO, CLEANER_MAX_CLEAN_TIME, CLEANER_MAX_COMPACTION_DELAY,
    CLEANER_MAX_BUFFER_UTILIZATION, CLEANER_RECOPY_RATIO, CLEANER_UNCLEANABLE_PARTITIONS,
    CLEANER_UNCLEANABLE_BYTES, CLEANER_DEAD_WORKERS, CLEANER_WORKERS, CLEANER_TIME_SINCE_LAST_RUN,
    CLEANER_CLEANINGS, CLEANER_BYTES_READ, CLEANER_BYTES_WRITTEN, CLEANER_MESSAGES_READ,
    CLEANER_MESSAGES_WRITTEN, CLEANER_PARTITION_DIRTY_RATIO, CLEANER_PARTITION_CLEANER_POINT,
    CLEANER_PARTITION_LAST_CLEAN_TIME, CLEANER_PARTITION_LAST_CLEAN_DURATION, CLEANER_PARTITION_RECORDS,
    CLEANER_PARTITION_DISTINCT_KEYS, CLEANER_PARTITION_TOMBSTONES, CLEANER_PARTITION_PAUSED,
    CLEANER_PARTITION_UNCLEANABLE, CLEANER_PARTITION_HELD_BACK, GUARANTEE_VIOLATIONS, GUARANTEE_CHECKS,
    GUARANTEE_CHECK_TIME, TOMBSTONE_STALE_GROUPS, TOMBSTONE_STALE_EVENTS)

log = logging.getLogger(__name__)


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    """First present field among `names`, from a mapping or an object's attributes."""
    if obj is None:
        return default
    for name in names:
        if isinstance(obj, Mapping):
            if name in obj and obj[name] is not None:
                return obj[name]
        else:
            value = getattr(obj, name, None)
            if value is not None:
                return value
    return default


def _num(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def log_size(log_obj: Any) -> int:
    """Bytes of every segment of a partition log (Kafka's Log.size)."""
    size = getattr(log_obj, "size", None)
    if isinstance(size, int):
        return size
    return sum(int(getattr(seg, "size", 0) or 0) for seg in list(getattr(log_obj, "segments", ()) or ()))


class TextGauge:
    """A gauge family written straight to Prometheus exposition text, as generate_latest would
    write it (HELP, TYPE, one line per sample, label values escaped), with GaugeMetricFamily's
    add_metric: one f-string per sample where prometheus-client builds a Sample, checks each label
    name and escapes each value (half of a 10 000-partition scrape's 1.1 s went there)."""

    __slots__ = ("name", "documentation", "labels", "_lines")

    def __init__(self, name: str, documentation: str, labels: list[str]):
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self._lines: list[str] = []

    def add_metric(self, label_values: list[str], value: float) -> None:
        self.add(label_text(self.labels, label_values), value)

    def add(self, labels: str, value: float) -> None:
        """One sample; `labels` as `label_text` renders them (made once per partition for all
        the families)."""
        self._lines.append(f"{self.name}{{{labels}}} {floatToGoString(value)}\n")

    def text(self) -> str:
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {self.name} {doc}\n# TYPE {self.name} gauge\n" + "".join(self._lines)


def label_text(names: list[str], values: list[str]) -> str:
    """`name="value",...` as exposition text has it between the braces (sorted by name, as
    generate_latest writes them: partition before topic)."""
    return ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in sorted(zip(names, values)))


def _escape_label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:   # never in Kafka topic names: [a-zA-Z0-9._-]
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return value


class LiveCollector:
    """Reads log and cleaner state at scrape time. Never raises out of `collect()`."""

    def __init__(self, broker: Any, partition_labels: bool = True):
        self.broker = broker
        self.partition_labels = partition_labels

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        """The families of few series (the per-partition ones are `partition_text`)."""
        try:
            yield from self._collect_cleaner()
        except Exception:
            log.exception("collecting cleaner metrics failed")
        try:
            yield from self._collect_log_manager()
        except Exception:
            log.exception("collecting log manager metrics failed")
        try:
            yield from self._collect_groups()
        except Exception:
            log.exception("collecting group coordinator metrics failed")
        try:
            yield from self._collect_transactions()
        except Exception:
            log.exception("collecting transaction metrics failed")
        try:
            yield from self._collect_tombstone_guard()
        except Exception:
            log.exception("collecting tombstone retention metrics failed")
        try:
            yield from self._collect_limits()
        except Exception:
            log.exception("collecting connection limit metrics failed")
        try:
            yield from self._collect_authentications()
        except Exception:
            log.exception("collecting authentication metrics failed")
        try:
            yield from self._collect_tls_bytes()
        except Exception:
            log.exception("collecting TLS metrics failed")

    def partition_text(self) -> str:
        """The per-partition families (log figures, open transactions, cleaner figures per
        compacted log), as exposition text written directly (`TextGauge`): at 10 000 partitions
        they are ~16 series per partition, and prometheus-client's Sample objects, label checks
        and escaping took most of a scrape's time."""
        out = []
        for what, families in (("log", self._collect_logs), ("log transaction", self._collect_log_transactions),
                               ("cleaner partition", self._collect_cleaner_partitions)):
            try:
                out.extend(fam.text() for fam in families())
            except Exception:  # a scrape must never take the broker down or lose the other families
                log.exception("collecting %s metrics failed", what)
        return "".join(out)

    # -- authentications per listener (broker/security: SASL exchanges, TLS handshakes) --
    def _collect_authentications(self) -> Iterable[Any]:
        listeners = [sec for sec in getattr(self.broker, "listeners", None) or () if getattr(sec, "stats", None)]
        if not listeners:
            return
        family = CounterMetricFamily(AUTHENTICATIONS[:-len("_total")], "Authentications by listener, mechanism "
                                     "(PLAIN, SCRAM-SHA-256/512, or TLS for handshakes) and result (success, "
                                     "failure). Kafka: successful-authentication-total / failed-authentication-total.",
                                     labels=["listener", "mechanism", "result"])
        for sec in listeners:
            for (mechanism, result), n in sorted(sec.stats.items()):
                family.add_metric([sec.name, mechanism, result], n)
        yield family

    # -- bytes through the TLS layer per listener (broker/network/tls_transport.py) --
    def _collect_tls_bytes(self) -> Iterable[Any]:
        listeners = [sec for sec in getattr(self.broker, "listeners", None) or ()
                     if getattr(sec, "ssl_context", None) is not None and getattr(sec, "tls_bytes", None) is not None]
        if not listeners:
            return
        family = CounterMetricFamily(TLS_BYTES[:-len("_total")], "Application bytes decrypted (from clients) and "
                                     "encrypted (to clients) on TLS listeners, by listener, operation (decrypt, "
                                     "encrypt) and the thread that did it (event_loop; worker: the kompakt-tls threads "
                                     "that take large reads and answers off the event loop). Kafka: none (its network "
                                     "threads do the TLS work).", labels=["listener", "operation", "thread"])
        for sec in listeners:
            for operation in ("decrypt", "encrypt"):
                for thread in ("event_loop", "worker"):
                    family.add_metric([sec.name, operation, thread], sec.tls_bytes.get((operation, thread), 0))
        yield family

    # -- connection and request-memory limits (broker/network/limits.py) --
    def _collect_limits(self) -> Iterable[Any]:
        limits = getattr(self.broker, "limits", None)
        if limits is None:
            return
        refused = CounterMetricFamily(CONNECTIONS_REFUSED[:-len("_total")], "Connections closed at once because "
                                      "a limit was reached, by limit (max.connections, max.connections.per.ip). "
                                      "Kafka: none (its acceptor blocks; per-ip refusals are logged).",
                                      labels=["reason"])
        for reason in ("max.connections", "max.connections.per.ip"):
            refused.add_metric([reason], limits.refused.get(reason, 0))
        yield refused
        yield GaugeMetricFamily(REQUEST_QUEUE_BYTES, "Bytes of requests read and not yet answered, across "
                                "connections (bounded by queued.max.request.bytes). Kafka: "
                                "kafka.network:type=SocketServer,name=MemoryPoolUsed.", value=limits.queued_bytes)

    # -- group-safe tombstones (kompakt.tombstone.retention.groups) --
    def _collect_tombstone_guard(self) -> Iterable[Any]:
        guard = getattr(self.broker, "tombstone_guard", None)
        stats = guard.stats() if callable(getattr(guard, "stats", None)) else None
        if stats is None:
            return
        stale = GaugeMetricFamily(TOMBSTONE_STALE_GROUPS, "Groups of kompakt.tombstone.retention.groups that "
                                  "stopped holding the topic's tombstones back: no commit on it for "
                                  "kompakt.tombstone.retention.max.ms. Kafka: none.", labels=["topic"])
        events = CounterMetricFamily(TOMBSTONE_STALE_EVENTS[:-len("_total")], "Times a group of "
                                     "kompakt.tombstone.retention.groups went stale (each also logs a WARNING). "
                                     "Kafka: none.", labels=["topic"])
        for topic, (now_stale, crossings) in sorted(stats.items()):
            stale.add_metric([topic], now_stale)
            events.add_metric([topic], crossings)
        yield stale
        yield events

    # -- group coordinator (groups) --
    def _collect_groups(self) -> Iterable[Any]:
        groups = getattr(self.broker, "groups", None)
        stats = groups.stats() if callable(getattr(groups, "stats", None)) else None
        if not stats:
            return
        by_state = GaugeMetricFamily(GROUPS, "Consumer groups by state (Empty, PreparingRebalance, "
                                     "CompletingRebalance, Stable). Kafka: kafka.coordinator.group:"
                                     "type=GroupMetadataManager,name=NumGroups<State>.", labels=["state"])
        for state, n in sorted(stats.get("groups_by_state", {}).items()):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily(GROUP_MEMBERS, "Members of all classic groups. Kafka: none (sum of "
                                "kafka-consumer-groups --members).", value=stats.get("members", 0))
        consumer = GaugeMetricFamily(CONSUMER_GROUPS, "KIP-848 consumer-protocol groups by state (Empty, "
                                     "Assigning, Reconciling, Stable). Kafka: kafka.coordinator.group:"
                                     "type=group-coordinator-metrics,name=group-count,protocol=consumer,state=...",
                                     labels=["state"])
        for state, n in sorted(stats.get("consumer_groups_by_state", {}).items()):
            consumer.add_metric([state], n)
        yield consumer
        yield GaugeMetricFamily(CONSUMER_GROUP_MEMBERS, "Members of all consumer-protocol groups. Kafka: none "
                                "(sum of ConsumerGroupDescribe members).", value=stats.get("consumer_group_members", 0))
        yield GaugeMetricFamily(GROUP_COMMITTED_OFFSETS, "Committed offsets held in memory. Kafka: "
                                "kafka.coordinator.group:type=GroupMetadataManager,name=NumOffsets.",
                                value=stats.get("offsets", 0))
        counters = (
            (GROUP_REBALANCES, "rebalances_total", "Join phases completed (new generations). Kafka: "
             "kafka.coordinator.group:type=group-coordinator-metrics,name=group-completed-rebalance-count."),
            (GROUP_MEMBERS_EXPIRED, "members_expired_total", "Members removed because their session "
             "timed out. Kafka: none (the 'removing member ... on heartbeat expiration' log line)."),
            (GROUP_OFFSET_COMMITS, "offset_commits_total", "Partition offsets committed. Kafka: "
             "kafka.coordinator.group:type=group-coordinator-metrics,name=offset-commit-count."),
            (GROUP_OFFSETS_EXPIRED, "offsets_expired_total", "Committed offsets removed by retention "
             "(offsets.retention.minutes). Kafka: kafka.coordinator.group:type=group-coordinator-metrics,"
             "name=offset-expiration-count."),
        )
        for name, key, text in counters:
            yield CounterMetricFamily(name, text, value=stats.get(key, 0))

    # -- transactions (txn) --
    def _collect_transactions(self) -> Iterable[Any]:
        txn = getattr(self.broker, "txn", None)
        stats = txn.stats() if callable(getattr(txn, "stats", None)) else None
        if stats:
            states = GaugeMetricFamily(TRANSACTIONS, "Transactional ids by the state of their transaction "
                                       "(Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                                       "CompleteAbort, PrepareEpochFence). Kafka: none (kafka-transactions "
                                       "--list).", labels=["state"])
            for state, n in sorted(stats.get("by_state", {}).items()):
                states.add_metric([state], n)
            yield states
            yield GaugeMetricFamily(TRANSACTION_COORDINATOR_LOAD, "Time the last start-up took to reload "
                                    "__transaction_state. Kafka: kafka.server:type=transaction-coordinator-"
                                    "metrics,name=partition-load-time-max (ms there).",
                                    value=stats.get("load_time_ms", 0) / 1000.0)
            counters = (
                (TRANSACTIONS_COMMITTED, "committed_total", "Transactions committed (every COMMIT marker "
                 "written). Kafka: none."),
                (TRANSACTIONS_ABORTED, "aborted_total", "Transactions aborted (by the producer, a fencing "
                 "producer or a timeout; every ABORT marker written). Kafka: none."),
                (TRANSACTIONS_TIMED_OUT, "timed_out_total", "Transactions aborted because they ran longer "
                 "than their transaction.timeout.ms. Kafka: none (the 'Completed rollback of ongoing "
                 "transaction ... due to timeout' log line)."),
                (TRANSACTIONS_FENCED, "fenced_total", "Open transactions aborted because a new instance "
                 "of their transactional id called InitProducerId. Kafka: none."),
                (TRANSACTIONAL_IDS_EXPIRED, "expired_ids_total", "Transactional ids removed after "
                 "transactional.id.expiration.ms idle. Kafka: none."),
            )
            for name, key, text in counters:
                yield CounterMetricFamily(name[:-len("_total")], text, value=stats.get(key, 0))
        pending = getattr(getattr(self.broker, "groups", None), "txn_offsets", None)
        if pending is not None:
            yield GaugeMetricFamily(TRANSACTIONS_PENDING_OFFSETS, "Group offsets committed inside open "
                                    "transactions (visible once they commit). Kafka: none.",
                                    value=pending.pending_count())

    def _collect_log_transactions(self) -> Iterable[Any]:
        labels = self._labels()
        lag = TextGauge(LOG_LSO_LAG, "High watermark minus last stable offset: records an open "
                                "transaction keeps from read_committed consumers (maximum over partitions "
                                "without partition labels). Kafka: kafka.cluster:type=Partition,"
                                "name=LastStableOffsetLag.", labels=labels)
        ongoing = TextGauge(LOG_ONGOING_TRANSACTIONS, "Transactions open in the partition (summed "
                                    "over partitions without partition labels). Kafka: none.", labels=labels)
        per_topic: dict[str, list[int]] = {}
        for tp, lg in self._logs():
            try:
                state = lg.producer_state
                values = [lg.high_watermark - lg.last_stable_offset, len(state.ongoing)]
            except Exception:
                continue
            if self.partition_labels:
                lv = label_text(labels, [tp[0], str(tp[1])])
                lag.add(lv, values[0])
                ongoing.add(lv, values[1])
            else:
                acc = per_topic.setdefault(tp[0], [0, 0])
                acc[0] = max(acc[0], values[0])
                acc[1] += values[1]
        for topic, acc in per_topic.items():
            lag.add_metric([topic], acc[0])
            ongoing.add_metric([topic], acc[1])
        yield lag
        yield ongoing

    # -- log manager (storage-manager) --
    def _collect_log_manager(self) -> Iterable[Any]:
        manager = getattr(self.broker, "log_manager", None)
        stats = manager.stats() if callable(getattr(manager, "stats", None)) else None
        if not stats:
            return
        gauges = (
            (LOG_MANAGER_OFFLINE_DIRS, "offline_log_dirs", "Log dirs offline: unusable at start-up or failed by an I/O error since. "
             "Kafka: kafka.log:type=LogManager,name=OfflineLogDirectoryCount."),
            (LOG_MANAGER_STARTUP, "startup_seconds", "Time the last start-up took to load and recover "
             "every log. Kafka: the 'Loaded N logs in Xms' log line (no JMX metric)."),
            (LOG_DIR_MOVES, "log_dir_moves", "Partitions moving to another log dir (AlterReplicaLogDirs: a "
             "future log copying). Kafka: none (the future replicas DescribeLogDirs lists)."),
            (LOG_DIR_MOVE_MAX_LAG, "log_dir_move_max_lag", "Largest offset lag of a future log behind its "
             "partition's log. Kafka: kafka.server:type=ReplicaAlterLogDirsManager,name=MaxLag."),
            (LOG_GROUP_COMMIT_MAX_ACKS, "group_commit_max_acks_per_round", "Most waits (acks=all "
             "partitions, coordinator writes) one group-commit round answered since start. Kafka: none."),
        )
        for name, key, text in gauges:
            v = _num(stats.get(key))
            if v is not None:
                yield GaugeMetricFamily(name, text, value=v)
        pending = GaugeMetricFamily(LOG_MANAGER_PENDING_DELETIONS, "Deleted partition dirs and segments "
                                    "waiting file.delete.delay.ms before their unlink. Kafka: none "
                                    "(kafka-delete-logs / delete-file scheduler tasks).", labels=["kind"])
        for kind, key in (("dir", "pending_dir_deletions"), ("segment", "pending_segment_deletions")):
            v = _num(stats.get(key))
            if v is not None:
                pending.add_metric([kind], v)
        yield pending
        counters = (
            (LOG_RETENTION_DELETED_SEGMENTS, "retention_deleted_segments_total", "Segments deleted by "
             "retention (log-start, retention.bytes and retention.ms breaches). Kafka: the 'Deleting "
             "segments due to ...' log lines of UnifiedLog.deleteOldSegments."),
            (LOG_RETENTION_DELETED_BYTES, "retention_deleted_bytes_total", "Bytes of the segments deleted "
             "by retention. Kafka: none."),
            (LOG_FLUSHES, "flushes_total", "Logs fsynced by the flusher task (flush.ms). "
             "Kafka: kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (count)."),
            (LOG_FLUSH_TIME, "flush_seconds_total", "Time spent in flusher fsyncs. "
             "Kafka: kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (time, ms there)."),
            (LOG_DELETED_DIRS, "deleted_dirs_total", "Partition dirs of deleted topics removed after "
             "file.delete.delay.ms. Kafka: none (kafka-delete-logs task)."),
            (LOG_DIR_MOVES_COMPLETED, "log_dir_moves_completed_total", "Partitions moved to another log "
             "dir since start (AlterReplicaLogDirs swaps). Kafka: none."),
            (LOG_GROUP_COMMIT_ROUNDS, "group_commit_rounds_total", "Group-commit rounds: one sync of "
             "every log appended to since the last round, per log dir (kompakt.durable.acks.enable). "
             "Kafka: none (it does not sync before acknowledging)."),
            (LOG_GROUP_COMMIT_SYNCED_LOGS, "group_commit_synced_logs_total", "Logs synced by "
             "group-commit rounds (divided by rounds: logs per sync round). Kafka: none."),
            (LOG_GROUP_COMMIT_ACKS, "group_commit_acks_total", "Waits answered by group-commit rounds: "
             "acks=all partitions and coordinator writes (divided by rounds: waits sharing one "
             "round). Kafka: none."),
            (LOG_GROUP_COMMIT_TIME, "group_commit_round_seconds_total", "Time spent in group-commit "
             "rounds (the syncs). Kafka: none."),
            (LOG_GROUP_COMMIT_WAIT, "group_commit_wait_seconds_total", "Time the answered waits spent "
             "from the wait to the end of the sync that covered them, summed (divided by acks: the "
             "mean). Kafka: none."),
            (LOG_GROUP_COMMIT_QUEUE, "group_commit_queue_seconds_total", "The part of wait_seconds "
             "before the round that answered a wait started (the flusher thread waking, or finishing "
             "the round under way), summed; the rest is that round's sync. Kafka: none."),
            (LOG_GROUP_COMMIT_ANSWER_LAG, "group_commit_answer_lag_seconds_total", "Time from the end "
             "of a wait's sync to the event loop running its answer, summed over the waits (divided "
             "by acks: the mean; a busy loop makes it grow). Kafka: none."),
        )
        for name, key, text in counters:
            v = _num(stats.get(key))
            if v is not None:
                yield CounterMetricFamily(name[:-len("_total")], text, value=v)

    # -- logs --
    def _logs(self) -> list[tuple[Any, Any]]:
        manager = getattr(self.broker, "log_manager", None)
        if manager is None:
            return []
        logs = manager.all_logs()
        items = list(logs.items()) if isinstance(logs, Mapping) else [(lg.tp, lg) for lg in logs]
        return sorted(items, key=lambda kv: (kv[0][0], kv[0][1]))

    def _labels(self) -> list[str]:
        return ["topic", "partition"] if self.partition_labels else ["topic"]

    def _collect_logs(self) -> Iterable[Any]:
        labels = self._labels()
        size = TextGauge(LOG_SIZE, "Bytes of all segments of the partition log. "
                                 "Kafka: kafka.log:type=Log,name=Size,topic=<t>,partition=<p>.", labels=labels)
        segs = TextGauge(LOG_SEGMENTS, "Segments of the partition log. "
                                 "Kafka: kafka.log:type=Log,name=NumLogSegments.", labels=labels)
        start = TextGauge(LOG_START_OFFSET, "First offset of the partition log (summed over "
                                  "partitions without partition labels). Kafka: kafka.log:type=Log,name=LogStartOffset.",
                                  labels=labels)
        end = TextGauge(LOG_END_OFFSET, "Next offset to be written (summed over partitions without "
                                "partition labels). Kafka: kafka.log:type=Log,name=LogEndOffset.", labels=labels)
        parts = TextGauge(LOG_PARTITIONS, "Partitions of the topic on this broker. "
                                  "Kafka: kafka.server:type=ReplicaManager,name=PartitionCount (per topic here).",
                                  labels=["topic"])
        per_topic: dict[str, list[float]] = {}
        for tp, lg in self._logs():
            topic, partition = tp[0], tp[1]
            try:
                values = [log_size(lg), len(list(lg.segments)), lg.log_start_offset, lg.log_end_offset]
            except Exception:  # a log being deleted or replaced under us: skip it this scrape
                log.debug("skipping metrics of %s-%s", topic, partition, exc_info=True)
                continue
            acc = per_topic.setdefault(topic, [0, 0, 0, 0, 0])
            for i, v in enumerate(values):
                acc[i] += v
            acc[4] += 1
            if self.partition_labels:
                lv = label_text(labels, [topic, str(partition)])
                for fam, v in zip((size, segs, start, end), values):
                    fam.add(lv, v)
        for topic, acc in per_topic.items():
            if not self.partition_labels:
                for fam, v in zip((size, segs, start, end), acc):
                    fam.add_metric([topic], v)
            parts.add_metric([topic], acc[4])
        yield from (size, segs, start, end, parts)

    # -- cleaner --
    def _collect_cleaner(self) -> Iterable[Any]:
        cleaner = getattr(self.broker, "cleaner", None)
        if cleaner is None:
            return
        status = cleaner.status() if callable(getattr(cleaner, "status", None)) else None
        if status is not None:
            yield from self._cleaner_globals(status)

    def _collect_cleaner_partitions(self) -> Iterable[Any]:
        cleaner = getattr(self.broker, "cleaner", None)
        if callable(getattr(cleaner, "partition_status", None)):
            yield from self._cleaner_partitions(cleaner)

    def _cleaner_globals(self, status: Any) -> Iterable[Any]:
        def gauge(name: str, help_text: str, value: Any, scale: float = 1.0):
            v = _num(value)
            if v is not None and v >= 0:  # the cleaner reports -1 for "never" (e.g. no run yet)
                yield GaugeMetricFamily(name, help_text, value=v * scale)

        yield from gauge(CLEANER_MAX_DIRTY_RATIO, "Dirty ratio of the filthiest compacted log at the last "
                         "cleaner pass (0..1). Kafka: kafka.log:type=LogCleanerManager,name=max-dirty-percent.",
                         _get(status, "max_dirty_percent"), 0.01)
        yield from gauge(CLEANER_MAX_CLEAN_TIME, "Duration of the longest clean in the last cleaner pass. "
                         "Kafka: kafka.log:type=LogCleaner,name=max-clean-time-secs.", _get(status, "max_clean_time_secs"))
        yield from gauge(CLEANER_MAX_COMPACTION_DELAY, "Largest delay past max.compaction.lag.ms of a log "
                         "cleaned in the last pass. Kafka: kafka.log:type=LogCleaner,name=max-compaction-delay-secs.",
                         _get(status, "max_compaction_delay_secs"))
        yield from gauge(CLEANER_MAX_BUFFER_UTILIZATION, "Largest fill of a worker's offset map in the last "
                         "pass (0..1). Kafka: kafka.log:type=LogCleaner,name=max-buffer-utilization-percent.",
                         _get(status, "max_buffer_utilization_percent"), 0.01)
        yield from gauge(CLEANER_RECOPY_RATIO, "Bytes written / bytes read by the cleaner in the last pass "
                         "(0..1). Kafka: kafka.log:type=LogCleaner,name=cleaner-recopy-percent.",
                         _get(status, "cleaner_recopy_percent"), 0.01)
        yield from gauge(CLEANER_DEAD_WORKERS, "Cleaner workers that died. "
                         "Kafka: kafka.log:type=LogCleaner,name=DeadThreadCount.", _get(status, "dead_thread_count"))
        workers = _get(status, "workers", "num_workers")
        if isinstance(workers, (list, tuple)):
            workers = len(workers)
        yield from gauge(CLEANER_WORKERS, "Cleaner worker processes configured (log.cleaner.threads). "
                         "Kafka: log.cleaner.threads (no metric).", workers)
        yield from gauge(CLEANER_TIME_SINCE_LAST_RUN, "Seconds since the cleaner last finished a pass. "
                         "Kafka: kafka.log:type=LogCleanerManager,name=time-since-last-run-ms (ms there).",
                         _get(status, "time_since_last_run_ms"), 0.001)
        for name, key, text in (
                (CLEANER_UNCLEANABLE_PARTITIONS, "uncleanable_partitions_count", "Partitions marked uncleanable "
                 "after a cleaner error, by log dir. Kafka: kafka.log:type=LogCleanerManager,"
                 "name=uncleanable-partitions-count,logDirectory=<dir>."),
                (CLEANER_UNCLEANABLE_BYTES, "uncleanable_bytes", "Cleanable bytes of uncleanable partitions, "
                 "by log dir. Kafka: kafka.log:type=LogCleanerManager,name=uncleanable-bytes,logDirectory=<dir>.")):
            value = _get(status, key)
            if value is None:
                continue
            fam = GaugeMetricFamily(name, text, labels=["log_dir"])
            if isinstance(value, Mapping):
                for d, v in sorted(value.items()):
                    if _num(v) is not None:
                        fam.add_metric([str(d)], _num(v))
            elif _num(value) is not None:
                fam.add_metric([""], _num(value))
            yield fam
        violations = CounterMetricFamily(GUARANTEE_VIOLATIONS[:-len("_total")], "Compaction guarantees (seed 004: "
                                         "order, latest value kept, records unchanged, young tombstones kept) a "
                                         "clean's output broke; each refused the swap and marked the partition "
                                         "uncleanable, with an ERROR line. Kafka: none.", labels=["topic"])
        for topic, n in sorted((_get(status, "guarantee_violations_by_topic") or {}).items()):
            violations.add_metric([str(topic)], n)
        yield violations
        for name, key, text in (
                (GUARANTEE_CHECKS, "guarantee_checks_total", "Cleans whose output the guarantee check read back "
                 "before the swap (kompakt.cleaner.guarantee.check.ratio > 0). Kafka: none."),
                (GUARANTEE_CHECK_TIME, "guarantee_check_seconds_total", "Seconds the cleaner workers spent in the "
                 "guarantee check. Kafka: none."),
                (CLEANER_CLEANINGS, "cleanings_total", "Cleans completed. Kafka: logged per clean "
                 "(\"Cleaner 0: Log ... cleaned\"), no JMX counter."),
                (CLEANER_BYTES_READ, "bytes_read_total", "Bytes read by the cleaner. Kafka: CleanerStats.bytesRead."),
                (CLEANER_BYTES_WRITTEN, "bytes_written_total", "Bytes written by the cleaner. "
                 "Kafka: CleanerStats.bytesWritten."),
                (CLEANER_MESSAGES_READ, "messages_read_total", "Records read by the cleaner. "
                 "Kafka: CleanerStats.messagesRead."),
                (CLEANER_MESSAGES_WRITTEN, "messages_written_total", "Records written by the cleaner. "
                 "Kafka: CleanerStats.messagesWritten.")):
            v = _num(_get(status, key))
            if v is not None:
                yield CounterMetricFamily(name[:-len("_total")], text, value=v)

    def _cleaner_partitions(self, cleaner: Any) -> Iterable[Any]:
        labels = self._labels()
        fams = {
            "dirty": TextGauge(CLEANER_PARTITION_DIRTY_RATIO, "Dirty bytes / cleanable bytes of a "
                                       "compacted log (max over partitions without partition labels). Kafka: "
                                       "computed by LogCleanerManager, exported only as max-dirty-percent.", labels=labels),
            "point": TextGauge(CLEANER_PARTITION_CLEANER_POINT, "Cleaner checkpoint: first dirty offset. "
                                       "Kafka: cleaner-offset-checkpoint file (no metric).", labels=labels),
            "time": TextGauge(CLEANER_PARTITION_LAST_CLEAN_TIME, "Unix time the last clean of the log "
                                      "finished (latest over partitions without partition labels). Kafka: broker "
                                      "log line only.", labels=labels),
            "duration": TextGauge(CLEANER_PARTITION_LAST_CLEAN_DURATION, "Duration of the last clean. "
                                          "Kafka: max-clean-time-secs (max over logs).", labels=labels),
            "records": TextGauge(CLEANER_PARTITION_RECORDS, "Records in the cleaned part after the last "
                                         "clean. Kafka: CleanerStats.messagesWritten (log line).", labels=labels),
            "keys": TextGauge(CLEANER_PARTITION_DISTINCT_KEYS, "Distinct keys in the offset map of the "
                                      "last clean. Kafka: none.", labels=labels),
            "tomb": TextGauge(CLEANER_PARTITION_TOMBSTONES, "Tombstones kept by the last clean (within "
                                      "delete.retention.ms). Kafka: none.", labels=labels),
            "paused": TextGauge(CLEANER_PARTITION_PAUSED, "1 while cleaning of the log is paused. "
                                        "Kafka: LogCleaningPaused state (no metric).", labels=labels),
            "unclean": TextGauge(CLEANER_PARTITION_UNCLEANABLE, "1 when the log is marked uncleanable. "
                                         "Kafka: uncleanable-partitions-count (per dir).", labels=labels),
            "held": TextGauge(CLEANER_PARTITION_HELD_BACK, "Tombstones and markers the last clean kept "
                                      "past delete.retention.ms because a group of kompakt.tombstone.retention."
                                      "groups has not committed past them. Kafka: none.", labels=labels),
        }
        keys = {"dirty": ("dirty_ratio",), "point": ("cleaner_point", "first_dirty_offset"),
                "time": ("last_clean_time_ms",), "duration": ("last_clean_duration_ms",),
                "records": ("records_after_last_clean",), "keys": ("distinct_keys_after_last_clean",),
                "tomb": ("tombstones_retained",), "held": ("tombstones_held_back",)}
        scale = {"time": 0.001, "duration": 0.001}
        combine_max = {"dirty", "time", "duration", "point"}
        per_topic: dict[str, dict[str, float]] = {}
        for tp, lg in self._logs():
            cfg = getattr(lg, "config", None)
            if cfg is not None and getattr(cfg, "compact", True) is False:
                continue
            try:
                st = cleaner.partition_status(tp)
            except Exception:
                log.debug("no cleaner status for %s", tp, exc_info=True)
                continue
            if st is None:
                continue
            row: dict[str, float] = {}
            for key, names in keys.items():
                v = _num(_get(st, *names))
                if v is not None and (v >= 0 or key == "dirty"):  # -1 means "never cleaned"
                    row[key] = v * scale.get(key, 1.0)
            state = str(_get(st, "state", default="")).lower()
            row["paused"] = 1.0 if ("pause" in state or (_num(_get(st, "paused_count")) or 0) > 0) else 0.0
            row["unclean"] = 1.0 if (_get(st, "uncleanable_reason") or "uncleanable" in state) else 0.0
            if self.partition_labels:
                lv = label_text(labels, [tp[0], str(tp[1])])
                for key, v in row.items():
                    fams[key].add(lv, v)
            else:
                acc = per_topic.setdefault(tp[0], {})
                for key, v in row.items():
                    acc[key] = max(acc.get(key, v), v) if key in combine_max else acc.get(key, 0.0) + v
        for topic, acc in per_topic.items():
            for key, v in acc.items():
                fams[key].add_metric([topic], v)
        yield from fams.values()
