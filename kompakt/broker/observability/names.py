"""Every Prometheus metric name of the broker, one constant each (STYLE habit 9), by family.

Role: the one place a metric name is spelled; broker/observability/metrics.py (registry, hot path)
and live.py (scrape time) register and export them, other rooms never name a metric themselves.
A new family adds its names here.

Conventions (https://prometheus.io/docs/practices/naming/):
- every name starts with `kompakt_`; values are in base units (seconds, bytes, ratios 0..1 where
  Kafka reports a percent); counters end in `_total`;
- every help text names the Kafka JMX metric it corresponds to, so a Kafka operator can map a
  dashboard over (`Kafka: kafka.log:type=Log,name=Size`);
- labels never explode: `api` and `error` take values from Kafka's fixed API and error-code tables;
  `topic` only on topic families; `partition` only on log and per-partition cleaner families, and
  dropped (values summed, or the maximum taken, per topic) when `metrics.partition.labels=false`.
tests/broker/observability/test_metrics.py checks the prefix, the units, the help texts and that no name repeats.
"""
# --- broker family -------------------------------------------------------------------------------
BROKER_INFO = "kompakt_broker"  # exported as kompakt_broker_info
BROKER_UPTIME = "kompakt_broker_uptime_seconds"
BROKER_CONNECTIONS = "kompakt_broker_connections"
BROKER_CONNECTIONS_CREATED = "kompakt_broker_connections_created_total"
BROKER_READY = "kompakt_broker_ready"
EVENT_LOOP_LAG = "kompakt_event_loop_lag_seconds"
EVENT_LOOP_LAG_MAX = "kompakt_event_loop_lag_max_seconds"
CONNECTIONS_REFUSED = "kompakt_broker_connections_refused_total"
AUTHENTICATIONS = "kompakt_broker_authentications_total"
TLS_BYTES = "kompakt_tls_bytes_total"
REQUEST_QUEUE_BYTES = "kompakt_request_queue_bytes"

# --- request family ------------------------------------------------------------------------------
REQUESTS = "kompakt_requests_total"
REQUEST_DURATION = "kompakt_request_duration_seconds"
REQUEST_ERRORS = "kompakt_request_errors_total"
REQUEST_BYTES = "kompakt_request_bytes_total"
RESPONSE_BYTES = "kompakt_response_bytes_total"

# --- client quota family (broker/quotas) ----------------------------------------------------------
QUOTA_THROTTLED = "kompakt_client_quota_throttled_requests_total"
QUOTA_THROTTLE_TIME = "kompakt_client_quota_throttle_seconds_total"

# --- topic family --------------------------------------------------------------------------------
TOPIC_BYTES_IN = "kompakt_topic_bytes_in_total"
TOPIC_BYTES_OUT = "kompakt_topic_bytes_out_total"
TOPIC_MESSAGES_IN = "kompakt_topic_messages_in_total"
TOPIC_MESSAGES_OUT = "kompakt_topic_messages_out_total"

# --- log family (scrape time) --------------------------------------------------------------------
LOG_SIZE = "kompakt_log_size_bytes"
LOG_SEGMENTS = "kompakt_log_segments"
LOG_START_OFFSET = "kompakt_log_start_offset"
LOG_END_OFFSET = "kompakt_log_end_offset"
LOG_PARTITIONS = "kompakt_log_partitions"
LOG_LSO_LAG = "kompakt_log_last_stable_offset_lag"
LOG_ONGOING_TRANSACTIONS = "kompakt_log_ongoing_transactions"

# --- transaction coordinator family (txn; scrape time, from TransactionCoordinator.stats()) ------
TRANSACTIONS = "kompakt_transactions"
TRANSACTIONS_COMMITTED = "kompakt_transactions_committed_total"
TRANSACTIONS_ABORTED = "kompakt_transactions_aborted_total"
TRANSACTIONS_TIMED_OUT = "kompakt_transactions_timed_out_total"
TRANSACTIONS_FENCED = "kompakt_transactions_fenced_total"
TRANSACTIONAL_IDS_EXPIRED = "kompakt_transactional_ids_expired_total"
TRANSACTION_COORDINATOR_LOAD = "kompakt_transaction_coordinator_load_seconds"
TRANSACTIONS_PENDING_OFFSETS = "kompakt_transactions_pending_offsets"

# --- log manager family (scrape time, from LogManager.stats(); added by storage-manager) ----------
LOG_MANAGER_OFFLINE_DIRS = "kompakt_log_manager_offline_dirs"
LOG_MANAGER_STARTUP = "kompakt_log_manager_startup_seconds"
LOG_MANAGER_PENDING_DELETIONS = "kompakt_log_manager_pending_deletions"
LOG_RETENTION_DELETED_SEGMENTS = "kompakt_log_retention_deleted_segments_total"
LOG_RETENTION_DELETED_BYTES = "kompakt_log_retention_deleted_bytes_total"
LOG_FLUSHES = "kompakt_log_flushes_total"
LOG_DIR_MOVES = "kompakt_log_dir_moves"
LOG_DIR_MOVE_MAX_LAG = "kompakt_log_dir_move_max_lag"
LOG_DIR_MOVES_COMPLETED = "kompakt_log_dir_moves_completed_total"
LOG_GROUP_COMMIT_ROUNDS = "kompakt_log_group_commit_rounds_total"
LOG_GROUP_COMMIT_SYNCED_LOGS = "kompakt_log_group_commit_synced_logs_total"
LOG_GROUP_COMMIT_ACKS = "kompakt_log_group_commit_acks_total"
LOG_GROUP_COMMIT_TIME = "kompakt_log_group_commit_round_seconds_total"
LOG_GROUP_COMMIT_MAX_ACKS = "kompakt_log_group_commit_max_acks_per_round"
LOG_GROUP_COMMIT_WAIT = "kompakt_log_group_commit_wait_seconds_total"
LOG_GROUP_COMMIT_QUEUE = "kompakt_log_group_commit_queue_seconds_total"
LOG_GROUP_COMMIT_ANSWER_LAG = "kompakt_log_group_commit_answer_lag_seconds_total"

# --- group coordinator family (groups; read at scrape time from GroupCoordinator.stats()) ---
GROUPS = "kompakt_groups"
CONSUMER_GROUPS = "kompakt_consumer_groups"
CONSUMER_GROUP_MEMBERS = "kompakt_consumer_group_members"
GROUP_MEMBERS = "kompakt_group_members"
GROUP_COMMITTED_OFFSETS = "kompakt_group_committed_offsets"
GROUP_REBALANCES = "kompakt_group_rebalances_total"
GROUP_MEMBERS_EXPIRED = "kompakt_group_members_expired_total"
GROUP_OFFSET_COMMITS = "kompakt_group_offset_commits_total"
GROUP_OFFSETS_EXPIRED = "kompakt_group_offsets_expired_total"
LOG_FLUSH_TIME = "kompakt_log_flush_seconds_total"
LOG_DELETED_DIRS = "kompakt_log_deleted_dirs_total"

# --- cleaner family (scrape time) ----------------------------------------------------------------
CLEANER_MAX_DIRTY_RATIO = "kompakt_cleaner_max_dirty_ratio"
CLEANER_MAX_CLEAN_TIME = "kompakt_cleaner_max_clean_time_seconds"
CLEANER_MAX_COMPACTION_DELAY = "kompakt_cleaner_max_compaction_delay_seconds"
CLEANER_MAX_BUFFER_UTILIZATION = "kompakt_cleaner_max_buffer_utilization_ratio"
CLEANER_RECOPY_RATIO = "kompakt_cleaner_recopy_ratio"
CLEANER_UNCLEANABLE_PARTITIONS = "kompakt_cleaner_uncleanable_partitions"
CLEANER_UNCLEANABLE_BYTES = "kompakt_cleaner_uncleanable_bytes"
CLEANER_DEAD_WORKERS = "kompakt_cleaner_dead_workers"
CLEANER_WORKERS = "kompakt_cleaner_workers"
CLEANER_TIME_SINCE_LAST_RUN = "kompakt_cleaner_time_since_last_run_seconds"
CLEANER_CLEANINGS = "kompakt_cleaner_cleanings_total"
CLEANER_BYTES_READ = "kompakt_cleaner_read_bytes_total"
CLEANER_BYTES_WRITTEN = "kompakt_cleaner_written_bytes_total"
CLEANER_MESSAGES_READ = "kompakt_cleaner_read_messages_total"
CLEANER_MESSAGES_WRITTEN = "kompakt_cleaner_written_messages_total"
# per partition (or per topic without partition labels)
CLEANER_PARTITION_DIRTY_RATIO = "kompakt_cleaner_partition_dirty_ratio"
CLEANER_PARTITION_CLEANER_POINT = "kompakt_cleaner_partition_cleaner_point_offset"
CLEANER_PARTITION_LAST_CLEAN_TIME = "kompakt_cleaner_partition_last_clean_timestamp_seconds"
CLEANER_PARTITION_LAST_CLEAN_DURATION = "kompakt_cleaner_partition_last_clean_duration_seconds"
CLEANER_PARTITION_RECORDS = "kompakt_cleaner_partition_records_after_last_clean"
CLEANER_PARTITION_DISTINCT_KEYS = "kompakt_cleaner_partition_distinct_keys_after_last_clean"
CLEANER_PARTITION_TOMBSTONES = "kompakt_cleaner_partition_tombstones_retained"
CLEANER_PARTITION_PAUSED = "kompakt_cleaner_partition_paused"
CLEANER_PARTITION_UNCLEANABLE = "kompakt_cleaner_partition_uncleanable"
CLEANER_PARTITION_HELD_BACK = "kompakt_cleaner_partition_tombstones_held_back"

# --- the live compaction-guarantee check (cleaner/guarantees.py; scrape time) -----------------------
GUARANTEE_VIOLATIONS = "kompakt_compaction_guarantee_violations_total"
GUARANTEE_CHECKS = "kompakt_compaction_guarantee_checks_total"
GUARANTEE_CHECK_TIME = "kompakt_compaction_guarantee_check_seconds_total"

# --- group-safe tombstones (broker/groups/tombstone_guard.py; scrape time) -------------------------------
TOMBSTONE_STALE_GROUPS = "kompakt_tombstone_retention_stale_groups"
TOMBSTONE_STALE_EVENTS = "kompakt_tombstone_retention_stale_group_events_total"
