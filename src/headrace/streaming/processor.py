"""The per-event stateful processor behind ``windowed`` for any window with
``approx_distinct`` (``columnar`` takes the rest); one instance per key group, in Python
workers. It is also the reference ``columnar`` is tested against.

Python transformWithState pays a socket round trip to the JVM for every state call, so
state is not kept per key: ``windowed`` groups the stream by a **bucket** (a hash of the
keys modulo ``buckets``) and the processor keeps, per bucket, one value holding every key's
windows, pickled. A micro-batch costs a few round trips per bucket (load, store, move the
bucket's one timer) whatever the number of keys; the price is rewriting a bucket's state
when any of its keys changes.

Per key: a map ``(start, end) -> [accumulator, emitted]``. For per-event sliding windows
the map holds one entry per event time ``t`` (start = end = t) whose accumulator is the
list of that instant's aggregate inputs; a window ``[e - size, e]`` is recomputed from the
entries it covers. Each key also keeps the timer a per-key processor would hold: the next
watermark that changes something (a window to emit or to evict). The bucket registers one
real timer, the earliest of its keys'; a micro-batch settles the keys with events and
those whose timer Spark would fire (once the watermark reaches it), so the output is the
same, batch for batch, as with state and timers per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessorHandle,
    TimerValues,
)

from headrace.streaming import aggregates, buckets
from headrace.streaming.errors import StreamingError
from headrace.streaming.frames import python_values, utc_times
from headrace.streaming.timeutil import epoch_ms
from headrace.streaming.window_spec import EVENT_JSON, WindowedSpec

_TIMES = ("window_start", "window_end", "event_time")
_NAT = np.iinfo(np.int64).min
OPERATOR = "windowed.per_event"
STATE_VERSION = 1
"""The layout of a bucket described above; a change ships a migration
(``headrace.savepoints.migrations``)."""

Entry = tuple[Any, bool]
Windows = dict[tuple[int, int], Entry]
# A key's windows, and the watermark at which its per-key timer would fire (None: none).
KeyState = tuple[Windows, int | None]


class WindowProcessor(buckets.BucketProcessor):
    def __init__(self, spec: WindowedSpec, params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        self.spec = spec
        self.head = buckets.header(OPERATOR, STATE_VERSION, params or {})
        self.resume = resume
        self.aggs = spec.aggs
        self.lateness = spec.allowed_lateness_ms
        self.kind = spec.window.kind
        self.inputs = [a.column for a in spec.aggs if a.column is not None]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket = self.bucket_state = handle.getValueState("bucket", buckets.VALUE_SCHEMA)

    # -- state access -------------------------------------------------------------------
    # -- output rows -------------------------------------------------------------------
    def _emit(self, out: dict[str, list[Any]], key: tuple[Any, ...], kind: str,
              values: dict[str, Any] | None = None, window: tuple[int, int] | None = None,
              final: bool | None = None, late: tuple[int, int, str] | None = None) -> None:
        """Append one output row to the column lists ``out``: a window's ``values`` or a
        ``late`` event (event time, lateness, event JSON)."""
        out["kind"].append(kind)
        for name, v in zip(self.spec.keys, key, strict=True):
            out[name].append(v)
        start = end = None
        if window is not None:
            start = window[1] - self.spec.window.size_ms if self.kind == "sliding" else window[0]
            end = window[1]
        out["window_start"].append(start)
        out["window_end"].append(end)
        for a in self.aggs:
            out[a.name].append(None if values is None else values[a.name])
        out["final"].append(final)
        out["event_time"].append(None if late is None else late[0])
        out["lateness_ms"].append(None if late is None else late[1])
        out["event"].append(None if late is None else late[2])

    def _columns(self) -> dict[str, list[Any]]:
        names = ["kind", *self.spec.keys, "window_start", "window_end",
                 *(a.name for a in self.aggs), "final", "event_time", "lateness_ms", "event"]
        return {n: [] for n in names}

    def _frames(self, out: dict[str, list[Any]]) -> Iterator[pd.DataFrame]:
        if not out["kind"]:
            return iter(())
        data = {}
        for name, values in out.items():
            if name in _TIMES:  # epoch ms; None is NaT (int64's minimum)
                ms = np.array([_NAT if v is None else v for v in values], dtype="int64")
                data[name] = utc_times(ms)
            else:
                data[name] = pd.Series(values, dtype=object)
        return iter([pd.DataFrame(data)])

    def _window_values(self, windows: Windows, w: tuple[int, int]) -> dict[str, Any]:
        if self.kind != "sliding":
            return aggregates.result(self.aggs, windows[w][0])
        start, end = w[1] - self.spec.window.size_ms, w[1]
        rows = [r for (t, _), (acc, _) in windows.items() if start <= t <= end for r in acc]
        return aggregates.fold(self.aggs, rows)

    # -- event handling ----------------------------------------------------------------
    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        watermark = self.watermark(timerValues)
        before, keys, timer = buckets.load(self.bucket)
        # key -> its events: (event time ms, aggregate inputs, index of the event's JSON)
        by_key: dict[tuple[Any, ...], list[tuple[int, dict[str, Any], int]]] = {}
        events: list[str] = []
        for frame in rows:
            times = frame[self.spec.event_time]
            if times.isna().any():
                raise StreamingError(f"{self.spec.event_time} is null in an event: every "
                                     "event needs an event time")
            ms = epoch_ms(times).tolist()
            key_columns = [frame[k].tolist() for k in self.spec.keys]
            # a null arrives as NaN in a float column; both are skipped, as SQL skips nulls
            inputs = [python_values(frame[c]) for c in self.inputs]
            base = len(events)
            events.extend(frame[EVENT_JSON].tolist())
            for i, t in enumerate(ms):
                k = tuple(c[i] for c in key_columns)
                values = {c: column[i] for c, column in zip(self.inputs, inputs, strict=True)}
                by_key.setdefault(k, []).append((t, values, base + i))
        out = self._columns()
        for k, its_events in by_key.items():
            windows = keys[k][0] if k in keys else {}
            its_events.sort(key=lambda e: e[0])
            self._add(k, windows, its_events, events, watermark, out)
            self._settle(keys, k, windows, watermark, out)
        self._fire_due(keys, watermark, out, skip=by_key.keys())
        buckets.store(self.handle, self.bucket, before, keys, timer, self._next_timer(keys),
                      head=self.head)
        return self._frames(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        before, keys, _ = buckets.load(self.bucket)
        out = self._columns()
        self._fire_due(keys, self.watermark(timerValues), out, skip=())
        # The timer that fired was the bucket's only one, and it is gone.
        buckets.store(self.handle, self.bucket, before, keys, None, self._next_timer(keys),
                      head=self.head)
        return self._frames(out)

    def _add(self, key: tuple[Any, ...], windows: Windows,
             its_events: list[tuple[int, dict[str, Any], int]], events: list[str],
             watermark: int, out: dict[str, list[Any]]) -> None:
        """One key's events of this batch, in event-time order."""
        touched: set[tuple[int, int]] = set()
        # what was shown of each emitted window: a session that grows retracts exactly that
        shown = ({w: aggregates.result(self.aggs, acc) for w, (acc, emitted) in windows.items()
                  if emitted} if self.kind == "session" else {})
        for t, values, at in its_events:
            if self.kind == "session":
                done = self._add_session(key, windows, touched, values, t, watermark, out,
                                         shown)
            elif self.kind == "sliding":
                done = self._add_sliding(windows, touched, values, t, watermark)
            else:
                done = self._add_fixed(windows, touched, values, t, watermark)
            if not done:
                self._emit(out, key, "late", late=(t, watermark - t, events[at]))
        for w in sorted(touched):
            if w not in windows:
                continue
            closed = watermark >= w[1]
            if closed or self.spec.emit == "updates":
                self._emit(out, key, "result", self._window_values(windows, w), w, closed)
                if closed:
                    windows[w] = (windows[w][0], True)

    def _settle(self, keys: dict[tuple[Any, ...], KeyState], key: tuple[Any, ...],
                windows: Windows, watermark: int, out: dict[str, list[Any]]) -> None:
        """Emit and evict what the watermark allows for ``key``, then give it its timer:
        the next watermark that changes something (a window to emit or to evict)."""
        self._sweep(key, windows, watermark, out)
        if not windows:
            keys.pop(key, None)
            return
        due = (w[1] if not emitted else self._evict_after(w) + 1
               for w, (_, emitted) in windows.items())
        keys[key] = (windows, min((t for t in due if t > watermark), default=None))

    def _fire_due(self, keys: dict[tuple[Any, ...], KeyState], watermark: int,
                  out: dict[str, list[Any]], skip: Iterable[tuple[Any, ...]]) -> None:
        """The keys whose timer Spark would fire in this batch (at or below the watermark; a
        key with events this batch was settled already), settled as a per-key timer
        would have them."""
        done = set(skip)
        for k, (windows, timer) in list(keys.items()):
            if timer is not None and timer <= watermark and k not in done:
                self._settle(keys, k, windows, watermark, out)

    @staticmethod
    def _next_timer(keys: dict[tuple[Any, ...], KeyState]) -> int | None:
        """The bucket's one timer: its keys' earliest."""
        return min((t for _, t in keys.values() if t is not None), default=None)

    def _evict_after(self, w: tuple[int, int]) -> int:
        """The watermark past which window ``w``'s state can no longer change."""
        extra = self.spec.window.size_ms if self.kind == "sliding" else 0
        return w[1] + extra + self.lateness

    def _expired(self, end: int, watermark: int) -> bool:
        """The toolkit's one lateness rule (module ``windows``): a window ending at ``end``
        takes no more events once ``end + allowed_lateness <= watermark``; with no allowed
        lateness that is the watermark that emits it as final, so a final window never
        changes."""
        return watermark >= 0 and end + self.lateness <= watermark

    def _sweep(self, key: tuple[Any, ...], windows: Windows, watermark: int,
               out: dict[str, list[Any]]) -> None:
        """Emit windows the watermark has closed; evict those past their lateness."""
        for w in sorted(windows):
            acc, emitted = windows[w]
            if not emitted and watermark >= w[1]:
                self._emit(out, key, "result", self._window_values(windows, w), w, True)
                windows[w] = (acc, True)
        for w in [w for w in windows if watermark > self._evict_after(w)]:
            del windows[w]

    def _add_fixed(self, windows: Windows, touched: set[tuple[int, int]],
                   row: dict[str, Any], t: int, watermark: int) -> bool:
        live = [w for w in self.spec.window.assign(t) if not self._expired(w[1], watermark)]
        for w in live:
            acc, emitted = windows.get(w) or (aggregates.empty(self.aggs), False)
            aggregates.add(self.aggs, acc, row)
            windows[w] = (acc, emitted)
            touched.add(w)
        return bool(live)

    def _add_sliding(self, windows: Windows, touched: set[tuple[int, int]],
                     row: dict[str, Any], t: int, watermark: int) -> bool:
        if self._expired(t, watermark):
            return False
        w = (t, t)
        acc, emitted = windows.get(w) or ([], False)
        acc.append(row)
        windows[w] = (acc, emitted)
        size = self.spec.window.size_ms
        # Windows ending at t and up to size after it contain this event.
        touched.update(e for e in windows if t <= e[1] <= t + size
                       and (e == w or windows[e][1] or self.spec.emit == "updates"))
        return True

    def _add_session(self, key: tuple[Any, ...], windows: Windows,
                     touched: set[tuple[int, int]], row: dict[str, Any], t: int,
                     watermark: int, out: dict[str, list[Any]],
                     shown: dict[tuple[int, int], dict[str, Any]]) -> bool:
        gap = self.spec.window.size_ms
        # An event exactly a gap after a session (or before it) joins it, as in Spark,
        # Flink and Kafka Streams.
        joined = [w for w in windows if w[0] <= t + gap and t <= w[1]]
        start = min([t, *(w[0] for w in joined)])
        end = max([t + gap, *(w[1] for w in joined)])
        if self._expired(end, watermark):
            return False
        acc = aggregates.empty(self.aggs)
        aggregates.add(self.aggs, acc, row)
        kept_emitted = False  # the event fell inside an emitted session it did not extend
        for w in joined:
            old, emitted = windows.pop(w)
            touched.discard(w)
            if w == (start, end):
                kept_emitted = emitted
            elif emitted:  # emitted: shown as it was before this batch (same bounds)
                self._emit(out, key, "retract", shown[w], w, True)
            acc = aggregates.merge(self.aggs, acc, old)
        windows[(start, end)] = (acc, kept_emitted)
        touched.add((start, end))
        return True
