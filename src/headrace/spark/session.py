"""A local SparkSession set up for headrace: the one-machine default of demos and tests."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from headrace import jvm
from headrace.spark import daemon

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOCAL_CHECKPOINT_FILES = ("org.apache.spark.sql.execution.streaming.checkpointing."
                          "FileSystemBasedCheckpointFileManager")
"""The checkpoint file manager of sessions on a ``local`` master
(``spark.sql.streaming.checkpointFileManagerClass``). Spark's default, the FileContext-based
one, renames every checkpoint file through Hadoop's ``FileContext``. On the local file system
that renaming starts a ``readlink`` process for each path it checks: 34 processes per
micro-batch of a windowed count, ~5 ms of CPU each, a fifth of that query's CPU. This one
renames through the ``FileSystem`` API (``File.renameTo``), with no process. On a local disk
both check that the target is absent before they rename, so neither is the more atomic.
Sessions on a cluster master keep Spark's default (their checkpoints are on shared
storage)."""


def kafka_connector_jars() -> list[str]:
    """The jars of Spark's own Kafka connector (``format("kafka")``: spark-sql-kafka-0-10
    4.2.0, its token provider, kafka-clients 3.9.2, commons-pool2) as ``make setup`` put them
    in ``jvm/lib/spark-kafka``; an empty list when they were not built (then only
    ``format("headrace")`` is available). Cheap, no JVM."""
    try:
        return [str(j) for j in jvm.jars("spark-kafka")]
    except jvm.JvmUnavailableError:
        return []


def realtime_jars() -> list[str]:
    """The real-time path's JVM rule operator (``jvm/lib/realtime``, built by ``make
    setup``); an empty list when it was not built. Cheap, no JVM."""
    try:
        return [str(j) for j in jvm.jars("realtime")]
    except jvm.JvmUnavailableError:
        return []


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """While open, file descriptor 2 (and so a JVM started meanwhile, and the Python
    workers it forks) writes to ``path``; this process's own stderr is restored after."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def class_archive() -> Path:
    """Where ``make setup`` keeps the Spark JVM's class-data archive (``headrace.spark.
    archive``); it may not exist."""
    return jvm.lib_dir() / "spark-classes.jsa"


def jvm_start_options() -> str:
    """Java options that make a Spark JVM start on about half the CPU time: the class-data
    archive (AppCDS: Spark's classes mapped from one file instead of read from jars,
    parsed and verified one by one), when ``make setup`` built it; "" otherwise. A JVM
    that cannot use the archive (another Java, other jars) starts without it, silently.
    Cheap, no JVM."""
    archive = class_archive()
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off,cds+dynamic=off"


def session_settings(master: str, shuffle_partitions: int = 2,
                     stop_timeout_s: float = 20) -> dict[str, str]:
    """The settings every headrace SparkSession on ``master`` gets (``local_session``'s,
    and those of applications that build their own session): no UI or console progress bar,
    ``shuffle_partitions``, queries given ``stop_timeout_s`` to stop, Python workers on
    this interpreter that import PySpark from its compiled files (``headrace.spark.daemon``)
    and are allowed 120 s for the JVM's handshake (Spark's 15 s default fails on a busy
    machine: "failed to connect back"), and on a ``local`` master the checkpoint file
    manager that starts no process (``LOCAL_CHECKPOINT_FILES``). Cheap, no JVM."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.streaming.stopTimeout": f"{round(stop_timeout_s)}s",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.python.authenticate.socketTimeout": "120s",
        "spark.python.daemon.module": daemon.MODULE,
    }
    if master.startswith("local"):
        settings["spark.sql.streaming.checkpointFileManagerClass"] = LOCAL_CHECKPOINT_FILES
    return settings


def local_session(app_name: str = "headrace", master: str = "local[2]",
                  shuffle_partitions: int = 2, kafka_connector: bool = True,
                  jvm_log: str | None = None, java_options: str = "") -> SparkSession:
    """Get or create a session on ``master`` with ``format("headrace")`` registered, the
    event-time toolkit's settings (RocksDB state store, UTC) and, on a ``local`` master, the
    checkpoint file manager that starts no process (``LOCAL_CHECKPOINT_FILES``). Python
    workers use this interpreter (PySpark's workers time out when it is not the venv's).
    Blocks ~7 s the first time (JVM start).

    With ``kafka_connector`` (the default) and the jars of ``kafka_connector_jars()``
    present, Spark's own ``format("kafka")`` is on the classpath too (``spark.jars``: the
    driver and every executor get them), and so is the real-time rule operator
    (``realtime_jars()``); without the jars the session silently has ``format("headrace")``
    only. Settings of a session that already exists are not changed. ``jvm_log``: a file
    that takes everything the JVM and its Python workers print (a demo's clean terminal).
    ``java_options`` go to the driver JVM, after ``jvm_start_options()`` (which are left
    out when they ask for an archive to be written) and ``jvm.extra_options()``.
    """
    from headrace.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python processes that import PySpark from its compiled files (headrace.spark.daemon;
    # Spark starts the data-source lookup with the driver's Python)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[name] = daemon.worker_python(os.environ[name])
    # One machine: bind to loopback (else Spark warns that the hostname resolves to it).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = Path(__file__).with_name("log4j2.properties")
    start = "" if "ArchiveClassesAtExit" in java_options else jvm_start_options()
    driver_options = " ".join(o for o in (f"-Dlog4j2.configurationFile={log_config}", start,
                                          *jvm.extra_options(), java_options) if o)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.extraJavaOptions", driver_options)
               .config("spark.driver.memory", "2g"))
    for key, value in session_settings(master, shuffle_partitions).items():
        builder = builder.config(key, value)
    connector = kafka_connector_jars() + realtime_jars() if kafka_connector else []
    if connector:
        builder = builder.config("spark.jars", ",".join(connector))
    with _stderr_to(jvm_log):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    configure_streaming(spark)
    return spark


def configure_streaming(spark: SparkSession) -> None:
    """Session settings stateful queries and the event-time toolkit need (it exports this
    as ``headrace.streaming.configure``): the RocksDB state store (transformWithState
    requires it) and UTC session time. Call before starting a query; idempotent."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def has_kafka_connector(spark: SparkSession) -> bool:
    """True when ``format("kafka")`` can be loaded in ``spark`` (its provider class is on
    the driver's classpath). Starts nothing; cheap."""
    jvm_view = spark.sparkContext._jvm
    if jvm_view is None:
        return False
    try:
        loader = jvm_view.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        loader.loadClass("org.apache.spark.sql.kafka010.KafkaSourceProvider")
    except Py4JError:  # Py4JJavaError wraps the JVM's ClassNotFoundException
        return False
    return True
