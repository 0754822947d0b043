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
  that product). A first stage, grouped by a bucket of the left side's primary keys,
  remembers each left row's join key, so a row that moves to another key leaves the old
  one.

The stream-table joins run on transformWithStateInPandas over the union of both sides,
grouped by a bucket of join keys (``buckets``, 64 by default: a few state calls per bucket
and micro-batch, whatever the number of keys); table state keeps one row per key (latest)
or the versions the watermark can still reach (temporal). A checkpoint stays tied to its
``buckets``. Each side's rows cross the operator as JSON text: Spark's ``to_json`` before,
``from_json`` after, lossless for every type those take (timestamps to the microsecond);
a map with non-string keys is refused with ``SpecError`` (``from_json`` reads string keys
only).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.streaming import buckets
from headrace.streaming.errors import SpecError, StreamingError
from headrace.streaming.timeutil import duration_ms
from headrace.streaming.windows import BUCKET, DEFAULT_BUCKETS, with_spark_watermark

# table_join's change marker on left rows: an upsert, or "moved away to another join key"
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
    left_pk: str | None = None


# Columns of the union the join processor reads (not "__..." names: transformWithStateInPandas
# renames those) and writes. Each side's row travels as JSON text, made and parsed by Spark.
_KEY = "headrace__key"  # the join key as JSON: equal keys, equal text
_T = "headrace__t"  # event time / valid_from in ms (0 for latest and table modes)
_SIDE = "headrace__side"  # L or R
_LEFT = "headrace__left"
_RIGHT = "headrace__right"
_PK = "headrace__pk"  # table mode: the left row's primary key as JSON
_LEFT_OP = "headrace__op"  # table mode: _UPSERT or _MOVED_AWAY
_VALID_FROM = "headrace__valid_from"
_INPUT = (_KEY, _T, _SIDE, _LEFT, _RIGHT, _PK, _LEFT_OP)
_KEY_BUCKET = "headrace__bucket"  # table mode: the join key's bucket, from the tracker
# table mode: what the tracker emits (the left side of the union but its constant columns)
_TRACKED = (_KEY, _LEFT, _PK, _LEFT_OP, _KEY_BUCKET)
# Lossless both ways for every type Spark's JSON functions take (timestamps to the µs).
_JSON = {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
         "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def _as_json(columns: list[str]) -> Column:
    return F.to_json(F.struct(*[F.col(c) for c in columns]), _JSON)


def _check_json_safe(side: str, schema: StructType) -> None:
    """from_json reads maps with string keys only; say so before the query starts."""
    def walk(t: DataType, path: str) -> None:
        if isinstance(t, MapType):
            if not isinstance(t.keyType, StringType):
                raise SpecError(f"the {side} stream's {path} is a map with "
                                f"{t.keyType.simpleString()} keys; the stream-table joins "
                                "carry maps with string keys only (cast the keys)")
            walk(t.valueType, path)
        elif isinstance(t, ArrayType):
            walk(t.elementType, path)
        elif isinstance(t, StructType):
            for f in t.fields:
                walk(f.dataType, f"{path}.{f.name}" if path else f.name)
    walk(schema, "")


def _key_bucket(key: list[str], n: int) -> Column:
    """The bucket of a join key: equal keys, equal bucket, on both sides of a join."""
    return F.pmod(F.xxhash64(*key), F.lit(n))


def _tagged(df: DataFrame, side: str, key: list[str], time_col: str | None,
            n: int) -> DataFrame:
    """One side of the union: ``_INPUT`` and the join key's bucket (``BUCKET``)."""
    t = (F.col(time_col).cast("double") * 1000).cast("long") if time_col else F.lit(0)
    none = F.lit(None).cast("string")
    own = _as_json(df.columns)
    return df.select(_as_json(key).alias(_KEY), t.alias(_T), F.lit(side).alias(_SIDE),
                     (own if side == "L" else none).alias(_LEFT),
                     (own if side == "R" else none).alias(_RIGHT), none.alias(_PK),
                     none.alias(_LEFT_OP), _key_bucket(key, n).alias(BUCKET))


class _JoinProcessor(StatefulProcessor):
    """The stream-table joins, grouped by a bucket of join keys (``windows.BUCKET``), on the
    pandas flavour of transformWithState: rows arrive as columns of JSON text and come out
    as such, so no Python object is built per field. One pickled value per bucket holds
    every key's state, so a micro-batch costs a few state round trips per bucket, not per
    key. Per key (its JSON text): ``table`` (the latest row: latest and table modes),
    ``versions`` (valid_from -> row) and ``pending`` (event time -> held events: temporal),
    ``first`` (the smallest valid_from ever stored: temporal), ``left`` (left primary key
    -> row: table mode) and ``timers``, the event-time timers a per-key processor would
    hold (temporal). The bucket registers one real timer, the earliest of its keys'; each
    micro-batch fires the keys' timers Spark would fire (the watermark at or past them), so
    the output is the one per-key state and timers would give. Output rows: (left, right,
    valid_from ms, late)."""

    def __init__(self, spec: _JoinSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    def _store(self, before: bytes | None, keys: dict[str, dict[str, Any]], watermark: int,
               registered: int | None, out: list[tuple[Any, ...]]) -> None:
        """Fire, for each key, the timers Spark would fire now (temporal: at or below the
        watermark), then write the bucket back, without the keys left with nothing (no
        table row, version, held event or timer), and keep its one timer at its keys'
        earliest. One pass over the keys."""
        temporal = self.spec.mode == "temporal"
        wanted: int | None = None
        empty: list[str] = []
        for k, ks in keys.items():
            timers = ks.get("timers") if temporal else None
            if timers:
                low = min(timers)
                if low <= watermark:
                    timers = ks["timers"] = {t for t in timers if t > watermark}
                    self._expire(ks, watermark, out)
                    low = min(timers) if timers else None
                if low is not None and (wanted is None or low < wanted):
                    wanted = low
            if not any(ks.values()):
                empty.append(k)
        for k in empty:
            del keys[k]
        buckets.store(self.handle, self.bucket, before, keys, registered, wanted)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before, keys, timer = buckets.load(self.bucket)
        by_key: dict[str, tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = {}
        table_mode = self.spec.mode == "table"
        for frame in rows:
            if frame[_T].isna().any():
                raise StreamingError("an event time or valid_from is null: every event and "
                                     "table row of a temporal join needs one")
            right = (frame[_SIDE] == "R").to_numpy()
            tables, events = frame[right], frame[~right]
            for k, t, row in zip(tables[_KEY].tolist(), tables[_T].tolist(),
                                 tables[_RIGHT].tolist(), strict=True):
                by_key.setdefault(k, ([], []))[0].append((t, row))
            ev = [events[c].tolist() for c in (_KEY, _T, _LEFT)]
            if table_mode:
                ev += [events[_PK].tolist(), events[_LEFT_OP].tolist()]
                for k, *rest in zip(*ev, strict=True):
                    by_key.setdefault(k, ([], []))[1].append(tuple(rest))
            else:
                for k, t, row in zip(*ev, strict=True):
                    by_key.setdefault(k, ([], []))[1].append((t, row, None, None))
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[tuple[Any, ...]] = []
        for k, (tables, events) in by_key.items():
            ks = keys.setdefault(k, {})
            # stable: arrival order within one time (all of it in latest and table modes)
            tables.sort(key=_time)
            events.sort(key=_time)
            if self.spec.mode == "latest":
                self._latest(ks, tables, events, out)
            elif self.spec.mode == "temporal":
                self._temporal(ks, tables, events, watermark, out)
            else:
                self._table(ks, tables, events, out)
        self._store(before, keys, watermark, timer, out)
        return self._frames(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        before, keys, _ = buckets.load(self.bucket)
        out: list[tuple[Any, ...]] = []
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, keys, timerValues.getCurrentWatermarkInMs(), None, out)
        return self._frames(out)

    def _frames(self, out: list[tuple[Any, ...]]) -> Iterator[pd.DataFrame]:
        if not out:
            return iter(())
        left, right, valid_from, late = zip(*out, strict=True)
        data: dict[str, Any] = {_LEFT: list(left), _RIGHT: list(right)}
        if self.spec.mode == "temporal":
            data[_VALID_FROM] = pd.Series(valid_from, dtype=object)
            data["late"] = pd.Series(late, dtype=object)
        return iter([pd.DataFrame(data)])

    @staticmethod
    def _latest(ks: dict[str, Any], tables: list[tuple[Any, ...]],
                events: list[tuple[Any, ...]], out: list[tuple[Any, ...]]) -> None:
        if tables:
            ks["table"] = tables[-1][1]
        current = ks.get("table")
        out.extend((e[1], current, None, None) for e in events)

    def _temporal(self, ks: dict[str, Any], tables: list[tuple[Any, ...]],
                  events: list[tuple[Any, ...]], watermark: int,
                  out: list[tuple[Any, ...]]) -> None:
        versions = ks.setdefault("versions", {})
        pending = ks.setdefault("pending", {})
        timers = ks.setdefault("timers", set())
        for t, right in tables:
            versions[t] = right
        if tables:
            first = tables[0][0]
            if ks.get("first") is None or first < ks["first"]:
                ks["first"] = first
            # Once the watermark passes the newest version, the older ones are evicted
            # (_expire), also for keys that never see an event.
            timers.add(tables[-1][0])
        for t, left, _, _ in events:
            if watermark >= 0 and t <= watermark:
                out.append(self._versioned(ks, left, t, late=True))
                continue
            pending.setdefault(t, []).append(left)
            timers.add(t)

    @staticmethod
    def _versioned(ks: dict[str, Any], event: str, t: int, late: bool) -> tuple[Any, ...]:
        held = ks["versions"]
        valid = [v for v in held if v <= t]
        first = ks.get("first")
        if valid:
            since = max(valid)
        elif late and held and first is not None and first <= t:
            since = min(held)  # the version valid at t was evicted: the oldest one held
        else:
            return event, None, None, late
        return event, held[since], since, late

    def _expire(self, ks: dict[str, Any], watermark: int, out: list[tuple[Any, ...]]) -> None:
        """A temporal key's timer fired: join the held events the watermark has reached."""
        pending = ks["pending"]
        for t in sorted(pending):
            if t <= watermark:
                out.extend(self._versioned(ks, ev, t, late=False) for ev in pending.pop(t))
        # Versions no on-time event can reach any more: all but the newest one at or before
        # the watermark (later events are after the watermark; late ones join the version
        # valid at their time if held, else the oldest held: see the module docstring).
        versions = ks["versions"]
        older = sorted(v for v in versions if v <= watermark)
        for since in older[:-1]:
            del versions[since]

    @staticmethod
    def _table(ks: dict[str, Any], tables: list[tuple[Any, ...]],
               events: list[tuple[Any, ...]], out: list[tuple[Any, ...]]) -> None:
        lefts: dict[str, str] = ks.setdefault("left", {})
        if tables:
            ks["table"] = tables[-1][1]
        touched: dict[str, str] = {}
        for _, left, pk, op in events:
            if op == _MOVED_AWAY:  # re-keyed to another join key: that key emits it
                lefts.pop(pk, None)
                touched.pop(pk, None)
                continue
            lefts[pk] = left
            touched[pk] = left
        if tables:
            touched = dict(lefts)
        current = ks.get("table")
        out.extend((left, current, None, None) for left in touched.values())


def _time(row: tuple[Any, ...]) -> Any:
    return row[0]


class _ForeignKeyTracker(StatefulProcessor):
    """First stage of ``table_join``, grouped by a bucket of the left table's primary keys,
    on the pandas flavour (rows as JSON text, as in ``_JoinProcessor``): remembers each
    left row's join key (its JSON text and bucket) and, when a micro-batch changes it,
    sends a ``moved away`` row to the old join key (which drops the left row from its
    state) before the upsert to the new one. Within a batch the last row of a primary key
    wins. One pickled value per bucket: ``{primary key: (join key, join key's bucket)}``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before, known, _ = buckets.load(self.bucket)
        latest: dict[str, tuple[str, str, int]] = {}
        for frame in rows:
            for pk, k, left, kb in zip(*(frame[c].tolist()
                                         for c in (_PK, _KEY, _LEFT, _KEY_BUCKET)),
                                       strict=True):
                latest[pk] = (k, left, kb)
        out: list[tuple[str, str | None, str, str, int]] = []
        for pk, (k, left, kb) in latest.items():
            old = known.get(pk)
            if old is not None and old[0] != k:
                out.append((old[0], None, pk, _MOVED_AWAY, old[1]))
            known[pk] = (k, kb)
            out.append((k, left, pk, _UPSERT, kb))
        buckets.store(self.handle, self.bucket, before, known, None, None)
        if not out:
            return iter(())
        columns = zip(*out, strict=True)
        return iter([pd.DataFrame(dict(zip(_TRACKED, columns, strict=True)))])


def _track_foreign_keys(left: DataFrame, on: list[str], left_key: str, n: int) -> DataFrame:
    """The left side of ``table_join``'s union (``_tagged``'s columns), after the tracker."""
    schema = StructType([StructField(_KEY, StringType()), StructField(_LEFT, StringType()),
                         StructField(_PK, StringType()), StructField(_LEFT_OP, StringType()),
                         StructField(_KEY_BUCKET, LongType())])
    tracked = left.select(_as_json([left_key]).alias(_PK), _as_json(on).alias(_KEY),
                          _as_json(left.columns).alias(_LEFT),
                          _key_bucket(on, n).alias(_KEY_BUCKET),
                          _key_bucket([left_key], n).alias(BUCKET)) \
        .groupBy(BUCKET).transformWithStateInPandas(
            _ForeignKeyTracker(), schema, "Append", "None")
    none = F.lit(None).cast("string")
    return tracked.select(_KEY, F.lit(0).alias(_T), F.lit("L").alias(_SIDE), _LEFT,
                          none.alias(_RIGHT), _PK, _LEFT_OP, F.col(_KEY_BUCKET).alias(BUCKET))


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
    left_schema = StructType(list(left.schema.fields))
    right_schema = StructType(list(right.schema.fields))
    _check_json_safe("left", left_schema)
    _check_json_safe("right", right_schema)
    if spec.left_pk is not None:
        if spec.left_pk not in left.columns:
            raise SpecError(f"left_key {spec.left_pk!r} is not in the left stream")
        tagged = _track_foreign_keys(left, key, spec.left_pk, buckets)
    else:
        tagged = _tagged(left, "L", key, left_time, buckets)
    union = tagged.unionByName(_tagged(right, "R", key, right_time, buckets))
    schema = StructType([StructField(_LEFT, StringType()), StructField(_RIGHT, StringType())])
    if spec.mode == "temporal":
        schema = schema.add(_VALID_FROM, LongType()).add("late", BooleanType())
    time_mode = "None"
    if watermark is not None:
        union = with_spark_watermark(union.withColumn("__wm", F.timestamp_millis(F.col(_T))),
                                     "__wm", watermark).drop("__wm")
        time_mode = "EventTime"
    joined = union.select(*_INPUT, BUCKET).groupBy(BUCKET).transformWithStateInPandas(
        _JoinProcessor(spec), schema, "Append", time_mode)
    parsed = joined.select(F.from_json(_LEFT, left_schema, _JSON).alias("left"),
                           F.from_json(_RIGHT, right_schema, _JSON).alias("right"),
                           *[F.col(f.name) for f in schema.fields[2:]])
    extras = {"valid_from": F.timestamp_millis(F.col(_VALID_FROM)), "late": F.col("late")}
    return parsed.select(*[F.col("left").getField(k).alias(k) for k in key], "left", "right",
                         *[extras[f.name].alias(f.name) for f in extra])


def latest_join(events: DataFrame, table: DataFrame, *, on: list[str],
                buckets: int = DEFAULT_BUCKETS) -> DataFrame:
    """Each event with the table's latest row for its key (``right`` null if none yet).
    A micro-batch's table updates are applied before its events (module docstring).

    ``table`` is a changelog stream (e.g. a compacted topic read with read_events). Output:
    the key columns, ``left`` (the event) and ``right`` (the table row) as structs.
    """
    spec = _JoinSpec("latest", tuple(on))
    return _join(events, table, spec, None, None, None, [], buckets)


def temporal_join(events: DataFrame, table: DataFrame, *, on: list[str], event_time: str,
                  valid_from: str, watermark: str | int | dt.timedelta,
                  buckets: int = DEFAULT_BUCKETS) -> DataFrame:
    """Each event with the table row valid at its ``event_time``: the version with the
    greatest ``valid_from`` at or before it. Output adds ``valid_from`` and ``late``; late
    events join as the module docstring says."""
    spec = _JoinSpec("temporal", tuple(on))
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
    spec = _JoinSpec("table", tuple(on), left_key)
    return _join(left, right, spec, None, None, None, [], buckets)
