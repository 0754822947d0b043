"""Durations and timestamps in milliseconds, the unit of Kafka and of Spark's timers."""

from __future__ import annotations

import datetime as dt
import re

import numpy as np
import pandas as pd

from headrace.streaming.errors import SpecError

_UNITS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000,
          "second": 1000, "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000,
          "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
          "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


def duration_ms(value: str | int | dt.timedelta) -> int:
    """``"10 minutes"``, ``"500 ms"``, ``"2h"``, a timedelta or an int (ms) -> milliseconds."""
    if isinstance(value, dt.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int):
        if value < 0:
            raise SpecError(f"a duration cannot be negative: {value}")
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", value.lower())
    if not match or match.group(2) not in _UNITS:
        raise SpecError(f"not a duration: {value!r} (try '10 minutes', '500 ms', '2h')")
    return int(match.group(1)) * _UNITS[match.group(2)]


def to_ms(value: dt.datetime) -> int:
    """A timestamp from Spark (naive local time, or aware) -> epoch milliseconds."""
    return round(value.timestamp() * 1000)


def from_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def epoch_ms(times: pd.Series) -> np.ndarray:
    """A datetime column (naive or with a zone, any unit) as int64 epoch milliseconds,
    floored as numpy casts them, without the ``Timestamp`` per row that ``to_numpy`` makes
    for a zoned column."""
    raw = np.asarray(times.array.asi8)
    ms: np.ndarray = raw.view(f"datetime64[{times.dt.unit}]").astype("datetime64[ms]")
    return ms.view("int64")
