"""SparkSession defaults for one machine, overridable from the command line.

Defaults: `local[*]`, UI off, few shuffle partitions (a laptop's cores, not a cluster's 200),
adaptive execution on, Python filter pushdown on (the `kompakt` source implements pushFilters),
SPARK_LOCAL_IP=127.0.0.1 (no DNS lookup of the host name, no listening on outside interfaces),
PYSPARK_PYTHON = this interpreter (executors import kompakt from the same environment).
`--master` and `--conf k=v` (repeatable) override any of them.
"""
from __future__ import annotations

import os
import sys

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def parse_conf(pairs) -> dict[str, str]:
    out = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise ValueError(f"--conf {pair!r}: expected key=value")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def get_session(master: str | None = None, conf: dict | None = None, app_name: str = "kompakt-pipeline"):
    """A SparkSession with the defaults above and the `kompakt` / `kompakt-stream` formats registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kompakt.pipeline.source import register
    from kompakt.pipeline.streaming import register_stream

    merged = dict(DEFAULT_CONF)
    merged.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(master or merged.pop("spark.master", "local[*]"))
    for k, v in merged.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(merged.get("kompakt.log.level", "ERROR"))
    register(spark)
    register_stream(spark)
    return spark
