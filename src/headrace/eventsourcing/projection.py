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

**Quarantine.** ``read_event_log`` applies the store's rule of what is an event
(``validity.classify``, the same Python function the repository's loads and the
subscriptions use) in a stateful step per aggregate (``applyInPandasWithState``: the
aggregate's last version, one long per aggregate), so a record that is not an event (a
second "version 3" from another producer, a skipped version, a foreign record) never
reaches a read model and every read model agrees with the aggregates the repository
loads. Each micro-batch reports how many records it quarantined as the observed metric
``quarantined:<topic>`` (``StreamingQueryProgress.observedMetrics``, field ``records``);
``read_quarantine`` gives the quarantined records themselves, which ``write_projection``
keeps in the compacted topic ``<topic>.quarantine`` (key ``partition:offset``, value the
``Quarantined`` JSON: topic, partition, offset, aggregate id, version, expected version,
reason). A projection checkpoint from before this step does not restore: rebuild the
projection (``rebuild``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pandas as pd
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from headrace.eventsourcing.errors import StoreError
from headrace.eventsourcing.validity import Quarantined, classify
from headrace.spark.checkpoint import discard_unfinished_first_batch
from headrace.spark.sink import QUERY_ID_PROPERTY

# The stateful step's output: an event's columns, or for a quarantined record its
# coordinates and ``quarantine`` (the ``Quarantined`` JSON; null for an event).
CLASSIFIED_DDL = ("aggregate_id string, aggregate_type string, version long, "
                  "event_type string, schema_version int, command_id string, time long, "
                  "data string, partition int, offset long, quarantine string")
# Its state per record key: the aggregate's last version. ``layout`` versions this format.
STATE_DDL = "layout int, version long"
STATE_LAYOUT = 1
_COLUMNS = [c.split()[0] for c in CLASSIFIED_DDL.split(", ")]


def _classify_frame(topic: str, partitions: int, frame: pd.DataFrame, last: int
                    ) -> tuple[pd.DataFrame, int]:
    """Classify one key's records (``key``, ``value``, ``partition``, ``offset``) in
    offset order, from the aggregate's last version ``last``; returns the rows and the
    new last version."""
    rows: list[tuple[Any, ...]] = []
    frame = frame.sort_values(["partition", "offset"])

    def last_version(_aggregate_id: str) -> int:
        return last  # the key's records: one aggregate (a record naming another is foreign)

    for key, value, partition, offset in zip(frame["key"], frame["value"],
                                             frame["partition"], frame["offset"], strict=True):
        found = classify(topic, partitions, None if key is None else bytes(key),
                         None if value is None else bytes(value), int(partition), int(offset),
                         last_version)
        if isinstance(found, Quarantined):
            rows.append((found.aggregate_id, None, found.version, None, None, None, None, None,
                         found.partition, found.offset, found.to_json()))
            continue
        last = found.version
        rows.append((found.aggregate_id, found.aggregate_type, found.version, found.type,
                     found.schema, found.command_id, found.recorded_at,
                     json.dumps(found.data, separators=(",", ":")), found.partition,
                     found.offset, None))
    return pd.DataFrame.from_records(rows, columns=_COLUMNS), last


def _partition_count(bootstrap_servers: str, topic: str, options: dict[str, str]) -> int:
    config = {k[len("kafka."):]: v for k, v in options.items()
              if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
    admin = AdminClient({**config, "bootstrap.servers": bootstrap_servers, "log_level": 4})
    try:
        found = admin.list_topics(topic, timeout=30).topics.get(topic)
    except KafkaException as e:
        raise StoreError(f"cannot describe {topic}: {e.args[0].str()}") from e
    if found is None or found.error is not None or not found.partitions:
        raise StoreError(f"event topic {topic} does not exist (start its EventStore first)")
    return len(found.partitions)


def _classified(spark: SparkSession, bootstrap_servers: str, topic: str, streaming: bool,
                output_mode: str, options: dict[str, str]) -> DataFrame:
    partitions = _partition_count(bootstrap_servers, topic, options)
    reader = spark.readStream if streaming else spark.read
    fmt = (reader.format("headrace").option("kafka.bootstrap.servers", bootstrap_servers)
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .option("isolation.level", "read_committed"))
    for name, value in options.items():
        fmt = fmt.option(name, value)
    records = fmt.load().select("key", "value", "partition", "offset").groupBy("key")

    def stateful(_key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
                 ) -> Iterator[pd.DataFrame]:
        if state.exists and int(state.get[0]) != STATE_LAYOUT:
            raise StoreError(f"{topic}: projection state of layout {state.get[0]}, this code "
                             f"reads layout {STATE_LAYOUT}: rebuild the projection")
        last = int(state.get[1]) if state.exists else 0
        # One key's records of a micro-batch may come in several frames, in any order.
        out, last = _classify_frame(topic, partitions, pd.concat(list(frames)), last)
        state.update((STATE_LAYOUT, last))
        yield out

    def whole(frame: pd.DataFrame) -> pd.DataFrame:
        return _classify_frame(topic, partitions, frame, 0)[0]

    if streaming:
        return records.applyInPandasWithState(stateful, CLASSIFIED_DDL, STATE_DDL,
                                              output_mode, GroupStateTimeout.NoTimeout)
    return records.applyInPandas(whole, CLASSIFIED_DDL)


def read_event_log(spark: SparkSession, bootstrap_servers: str, topic: str, *,
                   streaming: bool = True, output_mode: str = "append",
                   **options: str) -> DataFrame:
    """The events of ``topic`` as rows: ``aggregate_id``, ``aggregate_type``, ``version``,
    ``event_type``, ``schema_version``, ``command_id``, ``recorded_at`` (timestamp),
    ``data`` (the payload's JSON text), ``partition``, ``offset``. From offset 0,
    committed events only; records that are not events are left out (quarantined, see the
    module docstring) and counted in the observed metric ``quarantined:<topic>``. The
    topic must exist (its partition count is part of the rule), and the rule needs every
    record from offset 0: do not pass a later ``startingOffsets``. Needs
    ``headrace.spark.register``.

    ``output_mode`` is the stateful step's (Spark's rule for ``applyInPandasWithState``):
    ``"append"`` for a projection that aggregates the events (``write_projection`` writes
    it in update mode), ``"update"`` for one that maps them without aggregating."""
    rows = _classified(spark, bootstrap_servers, topic, streaming, output_mode, options)
    if streaming:
        rows = rows.observe(f"quarantined:{topic}", F.count("quarantine").alias("records"))
    return rows.where(F.col("quarantine").isNull()).select(
        "aggregate_id", "aggregate_type", "version", "event_type", "schema_version",
        "command_id", F.timestamp_millis("time").alias("recorded_at"), "data", "partition",
        "offset")


def read_quarantine(spark: SparkSession, bootstrap_servers: str, topic: str, *,
                    streaming: bool = True, **options: str) -> DataFrame:
    """The records of ``topic`` that are not events, by the rule ``read_event_log``
    applies, as ``key`` (``partition:offset``) and ``value`` (the ``Quarantined`` JSON):
    ready for ``write_projection`` into ``<topic>.quarantine``."""
    rows = _classified(spark, bootstrap_servers, topic, streaming, "update", options)
    return rows.where(F.col("quarantine").isNotNull()).select(
        F.concat_ws(":", F.col("partition").cast("string"),
                    F.col("offset").cast("string")).alias("key"),
        F.col("quarantine").alias("value"))


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

    discard_unfinished_first_batch(checkpoint)
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
