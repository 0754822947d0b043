"""Stream joins: interval (stream-stream), latest-value and temporal (stream-table), and a
table-table join kept as a live view.

- ``interval_join``: Spark's own stream-stream join with time bounds and watermarks on both
  sides; inner or left outer (unmatched left rows come out once the watermark passes the
  end of their interval). State is evicted by watermark.
- ``latest_join``: each event joined with the table's current row for its key — the latest
  update that arrived before it. Within one micro-batch the two topics have no common
  arrival order (offsets are per partition), so the rule is: a batch's table updates are
  applied before its events, i.e. an event sees every update that arrived in the same
  micro-batch, even one produced after it.
- ``temporal_join``: each event joined with the table row *valid at the event's time* (the
  version with the greatest ``valid_from`` not after it), correct when table updates arrive
  out of order: an event is held until the watermark passes its time, then joined. Events
  already behind the watermark when they arrive are joined at once and flagged ``late``:
  with the version valid at their time if it is still held; if the watermark has evicted
  it (eviction keeps only the newest version at or before the watermark), with the oldest
  version still held, so ``valid_from`` is then after the event's time — the sign that the
  exact version is gone. A late event older than the key's first version ever joins none
  (``right`` null), as an on-time one would.
- ``table_join``: two changelogs joined on a key into a materialized view; an update on
  either side re-emits the joined rows it changes (a price change updates every order of
  that product).

The stream-table joins run on transformWithState over the union of both sides, grouped by
a bucket of join keys (``buckets``, 64 by default: a few state calls per bucket and
micro-batch, whatever the number of keys); table state keeps one row per key (latest) or
the versions the watermark can still reach (temporal). A checkpoint stays tied to its
``buckets``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    BooleanType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.streaming import buckets
from headrace.streaming.errors import SpecError
from headrace.streaming.timeutil import duration_ms, from_ms
from headrace.streaming.windows import BUCKET, DEFAULT_BUCKETS, with_spark_watermark

_ONE_STRING = StructType([StructField("v", StringType())])
# table_join's change marker on left rows: an upsert, or "moved away to another join key"
_OP = "__op"
_UPSERT = "U"
_MOVED_AWAY = "D"


def interval_join(left: DataFrame, right: DataFrame, *, on: list[str], left_time: str,
                  right_time: str, lower: str | int | dt.timedelta,
                  upper: str | int | dt.timedelta, left_watermark: str | int | dt.timedelta,
                  right_watermark: str | int | dt.timedelta, how: str = "inner") -> DataFrame:
    """Rows of ``left`` and ``right`` with equal ``on`` columns and
    ``left_time + lower <= right_time <= left_time + upper``. Column names must not clash
    apart from ``on``. ``how`` is ``inner`` or ``left_outer``."""
    if how not in ("inner", "left_outer"):
        raise SpecError(f"how must be inner or left_outer, got {how!r}")
    clash = (set(left.columns) & set(right.columns)) - set(on)
    if clash:
        raise SpecError(f"columns {sorted(clash)} are on both sides; rename them first")
    lo, hi = duration_ms(lower), duration_ms(upper)
    lw = left.withWatermark(left_time, f"{duration_ms(left_watermark)} milliseconds")
    rw = right.withWatermark(right_time, f"{duration_ms(right_watermark)} milliseconds")
    r = rw.select(*[F.col(c).alias(f"__r_{c}") if c in on else F.col(c) for c in rw.columns])
    cond: Column = F.lit(True)
    for c in on:
        cond = cond & (lw[c] == r[f"__r_{c}"])
    cond = cond & (r[right_time] >= lw[left_time] + F.expr(f"INTERVAL {lo} MILLISECONDS")) \
        & (r[right_time] <= lw[left_time] + F.expr(f"INTERVAL {hi} MILLISECONDS"))
    joined = lw.join(r, cond, "leftouter" if how == "left_outer" else "inner")
    return joined.drop(*[f"__r_{c}" for c in on])


@dataclass(frozen=True)
class _JoinSpec:
    mode: str  # latest | temporal | table
    key: tuple[str, ...]
    left_fields: tuple[str, ...]
    right_fields: tuple[str, ...]
    left_pk: str | None = None


def _tagged(df: DataFrame, side: str, key: list[str], time_col: str | None,
            other: DataFrame) -> DataFrame:
    """One side of a union: join key, time (ms), side tag, and both sides' structs (the
    other side's null), so the two streams share one schema."""
    own = F.struct(*[F.col(c) for c in df.columns])
    none = F.lit(None).cast(StructType(list(other.schema.fields)))
    t = (F.col(time_col).cast("double") * 1000).cast("long") if time_col else F.lit(0)
    cols = [F.col(k) for k in key] + [t.alias("__t"), F.lit(side).alias("__side")]
    if side == "L":
        return df.select(*cols, own.alias("__left"), none.alias("__right"))
    return df.select(*cols, none.alias("__left"), own.alias("__right"))


def _row_dict(struct: Any) -> dict[str, Any]:
    """A struct value of an input row (a Row or, from transformWithState, a dict)."""
    if struct is None:
        return {}
    return dict(struct) if isinstance(struct, dict) else struct.asDict(recursive=True)


def _dumps(d: Any) -> str:
    return json.dumps(d, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v))


class _JoinProcessor(StatefulProcessor):
    """The stream-table joins, grouped by a bucket of join keys (``windows.BUCKET``): one
    pickled value per bucket holds every key's state, so a micro-batch costs a few state
    round trips per bucket, not per key. Per key: ``table`` (the latest row: latest and
    table modes), ``versions`` (valid_from -> row) and ``pending`` (event time -> held
    events: temporal), ``first`` (the smallest valid_from ever stored: temporal), ``left``
    (left primary key -> row: table mode) and ``timers``, the event-time timers a per-key
    processor would hold (temporal). The bucket registers one real timer, the earliest of
    its keys'; each micro-batch fires the keys' timers Spark would fire (the watermark at or past
    them), so the output is the one per-key state and timers would give."""

    def __init__(self, spec: _JoinSpec, schemas: tuple[str, str]) -> None:
        self.spec = spec
        self.schemas = schemas

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = handle.getValueState("bucket", buckets.VALUE_SCHEMA)
        self.left_schema = StructType.fromJson(json.loads(self.schemas[0]))
        self.right_schema = StructType.fromJson(json.loads(self.schemas[1]))

    def _store(self, before: bytes | None, keys: dict[tuple[Any, ...], dict[str, Any]],
               registered: int | None) -> None:
        """Write the bucket back, without the keys left with nothing (no table row,
        version, held event or timer), and keep its one timer at its keys' earliest."""
        for k in [k for k, ks in keys.items() if not any(ks.values())]:
            del keys[k]
        wanted = min((min(ks["timers"]) for ks in keys.values() if ks.get("timers")),
                     default=None)
        buckets.store(self.handle, self.bucket, before, keys, registered, wanted)

    def _out(self, key: tuple[Any, ...], left: dict[str, Any] | None,
             right: dict[str, Any] | None, **extra: Any) -> Row:
        data = dict(zip(self.spec.key, key, strict=True))
        data["left"] = _revive(left, self.left_schema)
        data["right"] = _revive(right, self.right_schema)
        data.update(extra)
        return Row(**data)

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        before, keys, timer = buckets.load(self.bucket)
        by_key: dict[tuple[Any, ...], list[Row]] = {}
        for r in rows:
            by_key.setdefault(tuple(r[k] for k in self.spec.key), []).append(r)
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[Row] = []
        for k, batch in by_key.items():
            ks = keys.setdefault(k, {})
            tables = sorted((r for r in batch if r["__side"] == "R"), key=lambda r: r["__t"])
            events = sorted((r for r in batch if r["__side"] == "L"), key=lambda r: r["__t"])
            if self.spec.mode == "latest":
                out.extend(self._latest(k, ks, tables, events))
            elif self.spec.mode == "temporal":
                out.extend(self._temporal(k, ks, tables, events, watermark))
            else:
                out.extend(self._table(k, ks, tables, events))
        if self.spec.mode == "temporal":
            self._fire_due(keys, watermark, out)
        self._store(before, keys, timer)
        return iter(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        before, keys, _ = buckets.load(self.bucket)
        out: list[Row] = []
        self._fire_due(keys, timerValues.getCurrentWatermarkInMs(), out)
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, keys, None)
        return iter(out)

    def _latest(self, key: tuple[Any, ...], ks: dict[str, Any], tables: list[Row],
                events: list[Row]) -> list[Row]:
        for r in tables:
            ks["table"] = _row_dict(r["__right"])
        current = ks.get("table")
        return [self._out(key, _row_dict(e["__left"]), current) for e in events]

    def _temporal(self, key: tuple[Any, ...], ks: dict[str, Any], tables: list[Row],
                  events: list[Row], watermark: int) -> list[Row]:
        versions = ks.setdefault("versions", {})
        pending = ks.setdefault("pending", {})
        timers = ks.setdefault("timers", set())
        for r in tables:
            versions[r["__t"]] = _row_dict(r["__right"])
        if tables:
            first = min(r["__t"] for r in tables)
            if ks.get("first") is None or first < ks["first"]:
                ks["first"] = first
            # Once the watermark passes the newest version, the older ones are evicted
            # (_expire), also for keys that never see an event.
            timers.add(max(r["__t"] for r in tables))
        out: list[Row] = []
        for e in events:
            t = e["__t"]
            if watermark >= 0 and t <= watermark:
                out.append(self._versioned(key, ks, _row_dict(e["__left"]), t, late=True))
                continue
            pending.setdefault(t, []).append(_row_dict(e["__left"]))
            timers.add(t)
        return out

    def _versioned(self, key: tuple[Any, ...], ks: dict[str, Any], event: dict[str, Any],
                   t: int, late: bool) -> Row:
        held = ks["versions"]
        valid = [v for v in held if v <= t]
        first = ks.get("first")
        if valid:
            since = max(valid)
        elif late and held and first is not None and first <= t:
            since = min(held)  # the version valid at t was evicted: the oldest one held
        else:
            return self._out(key, event, None, valid_from=None, late=late)
        return self._out(key, event, held[since], valid_from=from_ms(since), late=late)

    def _fire_due(self, keys: dict[tuple[Any, ...], dict[str, Any]], watermark: int,
                  out: list[Row]) -> None:
        """Fire, for each key, the timers Spark would fire now (at or below the watermark)."""
        for k, ks in keys.items():
            timers = ks.get("timers")
            if timers and min(timers) <= watermark:
                ks["timers"] = {t for t in timers if t > watermark}
                out.extend(self._expire(k, ks, watermark))

    def _expire(self, key: tuple[Any, ...], ks: dict[str, Any], watermark: int) -> list[Row]:
        """A temporal key's timer fired: join the held events the watermark has reached."""
        out: list[Row] = []
        pending = ks["pending"]
        for t in sorted(pending):
            if t <= watermark:
                out.extend(self._versioned(key, ks, ev, t, late=False) for ev in pending.pop(t))
        # Versions no on-time event can reach any more: all but the newest one at or before
        # the watermark (later events are after the watermark; late ones join the version
        # valid at their time if held, else the oldest held: see the module docstring).
        versions = ks["versions"]
        older = sorted(v for v in versions if v <= watermark)
        for since in older[:-1]:
            del versions[since]
        return out

    def _table(self, key: tuple[Any, ...], ks: dict[str, Any], tables: list[Row],
               events: list[Row]) -> list[Row]:
        pk = self.spec.left_pk
        assert pk is not None
        lefts: dict[str, dict[str, Any]] = ks.setdefault("left", {})
        for r in tables:
            ks["table"] = _row_dict(r["__right"])
        touched: dict[str, dict[str, Any]] = {}
        for e in events:
            left = _row_dict(e["__left"])
            op = left.pop(_OP, _UPSERT)
            if op == _MOVED_AWAY:  # re-keyed to another join key: that key emits it
                lefts.pop(str(left[pk]), None)
                touched.pop(str(left[pk]), None)
                continue
            lefts[str(left[pk])] = left
            touched[str(left[pk])] = left
        if tables:
            touched = dict(lefts)
        current = ks.get("table")
        return [self._out(key, left, current) for left in touched.values()]


class _ForeignKeyTracker(StatefulProcessor):
    """First stage of ``table_join``, grouped by the left table's primary key: remembers
    each left row's join key and, when a micro-batch changes it, sends a ``moved away``
    row to the old join key (which drops the left row from its state) before the upsert
    to the new one. Within a batch the last row of a primary key wins."""

    def __init__(self, on: tuple[str, ...]) -> None:
        self.on = on

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.join_key = handle.getValueState("join_key", _ONE_STRING)

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        tail = deque(rows, maxlen=1)  # the batch's last row is the current one
        if not tail:
            return iter(())
        row = tail[0].asDict()
        new_key = _dumps([row[c] for c in self.on])
        out: list[Row] = []
        if self.join_key.exists():
            old_key = self.join_key.get()
            assert old_key is not None
            if old_key[0] != new_key:
                moved = dict(row, **dict(zip(self.on, json.loads(old_key[0]), strict=True)))
                out.append(Row(**moved, **{_OP: _MOVED_AWAY}))
        self.join_key.update((new_key,))
        out.append(Row(**row, **{_OP: _UPSERT}))
        return iter(out)


def _track_foreign_keys(left: DataFrame, on: list[str], left_key: str) -> DataFrame:
    schema = StructType([*left.schema.fields, StructField(_OP, StringType())])
    return left.groupBy(left_key).transformWithState(
        _ForeignKeyTracker(tuple(on)), schema, "Append", "None")


def _loads(value: tuple[Any, ...] | None) -> Any:
    assert value is not None
    return json.loads(value[0])


def _revive(d: dict[str, Any] | None, schema: StructType) -> Any:
    """A JSON-decoded row back into Spark's types (timestamps were ISO strings)."""
    if d is None:
        return None
    out: dict[str, Any] = {}
    for f in schema.fields:
        v = d.get(f.name)
        if isinstance(v, str) and f.dataType.typeName() in ("timestamp", "timestamp_ntz"):
            v = dt.datetime.fromisoformat(v)
        elif isinstance(v, str) and f.dataType.typeName() == "date":
            v = dt.date.fromisoformat(v)
        out[f.name] = v
    return Row(**out)


def _join(left: DataFrame, right: DataFrame, spec: _JoinSpec, left_time: str | None,
          right_time: str | None, watermark: str | int | dt.timedelta | None,
          extra: list[StructField], buckets: int) -> DataFrame:
    if buckets < 1:
        raise SpecError(f"buckets must be at least 1, got {buckets}")
    key = list(spec.key)
    for side, df in (("left", left), ("right", right)):
        missing = [k for k in key if k not in df.columns]
        if missing:
            raise SpecError(f"join key {missing} is not in the {side} stream")
    union = _tagged(left, "L", key, left_time, right).unionByName(
        _tagged(right, "R", key, right_time, left))
    # the left struct as the user sees it (without table_join's internal change marker)
    left_schema = StructType([f for f in left.schema.fields if f.name != _OP])
    schema = StructType([left.schema[k] for k in key]
                        + [StructField("left", left_schema),
                           StructField("right", StructType(list(right.schema.fields)))]
                        + extra)
    processor = _JoinProcessor(spec, (left_schema.json(), right.schema.json()))
    bucket = F.pmod(F.xxhash64(*key), F.lit(buckets))
    if watermark is None:
        return union.withColumn(BUCKET, bucket).groupBy(BUCKET).transformWithState(
            processor, schema, "Append", "None")
    marked = union.withColumn("__wm", F.timestamp_millis(F.col("__t")))
    marked = with_spark_watermark(marked, "__wm", watermark).drop("__wm")
    return marked.withColumn(BUCKET, bucket).groupBy(BUCKET).transformWithState(
        processor, schema, "Append", "EventTime")


def latest_join(events: DataFrame, table: DataFrame, *, on: list[str],
                buckets: int = DEFAULT_BUCKETS) -> DataFrame:
    """Each event with the table's latest row for its key (``right`` null if none yet).
    A micro-batch's table updates are applied before its events (module docstring).

    ``table`` is a changelog stream (e.g. a compacted topic read with read_events). Output:
    the key columns, ``left`` (the event) and ``right`` (the table row) as structs.
    """
    spec = _JoinSpec("latest", tuple(on), tuple(events.columns), tuple(table.columns))
    return _join(events, table, spec, None, None, None, [], buckets)


def temporal_join(events: DataFrame, table: DataFrame, *, on: list[str], event_time: str,
                  valid_from: str, watermark: str | int | dt.timedelta,
                  buckets: int = DEFAULT_BUCKETS) -> DataFrame:
    """Each event with the table row valid at its ``event_time``: the version with the
    greatest ``valid_from`` at or before it. Output adds ``valid_from`` and ``late``; late
    events join as the module docstring says."""
    spec = _JoinSpec("temporal", tuple(on), tuple(events.columns), tuple(table.columns))
    return _join(events, table, spec, event_time, valid_from, watermark,
                 [StructField("valid_from", TimestampType()),
                  StructField("late", BooleanType())], buckets)


def table_join(left: DataFrame, right: DataFrame, *, on: list[str],
               left_key: str, buckets: int = DEFAULT_BUCKETS) -> DataFrame:
    """A live view of ``left`` (e.g. orders, primary key ``left_key``) joined with ``right``
    (e.g. products, keyed by ``on``). Every change re-emits the view rows it affects; read
    the output as upserts keyed by ``left_key``. A left row may change its ``on`` value
    (an order moved to another product), as in a KTable-KTable foreign-key join: the old
    join key forgets it (its later changes no longer re-emit that row) and the new one
    emits it, so the upsert view holds the new join row only. Within one micro-batch the
    last row of a ``left_key`` wins: produce ``left`` keyed by ``left_key`` so its changes
    keep their order."""
    spec = _JoinSpec("table", tuple(on), tuple(left.columns), tuple(right.columns), left_key)
    tracked = _track_foreign_keys(left, on, left_key)
    return _join(tracked, right, spec, None, None, None, [], buckets)
