"""CQRS read models as Spark Structured Streaming queries over the event log.

A projection is an ordinary streaming query: ``read_event_log`` gives the events as rows
(``format("headrace")``, ``read_committed``, from offset 0), the projection aggregates them
and ``write_projection`` writes each changed row to a compacted topic through headrace's
exactly-once sink, keyed by the read model's key. The topic is the read model: the latest
record per key is the current row (``latest_by_key`` reads it; Spark can too).

**Rebuild.** A projection's state is derived only from the log, so a new checkpoint and
``rebuild=True`` (``trigger(availableNow=True)``) recomputes it from offset 0 into a fresh
topic; starting it again without ``rebuild`` keeps it live. Nothing else is needed to
change a projection's logic: rebuild into a new topic, switch readers, drop the old one.

Payloads are the stored JSON (``data``), at the schema version each event was written
with (``schema_version``): a projection that reads a field whose shape changed handles the
versions itself (upcasters run in Python, not here).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from headrace.eventsourcing.errors import StoreError
from headrace.spark.sink import QUERY_ID_PROPERTY

ENVELOPE_DDL = ("id STRING, aggregate STRING, version BIGINT, type STRING, schema INT, "
                "command STRING, time BIGINT, data STRING")


def read_event_log(spark: SparkSession, bootstrap_servers: str, topic: str, *,
                   streaming: bool = True, **options: str) -> DataFrame:
    """The events of ``topic`` as rows: ``aggregate_id``, ``aggregate_type``, ``version``,
    ``event_type``, ``schema_version``, ``command_id``, ``recorded_at`` (timestamp),
    ``data`` (the payload's JSON text), ``partition``, ``offset``. From offset 0,
    committed events only. Needs ``headrace.spark.register(spark)``."""
    reader = spark.readStream if streaming else spark.read
    fmt = (reader.format("headrace").option("kafka.bootstrap.servers", bootstrap_servers)
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .option("isolation.level", "read_committed"))
    for name, value in options.items():
        fmt = fmt.option(name, value)
    env = F.from_json(F.col("value").cast("string"), ENVELOPE_DDL).alias("e")
    return fmt.load().select(env, "partition", "offset").select(
        F.col("e.id").alias("aggregate_id"), F.col("e.aggregate").alias("aggregate_type"),
        F.col("e.version").alias("version"), F.col("e.type").alias("event_type"),
        F.col("e.schema").alias("schema_version"), F.col("e.command").alias("command_id"),
        F.timestamp_millis(F.col("e.time")).alias("recorded_at"), F.col("e.data").alias("data"),
        "partition", "offset")


def ensure_compacted(bootstrap_servers: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with ``cleanup.policy=compact`` unless it exists."""
    # log_level 4: no info line about the admin handle's queue when it is dropped
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 4})
    future = admin.create_topics([NewTopic(topic, partitions, -1,
                                           config={"cleanup.policy": "compact"})])[topic]
    try:
        future.result(30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise StoreError(f"cannot create projection topic {topic}: "
                             f"{e.args[0].str()}") from e


def write_projection(rows: DataFrame, bootstrap_servers: str, topic: str, checkpoint: str, *,
                     rebuild: bool = False, query_name: str | None = None,
                     trigger_ms: int = 500) -> StreamingQuery:
    """Start writing ``rows`` (columns ``key`` and ``value``, strings) to the compacted
    ``topic`` in update mode: each micro-batch writes the rows whose aggregate changed.
    ``rebuild``: process what the log holds now and stop.

    Exactly once: each micro-batch is a batch write of headrace's sink keyed by the query's
    id (kept in the checkpoint) and the batch id, so a batch Spark replays after a crash is
    skipped if it committed. (Spark's Python data sources accept append mode only in
    ``writeStream``, hence ``foreachBatch``.)"""
    ensure_compacted(bootstrap_servers, topic)

    def write(batch: DataFrame, batch_id: int) -> None:
        query_id = batch.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise StoreError("foreachBatch ran without a streaming query id")
        (batch.write.format("headrace").mode("append")
         .option("kafka.bootstrap.servers", bootstrap_servers).option("topic", topic)
         .option("writeId", query_id).option("writeSequence", str(batch_id)).save())

    writer = (rows.writeStream.outputMode("update").foreachBatch(write)
              .option("checkpointLocation", checkpoint))
    if query_name:
        writer = writer.queryName(query_name)
    if rebuild:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


def latest_by_key(bootstrap_servers: str, topic: str, timeout: float = 30.0) -> dict[str, Any]:
    """The read model in ``topic``: the latest JSON value per key (committed records only;
    a tombstone removes its key). Blocks until the end of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": f"headrace-projection-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        rows: dict[str, Any] = {}
        ended: set[int] = set()
        while len(ended) < len(partitions):
            m = consumer.poll(timeout)
            if m is None:
                raise StoreError(f"reading {topic}: no answer within {timeout:g} s")
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise StoreError(f"reading {topic}: {err.str()}")
                ended.add(m.partition() or 0)
                continue
            key = (m.key() or b"").decode()
            value = m.value()
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = json.loads(value)
        return rows
    finally:
        consumer.close()
