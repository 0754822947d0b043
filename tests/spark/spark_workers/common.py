"""What every worker script shares: timestamped progress lines and its own SparkSession.

Progress goes to stdout, one ``<time.monotonic()> <event>`` line per event, written with
``os.write`` so that a SIGKILL loses nothing already said.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from pyspark.sql import SparkSession

from headrace import jvm
from headrace.spark import daemon, register
from headrace.spark.session import (
    jvm_start_options,
    kafka_connector_jars,
    realtime_jars,
    session_settings,
)
from headrace.testing import scaled


def say(event: str) -> None:
    os.write(1, f"{time.monotonic():.3f} {event}\n".encode())


def say_progress(query: Any, seen: int) -> int:
    """Say ``progress <json>`` (the source end offsets per topic, summed over partitions)
    when ``query`` has made progress past batch ``seen``; returns the last batch said."""
    progress = query.lastProgress
    if not progress or progress["batchId"] == seen:
        return seen
    ends: dict[str, int] = {}
    for source in progress["sources"]:
        for topic, parts in json.loads(source.get("endOffset") or "{}").items():
            ends[topic] = ends.get(topic, 0) + sum(int(o) for o in parts.values())
    say(f"progress {json.dumps(ends)}")
    return int(progress["batchId"])


def build_session(master: str, app: str, shuffle_partitions: int = 2,
                  kafka_connector: bool = False,
                  executor_cores: int = 1, executor_memory: str = "512m") -> SparkSession:
    """A SparkSession on ``master`` (``local[2]`` or ``local-cluster[N,C,M]``) with
    ``format("headrace")`` registered. Executors (local-cluster: separate JVMs that start
    their own Python workers) get this interpreter as ``PYSPARK_PYTHON``. With
    ``kafka_connector``, Spark's ``format("kafka")`` jars and the real-time rule operator
    (when built) go in ``spark.jars``, which ships them to every executor."""
    os.environ["PYSPARK_PYTHON"] = daemon.worker_python(sys.executable)
    os.environ["PYSPARK_DRIVER_PYTHON"] = daemon.worker_python(sys.executable)
    builder = SparkSession.builder.master(master).appName(app).config("spark.driver.memory", "1g")
    for key, value in session_settings(master, shuffle_partitions, scaled(20)).items():
        builder = builder.config(key, value)
    # the suite's JVM options (tests/conftest.py: C1 only) and the class-data archive
    options = " ".join([*jvm.extra_options(), jvm_start_options()]).strip()
    if options:
        builder = (builder.config("spark.driver.extraJavaOptions", options)
                   .config("spark.executor.extraJavaOptions", options))
    connector = kafka_connector_jars() + realtime_jars() if kafka_connector else []
    if connector:
        builder = builder.config("spark.jars", ",".join(connector))
    if master.startswith("local-cluster"):
        # Each worker of local-cluster[N,C,M] offers M MiB; the executor must fit in it.
        builder = builder.config("spark.executor.memory", "768m")
    elif master.startswith("spark://"):
        # A standalone cluster's workers (headrace.cluster.SparkCluster) offer 1 GiB and
        # a few cores each: one small executor per worker (spark.cores.max caps the
        # application at two), tasks retried as on any cluster.
        builder = (builder.config("spark.executor.memory", executor_memory)
                   .config("spark.executor.cores", str(executor_cores))
                   .config("spark.cores.max", str(2 * executor_cores))
                   .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
