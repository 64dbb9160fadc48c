"""The pipeline's jobs, one module each, run by `kompakt pipeline <job>` (pipeline/cli.py):
audit (what compaction would gain), compact (exact compaction by Spark's shuffle), snapshot (latest
value per key to Parquet), verify (a compacted partition against its input), whatif (other
compaction settings replayed over a topic's records)."""
