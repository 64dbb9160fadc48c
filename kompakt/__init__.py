"""Kompakt: a single-node broker speaking the Apache Kafka wire protocol, built around log compaction."""
__version__ = "0.1.0"
