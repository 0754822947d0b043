"""The fraud pipeline's real-time path: Spark Real-Time Mode, no Python on the record path.

The fraud rules are written in Python with ``headrace.realtime``'s rule API (``fraud_rules``,
the same thresholds as the micro-batch detector's ``rules.CardState``) and compiled to Spark
SQL (JSON parsing, predicates) plus the JVM rule operator (per-card state). One Kafka source
(Spark's connector) reads ``transactions`` and the compacted ``user-profiles``; each profile
is exploded to one row per card and kept in that card's state, so profile updates apply live.
Alerts go to ``fraud-alerts`` through Spark's Kafka sink, each as soon as its transaction is
handled (``trigger(realTime=...)``: the interval is the checkpoint period, not a latency).

Delivery: **exactly once** for read_committed consumers (``exactly_once``, the default): the
alerts go through the JVM sink ``io.headrace.realtime.ExactlyOnceKafkaWriter``, which writes
them in short Kafka transactions (committed within ``commit_interval_ms``, so an alert is
readable within tens of milliseconds, not at the checkpoint interval) with a transactional
id per (query id, task partition). After a crash the query replays from its last checkpoint;
the sink then reads what it already committed since that epoch began (the output topic's end
offsets it recorded under ``<checkpoint>/exactly-once-sink`` when the epoch started) and
skips those alerts (by transaction id) instead of writing them again. Consumers that read
uncommitted see aborted attempts too. ``exactly_once=False`` is Spark's own Kafka sink:
at-least-once (alerts since the last checkpoint may come twice after a crash, identical).

Dead letters: with the exactly-once sink, a transaction record that does not parse (bad
JSON or Avro, a required field missing or of the wrong type) goes to the dead-letter topic
with its key and bytes, the error (``headrace.error``) and its coordinates
(``headrace.source.topic/partition/offset/timestamp``), the shape of the micro-batch path's
dead letters, in the same query and exactly once (its id is its coordinates). Late data: no
watermark and no side output here (a late transaction is evaluated against the card's state
like any other); an alert on a transaction that arrived more than ``late_after_ms`` after its
event time says ``"late": true``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from headrace.pipelines.fraud.avro import TRANSACTION_SCHEMA, header
from headrace.pipelines.fraud.pipeline import PROFILE_SCHEMA, TXN_SCHEMA, PipelineTopics
from headrace.pipelines.fraud.rules import WEIGHTS, Thresholds
from headrace.pipelines.fraud.truth import LATE_THRESHOLD_MS
from headrace.realtime import (
    AboveProfile,
    Burst,
    Profile,
    RealtimeError,
    RuleSet,
    Travel,
    WindowCount,
    apply_rules,
)
from headrace.savepoints import IncompatibleStateError, Savepoint
from headrace.savepoints.replay import SINK_DIR, seed
from headrace.spark.checkpoint import discard_unfinished_first_batch
from headrace.streaming.errors import SpecError
from headrace.streaming.timeutil import duration_ms

REQUIRED = ("txn_id", "card_id", "user_id", "amount", "event_time", "merchant_id", "lat", "lon",
            "city")
"""A transaction missing any of these is malformed (the micro-batch path dead-letters it)."""


@dataclass(frozen=True)
class RealtimeConfig:
    bootstrap_servers: str
    checkpoint: str
    topics: PipelineTopics = field(default_factory=PipelineTopics)
    thresholds: Thresholds = field(default_factory=Thresholds)
    checkpoint_interval: str = "5 minutes"
    """Real-Time Mode's batch length: how often state and offsets are checkpointed (>= 5 s;
    ``"5 minutes"``, ``"30 s"``; Spark's own default is 5 minutes). Each boundary stalls the
    stream while one batch's tasks finish and the next one's start (about 0.7 s on a quiet
    machine; the first, where Spark snapshots all the state, seconds), and the alerts of
    that stretch come late (BENCHMARKS.md), so longer is smoother; shorter replays less
    after a crash (the exactly-once sink skips what it already wrote)."""
    starting_offsets: str = "earliest"
    profiles_envelope: str = ""
    """``debezium``: profiles are change events of a PostgreSQL table (``headrace cdc``):
    their ``after`` state is the profile; deletes are ignored."""
    transaction_schema_id: int | None = None
    """Set: transactions are Avro in a registry's wire format with this schema id
    (``avro.py``), decoded by Spark's ``from_avro``; records of other ids are dropped."""
    preload_profiles: bool = False
    """Load the profile topic as it stands into state before the first transaction
    (initial state; ``current_profiles``). Correct by construction but slow to start (about
    14 s for 100k cards on 2 cores, during which transactions wait); without it profiles
    arrive through the stream like any record, and a caller waits until they are in
    (``headrace.realtime.local_counters``)."""
    exactly_once: bool = True
    """Alerts through the transactional sink (exactly once for read_committed readers);
    False: Spark's Kafka sink (at-least-once, no transactions)."""
    late_after_ms: int = LATE_THRESHOLD_MS
    """An alert's ``late`` flag: its transaction reached the broker this long after its event
    time (the ground truth's definition of late)."""
    commit_interval_ms: int = 25
    """The exactly-once sink's longest transaction: the most an alert waits, once handled,
    before read_committed consumers can read it (plus one commit round trip). A transaction
    is committed sooner once no alert came for a quarter of it (a lone alert: about two
    quarters)."""
    from_savepoint: str | None = None
    """A savepoint (``headrace savepoint create`` of a stopped real-time query's checkpoint)
    to start from, with a fresh ``checkpoint``: the cards' state as initial state
    (``apply_rules(from_savepoint=)``; the thresholds may differ) and both topics from the
    savepoint's offsets (``starting_offsets`` is ignored)."""


def fraud_rules(th: Thresholds, profiles_topic: str = "user-profiles",
                dead_letters: bool = False) -> RuleSet:
    """The detector's four rules in the rule API (the same thresholds, cool-down and
    horizon as ``rules.CardState``, which the micro-batch path runs). With
    ``dead_letters``, rows with a ``dl_error`` (``input_rows``) pass through the operator
    with their ``DEAD_COLUMNS``."""
    return RuleSet(
        rules=(
            WindowCount("velocity", window=th.velocity_window_ms, hop=th.velocity_hop_ms,
                        at_least=th.velocity_count, weight=WEIGHTS["velocity"]),
            Travel("impossible_travel", above_kmh=th.travel_kmh,
                   weight=WEIGHTS["impossible_travel"]),
            AboveProfile("amount_anomaly", value="amount", sigmas=th.amount_sigmas,
                         factor=th.amount_factor, weight=WEIGHTS["amount_anomaly"]),
            Burst("card_testing", window=th.tiny_window_ms, at_least=th.tiny_count,
                  where=F.col("amount") < F.lit(th.tiny_amount),
                  weight=WEIGHTS["card_testing"]),
        ),
        key="card_id", id="txn_id", event_time="event_time",
        cooldown=th.quiet_ms, keep=th.keep_ms,
        carry=("user_id", "amount", "city", "ingest_ms",
               *(DEAD_COLUMNS if dead_letters else ())),
        profile=Profile(when=F.col("topic") == F.lit(profiles_topic), time="updated_at",
                        fields=("avg_amount", "std_amount")),
        passthrough=F.col("dl_error").isNotNull() if dead_letters else None,
    )


def _profile(value: Column, envelope: str) -> Column:
    """A profile struct from a record value: plain JSON, or a change event's ``after``."""
    if envelope == "debezium":
        return F.from_json(value, f"after struct<{PROFILE_SCHEMA}>")["after"]
    return F.from_json(value, PROFILE_SCHEMA)


def _transaction(value: Column, transaction_schema_id: int | None) -> Column:
    """The transaction struct of a record value (null fields where it does not parse)."""
    txn = F.from_json(value.cast("string"), TXN_SCHEMA)
    if transaction_schema_id is not None:
        from pyspark.sql.avro.functions import from_avro

        framed = F.substring(value, 1, 5) == F.lit(header(transaction_schema_id))
        txn = F.when(framed, from_avro(F.expr("substring(value, 6)"), TRANSACTION_SCHEMA,
                                       {"mode": "PERMISSIVE"}))
    return txn


DEAD_COLUMNS = ("dl_error", "dl_key", "dl_value", "dl_topic", "dl_partition", "dl_offset",
                "dl_timestamp")
"""What a dead letter carries through the rule operator (null on every other row)."""


def _dead_letter_columns(txn: Column, is_txn: Column) -> tuple[Column, list[Column]]:
    """(is a dead letter, the ``DEAD_COLUMNS``) of a transaction record that does not parse
    (bad JSON or Avro, a required field missing or of the wrong type)."""
    missing = F.filter(F.array(*[F.when(txn[n].isNull(), F.lit(n)) for n in REQUIRED]),
                       lambda c: c.isNotNull())
    dead = is_txn & (F.col("value").isNull() | txn.isNull() | (F.size(missing) > 0))
    error = (F.when(F.col("value").isNull(), F.lit("the record has no value"))
             .when(txn.isNull() | (F.size(missing) == len(REQUIRED)),
                   F.lit("not a transaction: the value does not parse"))
             .otherwise(F.concat(F.lit("required fields missing or of the wrong type: "),
                                 F.array_join(missing, ", "))))
    return dead, [
        F.when(dead, error).alias("dl_error"),
        F.when(dead, F.col("key")).alias("dl_key"),
        F.when(dead, F.col("value")).alias("dl_value"),
        F.when(dead, F.col("topic")).alias("dl_topic"),
        F.when(dead, F.col("partition")).alias("dl_partition"),
        F.when(dead, F.col("offset")).alias("dl_offset"),
        F.when(dead, F.unix_millis(F.col("timestamp"))).alias("dl_timestamp")]


def input_rows(raw: DataFrame, topics: PipelineTopics,
               transaction_schema_id: int | None = None, profiles_envelope: str = ""
               ) -> DataFrame:
    """Kafka records (Spark's connector columns) of both topics -> one row per transaction
    and one per (profile, card), the shape ``fraud_rules`` reads. Spark SQL only (with
    ``transaction_schema_id``, Spark's ``from_avro`` in the JVM).

    Each record is decoded once, by its topic's decoder only: the decoded structs are
    columns of a projection of their own that the rest reads. Written as one expression,
    the plan repeated ``from_json`` in every reference (the explode's branches, each
    field, the dead-letter checks), which Spark evaluates without common-subexpression
    elimination there, and it decoded every record with both topics' schemas: about twenty
    JSON parses per transaction, most of the real-time path's CPU."""
    is_txn = F.col("topic") == F.lit(topics.transactions)
    is_profile = F.col("topic") == F.lit(topics.profiles)
    decoded = raw.select(
        "topic", "key", "value", "partition", "offset", "timestamp",
        F.when(is_txn, _transaction(F.col("value"), transaction_schema_id)).alias(_TXN),
        F.when(is_profile, _profile(F.col("value").cast("string"), profiles_envelope))
        .alias(_PROF))
    txn, prof = F.col(_TXN), F.col(_PROF)
    complete = F.lit(True)
    for name in REQUIRED:
        complete = complete & txn[name].isNotNull()
    dead, dead_columns = _dead_letter_columns(txn, is_txn)
    coordinates = F.concat_ws(":", F.lit("dead"), F.col("topic"),
                              F.col("partition").cast("string"), F.col("offset").cast("string"))
    # a dead letter is keyed (and so spread over the shuffle partitions) by its coordinates
    cards = (F.when(is_profile, prof["card_ids"]).when(dead, F.array(coordinates))
             .when(complete, F.array(txn["card_id"])))
    return decoded.select(
        F.col("topic"),
        F.explode(cards).alias("card_id"),
        F.when(dead, coordinates).otherwise(txn["txn_id"]).alias("txn_id"),
        txn["user_id"].alias("user_id"),
        txn["amount"].alias("amount"), txn["lat"].alias("lat"), txn["lon"].alias("lon"),
        txn["city"].alias("city"), txn["event_time"].alias("event_time"),
        prof["avg_amount"].alias("avg_amount"), prof["std_amount"].alias("std_amount"),
        prof["updated_at"].alias("updated_at"),
        F.unix_millis(F.col("timestamp")).alias("ingest_ms"), *dead_columns)


_TXN, _PROF = "__txn", "__profile"
"""``input_rows``' decoded records: the transaction struct (null on other topics, and
null fields where it does not parse), the profile struct (null on other topics)."""


def current_profiles(spark: SparkSession, cfg: RealtimeConfig) -> DataFrame:
    """The profile topic as it stands (a batch read, evaluated when the query starts): each
    user's latest profile, one row per card."""
    raw = (spark.read.format("kafka")
           .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
           .option("subscribe", cfg.topics.profiles)
           .option("startingOffsets", "earliest").option("endingOffsets", "latest")
           .load())
    prof = raw.select(_profile(F.col("value").cast("string"), cfg.profiles_envelope).alias("p"))
    latest = (prof.where(F.col("p.user_id").isNotNull() & F.col("p.updated_at").isNotNull())
              .groupBy(F.col("p.user_id"))
              .agg(F.max_by(F.col("p"), F.col("p.updated_at")).alias("p")))
    return (latest.select(F.explode(F.col("p.card_ids")).alias("card_id"),
                          F.col("p.updated_at").alias("updated_at"),
                          F.col("p.avg_amount").alias("avg_amount"),
                          F.col("p.std_amount").alias("std_amount"))
            .dropDuplicates(["card_id"]))


def alerts(spark: SparkSession, cfg: RealtimeConfig) -> DataFrame:
    """The stream of alerts (columns as the micro-batch path's alert JSON, plus
    ``ingest_ms``: the transaction record's Kafka timestamp, and ``late``). With
    ``preload_profiles`` and a fresh checkpoint the profile topic as it stands is loaded
    first (``current_profiles``, as initial state); profile records flow through the stream
    either way."""
    return alert_columns(operator_output(spark, cfg), cfg)


def operator_output(spark: SparkSession, cfg: RealtimeConfig) -> DataFrame:
    """The rule operator's output over both topics: alerts and pass-through dead letters."""
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
           .option("subscribe", f"{cfg.topics.transactions},{cfg.topics.profiles}")
           .option("startingOffsets", _starting_offsets(cfg))
           .load())
    return apply_rules(input_rows(raw, cfg.topics, cfg.transaction_schema_id,
                                  cfg.profiles_envelope),
                       fraud_rules(cfg.thresholds, cfg.topics.profiles, dead_letters=True),
                       initial_profiles=current_profiles(spark, cfg) if cfg.preload_profiles
                       else None, from_savepoint=cfg.from_savepoint)


def _starting_offsets(cfg: RealtimeConfig) -> str:
    """``startingOffsets``: the config's, or where the savepoint's query would have read
    next in both topics (``IncompatibleStateError`` for a topic it never read)."""
    if cfg.from_savepoint is None:
        return cfg.starting_offsets
    sp = Savepoint(cfg.from_savepoint)
    merged: dict[str, Any] = {}
    for topic in (cfg.topics.transactions, cfg.topics.profiles):
        merged.update(json.loads(sp.starting_offsets(topic)))
    return json.dumps(merged)


def _alert_fields(cfg: RealtimeConfig) -> list[Column]:
    late = (F.col("ingest_ms") - F.col("event_time_ms")) > F.lit(cfg.late_after_ms)
    return [F.col("id").alias("txn_id"), F.col("key").alias("card_id"), F.col("user_id"),
            F.col("event_time_ms").alias("event_time"), F.col("amount"), F.col("city"),
            F.col("reasons"), F.col("score"), F.col("ingest_ms"), late.alias("late")]


def alert_columns(out: DataFrame, cfg: RealtimeConfig) -> DataFrame:
    """The alerts of the operator's output (``operator_output``), as ``alerts`` has them."""
    return out.where(F.col("dl_error").isNull()).select(*_alert_fields(cfg))


def exactly_once_rows(out: DataFrame, cfg: RealtimeConfig) -> DataFrame:
    """The operator's output as the exactly-once sink's rows (``topic``, ``key``, ``value``,
    ``id``, ``headers``): alerts (JSON, keyed by card, id = transaction id) to the alert
    topic; dead letters to the dead-letter topic with the record's key and bytes, headers
    ``headrace.error`` and ``headrace.source.topic/partition/offset/timestamp`` (as the
    micro-batch path's dead letters), id = ``dead:<topic>:<partition>:<offset>``."""
    dead = F.col("dl_error").isNotNull()
    headers = F.create_map(
        F.lit("headrace.error"), F.col("dl_error"),
        F.lit("headrace.source.topic"), F.col("dl_topic"),
        F.lit("headrace.source.partition"), F.col("dl_partition").cast("string"),
        F.lit("headrace.source.offset"), F.col("dl_offset").cast("string"),
        F.lit("headrace.source.timestamp"), F.col("dl_timestamp").cast("string"))
    alert = F.to_json(F.struct(*_alert_fields(cfg))).cast("binary")
    return out.select(
        F.when(dead, F.lit(cfg.topics.dead_letters)).otherwise(F.lit(cfg.topics.alerts))
        .alias("topic"),
        F.when(dead, F.col("dl_key")).otherwise(F.col("key").cast("binary")).alias("key"),
        F.when(dead, F.col("dl_value")).otherwise(alert).alias("value"),
        F.col("id"), F.when(dead, headers).alias("headers"))


def sink_rows(out: DataFrame) -> DataFrame:
    """Alerts as Kafka records: key = card id, value = the alert as JSON, id = the
    transaction id (what the exactly-once sink recognises a replayed alert by)."""
    return out.select(F.col("card_id").alias("key"),
                      F.to_json(F.struct(*out.columns)).alias("value"),
                      F.col("txn_id").alias("id"))


MIN_CHECKPOINT_INTERVAL_MS = 5_000
"""Real-Time Mode's shortest batch (``spark.sql.streaming.realTimeMode.minBatchDuration``)."""


def checkpoint_interval_ms(text: str) -> int:
    """A checkpoint interval (``"5 minutes"``, ``"30 s"``) in milliseconds; ``RealtimeError``
    for one that does not parse or is shorter than Real-Time Mode's 5 s minimum."""
    try:
        ms = duration_ms(text)
    except SpecError as e:
        raise RealtimeError(f"checkpoint interval: {e}") from e
    if ms < MIN_CHECKPOINT_INTERVAL_MS:
        raise RealtimeError(f"checkpoint interval {text!r} is shorter than Real-Time Mode's "
                            "shortest batch, 5 seconds")
    return ms


SINK_STATE = SINK_DIR
"""Where, under the checkpoint, the exactly-once sink records each epoch's start offsets."""


def start(spark: SparkSession, cfg: RealtimeConfig, query_name: str = "fraud-realtime"
          ) -> StreamingQuery:
    """Start the real-time query (``outputMode("update")``, ``trigger(realTime=...)``).
    The session needs ``format("kafka")`` and the rule operator (``local_session`` adds both
    when ``make setup`` built them) and a task slot per source partition plus one per shuffle
    partition (e.g. ``local[8]`` for 4 + 1 topic partitions and 2 shuffle partitions).
    Raises ``RealtimeError`` when ``exactly_once`` and the sink's jar is not in the session
    or for a bad ``checkpoint_interval`` (``checkpoint_interval_ms``);
    with ``from_savepoint``, ``IncompatibleStateError`` for a checkpoint that is not fresh
    (Spark would take its state and offsets and silently ignore the savepoint's).

    With ``from_savepoint`` and ``exactly_once``, blocks first while it reads back what the
    savepoint's query committed after the savepoint's batch (``headrace.savepoints.replay``:
    the replay from the savepoint's offsets skips it), so that query must be stopped
    first; raises ``SavepointError`` when that output cannot be read."""
    if cfg.from_savepoint is not None and any(Path(cfg.checkpoint, "commits").glob("[0-9]*")):
        raise IncompatibleStateError(
            f"checkpoint {cfg.checkpoint} has committed batches: a query starts from a "
            "savepoint with a fresh checkpoint")
    discard_unfinished_first_batch(cfg.checkpoint)
    interval = f"{checkpoint_interval_ms(cfg.checkpoint_interval)} milliseconds"
    out = operator_output(spark, cfg)
    if cfg.exactly_once:
        if cfg.from_savepoint is not None:
            _seed_sink(spark, Savepoint(cfg.from_savepoint), cfg)
        return _start_exactly_once(spark, exactly_once_rows(out, cfg), cfg, interval,
                                   query_name)
    rows = sink_rows(alert_columns(out, cfg))
    writer = (rows.drop("id").writeStream.format("kafka")
              .queryName(query_name)
              .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("topic", cfg.topics.alerts)
              .option("kafka.linger.ms", "0")
              .option("checkpointLocation", cfg.checkpoint)
              .outputMode("update"))
    # PySpark 4.3's type stubs lack trigger(realTime=...), which it accepts at run time.
    trigger: Any = writer.trigger
    query: StreamingQuery = trigger(realTime=interval).start()
    return query


def _seed_sink(spark: SparkSession, sp: Savepoint, cfg: RealtimeConfig) -> None:
    """The new checkpoint's sink skips what the savepoint's query committed after it. A
    savepoint without the real-time sink's records (format 1, or of another query) has
    nothing to skip."""
    replay = sp.manifest.realtime_sink
    if replay is None:
        return
    tasks = int(spark.conf.get("spark.sql.shuffle.partitions") or "200")
    seed(sp.path, replay, f"{cfg.checkpoint.rstrip('/')}/{SINK_STATE}", tasks,
         cfg.bootstrap_servers)


def _start_exactly_once(spark: SparkSession, rows: DataFrame, cfg: RealtimeConfig,
                        interval: str, query_name: str) -> StreamingQuery:
    # PySpark's foreach takes Python functions only, which Real-Time Mode feeds at batch end:
    # the JVM writer goes on the JVM's DataStreamWriter directly.
    jvm_view = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    assert jvm_view is not None and gateway is not None
    topics = gateway.new_array(jvm_view.java.lang.String, 2)
    topics[0], topics[1] = cfg.topics.alerts, cfg.topics.dead_letters
    try:
        writer = jvm_view.io.headrace.realtime.ExactlyOnceKafkaWriter(
            cfg.bootstrap_servers, topics, f"{cfg.checkpoint.rstrip('/')}/{SINK_STATE}",
            cfg.commit_interval_ms, 10_000, jvm_view.java.util.HashMap())
    except Py4JError as e:
        raise RealtimeError("the exactly-once sink (io.headrace.realtime."
                            "ExactlyOnceKafkaWriter) is not on this session's classpath: "
                            f"run `make setup` ({e})") from e
    trigger = jvm_view.org.apache.spark.sql.streaming.Trigger.RealTime(interval)
    jquery = (rows._jdf.writeStream().foreach(writer).queryName(query_name)
              .option("checkpointLocation", cfg.checkpoint).outputMode("update")
              .trigger(trigger).start())
    return StreamingQuery(jquery)
