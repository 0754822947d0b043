"""The columnar processor behind ``windowed`` for tumbling, hopping, session and per-event
sliding windows whose aggregates are counts, sums, averages, minima and maxima: the common
case, worked a bucket at a time with pandas instead of an event at a time in Python.

A bucket's state is one table, a row per (key, window): the key columns, ``start``,
``end``, ``emitted`` and each aggregate's partial state (a count; a sum and a count of the
values summed; a minimum or maximum), pickled as numpy columns. A micro-batch with
watermark ``W``:

1. takes its events into windows. Tumbling and hopping: every event goes to its windows;
   one none of whose windows takes events any more (``end + allowed_lateness <= W``) is a
   ``late`` row. Sessions: every event is a window ``[t, t + gap]``; it merges with every
   session it touches (an event exactly a gap after a session joins it), and is late if
   the session it would make takes no more events. Events are taken in event-time order,
   so a late event bridges nothing; whether one is late is decided by replaying, for its
   key alone, the intervals (never the aggregates) of its key's sessions. The sessions
   left then come from one interval merge of the table and the accepted events, and a
   session that was emitted final and grew is retracted. Sliding windows: an event is late
   if its own window (ending at it) takes no more events; the table holds a row per (key,
   event time) and the window ending at a row folds the rows of its key a size before it
   (ranges found by binary search over the table sorted by key and time, folded with
   ``reduceat``); an event touches its own window and the emitted windows it falls in
   (every window it falls in with ``emit="updates"``);
2. aggregates per (key, window) and merges that into the table;
3. emits every window the batch touched that is closed (``end <= W``), as final, or every
   touched window with ``emit="updates"`` (final once closed);
4. emits, as final, every window the watermark closed that was not emitted yet, then drops
   windows past ``end + allowed_lateness`` (sliding: ``end + size + allowed_lateness``,
   as later windows still read them);
5. keeps one timer: the next watermark at which step 4 would change anything.

That is, batch for batch, what ``processor.WindowProcessor`` does with state and timers per
key (its per-key timer fires exactly when step 4 has work for that key); only the order of
rows within a batch differs. Null and NaN aggregate inputs are skipped, as SQL skips nulls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessorHandle,
    TimerValues,
)

from headrace.streaming import buckets
from headrace.streaming.errors import StreamingError
from headrace.streaming.frames import utc_times
from headrace.streaming.timeutil import epoch_ms
from headrace.streaming.window_spec import EVENT_JSON, WindowedSpec

KINDS = ("count", "sum", "avg", "min", "max")
OPERATOR = "windowed.columnar"
STATE_VERSION = 1
"""The layout of a bucket described above; a change ships a migration
(``headrace.savepoints.migrations``)."""
_NAT = np.iinfo(np.int64).min


def handles(spec: WindowedSpec) -> bool:
    """Whether this processor computes ``spec`` (else ``processor.WindowProcessor`` does)."""
    return spec.window.kind in ("tumbling", "hopping", "session", "sliding") and all(
        a.kind in KINDS for a in spec.aggs)


class ColumnarWindowProcessor(buckets.BucketProcessor):
    def __init__(self, spec: WindowedSpec, params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        assert handles(spec)
        self.spec = spec
        self.head = buckets.header(OPERATOR, STATE_VERSION, params or {})
        self.resume = resume
        self.keys = list(spec.keys)
        self.size = spec.window.size_ms
        self.slide = spec.window.slide_ms if spec.window.kind == "hopping" else self.size
        self.lateness = spec.allowed_lateness_ms
        # how long past its end a window's rows are kept: a sliding window's are read by
        # the windows ending up to a size later
        self.linger = self.size if spec.window.kind == "sliding" else 0
        # partial-state columns per aggregate, and how each merges
        self.parts: dict[str, str] = {}
        for i, a in enumerate(spec.aggs):
            if a.kind == "count":
                self.parts[f"n{i}"] = "sum"
            elif a.kind in ("sum", "avg"):
                self.parts[f"s{i}"] = "sum"
                self.parts[f"c{i}"] = "sum"
            else:
                self.parts[f"v{i}"] = a.kind
        self.group = [*(f"k{i}" for i in range(len(self.keys))), "start", "end"]
        self.columns = [*self.group, "emitted", *self.parts]
        self.dtypes = {"start": "int64", "end": "int64", "emitted": bool,
                       **{c: "int64" if c[0] in "nc" else "float64" for c in self.parts}}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> tuple[bytes | None, pd.DataFrame, int | None]:
        before, columns, timer = buckets.load(self.bucket)
        if not columns:
            columns = {c: np.array([], dtype=self.dtypes.get(c, object)) for c in self.columns}
        return before, pd.DataFrame(columns), timer

    def _store(self, before: bytes | None, table: pd.DataFrame, registered: int | None,
               wanted: int | None) -> None:
        columns = {} if table.empty else {c: table[c].to_numpy() for c in self.columns}
        buckets.store(self.handle, self.bucket, before, columns, registered, wanted,
                      head=self.head)

    # -- Spark's calls ---------------------------------------------------------------------
    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        watermark = self.watermark(timerValues)
        before, table, timer = self._load()
        frames = [f for f in rows if len(f)]
        out: list[dict[str, np.ndarray]] = []
        touched = pd.Series(False, index=table.index)
        if frames:
            events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            table, touched = self._add(events, table, watermark, out)
        table = self._settle(table, touched, watermark, out)
        self._store(before, table, timer, self._next_timer(table, watermark))
        return self._frames(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        watermark = self.watermark(timerValues)
        before, table, _ = self._load()
        out: list[dict[str, np.ndarray]] = []
        table = self._settle(table, pd.Series(False, index=table.index), watermark, out)
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, table, None, self._next_timer(table, watermark))
        return self._frames(out)

    # -- steps -----------------------------------------------------------------------------
    def _expired(self, end: np.ndarray, watermark: int) -> np.ndarray:
        """The toolkit's one lateness rule (see ``processor``)."""
        if watermark < 0:
            return np.zeros(len(end), dtype=bool)
        return end + self.lateness <= watermark

    def _times(self, events: pd.DataFrame) -> np.ndarray:
        times = events[self.spec.event_time]
        if times.isna().any():
            raise StreamingError(f"{self.spec.event_time} is null in an event: every event "
                                 "needs an event time")
        return epoch_ms(times)

    def _late(self, events: pd.DataFrame, t: np.ndarray, late: np.ndarray, watermark: int,
              out: list[dict[str, np.ndarray]]) -> None:
        if late.any():
            rows = events.loc[late]
            lt = t[late]
            out.append({"kind": np.full(len(lt), "late", dtype=object),
                        **{k: rows[k].to_numpy() for k in self.keys},
                        "event_time": lt, "lateness_ms": (watermark - lt).astype(object),
                        "event": rows[EVENT_JSON].to_numpy()})

    def _partials(self, events: pd.DataFrame, which: np.ndarray, starts: np.ndarray,
                  ends: np.ndarray) -> pd.DataFrame:
        """One table row per (event ``which[i]``, window ``starts[i]``..``ends[i]``)."""
        part: dict[str, Any] = {f"k{i}": events[k].to_numpy()[which]
                                for i, k in enumerate(self.keys)}
        part["start"] = starts
        part["end"] = ends
        for i, a in enumerate(self.spec.aggs):
            if a.kind == "count":
                part[f"n{i}"] = np.ones(len(which), dtype="int64")
                continue
            assert a.column is not None
            values = pd.to_numeric(events[a.column], errors="coerce").to_numpy(
                dtype="float64", na_value=np.nan)[which]
            present = ~np.isnan(values)
            if a.kind in ("sum", "avg"):
                part[f"s{i}"] = np.where(present, values, 0.0)
                part[f"c{i}"] = present.astype("int64")
            else:
                part[f"v{i}"] = values
        return pd.DataFrame(part)

    def _add(self, events: pd.DataFrame, table: pd.DataFrame, watermark: int,
             out: list[dict[str, np.ndarray]]) -> tuple[pd.DataFrame, pd.Series]:
        if self.spec.window.kind == "session":
            return self._add_sessions(events, table, watermark, out)
        if self.spec.window.kind == "sliding":
            return self._add_sliding(events, table, watermark, out)
        t = self._times(events)
        # window k of an event starts at last - k * slide, while start > t - size
        last = t - t % self.slide
        per_event = -(-self.size // self.slide)
        starts = np.concatenate([last - k * self.slide for k in range(per_event)])
        which = np.tile(np.arange(len(t)), per_event)
        inside = starts > t[which] - self.size
        live = inside & ~self._expired(starts + self.size, watermark)
        taken = np.zeros(len(t), dtype=bool)
        taken[which[live]] = True
        self._late(events, t, ~taken, watermark, out)
        which, starts = which[live], starts[live]
        if not len(which):
            return table, pd.Series(False, index=table.index)
        merged, touched = self._merge(table, events, which, starts, starts + self.size)
        return merged, pd.Series(touched)

    def _merge(self, table: pd.DataFrame, events: pd.DataFrame, which: np.ndarray,
               starts: np.ndarray, ends: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """The table with the events' partials (``_partials``) merged in per (key, window),
        and which of its rows took events."""
        batch = self._partials(events, which, starts, ends).groupby(
            self.group, sort=False, dropna=False).agg(self.parts).reset_index()
        batch["emitted"] = False
        batch["new"] = True
        merged = batch
        if len(table):
            how = {**self.parts, "emitted": "any", "new": "any"}
            merged = (pd.concat([table.assign(new=False), batch], ignore_index=True)
                      .groupby(self.group, sort=False, dropna=False).agg(how).reset_index())
        new = merged.pop("new").to_numpy(dtype=bool)
        return merged[self.columns], new

    def _session_late(self, events: pd.DataFrame, t: np.ndarray, table: pd.DataFrame,
                      watermark: int) -> np.ndarray:
        """Which events (sorted by time) are late: replayed per key, intervals only, for
        the keys with an event that could be (its own session ``[t, t + gap]`` already
        past lateness); any other event makes a session that takes events."""
        gap, late = self.size, np.zeros(len(t), dtype=bool)
        if watermark < 0:
            return late
        maybe = t + gap + self.lateness <= watermark
        if not maybe.any():
            return late
        event_keys = list(zip(*(events[k].tolist() for k in self.keys), strict=True)) \
            if self.keys else [()] * len(t)
        suspects = {event_keys[i] for i in np.flatnonzero(maybe)}
        sessions: dict[tuple[Any, ...], list[tuple[int, int]]] = {k: [] for k in suspects}
        held = zip(zip(*(table[f"k{i}"].tolist() for i in range(len(self.keys))),
                       strict=True) if self.keys else [()] * len(table),
                   table["start"].tolist(), table["end"].tolist(), strict=True)
        for k, start, end in held:
            if k in sessions:
                sessions[k].append((start, end))
        for i, k in enumerate(event_keys):
            if k not in sessions:
                continue
            ti = int(t[i])
            joined = [w for w in sessions[k] if w[0] <= ti + gap and ti <= w[1]]
            start = min([ti, *(w[0] for w in joined)])
            end = max([ti + gap, *(w[1] for w in joined)])
            if end + self.lateness <= watermark:
                late[i] = True
                continue
            sessions[k] = [w for w in sessions[k] if w not in joined] + [(start, end)]
        return late

    def _add_sessions(self, events: pd.DataFrame, table: pd.DataFrame, watermark: int,
                      out: list[dict[str, np.ndarray]]) -> tuple[pd.DataFrame, pd.Series]:
        t = self._times(events)
        order = np.argsort(t, kind="stable")
        events, t = events.iloc[order].reset_index(drop=True), t[order]
        late = self._session_late(events, t, table, watermark)
        self._late(events, t, late, watermark, out)
        which = np.flatnonzero(~late)
        if not len(which):
            return table, pd.Series(False, index=table.index)
        batch = self._partials(events, which, t[which], t[which] + self.size)
        batch["emitted"] = False
        rows = pd.concat([table.assign(event=False), batch.assign(event=True)],
                         ignore_index=True)
        keys = [f"k{i}" for i in range(len(self.keys))]
        rows = rows.sort_values([*keys, "start"], kind="stable", na_position="last",
                                ignore_index=True)
        start = rows["start"].to_numpy(dtype="int64")
        end = rows["end"].to_numpy(dtype="int64")
        kid = (rows.groupby(keys, sort=False, dropna=False).ngroup().to_numpy() if keys
               else np.zeros(len(rows), dtype="int64"))
        # a new session where the key changes or a window starts after all before it end
        reach = pd.Series(end).groupby(kid).cummax().to_numpy()
        first = np.r_[True, kid[1:] != kid[:-1]]
        sid = np.cumsum(first | (start > np.r_[np.iinfo(np.int64).min, reach[:-1]])) - 1
        rows["sid"] = sid
        how: dict[str, Any] = {"start": "min", "end": "max", **self.parts, "event": "any"}
        merged = rows.groupby("sid", sort=True).agg(how).reset_index(drop=True)
        firsts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
        for k in keys:  # by position: a null key stays None
            merged[k] = rows[k].to_numpy()[firsts]
        # an emitted session keeps its flag while its bounds stay; one that grew is retracted
        same = ((start == merged["start"].to_numpy()[sid])
                & (end == merged["end"].to_numpy()[sid]))
        emitted = rows["emitted"].to_numpy(dtype=bool)
        grew = emitted & ~same
        if grew.any():
            out.append(self._results(rows[grew], np.ones(int(grew.sum()), dtype=bool),
                                     "retract"))
        merged["emitted"] = np.bincount(sid, weights=emitted & same,
                                        minlength=len(merged)) > 0
        touched = merged.pop("event").astype(bool)
        return merged[self.columns], touched

    def _add_sliding(self, events: pd.DataFrame, table: pd.DataFrame, watermark: int,
                     out: list[dict[str, np.ndarray]]) -> tuple[pd.DataFrame, pd.Series]:
        """Sliding windows: the table holds a row per (key, event time ``t``), start = end =
        ``t``, the partials of the events at ``t``; that row is also the window ending at
        ``t``, whose value ``_sliding_windows`` folds from the rows a size before it. An
        event touches its own window and the emitted windows (every window with
        ``emit="updates"``) that it falls in."""
        t = self._times(events)
        late = self._expired(t, watermark)
        self._late(events, t, late, watermark, out)
        which = np.flatnonzero(~late)
        if not len(which):
            return table, pd.Series(False, index=table.index)
        merged, new = self._merge(table, events, which, t[which], t[which])
        reached = new.copy()
        older = ~new & (merged["emitted"].to_numpy(dtype=bool) | (self.spec.emit == "updates"))
        if older.any():
            lo, hi, order = self._ranges(merged, older)
            seen = np.r_[0, np.cumsum(new[order])]
            reached[older] = seen[hi] > seen[lo]
        return merged, pd.Series(reached)

    def _ranges(self, table: pd.DataFrame,
                which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the sliding windows ``which`` (a mask of table rows): the rows each covers,
        as ``[lo, hi)`` positions in ``order``, the table sorted by key and time."""
        n = len(table)
        end = table["end"].to_numpy(dtype="int64")
        keys = [f"k{i}" for i in range(len(self.keys))]
        kid = (table.groupby(keys, sort=False, dropna=False).ngroup().to_numpy(dtype="int64")
               if keys else np.zeros(n, dtype="int64"))
        order = np.lexsort((end, kid))
        q = np.flatnonzero(which)
        # times ranked, so that (key, rank) packs into one int64 whatever the times
        _, rank = np.unique(np.concatenate([end, end[q] - self.size]), return_inverse=True)
        span = n + len(q) + 1
        packed = kid * span + rank[:n]
        lo = np.searchsorted(packed[order], kid[q] * span + rank[n:], "left")
        hi = np.searchsorted(packed[order], packed[q], "right")
        return lo, hi, order

    def _sliding_windows(self, table: pd.DataFrame, which: np.ndarray) -> pd.DataFrame:
        """The sliding windows ending at the rows ``which``, with their folded partials."""
        lo, hi, order = self._ranges(table, which)
        idx = np.empty(2 * len(lo), dtype="int64")
        idx[0::2], idx[1::2] = lo, hi
        rows = table[which].reset_index(drop=True)
        merge = {"sum": np.add, "min": np.fmin, "max": np.fmax}
        for c, how in self.parts.items():
            v = table[c].to_numpy()[order]
            # reduceat folds [lo, hi) at the even positions; every window holds its own row
            rows[c] = merge[how].reduceat(np.append(v, v[:1]), idx)[0::2]
        rows["start"] = rows["end"] - self.size
        return rows

    def _settle(self, table: pd.DataFrame, touched: pd.Series, watermark: int,
                out: list[dict[str, np.ndarray]]) -> pd.DataFrame:
        if table.empty:
            return table
        end = table["end"].to_numpy()
        emitted = table["emitted"].to_numpy(dtype=bool)
        closed = end <= watermark
        show = touched.to_numpy() & (closed | (self.spec.emit == "updates"))
        # the watermark closed it, and no one saw it final yet
        show |= ~emitted & closed
        if show.any():
            rows, final = table[show], closed[show]
            if self.spec.window.kind == "sliding":
                # windows the batch touched, then those the watermark closed, each in time
                # order, as a per-key processor emits them
                order = np.lexsort((end[show], ~touched.to_numpy()[show]))
                rows, final = self._sliding_windows(table, show).iloc[order], final[order]
            out.append(self._results(rows, final))
        table = table.assign(emitted=emitted | closed)
        keep = ~(watermark > end + self.linger + self.lateness)
        return table if keep.all() else table[keep].reset_index(drop=True)

    def _next_timer(self, table: pd.DataFrame, watermark: int) -> int | None:
        """The bucket's one timer: the next watermark that emits or drops a window."""
        if table.empty:
            return None
        end = table["end"].to_numpy()
        due = np.where(table["emitted"].to_numpy(dtype=bool),
                       end + self.linger + self.lateness + 1, end)
        due = due[due > watermark]
        return int(due.min()) if len(due) else None

    # -- output ----------------------------------------------------------------------------
    def _results(self, rows: pd.DataFrame, final: np.ndarray,
                 kind: str = "result") -> dict[str, np.ndarray]:
        data: dict[str, np.ndarray] = {"kind": np.full(len(rows), kind, dtype=object)}
        for i, k in enumerate(self.keys):
            data[k] = rows[f"k{i}"].to_numpy()
        data["window_start"] = rows["start"].to_numpy(dtype="int64")
        data["window_end"] = rows["end"].to_numpy(dtype="int64")
        for i, a in enumerate(self.spec.aggs):
            if a.kind == "count":
                data[a.name] = rows[f"n{i}"].to_numpy(dtype="int64").astype(object)
                continue
            if a.kind in ("sum", "avg"):
                n = rows[f"c{i}"].to_numpy()
                s = rows[f"s{i}"].to_numpy(dtype="float64")
                value = s if a.kind == "sum" else s / np.maximum(n, 1)
                data[a.name] = _nullable(value, n > 0)
            else:
                v = rows[f"v{i}"].to_numpy(dtype="float64")
                data[a.name] = _nullable(v, ~np.isnan(v))
        data["final"] = final.astype(object)
        return data

    def _frames(self, out: list[dict[str, np.ndarray]]) -> Iterator[pd.DataFrame]:
        """One frame of the output rows; a column a part lacks is null in it."""
        if not out:
            return iter(())
        names = ["kind", *self.keys, "window_start", "window_end",
                 *(a.name for a in self.spec.aggs), "final", "event_time", "lateness_ms",
                 "event"]
        data: dict[str, pd.Series] = {}
        for name in names:
            if name in ("window_start", "window_end", "event_time"):
                ms = np.concatenate([part.get(name, np.full(len(part["kind"]), _NAT,
                                                            dtype="int64")) for part in out])
                data[name] = utc_times(ms)
            else:
                column = np.concatenate(
                    [part[name].astype(object) if name in part
                     else np.full(len(part["kind"]), None, dtype=object) for part in out])
                if name in self.keys:  # a null key comes out of a group-by as NaN
                    column[pd.isna(column)] = None
                data[name] = pd.Series(column, dtype=object)
        return iter([pd.DataFrame(data)])


def _nullable(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    out = values.astype(object)
    out[~present] = None
    return out
