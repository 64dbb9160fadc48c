"""The PySpark pipeline, beside the broker: Kafka log dirs read as DataFrames, and jobs over them.

    reader.py               pure-Python reading of log dirs: partitions, segments, splits, records
    keyscan.py              a split's keyed records as Arrow record batches (what compaction groups)
    source.py               the `kompakt` data source (log dirs on disk)
    streaming.py            the `kompakt-stream` source (a live broker, through the Kafka protocol)
    jobs/                   `kompakt pipeline <job>`: audit, compact, snapshot, verify, whatif
    adopt.py, adopt_cmd.py  a compacted staging dir adopted into a live partition (crash-safe swap)
    spark.py, chart.py, cli.py   session defaults, PNG charts, the command line

Invariant: reads storage's formats and the cleaner's rules, never the broker (tests/test_layers.py):
a live broker is reached only over the wire.
"""
