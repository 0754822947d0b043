"""``headrace.streaming.frames``: pandas columns to Python values and epoch milliseconds to
UTC timestamps, and back with ``epoch_ms``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from headrace.streaming.frames import python_values, utc_times
from headrace.streaming.timeutil import epoch_ms

_MS = st.integers(min_value=-(2**53), max_value=2**53)


@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=50))
def test_a_float_column_gives_its_floats_and_none_for_each_null(values: list[float | None]
                                                                ) -> None:
    column = pd.Series([math.nan if v is None else v for v in values], dtype="float64")
    assert python_values(column) == values


@given(st.lists(st.one_of(st.none(), st.integers(-(2**62), 2**62), st.text(max_size=5)),
                max_size=50))
def test_an_object_column_gives_its_values_and_none_for_each_null(values: list[object]
                                                                  ) -> None:
    assert python_values(pd.Series(values, dtype=object)) == values


@given(st.lists(st.one_of(st.none(), _MS), max_size=50))
def test_epoch_milliseconds_become_utc_timestamps_and_back(values: list[int | None]) -> None:
    nat = np.iinfo(np.int64).min
    ms = np.array([nat if v is None else v for v in values], dtype="int64")
    times = utc_times(ms)
    assert str(times.dt.tz) == "UTC"
    assert times.isna().tolist() == [v is None for v in values]
    assert times.dt.unit == "ms"
    assert epoch_ms(times).tolist() == ms.tolist()
    assert python_values(times) == [None if v is None else pd.Timestamp(v, unit="ms", tz="UTC")
                                    for v in values]
