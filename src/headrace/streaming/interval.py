"""``interval_join``: a stream-stream join with time bounds, on transformWithState.

Rows of ``left`` and ``right`` with equal ``on`` columns and
``left_time + lower <= right_time <= left_time + upper``, inner or left outer. The output
is, batch for batch, what Spark's own stream-stream join gives for the same query (it
used that join until state schema version 1 of ``interval_join``): Spark's join state
cannot be loaded into a new query, this operator's can (``headrace.savepoints``). A
savepoint of a checkpoint of Spark's join (schema version 0, ``savepoints.spark_join``:
each side's rows and whether a left row matched) starts this operator too: its rows are
put into this operator's buckets as the query starts (``_from_spark_join``).

Spark's rules, kept here (``W`` is the query's global watermark, the minimum over both
inputs, in ms; times compare to the microsecond):

- a row whose time is at or before the *previous* batch's watermark is late and dropped
  (Spark's own filter does it: the union's ``_EVENT_TIME`` carries the watermark);
- each of a batch's left rows is joined with the right rows held from earlier batches and
  held; then each right row with every left row held (this batch's included) and held;
  a left row that joins at least one right row is ``matched``;
- then, with this batch's ``W``, left rows with ``left_time <= W - upper - 1 ms`` are
  evicted (in a left outer join, an unmatched one comes out with a null right side) and
  right rows with ``right_time <= W + lower - 1 ms``.

State per bucket of join keys (``buckets``): ``{key JSON: {"L": [[time µs, row JSON,
matched], ...], "R": [[time µs, row JSON], ...]}}``; the bucket's one timer is set where
the watermark evicts its first row. Rows cross the operator as JSON text (``rowjson``).
A query started ``from_savepoint`` drops, besides Spark's late rows, those at or before
the savepoint's watermark, and evicts with that watermark until its own passes it.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Iterator
from functools import reduce
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StringType, StructField, StructType

from headrace.savepoints import IncompatibleStateError, Resume, Savepoint, spark_join
from headrace.streaming import buckets, rowjson
from headrace.streaming.errors import SpecError
from headrace.streaming.timeutil import duration_ms
from headrace.streaming.windows import BUCKET, DEFAULT_BUCKETS

NAME = "interval_join"
STATE_VERSION = 1
# What a savepoint's state needs unchanged, and why (bounds, delays and ``how`` may change:
# every held row keeps its time and whether it matched).
_FIXED = {"key": "the state is kept per join key",
          "buckets": "keys are hashed into that many buckets"}

# The union's columns (not "__..." names: transformWithStateInPandas renames those).
_KEY = "headrace__key"
_T = "headrace__t"  # the side's time in µs
_SIDE = "headrace__side"
_ROW = "headrace__row"
_EVENT_TIME = "headrace__event_time"  # the side's time with Spark's watermark on it
_LEFT, _RIGHT = "headrace__left", "headrace__right"
_MATCHED = "headrace__matched"  # a savepoint of Spark's join: whether a left row matched


class _IntervalProcessor(buckets.BucketProcessor):
    """The join of one bucket of keys (module docstring), on the pandas flavour of
    transformWithState. Output rows: (left JSON, right JSON or null)."""

    def __init__(self, lower_ms: int, upper_ms: int, outer: bool, params: dict[str, Any],
                 resume: buckets.Resume | None = None) -> None:
        self.lower_ms, self.upper_ms, self.outer = lower_ms, upper_ms, outer
        self.lo, self.hi = lower_ms * 1000, upper_ms * 1000
        self.head = buckets.header(NAME, STATE_VERSION, params)
        self.resume = resume

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    def handleInitialState(self, key: Any, initialState: Any,
                           timerValues: TimerValues) -> None:
        """A bucket of a savepoint: this operator's value, or rows of Spark's own join
        (``_from_spark_join``), which become the bucket's keys."""
        if "keys" in initialState.columns:
            super().handleInitialState(key, initialState, timerValues)
            return
        keys: dict[str, dict[str, list[Any]]] = {}
        for k, t, side, row, matched in zip(
                *(initialState[c].tolist() for c in (_KEY, _T, _SIDE, _ROW, _MATCHED)),
                strict=True):
            held = keys.setdefault(k, {"L": [], "R": []})
            if side == "L":
                held["L"].append([int(t), row, bool(matched)])
            else:
                held["R"].append([int(t), row])
        self._store(None, keys, None)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before, keys, timer = buckets.load(self.bucket)
        frames = list(rows)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        if self.resume is not None and self.resume.watermark_ms > 0:
            frame = frame[frame[_T] > self.resume.watermark_ms * 1000]
        out: list[tuple[str, str | None]] = []
        left = (frame[_SIDE] == "L").to_numpy()
        for k, t, row in zip(*(frame[left][c].tolist() for c in (_KEY, _T, _ROW)),
                             strict=True):
            held = keys.setdefault(k, {"L": [], "R": []})
            matched = False
            for rt, rrow in held["R"]:
                if t + self.lo <= rt <= t + self.hi:
                    out.append((row, rrow))
                    matched = True
            held["L"].append([t, row, matched])
        for k, t, row in zip(*(frame[~left][c].tolist() for c in (_KEY, _T, _ROW)),
                             strict=True):
            held = keys.setdefault(k, {"L": [], "R": []})
            for lrow in held["L"]:
                if lrow[0] + self.lo <= t <= lrow[0] + self.hi:
                    out.append((lrow[1], row))
                    lrow[2] = True
            held["R"].append([t, row])
        self._evict(keys, self.watermark(timerValues), out)
        self._store(before, keys, timer)
        return self._frames(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        before, keys, _ = buckets.load(self.bucket)
        out: list[tuple[str, str | None]] = []
        self._evict(keys, self.watermark(timerValues), out)
        self._store(before, keys, None)  # the timer that fired was the bucket's only one
        return self._frames(out)

    def _evict(self, keys: dict[str, dict[str, list[Any]]], watermark: int,
               out: list[tuple[str, str | None]]) -> None:
        """Spark's state watermarks: left rows at or before ``W - upper - 1 ms``, right rows
        at or before ``W + lower - 1 ms`` go (unmatched left ones out, when outer)."""
        left_limit = (watermark - self.upper_ms - 1) * 1000
        right_limit = (watermark + self.lower_ms - 1) * 1000
        for k in list(keys):
            held = keys[k]
            kept = [r for r in held["L"] if r[0] > left_limit]
            if self.outer and len(kept) < len(held["L"]):
                out.extend((r[1], None) for r in held["L"] if r[0] <= left_limit and not r[2])
            held["L"] = kept
            held["R"] = [r for r in held["R"] if r[0] > right_limit]
            if not held["L"] and not held["R"]:
                del keys[k]

    def _next_timer(self, keys: dict[str, dict[str, list[Any]]]) -> int | None:
        """The first watermark that evicts a row: Python transformWithState fires a timer
        once the watermark reaches it. (Never the timer that fired: evicting left no row
        that this watermark evicts, and a timer re-registered at the time that fired
        would be deleted with it.)"""
        def ceil_ms(us: int) -> int:
            return -(-us // 1000)
        firsts = [ceil_ms(r[0]) + self.upper_ms + 1 for held in keys.values()
                  for r in held["L"]]
        firsts += [ceil_ms(r[0]) - self.lower_ms + 1 for held in keys.values()
                   for r in held["R"]]
        return min(firsts) if firsts else None

    def _store(self, before: bytes | None, keys: dict[str, dict[str, list[Any]]],
               registered: int | None) -> None:
        buckets.store(self.handle, self.bucket, before, keys, registered,
                      self._next_timer(keys), head=self.head)

    @staticmethod
    def _frames(out: list[tuple[str, str | None]]) -> Iterator[pd.DataFrame]:
        if not out:
            return iter(())
        left, right = zip(*out, strict=True)
        return iter([pd.DataFrame({_LEFT: list(left), _RIGHT: list(right)})])


def _from_spark_join(sp: Savepoint, left: DataFrame, right: DataFrame, on: list[str],
                     left_time: str, right_time: str, n: int
                     ) -> tuple[GroupedData | None, buckets.Resume]:
    """The initial state (rows, grouped by bucket) and ``Resume`` of a savepoint of
    ``interval_join`` on Spark's own join (schema version 0, ``savepoints.spark_join``):
    each side's rows with their key, time, JSON and ``matched``, bucketed as this join
    buckets them. Raises ``IncompatibleStateError`` for a changed key or side columns."""
    op = sp.find(NAME, (NAME,))
    where = f"operator {op.operator_id} ({NAME} on Spark's own join)"
    if sorted(op.params.get("key", [])) != sorted(on):
        raise IncompatibleStateError(f"{where}: its join key {op.params.get('key')} is not "
                                     f"{on}; {_FIXED['key']}")
    resume = buckets.Resume(sp.manifest.watermark_ms)
    frames = []
    for side, df, time, tag in (("left", left, left_time, "L"),
                                ("right", right, right_time, "R")):
        held = op.params.get(side, [])
        if sorted(held) != sorted(df.columns):
            raise IncompatibleStateError(
                f"{where}: its {side} rows have columns {held}, this join's {side} stream "
                f"{df.columns}; the rows it holds are joined as they are")
        rows = sp.state(left.sparkSession, op.operator_id, side)
        matched = F.col(spark_join.MATCHED) if tag == "L" else F.lit(None).cast("boolean")
        frames.append(rows.select(
            rowjson.as_json(on).alias(_KEY),
            F.unix_micros(F.col(time).cast("timestamp")).alias(_T), F.lit(tag).alias(_SIDE),
            rowjson.as_json(df.columns).alias(_ROW), matched.alias(_MATCHED),
            rowjson.key_bucket(on, n).alias(BUCKET)))
    if not op.keys:
        return None, resume
    return frames[0].unionByName(frames[1]).groupBy(BUCKET), resume


def _tagged(df: DataFrame, side: str, on: list[str], time: str, n: int) -> DataFrame:
    """One side of the union; ``_EVENT_TIME`` keeps the side's watermark (an alias of a
    column keeps its metadata), so Spark drops the late rows before the processor."""
    return df.select(rowjson.as_json(on).alias(_KEY),
                     F.unix_micros(F.col(time).cast("timestamp")).alias(_T),
                     F.lit(side).alias(_SIDE), rowjson.as_json(df.columns).alias(_ROW),
                     F.col(time).alias(_EVENT_TIME), rowjson.key_bucket(on, n).alias(BUCKET))


def interval_join(left: DataFrame, right: DataFrame, *, on: list[str], left_time: str,
                  right_time: str, lower: str | int | dt.timedelta,
                  upper: str | int | dt.timedelta, left_watermark: str | int | dt.timedelta,
                  right_watermark: str | int | dt.timedelta, how: str = "inner",
                  buckets: int = DEFAULT_BUCKETS,
                  from_savepoint: Savepoint | str | Path | None = None) -> DataFrame:
    """Rows of ``left`` and ``right`` with equal ``on`` columns and
    ``left_time + lower <= right_time <= left_time + upper``. Column names must not clash
    apart from ``on``. ``how`` is ``inner`` or ``left_outer`` (an unmatched left row comes
    out, right columns null, once the watermark passes ``left_time + upper``). Output: the
    left columns, then the right ones but ``on``, as Spark's join gives them.
    ``from_savepoint``: start from a savepoint's state; ``on`` and ``buckets`` must not
    change (the bounds, the watermark delays and ``how`` may). A savepoint of a
    checkpoint of this join from before transformWithState (Spark's own join) takes any
    ``buckets``; ``on`` and each side's columns must not change."""
    if how not in ("inner", "left_outer"):
        raise SpecError(f"how must be inner or left_outer, got {how!r}")
    if buckets < 1:
        raise SpecError(f"buckets must be at least 1, got {buckets}")
    clash = (set(left.columns) & set(right.columns)) - set(on)
    if clash:
        raise SpecError(f"columns {sorted(clash)} are on both sides; rename them first")
    for side, df, time in (("left", left, left_time), ("right", right, right_time)):
        missing = [c for c in [*on, time] if c not in df.columns]
        if missing:
            raise SpecError(f"{missing} not in the {side} stream")
        rowjson.check_json_safe(side, df.schema)
    lo, hi = duration_ms(lower), duration_ms(upper)
    params = {"key": list(on), "buckets": buckets}
    initial: GroupedData | None = None
    resume: Resume | None = None
    if from_savepoint is not None:
        sp = Savepoint.of(from_savepoint)
        if sp.find(NAME, (NAME,)).schema_version == spark_join.VERSION:
            initial, resume = _from_spark_join(sp, left, right, on, left_time, right_time,
                                               buckets)
        else:
            initial, resume = sp.resume(
                left.sparkSession, operator=NAME, family=(NAME,), version=STATE_VERSION,
                params=params, fixed=_FIXED, key_column=BUCKET)
    lw = left.withWatermark(left_time, f"{duration_ms(left_watermark)} milliseconds")
    # a null join key equals nothing, as in Spark's join: such right rows can never come
    # out; left ones are held and never match (in a left outer join, they come out with
    # null right columns once evicted)
    rw = right.withWatermark(right_time, f"{duration_ms(right_watermark)} milliseconds"
                             ).where(reduce(operator.and_, [F.col(c).isNotNull() for c in on]))
    union = _tagged(lw, "L", on, left_time, buckets).unionByName(
        _tagged(rw, "R", on, right_time, buckets))
    schema = StructType([StructField(_LEFT, StringType()), StructField(_RIGHT, StringType())])
    joined = union.groupBy(BUCKET).transformWithStateInPandas(
        _IntervalProcessor(lo, hi, how == "left_outer", params, resume), schema, "Append",
        "EventTime", initialState=initial)
    left_schema = StructType(list(left.schema.fields))
    right_fields = [f for f in right.schema.fields if f.name not in on]
    parsed = joined.select(
        F.from_json(_LEFT, left_schema, rowjson.OPTIONS).alias("l"),
        F.from_json(_RIGHT, StructType(right_fields), rowjson.OPTIONS).alias("r"))
    return parsed.select(*[F.col("l").getField(f.name).alias(f.name) for f in left_schema],
                         *[F.col("r").getField(f.name).alias(f.name) for f in right_fields])
