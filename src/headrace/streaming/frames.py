"""Columns of the pandas frames that ``transformWithStateInPandas`` passes in and out, to
and from plain values: Python objects with None for null, and epoch milliseconds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def python_values(column: pd.Series) -> list[Any]:
    """A column's values as Python objects, None for a null (pandas has NaN or NaT for
    some)."""
    values: list[Any] = column.tolist()
    if column.hasnans:
        return [None if null else v
                for v, null in zip(values, column.isna().tolist(), strict=True)]
    return values


def utc_times(ms: np.ndarray) -> pd.Series:
    """int64 epoch milliseconds as a timestamp column in UTC; int64's minimum is null (NaT).
    The inverse of ``timeutil.epoch_ms``."""
    return pd.Series(np.asarray(ms, dtype="int64").astype("datetime64[ms]")).dt.tz_localize("UTC")
