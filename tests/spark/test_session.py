"""The local session's JVM starts from the class-data archive ``make setup`` built."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headrace.spark.session import class_archive, jvm_start_options

pytestmark = pytest.mark.spark


def test_the_driver_jvm_maps_the_class_archive(spark: SparkSession) -> None:
    archive = class_archive()
    assert archive.is_file(), f"{archive} missing: `make setup` builds it"
    assert str(archive) in jvm_start_options()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = jvm.java.lang.ProcessHandle.current().pid()
    # Mapped, not only named on the command line: a JVM that finds the archive stale (another
    # Java, other jars) starts without it, silently.
    assert str(archive.resolve()) in Path(f"/proc/{pid}/maps").read_text()


def test_python_workers_run_from_headraces_daemon_with_pyspark_compiled(
        spark: SparkSession) -> None:
    """The session's tasks run in workers forked from ``headrace.spark.daemon``, which
    imported PySpark from the installed package's compiled files (not Spark's zip of its
    sources)."""

    def where(_: object) -> tuple[str, str]:
        import sys

        main = sys.modules["__main__"].__spec__
        return (sys.modules["pyspark"].__file__ or "", main.name if main else "")

    pyspark_file, main = spark.sparkContext.parallelize([0], 1).map(where).collect()[0]
    assert main == "headrace.spark.daemon"
    assert ".zip" not in pyspark_file and pyspark_file.endswith("pyspark/__init__.py")
