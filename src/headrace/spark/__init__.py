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
(read_committed by default), ``kafkaConsumer.pollTimeoutMs``, ``kafka.*`` client settings.
Columns: key, value, topic, partition, offset, timestamp, timestampType[, headers].

Sink options: ``kafka.bootstrap.servers``, ``topic`` (or a topic column), ``delivery``
(``exactly-once`` by default, or ``at-least-once``), ``kafka.*``. Columns: value
(required), key, topic, partition, headers.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from headrace.spark.datasource import HeadraceDataSource
from headrace.spark.errors import DataLossError, OptionError, SinkError, SparkConnectorError
from headrace.spark.events import read_events

__all__ = ["DataLossError", "HeadraceDataSource", "OptionError", "SinkError",
           "SparkConnectorError", "read_events", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("headrace")`` available in ``spark``. Idempotent."""
    spark.dataSource.register(HeadraceDataSource)
