"""The fraud-detection pipeline on Spark Structured Streaming.

transactions --read_events (dead letters)--> latest_join(user-profiles) --> per-card detector
(transformWithStateInPandas: velocity in 5-minute hopping windows, impossible travel, amount
anomaly, card testing) --> alerts to ``fraud-alerts`` and late transactions to
``transactions-late``, both through the exactly-once sink in one query.

Observed per micro-batch (``StreamingQueryProgress.observedMetrics``): ``parsed``
(transactions read and parsed) and ``out`` (alerts, late). Dead letters are counted by
the dead-letter topic's offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from headrace.pipelines.fraud import detector
from headrace.pipelines.fraud.detector import OUTPUT_DDL, FraudDetector
from headrace.pipelines.fraud.rules import Thresholds
from headrace.savepoints import IncompatibleStateError, Savepoint
from headrace.spark import read_events
from headrace.spark.checkpoint import discard_unfinished_first_batch
from headrace.streaming import with_spark_watermark
from headrace.streaming.joins import latest_join
from headrace.streaming.timeutil import duration_ms
from headrace.streaming.windows import BUCKET, DEFAULT_BUCKETS

TXN_SCHEMA = ("txn_id string not null, card_id string not null, user_id string not null, "
              "merchant_id string not null, amount double not null, currency string, "
              "lat double not null, lon double not null, city string not null, "
              "country string, category string, event_time long not null")
PROFILE_SCHEMA = ("user_id string not null, home_city string, home_lat double, "
                  "home_lon double, avg_amount double, std_amount double, "
                  "card_ids array<string>, updated_at long not null")


@dataclass(frozen=True)
class PipelineTopics:
    transactions: str = "transactions"
    profiles: str = "user-profiles"
    alerts: str = "fraud-alerts"
    late: str = "transactions-late"
    dead_letters: str = "transactions-dlq"


@dataclass(frozen=True)
class PipelineConfig:
    bootstrap_servers: str
    checkpoint: str
    topics: PipelineTopics = field(default_factory=PipelineTopics)
    watermark: str = "10 seconds"
    allowed_lateness: str = "30 seconds"
    trigger_ms: int = 0
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    schema_registry_url: str = ""
    """Set: transactions are in the registry's wire format (``avro.py``), else JSON."""
    profiles_envelope: str = ""
    """``debezium``: profiles are change events of a PostgreSQL table (``headrace cdc``)."""
    from_savepoint: str = ""
    """Set: start from this savepoint (``headrace.savepoints``) with a fresh ``checkpoint``:
    the detector's cards and the profile join's rows as the savepoint holds them, the
    topics read from its offsets. Thresholds, the allowed lateness and the watermark may
    differ from the savepoint's pipeline."""


def detections(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """The stream of detector output rows (``kind`` alert or late), before the sink.
    Raises ``IncompatibleStateError`` when ``cfg.from_savepoint`` cannot carry over."""
    sp = Savepoint(cfg.from_savepoint) if cfg.from_savepoint else None
    options: dict[str, str] = {"kafka_bootstrap_servers": cfg.bootstrap_servers,
                               "startingOffsets": "earliest"}
    txn_options = dict(options)
    if cfg.max_offsets_per_trigger:
        txn_options["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    txns = read_events(spark, cfg.topics.transactions, TXN_SCHEMA, event_time="event_time",
                       dead_letter_topic=cfg.topics.dead_letters, options=txn_options,
                       schema_registry_url=cfg.schema_registry_url, from_savepoint=sp)
    txns = txns.observe("parsed", F.count(F.lit(1)).alias("transactions"))
    profiles = read_events(spark, cfg.topics.profiles, PROFILE_SCHEMA, event_time="updated_at",
                           dead_letter_topic=cfg.topics.dead_letters, options=options,
                           envelope=cfg.profiles_envelope, from_savepoint=sp)
    enriched = latest_join(
        txns.select("user_id", "txn_id", "card_id", "amount", "lat", "lon", "city",
                    "event_time"),
        profiles.select("user_id", "avg_amount", "std_amount"), on=["user_id"],
        from_savepoint=sp)
    flat = enriched.select("left.*", F.col("right.avg_amount").alias("avg_amount"),
                           F.col("right.std_amount").alias("std_amount"))
    out = detect(flat, cfg.thresholds, cfg.watermark, cfg.allowed_lateness, sp)
    return out.observe("out", F.count(F.when(F.col("kind") == "alert", 1)).alias("alerts"),
                       F.count(F.when(F.col("kind") == "late", 1)).alias("late"))


def detect(txns: DataFrame, thresholds: Thresholds, watermark: str,
           allowed_lateness: str, from_savepoint: Savepoint | str | Path | None = None
           ) -> DataFrame:
    """The per-card detector over enriched transactions (``card_id``, ``txn_id``,
    ``user_id``, ``amount``, ``lat``, ``lon``, ``city``, ``event_time``, ``avg_amount``,
    ``std_amount``; more columns ride along into late rows' ``event``): rows of
    ``OUTPUT_DDL``, ``kind`` alert or late. ``from_savepoint``: start from a savepoint's
    cards (the thresholds and the lateness may change)."""
    lateness = duration_ms(allowed_lateness)
    params: dict[str, Any] = {"key": "card_id", "buckets": DEFAULT_BUCKETS,
                              "allowed_lateness_ms": lateness}
    initial, resume = None, None
    if from_savepoint is not None:
        initial, resume = Savepoint.of(from_savepoint).resume(
            txns.sparkSession, operator=detector.OPERATOR, family=(detector.OPERATOR,),
            version=detector.STATE_VERSION, params=params, fixed=_FIXED, key_column=BUCKET)
    marked = with_spark_watermark(txns, "event_time", watermark, resume)
    bucket = F.pmod(F.xxhash64("card_id"), F.lit(DEFAULT_BUCKETS)).alias(BUCKET)
    return marked.select("*", bucket).groupBy(BUCKET).transformWithStateInPandas(
        FraudDetector(thresholds, lateness, params, resume), OUTPUT_DDL, "Append",
        "EventTime", initialState=initial)


_FIXED = {"key": "the detector's state is kept per card",
          "buckets": "cards are hashed into that many buckets"}


def to_sink_rows(out: DataFrame, topics: PipelineTopics) -> DataFrame:
    """Alerts (JSON, keyed by card) to the alerts topic; late transactions, as they came
    with how late, to the late topic."""
    alert = F.to_json(F.struct(
        "txn_id", "card_id", "user_id",
        (F.col("event_time").cast("double") * 1000).cast("long").alias("event_time"),
        "amount", "city", "reasons", "score"))
    late = F.to_json(F.struct(F.col("lateness_ms"), F.col("event")))
    is_alert = F.col("kind") == "alert"
    return out.select(
        F.when(is_alert, F.lit(topics.alerts)).otherwise(F.lit(topics.late)).alias("topic"),
        F.col("card_id").alias("key"),
        F.when(is_alert, alert).otherwise(late).alias("value"))


def start(spark: SparkSession, cfg: PipelineConfig, query_name: str = "fraud") -> StreamingQuery:
    """Start the pipeline; returns the running query. Needs ``headrace.spark.register`` and
    ``headrace.streaming.configure`` on ``spark``. With ``cfg.from_savepoint``, refuses
    (``IncompatibleStateError``) a checkpoint that is not fresh, and a savepoint whose
    query wrote output after it (``Savepoint.verify_sink``): either would break
    exactly-once across the switch."""
    if cfg.from_savepoint:
        if any(Path(cfg.checkpoint, "commits").glob("[0-9]*")):
            raise IncompatibleStateError(
                f"checkpoint {cfg.checkpoint} has committed batches: a query starts from a "
                "savepoint with a fresh checkpoint")
        Savepoint(cfg.from_savepoint).verify_sink(cfg.bootstrap_servers)
    discard_unfinished_first_batch(cfg.checkpoint)
    writer = (to_sink_rows(detections(spark, cfg), cfg.topics).writeStream
              .format("headrace").queryName(query_name)
              .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("checkpointLocation", cfg.checkpoint))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
    return writer.start()
