"""Dead letters as a reusable step: per-row processing that cannot be stopped by one row.

``with_dead_letters(df, fn, schema, dead_letter_topic=..., bootstrap_servers=...)`` runs
``fn(row: dict) -> dict | list[dict] | None`` on every row, in the tasks (mapInArrow). A
row for which ``fn`` raises goes to the dead-letter topic: its original bytes (the
``value_column``, or the row as JSON), the error (``headrace.error``, with the exception
type) and its source coordinates (``headrace.source.topic/partition/offset`` from the
``kafka_*`` columns when present). The query goes on; the partition is never blocked.

In a streaming query the dead letters of a task are written with the sink's exactly-once
protocol keyed by (query, step, task, micro-batch), so a re-run task does not repeat them.
Outside a stream (no query id) they are written at least once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from headrace.spark.event_parser import dead_letter_batches
from headrace.spark.options import SinkOptions
from headrace.spark.sink import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    write_at_least_once,
    write_exactly_once,
)
from headrace.streaming.errors import SpecError

RowFn = Callable[[dict[str, Any]], "dict[str, Any] | list[dict[str, Any]] | None"]
Dead = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


def _dead_letter(row: dict[str, Any], error: BaseException, value_column: str | None) -> Dead:
    raw = row.get(value_column) if value_column else None
    if raw is None:
        raw = json.dumps(row, default=str, sort_keys=True)
    value = raw.encode() if isinstance(raw, str) else raw
    key = row.get("kafka_key")
    headers = [("headrace.error", f"{type(error).__name__}: {error}".encode())]
    for name in ("topic", "partition", "offset"):
        if row.get(f"kafka_{name}") is not None:
            headers.append((f"headrace.source.{name}", str(row[f"kafka_{name}"]).encode()))
    return (key if isinstance(key, bytes) else None, value, headers)


def _publish(sink: SinkOptions, tag: str, dead: list[Dead]) -> None:
    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
    batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    partition = ctx.partitionId() if ctx else 0
    batches = dead_letter_batches(list(dead))
    if query_id and batch_id is not None:
        write_exactly_once(sink, batches, f"{query_id}-dead-{tag}", partition, int(batch_id))
    else:
        write_at_least_once(sink, batches, partition)


def with_dead_letters(df: DataFrame, fn: RowFn, schema: StructType | str, *,
                      dead_letter_topic: str, bootstrap_servers: str,
                      value_column: str | None = None,
                      client_configs: dict[str, str] | None = None) -> DataFrame:
    """``df`` mapped row by row through ``fn`` into ``schema``; failing rows become dead
    letters. ``schema`` must be a StructType when called outside the driver."""
    out_schema = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    if not isinstance(out_schema, StructType):
        raise SpecError("schema must describe a struct")
    if value_column is not None and value_column not in df.columns:
        raise SpecError(f"value_column {value_column!r} is not in the DataFrame")
    arrow_schema = to_arrow_schema(out_schema, timezone="UTC")
    sink = SinkOptions(bootstrap_servers, dead_letter_topic, True, dict(client_configs or {}))
    tag = hashlib.sha1(f"{dead_letter_topic}|{getattr(fn, '__qualname__', fn)}".encode()
                       ).hexdigest()[:10]
    names = out_schema.fieldNames()

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        dead: list[Dead] = []
        for batch in batches:
            good: list[dict[str, Any]] = []
            for row in batch.to_pylist():
                try:
                    result = fn(row)
                    results = [] if result is None else result if isinstance(result, list) \
                        else [result]
                    checked = [{n: r[n] for n in names} for r in results]
                except Exception as e:  # the point of the step: any failure is a dead letter
                    dead.append(_dead_letter(row, e, value_column))
                    continue
                good.extend(checked)
            if good:
                yield pa.RecordBatch.from_pylist(good, schema=arrow_schema)
        if dead:
            _publish(sink, tag, dead)

    return df.mapInArrow(apply, out_schema)
