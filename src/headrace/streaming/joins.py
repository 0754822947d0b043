"""Stream joins: interval (stream-stream), latest-value and temporal (stream-table), and a
table-table join kept as a live view.

- ``interval_join`` (module ``interval``): a stream-stream join with time bounds and
  watermarks on both sides, inner or left outer (unmatched left rows come out once the
  watermark passes the end of their interval), batch for batch as Spark's own join, on
  transformWithState so that a savepoint can carry its state. State is evicted by watermark.
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
or the versions the watermark can still reach (temporal, worked a bucket at a time with
pandas: ``_TemporalProcessor``). A checkpoint stays tied to its ``buckets``. Each side's
rows cross the operator as JSON text: Spark's ``to_json`` before, ``from_json`` after,
lossless for every type those take (timestamps to the microsecond); a map with non-string
keys is refused with ``SpecError`` (``from_json`` reads string keys only).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.savepoints import Savepoint
from headrace.savepoints.state import Resume
from headrace.streaming import buckets, rowjson
from headrace.streaming.errors import SpecError, StreamingError
from headrace.streaming.interval import interval_join  # noqa: F401  (public here too)
from headrace.streaming.windows import BUCKET, DEFAULT_BUCKETS, with_spark_watermark

# table_join's change marker on left rows: an upsert, or "moved away to another join key"
_UPSERT = "U"
_MOVED_AWAY = "D"

# Each processor's operator name and state schema version (``buckets.header``): the
# layouts the classes below describe. A change ships a migration
# (``headrace.savepoints.migrations``).
STATE_VERSIONS = {"latest_join": 1, "table_join": 1, "table_join.tracker": 1,
                  "temporal_join": 1}
# What a savepoint's join state needs unchanged, and why.
_FIXED = {"key": "the state is kept per join key",
          "left_key": "the tracker's state is kept per left primary key",
          "buckets": "keys are hashed into that many buckets"}
Origin = Savepoint | str | Path | None


def _resume(origin: Origin, df: DataFrame, name: str, params: dict[str, Any]
            ) -> tuple[GroupedData | None, Resume | None]:
    """The initial state and ``Resume`` of join operator ``name`` from a savepoint."""
    if origin is None:
        return None, None
    return Savepoint.of(origin).resume(df.sparkSession, operator=name, family=(name,),
                                       version=STATE_VERSIONS[name], params=params,
                                       fixed=_FIXED, key_column=BUCKET)


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
_JSON = rowjson.OPTIONS
_as_json = rowjson.as_json
_check_json_safe = rowjson.check_json_safe
_key_bucket = rowjson.key_bucket


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


class _JoinProcessor(buckets.BucketProcessor):
    """``latest_join`` and ``table_join``, grouped by a bucket of join keys
    (``windows.BUCKET``), on the pandas flavour of transformWithState: rows arrive as
    columns of JSON text and come out as such, so no Python object is built per field. One
    pickled value per bucket holds every key's state, so a micro-batch costs a few state
    round trips per bucket, not per key. Per key (its JSON text): ``table`` (the latest
    row) and ``left`` (left primary key -> row: table mode). Output rows: (left, right)."""

    def __init__(self, spec: _JoinSpec, params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        self.spec = spec
        name = f"{spec.mode}_join"
        self.head = buckets.header(name, STATE_VERSIONS[name], params or {})
        self.resume = resume

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    def _store(self, before: bytes | None, keys: dict[str, dict[str, Any]]) -> None:
        """Write the bucket back without the keys left with nothing (no table row or left
        row)."""
        for k in [k for k, ks in keys.items() if not any(ks.values())]:
            del keys[k]
        buckets.store(self.handle, self.bucket, before, keys, None, None, head=self.head)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before, keys, _ = buckets.load(self.bucket)
        by_key: dict[str, tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = {}
        table_mode = self.spec.mode == "table"
        for frame in rows:
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
                    by_key.setdefault(k, ([], []))[1].append((t, row))
        out: list[tuple[Any, ...]] = []
        for k, (tables, events) in by_key.items():
            ks = keys.setdefault(k, {})
            # stable: arrival order within one time (all of it in latest and table modes)
            tables.sort(key=_time)
            events.sort(key=_time)
            if self.spec.mode == "latest":
                self._latest(ks, tables, events, out)
            else:
                self._table(ks, tables, events, out)
        self._store(before, keys)
        if not out:
            return iter(())
        left, right = zip(*out, strict=True)
        return iter([pd.DataFrame({_LEFT: list(left), _RIGHT: list(right)})])

    @staticmethod
    def _latest(ks: dict[str, Any], tables: list[tuple[Any, ...]],
                events: list[tuple[Any, ...]], out: list[tuple[Any, ...]]) -> None:
        if tables:
            ks["table"] = tables[-1][1]
        current = ks.get("table")
        out.extend((e[1], current) for e in events)

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
        out.extend((left, current) for left in touched.values())


def _time(row: tuple[Any, ...]) -> Any:
    return row[0]


class _TemporalProcessor(buckets.BucketProcessor):
    """``temporal_join``'s processor: a bucket of join keys at a time, with pandas, on the
    pandas flavour of transformWithState. A bucket's state is four tables, pickled as numpy
    columns (``_TemporalState``): the versions held (key, valid_from, row), the first
    valid_from each key ever stored, the events held until the watermark passes their
    time (key, time, event, in arrival order) and the keys' event-time timers (key, time).
    A micro-batch with watermark ``W``:

    1. stores its table rows as versions (a later row with the same key and valid_from
       replaces the earlier one), lowers the keys' first valid_from, and sets a timer per
       key at the newest valid_from it received;
    2. joins its late events (time at or before ``W``) at once, with the version valid at
       their time if held, else with the key's oldest version held if the key's first
       valid_from is at or before their time (flagged by ``valid_from`` after the event),
       else with none; holds the others, each with a timer at its time;
    3. fires, for each key, its timers at or before ``W``: joins the key's held events
       up to ``W`` with the version valid at their time (none if there is none), and
       evicts the key's versions at or before ``W`` but the newest of them.

    That is, batch for batch, what state and timers per key give (a key's timer fires when
    the watermark reaches it; versions are evicted only then). The bucket registers one
    real timer, its keys' earliest. Output rows: (left, right, valid_from ms, late)."""

    def __init__(self, params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        self.head = buckets.header("temporal_join", STATE_VERSIONS["temporal_join"],
                                   params or {})
        self.resume = resume

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before, stored, timer = buckets.load(self.bucket)
        state = _TemporalState(stored)
        frames = list(rows)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        if frame[_T].isna().any():
            raise StreamingError("an event time or valid_from is null: every event and "
                                 "table row of a temporal join needs one")
        watermark = self.watermark(timerValues)
        right = (frame[_SIDE] == "R").to_numpy()
        keys = frame[_KEY].to_numpy(dtype=object)
        times = frame[_T].to_numpy(dtype=np.int64)
        state.add_versions(keys[right], times[right], frame[_RIGHT].to_numpy(dtype=object)[right])
        events = ~right
        out = [state.add_events(keys[events], times[events],
                                frame[_LEFT].to_numpy(dtype=object)[events], watermark),
               state.fire(watermark)]
        self._store(before, state, timer)
        return iter([f for f in out if f is not None])

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        before, stored, _ = buckets.load(self.bucket)
        state = _TemporalState(stored)
        out = state.fire(self.watermark(timerValues))
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, state, None)
        return iter([] if out is None else [out])

    def _store(self, before: bytes | None, state: _TemporalState,
               registered: int | None) -> None:
        buckets.store(self.handle, self.bucket, before, state.columns(), registered,
                      state.next_timer(), head=self.head)


_NO_OBJECTS = np.empty(0, object)
_NO_TIMES = np.empty(0, np.int64)
_TEMPORAL_COLUMNS = ("vk", "vt", "vr", "fk", "ft", "pk", "pt", "pe", "tk", "tt")


class _TemporalState:
    """A temporal bucket's tables as numpy columns: versions ``vk, vt, vr`` (key,
    valid_from, row; one per key and valid_from), first valid_from ``fk, ft`` (one per key
    with versions), held events ``pk, pt, pe`` (key, time, event; arrival order) and the
    timers set by versions ``tk, tt`` (a held event's timer is its own time). Keys are the
    join key's JSON text. ``stored``: what ``columns()`` returned, or a bucket written
    before this layout (a map from key to its state), converted."""

    def __init__(self, stored: dict[str, Any]) -> None:
        if stored and "vk" not in stored:
            stored = _per_key_to_columns(stored)
        def column(name: str) -> Any:
            return stored.get(name, _NO_TIMES if name[1] == "t" else _NO_OBJECTS)

        self.vk, self.vt, self.vr = column("vk"), column("vt"), column("vr")
        self.fk, self.ft = column("fk"), column("ft")
        self.pk, self.pt, self.pe = column("pk"), column("pt"), column("pe")
        self.tk, self.tt = column("tk"), column("tt")

    def columns(self) -> dict[str, Any]:
        """What to store: empty when the bucket holds nothing."""
        if not (len(self.vk) or len(self.pk) or len(self.tk)):
            return {}
        return {name: getattr(self, name) for name in _TEMPORAL_COLUMNS}

    def next_timer(self) -> int | None:
        """The earliest time at which ``fire`` has work: a version timer or a held event."""
        lows = [int(a.min()) for a in (self.tt, self.pt) if len(a)]
        return min(lows) if lows else None

    def add_versions(self, keys: Any, times: Any, rows: Any) -> None:
        """Step 1 of the class docstring (``_TemporalProcessor``)."""
        if not len(keys):
            return
        vk, vt = np.concatenate([self.vk, keys]), np.concatenate([self.vt, times])
        vr = np.concatenate([self.vr, rows])
        repeated = pd.DataFrame({"k": vk, "t": vt}).duplicated(keep="last").to_numpy()
        if repeated.any():
            vk, vt, vr = vk[~repeated], vt[~repeated], vr[~repeated]
        self.vk, self.vt, self.vr = vk, vt, vr
        span = pd.Series(times).groupby(keys, sort=False).agg(["min", "max"])
        names = span.index.to_numpy(dtype=object)
        lows = span["min"].to_numpy(dtype=np.int64)
        at = pd.Index(self.fk).get_indexer(names)
        known = at >= 0
        ft = self.ft.copy()
        ft[at[known]] = np.minimum(ft[at[known]], lows[known])
        self.fk = np.concatenate([self.fk, names[~known]])
        self.ft = np.concatenate([ft, lows[~known]])
        self.tk = np.concatenate([self.tk, names])
        self.tt = np.concatenate([self.tt, span["max"].to_numpy(dtype=np.int64)])

    def add_events(self, keys: Any, times: Any, events: Any,
                   watermark: int) -> pd.DataFrame | None:
        """Step 2: the late events joined (or None), the others held."""
        late = (times <= watermark) if watermark >= 0 else np.zeros(len(times), bool)
        out = self._joined(keys[late], times[late], events[late], True) if late.any() \
            else None
        held = ~late
        self.pk = np.concatenate([self.pk, keys[held]])
        self.pt = np.concatenate([self.pt, times[held]])
        self.pe = np.concatenate([self.pe, events[held]])
        return out

    def fire(self, watermark: int) -> pd.DataFrame | None:
        """Step 3: the held events the watermark reached, joined (or None); the versions of
        the keys whose timers fired evicted."""
        due_timers, due_events = self.tt <= watermark, self.pt <= watermark
        if not (due_timers.any() or due_events.any()):
            return None
        fired = pd.unique(np.concatenate([self.tk[due_timers], self.pk[due_events]]))
        out = None
        if due_events.any():
            out = self._joined(self.pk[due_events], self.pt[due_events],
                               self.pe[due_events], False)
            kept = ~due_events
            self.pk, self.pt, self.pe = self.pk[kept], self.pt[kept], self.pe[kept]
        self.tk, self.tt = self.tk[~due_timers], self.tt[~due_timers]
        reached = np.flatnonzero(self.vt <= watermark)
        reached = reached[pd.Index(fired).get_indexer(self.vk[reached]) >= 0]
        if len(reached):
            newest = pd.Series(self.vt[reached]).groupby(self.vk[reached], sort=False) \
                .transform("max").to_numpy()
            dropped = reached[self.vt[reached] < newest]
            if len(dropped):
                kept = np.ones(len(self.vk), bool)
                kept[dropped] = False
                self.vk, self.vt, self.vr = self.vk[kept], self.vt[kept], self.vr[kept]
        return out

    def _joined(self, keys: Any, times: Any, events: Any, late: bool) -> pd.DataFrame:
        """Each event with the version valid at its time (the greatest valid_from at or
        before it); late ones without it, with their key's oldest version held when the
        key's first valid_from is at or before their time."""
        n = len(keys)
        version = np.full(n, -1, np.int64)
        if len(self.vk):
            asked = pd.DataFrame({"k": keys, "t": times, "i": np.arange(n)}) \
                .sort_values("t", kind="stable")
            held = pd.DataFrame({"k": self.vk, "vt": self.vt, "v": np.arange(len(self.vk))}) \
                .sort_values("vt", kind="stable")
            found = pd.merge_asof(asked, held, left_on="t", right_on="vt", by="k",
                                  direction="backward")
            hit = found["v"].notna().to_numpy()
            version[found["i"].to_numpy()[hit]] = found["v"].to_numpy()[hit].astype(np.int64)
            missing = np.flatnonzero(version < 0)
            if late and len(missing):
                version[missing] = self._oldest(keys[missing], times[missing])
        has = version >= 0
        right = np.full(n, None, object)
        right[has] = self.vr[version[has]]
        valid_from = np.full(n, None, object)
        valid_from[has] = self.vt[version[has]].tolist()
        return pd.DataFrame({_LEFT: events, _RIGHT: right, _VALID_FROM: valid_from,
                             "late": np.full(n, late, object)})

    def _oldest(self, keys: Any, times: Any) -> Any:
        """Per late event without its version: the position of its key's oldest version
        held if the key's first valid_from is at or before its time, else -1."""
        mine = np.flatnonzero(pd.Index(pd.unique(keys)).get_indexer(self.vk) >= 0)
        if not len(mine):
            return np.full(len(keys), -1, np.int64)
        oldest = pd.Series(self.vt[mine], index=mine).groupby(self.vk[mine]).idxmin()
        position = oldest.reindex(keys).to_numpy(dtype=float)
        first = pd.Series(self.ft, index=self.fk).reindex(keys).to_numpy(dtype=float)
        ok = ~np.isnan(position) & (first <= times)
        return np.where(ok, np.nan_to_num(position, nan=-1), -1).astype(np.int64)


def _per_key_to_columns(keys: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A temporal bucket stored per key (``{"versions": {valid_from: row}, "pending":
    {time: [event]}, "timers": {time}, "first": valid_from}`` per key) as columns."""
    cols: dict[str, list[Any]] = {name: [] for name in _TEMPORAL_COLUMNS}
    for key, ks in keys.items():
        for t, row in (ks.get("versions") or {}).items():
            cols["vk"].append(key)
            cols["vt"].append(t)
            cols["vr"].append(row)
        if ks.get("first") is not None:
            cols["fk"].append(key)
            cols["ft"].append(ks["first"])
        pending = ks.get("pending") or {}
        for t in sorted(pending):
            for event in pending[t]:
                cols["pk"].append(key)
                cols["pt"].append(t)
                cols["pe"].append(event)
        for t in ks.get("timers") or ():
            if t not in pending:
                cols["tk"].append(key)
                cols["tt"].append(t)
    return {name: np.array(values, dtype=np.int64 if name[1] == "t" else object)
            for name, values in cols.items()}


class _ForeignKeyTracker(buckets.BucketProcessor):
    """First stage of ``table_join``, grouped by a bucket of the left table's primary keys,
    on the pandas flavour (rows as JSON text, as in ``_JoinProcessor``): remembers each
    left row's join key (its JSON text and bucket) and, when a micro-batch changes it,
    sends a ``moved away`` row to the old join key (which drops the left row from its
    state) before the upsert to the new one. Within a batch the last row of a primary key
    wins. One pickled value per bucket: ``{primary key: (join key, join key's bucket)}``."""

    def __init__(self, params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        self.head = buckets.header("table_join.tracker", STATE_VERSIONS["table_join.tracker"],
                                   params or {})
        self.resume = resume

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

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
        buckets.store(self.handle, self.bucket, before, known, None, None, head=self.head)
        if not out:
            return iter(())
        columns = zip(*out, strict=True)
        return iter([pd.DataFrame(dict(zip(_TRACKED, columns, strict=True)))])


def _track_foreign_keys(left: DataFrame, on: list[str], left_key: str, n: int,
                        origin: Origin = None) -> DataFrame:
    """The left side of ``table_join``'s union (``_tagged``'s columns), after the tracker."""
    schema = StructType([StructField(_KEY, StringType()), StructField(_LEFT, StringType()),
                         StructField(_PK, StringType()), StructField(_LEFT_OP, StringType()),
                         StructField(_KEY_BUCKET, LongType())])
    params = {"key": on, "left_key": left_key, "buckets": n}
    initial, resume = _resume(origin, left, "table_join.tracker", params)
    tracked = left.select(_as_json([left_key]).alias(_PK), _as_json(on).alias(_KEY),
                          _as_json(left.columns).alias(_LEFT),
                          _key_bucket(on, n).alias(_KEY_BUCKET),
                          _key_bucket([left_key], n).alias(BUCKET)) \
        .groupBy(BUCKET).transformWithStateInPandas(
            _ForeignKeyTracker(params, resume), schema, "Append", "None",
            initialState=initial)
    none = F.lit(None).cast("string")
    return tracked.select(_KEY, F.lit(0).alias(_T), F.lit("L").alias(_SIDE), _LEFT,
                          none.alias(_RIGHT), _PK, _LEFT_OP, F.col(_KEY_BUCKET).alias(BUCKET))


def _join(left: DataFrame, right: DataFrame, spec: _JoinSpec, left_time: str | None,
          right_time: str | None, watermark: str | int | dt.timedelta | None,
          extra: list[StructField], buckets: int, origin: Origin = None) -> DataFrame:
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
        tagged = _track_foreign_keys(left, key, spec.left_pk, buckets, origin)
    else:
        tagged = _tagged(left, "L", key, left_time, buckets)
    union = tagged.unionByName(_tagged(right, "R", key, right_time, buckets))
    schema = StructType([StructField(_LEFT, StringType()), StructField(_RIGHT, StringType())])
    if spec.mode == "temporal":
        schema = schema.add(_VALID_FROM, LongType()).add("late", BooleanType())
    name = f"{spec.mode}_join"
    params = {"key": key, "left_key": spec.left_pk, "buckets": buckets}
    initial, resume = _resume(origin, left, name, params)
    time_mode = "None"
    if watermark is not None:
        union = with_spark_watermark(union.withColumn("__wm", F.timestamp_millis(F.col(_T))),
                                     "__wm", watermark, resume).drop("__wm")
        time_mode = "EventTime"
    joined = union.select(*_INPUT, BUCKET).groupBy(BUCKET).transformWithStateInPandas(
        _TemporalProcessor(params, resume) if spec.mode == "temporal"
        else _JoinProcessor(spec, params, resume), schema,
        "Append", time_mode, initialState=initial)
    parsed = joined.select(F.from_json(_LEFT, left_schema, _JSON).alias("left"),
                           F.from_json(_RIGHT, right_schema, _JSON).alias("right"),
                           *[F.col(f.name) for f in schema.fields[2:]])
    extras = {"valid_from": F.timestamp_millis(F.col(_VALID_FROM)), "late": F.col("late")}
    return parsed.select(*[F.col("left").getField(k).alias(k) for k in key], "left", "right",
                         *[extras[f.name].alias(f.name) for f in extra])


def latest_join(events: DataFrame, table: DataFrame, *, on: list[str],
                buckets: int = DEFAULT_BUCKETS, from_savepoint: Origin = None) -> DataFrame:
    """Each event with the table's latest row for its key (``right`` null if none yet).
    A micro-batch's table updates are applied before its events (module docstring).

    ``table`` is a changelog stream (e.g. a compacted topic read with read_events). Output:
    the key columns, ``left`` (the event) and ``right`` (the table row) as structs.
    ``from_savepoint`` (every join here): start from a savepoint's state
    (``headrace.savepoints``); the join key, ``left_key`` and ``buckets`` must not change.
    """
    spec = _JoinSpec("latest", tuple(on))
    return _join(events, table, spec, None, None, None, [], buckets, from_savepoint)


def temporal_join(events: DataFrame, table: DataFrame, *, on: list[str], event_time: str,
                  valid_from: str, watermark: str | int | dt.timedelta,
                  buckets: int = DEFAULT_BUCKETS, from_savepoint: Origin = None) -> DataFrame:
    """Each event with the table row valid at its ``event_time``: the version with the
    greatest ``valid_from`` at or before it. Output adds ``valid_from`` and ``late``; late
    events join as the module docstring says."""
    spec = _JoinSpec("temporal", tuple(on))
    return _join(events, table, spec, event_time, valid_from, watermark,
                 [StructField("valid_from", TimestampType()),
                  StructField("late", BooleanType())], buckets, from_savepoint)


def table_join(left: DataFrame, right: DataFrame, *, on: list[str],
               left_key: str, buckets: int = DEFAULT_BUCKETS,
               from_savepoint: Origin = None) -> DataFrame:
    """A live view of ``left`` (e.g. orders, primary key ``left_key``) joined with ``right``
    (e.g. products, keyed by ``on``). Every change re-emits the view rows it affects; read
    the output as upserts keyed by ``left_key``. A left row may change its ``on`` value
    (an order moved to another product), as in a KTable-KTable foreign-key join: the old
    join key forgets it (its later changes no longer re-emit that row) and the new one
    emits it, so the upsert view holds the new join row only. Within one micro-batch the
    last row of a ``left_key`` wins: produce ``left`` keyed by ``left_key`` so its changes
    keep their order."""
    spec = _JoinSpec("table", tuple(on), left_key)
    return _join(left, right, spec, None, None, None, [], buckets, from_savepoint)
