"""The Spark session the audit runs in: Python workers on this interpreter, the
`commitlog` source registered, settings the audit's throughput depends on."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from brokergroup_audit.source import CommitLogDataSource


def spark_session(
    master: str = "local[*]",
    app_name: str = "brokergroup-audit",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session whose Python workers run this interpreter (so they import this package);
    `conf`: further Spark settings (over the ones below)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        # The audit caches its scan once (about 110 bytes per record uncompressed, 60
        # compressed); compressing took a third of the audit's time on one core and
        # the checks read every cached column anyway (docs/audit.md "Throughput").
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CommitLogDataSource)
    return spark
