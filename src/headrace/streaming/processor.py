"""The stateful processor behind ``windowed``: one instance per key group, in Python workers.

State per key: a map ``(start, end) -> (accumulator JSON, emitted)``. For per-event
sliding windows the map holds one entry per event time ``t`` (start = end = t) whose
accumulator is the list of that instant's aggregate inputs; a window ``[e - size, e]`` is
recomputed from the entries it covers. Timers only wake the key up: ``_sweep`` decides
what to emit and evict from the watermark; each key holds one timer, at the next
watermark that changes something.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from headrace.streaming import aggregates
from headrace.streaming.timeutil import from_ms, to_ms
from headrace.streaming.windows import WindowedSpec, row_json

_WINDOW_KEY = StructType([StructField("start", LongType()), StructField("end", LongType())])
_WINDOW_VALUE = StructType([StructField("acc", StringType()),
                            StructField("emitted", BooleanType())])

Entry = tuple[list[Any], bool]


class WindowProcessor(StatefulProcessor):
    def __init__(self, spec: WindowedSpec) -> None:
        self.spec = spec
        self.aggs = spec.aggs
        self.lateness = spec.allowed_lateness_ms
        self.kind = spec.window.kind
        self.inputs = [a.column for a in spec.aggs if a.column is not None]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = handle.getMapState("windows", _WINDOW_KEY, _WINDOW_VALUE)

    # -- state access -------------------------------------------------------------------
    def _load(self) -> tuple[dict[tuple[int, int], tuple[str, bool]],
                             dict[tuple[int, int], Entry]]:
        """The stored state as written (to detect changes) and parsed (to change)."""
        stored = {(k[0], k[1]): (v[0], v[1]) for k, v in self.windows.iterator()}
        return stored, {w: (json.loads(acc), emitted) for w, (acc, emitted) in stored.items()}

    def _store(self, before: dict[tuple[int, int], tuple[str, bool]],
               after: dict[tuple[int, int], Entry]) -> None:
        for w in before.keys() - after.keys():
            self.windows.removeKey(w)
        for w, (acc, emitted) in after.items():
            value = (json.dumps(acc), emitted)
            if before.get(w) != value:
                self.windows.updateValue(w, value)

    # -- output rows -------------------------------------------------------------------
    def _row(self, key: tuple[Any, ...], kind: str, **values: Any) -> Row:
        data: dict[str, Any] = {"kind": kind}
        data.update(zip(self.spec.keys, key, strict=True))
        data.update({"window_start": None, "window_end": None, "final": None,
                     "event_time": None, "lateness_ms": None, "event": None})
        data.update({a.name: None for a in self.aggs})
        data.update(values)
        return Row(**data)

    def _result(self, key: tuple[Any, ...], w: tuple[int, int], values: dict[str, Any],
                final: bool, kind: str = "result") -> Row:
        start = w[1] - self.spec.window.size_ms if self.kind == "sliding" else w[0]
        return self._row(key, kind, window_start=from_ms(start), window_end=from_ms(w[1]),
                         final=final, **values)

    def _window_values(self, windows: dict[tuple[int, int], Entry],
                       w: tuple[int, int]) -> dict[str, Any]:
        if self.kind != "sliding":
            return aggregates.result(self.aggs, windows[w][0])
        start, end = w[1] - self.spec.window.size_ms, w[1]
        rows = [r for (t, _), (acc, _) in windows.items() if start <= t <= end for r in acc]
        return aggregates.fold(self.aggs, rows)

    # -- event handling ----------------------------------------------------------------
    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        key = tuple(key)
        watermark = timerValues.getCurrentWatermarkInMs()
        before, windows = self._load()
        touched: set[tuple[int, int]] = set()
        out: list[Row] = []
        for row in sorted(rows, key=lambda r: to_ms(r[self.spec.event_time])):
            t = to_ms(row[self.spec.event_time])
            if self.kind == "session":
                done = self._add_session(key, windows, touched, row, t, watermark, out)
            elif self.kind == "sliding":
                done = self._add_sliding(windows, touched, row, t, watermark)
            else:
                done = self._add_fixed(windows, touched, row, t, watermark)
            if not done:
                out.append(self._row(key, "late", event_time=from_ms(t),
                                     lateness_ms=watermark - t, event=row_json(row)))
        for w in sorted(touched):
            if w not in windows:
                continue
            closed = watermark >= w[1]
            if closed or self.spec.emit == "updates":
                out.append(self._result(key, w, self._window_values(windows, w), closed))
                if closed:
                    windows[w] = (windows[w][0], True)
        out.extend(self._sweep(key, windows, watermark))
        self._store(before, windows)
        # A key without state holds no timer (the one-timer invariant): nothing to list.
        self._schedule(windows, watermark, registered=None if before else ())
        return iter(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        before, windows = self._load()
        watermark = timerValues.getCurrentWatermarkInMs()
        out = self._sweep(tuple(key), windows, watermark)
        self._store(before, windows)
        # The timer that fired was the key's only one, and it is gone.
        self._schedule(windows, watermark, registered=())
        return iter(out)

    def _schedule(self, windows: dict[tuple[int, int], Entry], watermark: int,
                  registered: Iterable[int] | None = None) -> None:
        """Keep exactly one timer per key, at the next watermark that changes something: a
        window to emit or to evict. One timer, not one per window, so a key's state is
        loaded once per batch however many windows it holds. ``registered``: the key's
        timers when known without asking (each state call is a round trip to the JVM),
        else None to list them."""
        due = [w[1] if not emitted else self._evict_after(w) + 1
               for w, (_, emitted) in windows.items()]
        wanted = min((t for t in due if t > watermark), default=None)
        for t in self.handle.listTimers() if registered is None else registered:
            if t != wanted:
                self.handle.deleteTimer(t)
            else:
                wanted = None  # already registered
        if wanted is not None:
            self.handle.registerTimer(wanted)

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

    def _sweep(self, key: tuple[Any, ...], windows: dict[tuple[int, int], Entry],
               watermark: int) -> list[Row]:
        """Emit windows the watermark has closed; evict those past their lateness."""
        out: list[Row] = []
        for w in sorted(windows):
            acc, emitted = windows[w]
            if not emitted and watermark >= w[1]:
                out.append(self._result(key, w, self._window_values(windows, w), True))
                windows[w] = (acc, True)
        for w in [w for w in windows if watermark > self._evict_after(w)]:
            del windows[w]
        return out

    def _add_fixed(self, windows: dict[tuple[int, int], Entry], touched: set[tuple[int, int]],
                   row: Row, t: int, watermark: int) -> bool:
        live = [w for w in self.spec.window.assign(t) if not self._expired(w[1], watermark)]
        for w in live:
            acc, emitted = windows.get(w) or (aggregates.empty(self.aggs), False)
            aggregates.add(self.aggs, acc, row)
            windows[w] = (acc, emitted)
            touched.add(w)
        return bool(live)

    def _add_sliding(self, windows: dict[tuple[int, int], Entry],
                     touched: set[tuple[int, int]], row: Row, t: int, watermark: int) -> bool:
        if self._expired(t, watermark):
            return False
        w = (t, t)
        acc, emitted = windows.get(w) or ([], False)
        acc.append({c: row[c] for c in self.inputs})
        windows[w] = (acc, emitted)
        size = self.spec.window.size_ms
        # Windows ending at t and up to size after it contain this event.
        touched.update(e for e in windows if t <= e[1] <= t + size
                       and (e == w or windows[e][1] or self.spec.emit == "updates"))
        return True

    def _add_session(self, key: tuple[Any, ...], windows: dict[tuple[int, int], Entry],
                     touched: set[tuple[int, int]], row: Row, t: int, watermark: int,
                     out: list[Row]) -> bool:
        gap = self.spec.window.size_ms
        joined = [w for w in windows if w[0] < t + gap and t < w[1]]
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
            elif emitted:
                out.append(self._result(key, w, aggregates.result(self.aggs, old), True,
                                        kind="retract"))
            acc = aggregates.merge(self.aggs, acc, old)
        windows[(start, end)] = (acc, kept_emitted)
        touched.add((start, end))
        return True
