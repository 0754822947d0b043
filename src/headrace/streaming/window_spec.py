"""What a window is (``Window`` and its constructors) and what ``windows.windowed`` hands
the processors that run it (``WindowedSpec``, the column of each event's JSON).

Below ``windows``, ``columnar`` and ``processor``: they all build on it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from headrace.streaming.aggregates import Agg
from headrace.streaming.errors import SpecError
from headrace.streaming.timeutil import duration_ms

# Not "__..." like windows' hidden columns: transformWithStateInPandas renames such
# columns to "_<n>".
EVENT_JSON = "headrace__event"


@dataclass(frozen=True)
class Window:
    """``kind`` is tumbling, hopping, session or sliding (one window per event, ending at it:
    Kafka Streams' sliding windows); sizes in milliseconds."""

    kind: str
    size_ms: int
    slide_ms: int = 0

    def assign(self, t: int) -> list[tuple[int, int]]:
        """The [start, end) windows an event at ``t`` belongs to (tumbling and hopping)."""
        if self.kind == "tumbling":
            start = t - t % self.size_ms
            return [(start, start + self.size_ms)]
        last = t - t % self.slide_ms
        return [(s, s + self.size_ms) for s in range(last, t - self.size_ms, -self.slide_ms)]


def tumbling(size: str | int | dt.timedelta) -> Window:
    return Window("tumbling", duration_ms(size))


def hopping(size: str | int | dt.timedelta, slide: str | int | dt.timedelta) -> Window:
    size_ms, slide_ms = duration_ms(size), duration_ms(slide)
    if slide_ms > size_ms:
        raise SpecError("a hopping window's slide must not exceed its size")
    return Window("hopping", size_ms, slide_ms)


def session(gap: str | int | dt.timedelta) -> Window:
    return Window("session", duration_ms(gap))


def sliding(size: str | int | dt.timedelta) -> Window:
    """One window per event covering ``[t - size, t]``, as in "more than 3 failed logins
    within 10 minutes of each other"."""
    return Window("sliding", duration_ms(size))


@dataclass(frozen=True)
class WindowedSpec:
    keys: tuple[str, ...]
    event_time: str
    window: Window
    aggs: tuple[Agg, ...]
    allowed_lateness_ms: int
    emit: str
