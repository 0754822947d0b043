"""headrace on Spark: ``format("headrace")`` reads and writes Kafka-protocol topics.

``register(spark)`` once per session, then, as with Spark's own Kafka connector::

    df = (spark.readStream.format("headrace")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "payments").load())
    df.writeStream.format("headrace").option("kafka.bootstrap.servers", "localhost:9092") \\
        .option("topic", "out").option("checkpointLocation", "/tmp/cp").start()

Source options: ``kafka.bootstrap.servers``; one of ``subscribe``, ``subscribePattern``,
``assign``; ``startingOffsets`` (earliest | latest | JSON), ``startingTimestamp``,
``startingOffsetsByTimestamp`` (+ ``startingOffsetsByTimestampStrategy``),
``endingOffsets`` / ``endingTimestamp`` (batch), ``maxOffsetsPerTrigger``,
``minPartitions``, ``failOnDataLoss``, ``includeHeaders``, ``isolation.level``
(read_committed by default), ``kafkaConsumer.pollTimeoutMs``, ``kafka.*`` client settings,
``headrace.reader`` (``fetch``, the default over PLAINTEXT: raw Fetch requests decoded into
Arrow columns by a compiled scan; ``librdkafka``: a librdkafka consumer per task, the path
for TLS/SASL), ``headrace.remote.storage.*`` (batch reads of a topic with tiered storage:
the brokers' store settings, ``kind`` filesystem + ``path`` or s3 + ``s3.endpoint``,
``s3.bucket``, ``s3.access.key``, ``s3.secret.key``, ``s3.region``, ``s3.timeout.ms``; the
tiered part is read straight from the store, see ``headrace.spark.cold``). Columns: key, value, topic, partition, offset, timestamp,
timestampType[, headers]. A schema declared on the reader naming some of them, in any order
(``spark.read.format("headrace").schema("value binary")``), reads only those: the others
are neither decoded nor sent to the JVM (the Python Data Source API cannot prune columns by
itself). Spark's connector refuses a declared schema.

Sink options: ``kafka.bootstrap.servers``, ``topic`` (or a topic column), ``delivery``
(``exactly-once`` by default, or ``at-least-once``), ``kafka.*``. Columns: value
(required), key, topic, partition, headers.

Which connector: ours or Spark's ``format("kafka")``
----------------------------------------------------

``headrace.spark.session.local_session`` also puts Spark's own Kafka connector on the
classpath (spark-sql-kafka-0-10 4.2.0 with kafka-clients 3.9.2, from ``jvm/lib/spark-kafka``
after ``make setup``; on a cluster pass the same jars with ``spark.jars`` or
``--packages``). Both connectors speak only the Kafka protocol, so both work against
headrace and against a Kafka cluster, with the same options and columns:

- ``format("headrace")`` for what Spark's connector lacks: the **exactly-once sink** (Spark's
  Kafka sink is at-least-once: a retried task or replayed micro-batch writes again),
  ``read_events`` with **dead letters**, and the ``headrace.streaming`` event-time toolkit
  built on it. It also reads read_committed by default, where Spark reads read_uncommitted.
- ``format("kafka")`` where a pipeline already uses it, and for Spark's Real-Time Mode,
  which admits only JVM sources and sinks (tested: 4.2.0 on
  PySpark 4.3.0, against headrace and Kafka). A pipeline can mix them
  (read with ``format("kafka")``, write exactly-once with ``format("headrace")``).

Differences to know when moving code between them: Spark's connector returns ``null``
(not ``[]``) as ``headers`` of a record without headers, splits ``maxOffsetsPerTrigger``
over partitions rounding down (70 over three equally lagging partitions reads 69; ours
hands out the remainder and reads 70), and takes the isolation level only as
``kafka.isolation.level`` (ours takes that or ``isolation.level``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from headrace.spark.errors import DataLossError, OptionError, SinkError, SparkConnectorError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from headrace.spark.datasource import HeadraceDataSource
    from headrace.spark.events import read_events

__all__ = ["DataLossError", "HeadraceDataSource", "OptionError", "SinkError",
           "SparkConnectorError", "read_events", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("headrace")`` available in ``spark``. Idempotent."""
    from headrace.spark.datasource import HeadraceDataSource

    spark.dataSource.register(HeadraceDataSource)


def __getattr__(name: str) -> Any:
    # Imported on first use, not with the package: every Python worker of a query imports
    # this package (and the PySpark daemon, headrace.spark.daemon, runs from it), and each
    # should import only the modules its own work needs.
    if name == "HeadraceDataSource":
        from headrace.spark.datasource import HeadraceDataSource

        return HeadraceDataSource
    if name == "read_events":
        from headrace.spark.events import read_events

        return read_events
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
