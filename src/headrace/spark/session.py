"""A local SparkSession set up for headrace: the one-machine default of demos and tests."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def local_session(app_name: str = "headrace", master: str = "local[2]",
                  shuffle_partitions: int = 2) -> SparkSession:
    """Get or create a session on ``master`` with ``format("headrace")`` registered and the
    event-time toolkit's settings (RocksDB state store, UTC). Python workers use this
    interpreter (PySpark's workers time out when it is not the venv's). Blocks ~7 s the
    first time (JVM start)."""
    from headrace.spark import register
    from headrace.streaming import configure

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.streaming.stopTimeout", "20s")
             .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    configure(spark)
    return spark
