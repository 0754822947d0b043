"""Event-time toolkit on Spark Structured Streaming.

Windows (tumbling, hopping, session, per-event sliding) with a watermark, allowed lateness
and a late-data side output (``windowed``); lateness measured from the log
(``lateness_profile``); joins (``interval_join``, ``latest_join``, ``temporal_join``);
dead letters for processing errors (``with_dead_letters``). Everything composes with plain
PySpark DataFrames and writes through ``format("headrace")``.
"""

from __future__ import annotations

from headrace.spark.session import configure_streaming as configure
from headrace.streaming.aggregates import (
    Agg,
    approx_distinct,
    avg_of,
    count,
    max_of,
    min_of,
    sum_of,
)
from headrace.streaming.errors import SpecError, StreamingError
from headrace.streaming.window_spec import Window, hopping, session, sliding, tumbling
from headrace.streaming.windows import (
    late_events,
    results,
    to_topics,
    windowed,
    with_spark_watermark,
)

__all__ = ["Agg", "SpecError", "StreamingError", "Window", "approx_distinct", "avg_of",
           "configure", "count", "hopping", "late_events", "max_of", "min_of", "results",
           "session", "sliding", "sum_of", "to_topics", "tumbling", "windowed",
           "with_spark_watermark"]

