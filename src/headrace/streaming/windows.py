"""Event-time windows with allowed lateness and a late-data side output, on transformWithState.

``windowed(df, keys=..., event_time=..., window=tumbling("10 minutes"), aggs=[count()],
watermark="5 minutes", allowed_lateness="2 minutes", emit="final")`` returns one stream of
rows told apart by ``kind``:

- ``result``: a window's aggregates. With ``emit="final"`` a window is emitted once the
  watermark reaches its end (``final`` true), and again, updated, for each batch of late
  events that arrive while the watermark is below ``end + allowed_lateness`` (Flink's
  late firings; seed 000's worked example 2). With ``emit="updates"`` every batch that
  changes a window emits it (``final`` false until the watermark passes its end).
- ``retract``: a session window emitted earlier that a later event merged into a bigger
  one; its values are the ones emitted before.
- ``late``: an event whose every window is past ``end + allowed_lateness`` — Spark would
  drop it silently; here it comes out with ``lateness_ms`` (watermark minus event time)
  and the event as JSON (Spark's `to_json` of the input row, nulls kept), so it can go to a
  side-output topic and be counted.

The watermark ``W`` is Spark's own: the maximum event time seen in earlier micro-batches
minus the ``watermark`` delay, the same for all keys, as transformWithState reports it to
the batch the event arrives in. One lateness rule holds for every window kind, the late
side output and the temporal join's ``late`` flag: **an event is late when
``end + allowed_lateness <= W``**, ``end`` being its window's end (a session's end, or the
event's own time for per-event sliding windows and joins). An event exactly at the
boundary is late; one a millisecond before it is not. It is the comparison Spark and Flink
use (Spark drops a row when ``end <= watermark``); the one difference from Spark's native
operators is which ``W``: Spark filters late rows with the watermark of the batch
*before*, one batch staler, so on the same input Spark may keep a few rows this toolkit
reports as late. State per key and window is evicted once ``W`` passes
``end + allowed_lateness``, so it stays bounded.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from headrace.savepoints import Savepoint
from headrace.savepoints.state import Resume
from headrace.streaming import columnar, processor
from headrace.streaming.aggregates import Agg
from headrace.streaming.columnar import ColumnarWindowProcessor, handles
from headrace.streaming.errors import SpecError
from headrace.streaming.processor import WindowProcessor
from headrace.streaming.timeutil import duration_ms
from headrace.streaming.window_spec import EVENT_JSON, Window, WindowedSpec

HIDDEN_WATERMARK = "__headrace_watermark"
BUCKET = "__headrace_bucket"
DEFAULT_BUCKETS = 64


def output_schema(df: DataFrame, spec: WindowedSpec) -> StructType:
    fields = [StructField("kind", StringType())]
    fields += [df.schema[k] for k in spec.keys]
    schema = StructType(fields)
    schema = schema.add("window_start", "timestamp").add("window_end", "timestamp")
    for a in spec.aggs:
        schema = schema.add(a.name, a.spark_type)
    return (schema.add("final", "boolean").add("event_time", "timestamp")
            .add("lateness_ms", "long").add("event", "string"))


def windowed(df: DataFrame, *, keys: list[str] | tuple[str, ...], event_time: str,
             window: Window, aggs: list[Agg] | tuple[Agg, ...],
             watermark: str | int | dt.timedelta,
             allowed_lateness: str | int | dt.timedelta = 0, emit: str = "final",
             buckets: int = DEFAULT_BUCKETS,
             from_savepoint: Savepoint | str | Path | None = None) -> DataFrame:
    """Window ``df`` (a stream without a watermark of its own) by event time per ``keys``.

    State lives in ``buckets`` groups (a hash of the keys; see ``columnar``, and ``processor``
    for windows with ``approx_distinct``): every
    micro-batch costs a few state calls per bucket, not per key, so more buckets mean more
    parallelism across a cluster and smaller state rewrites, fewer mean less overhead per
    batch. A checkpoint stays tied to its ``buckets``.

    ``from_savepoint``: start from a savepoint's windows (``headrace.savepoints``), in a
    query with a fresh checkpoint whose source starts at the savepoint's offsets. The
    allowed lateness, ``emit``, the aggregates' names and the number of shuffle partitions
    may differ from the savepoint's query; the keys, the window, the aggregates' kinds and
    columns and ``buckets`` may not (``IncompatibleStateError``, raised here).

    Raises ``SpecError`` for an unknown column, duplicate output names, a bad ``emit`` or
    ``buckets`` below 1. Needs the RocksDB state store
    (``headrace.streaming.configure(spark)``).
    """
    if emit not in ("final", "updates"):
        raise SpecError(f"emit must be 'final' or 'updates', got {emit!r}")
    if buckets < 1:
        raise SpecError(f"buckets must be at least 1, got {buckets}")
    missing = [c for c in (*keys, event_time, *(a.column for a in aggs if a.column))
               if c not in df.columns]
    if missing:
        raise SpecError(f"columns {missing} are not in the stream ({', '.join(df.columns)})")
    names = [a.name for a in aggs]
    reserved = {"kind", "window_start", "window_end", "final", "event_time", "lateness_ms",
                "event", *keys}
    if len(set(names)) != len(names) or reserved & set(names):
        raise SpecError(f"aggregate names {names} repeat or clash with output columns")
    spec = WindowedSpec(tuple(keys), event_time, window, tuple(aggs),
                        duration_ms(allowed_lateness), emit)
    params: dict[str, Any] = {
        "keys": list(keys), "window": [window.kind, window.size_ms, window.slide_ms],
        "aggs": [[a.kind, a.column] for a in aggs], "buckets": buckets,
        "allowed_lateness_ms": spec.allowed_lateness_ms, "emit": emit}
    kind = columnar if handles(spec) else processor
    initial, resume = None, None
    if from_savepoint is not None:
        initial, resume = Savepoint.of(from_savepoint).resume(
            df.sparkSession, operator=kind.OPERATOR,
            family=(columnar.OPERATOR, processor.OPERATOR), version=kind.STATE_VERSION,
            params=params, fixed=_FIXED, key_column=BUCKET)
    marked = with_spark_watermark(df, event_time, watermark, resume)
    bucket = F.pmod(F.xxhash64(*keys), F.lit(buckets)) if keys else F.lit(0)
    # Each event as JSON, for the late side output (Spark's to_json, nulls kept).
    event = F.to_json(F.struct(*[F.col(c) for c in df.columns]), {"ignoreNullFields": "false"})
    needed = [*keys, event_time, *{a.column for a in aggs if a.column}]
    return (marked.withColumn(EVENT_JSON, event).withColumn(BUCKET, bucket)
            .select(*dict.fromkeys(needed), EVENT_JSON, BUCKET)
            .groupBy(BUCKET).transformWithStateInPandas(
                ColumnarWindowProcessor(spec, params, resume) if handles(spec)
                else WindowProcessor(spec, params, resume),
                output_schema(df, spec), "Append", "EventTime", initialState=initial))


# What a savepoint's windows need unchanged, and why (``windowed(from_savepoint=...)``).
_FIXED = {"keys": "the state is kept per key",
          "window": "windows cannot be re-cut from their aggregates",
          "aggs": "the state holds these aggregates' partial values",
          "buckets": "keys are hashed into that many buckets"}


def with_spark_watermark(df: DataFrame, event_time: str,
                         delay: str | int | dt.timedelta,
                         resume: Resume | None = None) -> DataFrame:
    """Give ``df`` Spark's watermark on a hidden copy of ``event_time``, then drop the copy.

    Spark's stateful operators drop rows behind the watermark of a column they see; with
    the copy gone, transformWithState still gets the watermark (for timers) but receives
    late rows too, which is what lets the toolkit send them to a side output.

    ``resume`` (a query started from a savepoint): the copy is at least the event time
    that puts Spark's watermark at the savepoint's, so the new query's watermark goes on
    from there after its first batch (during which the processors use the savepoint's).
    """
    delay_ms = duration_ms(delay)
    hidden = F.col(event_time)
    if resume is not None and resume.watermark_ms > 0:
        hidden = F.greatest(hidden, F.timestamp_millis(F.lit(resume.watermark_ms + delay_ms)))
    return (df.withColumn(HIDDEN_WATERMARK, hidden)
            .withWatermark(HIDDEN_WATERMARK, f"{delay_ms} milliseconds")
            .drop(HIDDEN_WATERMARK))


def results(out: DataFrame) -> DataFrame:
    """The ``result`` rows of ``windowed``'s output, without the side-output columns."""
    return out.where("kind = 'result'").drop("kind", "event_time", "lateness_ms", "event")


def late_events(out: DataFrame) -> DataFrame:
    """The ``late`` rows: event time, how far behind the watermark it came, the event."""
    return out.where("kind = 'late'").select("event_time", "lateness_ms", "event")


def to_topics(out: DataFrame, keys: list[str], results_topic: str,
              late_topic: str) -> DataFrame:
    """``windowed``'s output as (topic, key, value) rows for the headrace sink: results and
    retractions to ``results_topic``, late events to ``late_topic`` — one query, both
    exactly-once."""
    key = F.to_json(F.struct(*keys))
    payload = F.to_json(F.struct(*[c for c in out.columns if c not in ("event",)]))
    return out.select(
        F.when(F.col("kind") == "late", F.lit(late_topic)).otherwise(F.lit(results_topic))
        .alias("topic"),
        key.alias("key"),
        F.when(F.col("kind") == "late", F.col("event")).otherwise(payload).alias("value"))
