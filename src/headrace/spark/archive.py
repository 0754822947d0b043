"""Build the Spark JVM's class-data archive: ``python -m headrace.spark.archive [PATH]``.

A Spark driver JVM loads thousands of classes from PySpark's jars as it starts, which is
most of a session's start-up CPU. Java's application class-data sharing (AppCDS) keeps them
parsed and verified in one file that every later JVM maps: on the 2-core development
machine a session start plus a first query took about 14 CPU seconds instead of 24.
``make setup`` runs this once (the archive belongs to this Java and these jars; a JVM that
finds it stale ignores it); ``local_session`` uses it through ``jvm_start_options``.

The archive is what a JVM loaded before it exited, so the warm-up here runs what headrace's
sessions run (SQL with a shuffle, a pandas UDF, a watermarked streaming aggregation on the
RocksDB state store) in a child process, whose JVM writes the archive as it exits. Written
to a temporary name and renamed: a failed build leaves no archive, never half of one.
Needs no broker and no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from headrace.spark.errors import SparkConnectorError
from headrace.spark.session import class_archive

_WARM_UP = """
import sys
import pandas as pd
from pyspark import SparkContext
from pyspark.sql import functions as F
from headrace.spark.session import local_session

spark = local_session("headrace-class-archive", kafka_connector=False,
                      java_options="-XX:ArchiveClassesAtExit=" + sys.argv[1])
spark.range(2000).selectExpr("id % 7 as k", "id").groupBy("k").agg(F.sum("id")).collect()

@F.pandas_udf("long")
def twice(v: pd.Series) -> pd.Series:
    return v * 2

spark.range(100).select(twice("id")).collect()
stream = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
          .withWatermark("timestamp", "1 second")
          .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 3).alias("k")).count())
query = stream.writeStream.format("memory").queryName("warm").outputMode("append").start()
for _ in range(3):
    query.processAllAvailable()
query.stop()
spark.stop()
gateway = SparkContext._gateway
gateway.shutdown()
gateway.proc.stdin.close()  # the JVM exits on end of input, writing the archive first
gateway.proc.wait(timeout=300)
"""


def build(target: Path, timeout_s: float = 600) -> None:
    """Write the archive to ``target`` (replacing it). Blocks for about a minute; raises
    ``SparkConnectorError`` if the warm-up fails or the JVM writes no archive."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        partial = Path(tmp) / "classes.jsa"
        done = subprocess.run([sys.executable, "-c", _WARM_UP, str(partial)],
                              capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                              check=False)
        if done.returncode != 0 or not partial.is_file():
            raise SparkConnectorError(
                f"the class-data archive was not written (exit {done.returncode}): "
                + (done.stderr.strip().splitlines() or ["no output"])[-1])
        partial.replace(target)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else class_archive()
    try:
        print("building the Spark JVM's class-data archive (once, a minute or two) ...")
        build(target)
    except (SparkConnectorError, subprocess.SubprocessError, OSError) as e:
        print(f"warning: Spark starts without a class-data archive: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
