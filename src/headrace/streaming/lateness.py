"""How late do events really arrive? Measure it from the log before choosing a watermark.

``lateness_profile(df)`` takes a batch DataFrame of events (``read_events(...,
streaming=False)``) and measures, per event:

- ``delay``: arrival (the record's Kafka timestamp) minus event time;
- ``behind``: how far the event's time is behind the newest event time that arrived
  before it (in arrival order) — exactly what a watermark delay must cover for the event
  to be on time, since Spark's watermark is the newest event time seen minus the delay.

It returns histograms of both and ``suggest(completeness)``: the smallest watermark delay
that keeps that share of events on time (e.g. 0.999). Ordering by arrival is global, so
the profile runs in one Spark partition: point it at a bounded range of the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as SparkWindow
from pyspark.sql import functions as F

from headrace.streaming.errors import SpecError

BUCKETS_MS = (0, 1, 10, 100, 1_000, 10_000, 60_000, 600_000, 3_600_000)
"""Histogram bucket lower bounds: 0, 1 ms, 10 ms, 100 ms, 1 s, 10 s, 1 min, 10 min, 1 h."""


@dataclass(frozen=True)
class LatenessProfile:
    events: int
    delay_histogram: tuple[int, ...]
    behind_histogram: tuple[int, ...]
    behind_quantiles: dict[float, int]
    max_behind_ms: int

    def suggest(self, completeness: float) -> int:
        """The watermark delay (ms) that keeps ``completeness`` of events on time."""
        if completeness not in self.behind_quantiles:
            raise SpecError(f"completeness {completeness} was not measured; measured: "
                            f"{sorted(self.behind_quantiles)}")
        return self.behind_quantiles[completeness]

    def render(self) -> str:
        """A text table of both histograms and the suggestions."""
        lines = [f"{self.events} events", f"{'bucket':>10} {'delay':>10} {'behind':>10}"]
        for i, lo in enumerate(BUCKETS_MS):
            lines.append(f"{_fmt(lo):>10} {self.delay_histogram[i]:>10} "
                         f"{self.behind_histogram[i]:>10}")
        for c, ms in sorted(self.behind_quantiles.items()):
            lines.append(f"watermark delay for {c:.3%} on time: {_fmt(ms)}")
        return "\n".join(lines)


def _fmt(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            return f">={ms / size:g} {unit}"
    return f">={ms} ms"


def _bucket(column: Column) -> Column:
    expr = F.lit(0)
    for i, lo in enumerate(BUCKETS_MS[1:], start=1):
        expr = F.when(column >= lo, F.lit(i)).otherwise(expr)
    return expr


def _ms(column: str) -> Column:
    return (F.col(column).cast("double") * 1000).cast("long")


def lateness_profile(df: DataFrame, *, event_time: str = "event_time",
                     arrival: str = "kafka_timestamp",
                     completeness: tuple[float, ...] = (0.99, 0.999, 1.0)) -> LatenessProfile:
    """Measure ``df`` (bounded). Blocks while Spark computes; raises ``SpecError`` for a
    missing column."""
    missing = [c for c in (event_time, arrival) if c not in df.columns]
    if missing:
        raise SpecError(f"columns {missing} are not in the DataFrame")
    order = [F.col(arrival)] + [F.col(c) for c in ("kafka_partition", "kafka_offset")
                                if c in df.columns]
    frontier = F.max(_ms(event_time)).over(
        SparkWindow.orderBy(*order).rowsBetween(SparkWindow.unboundedPreceding, -1))
    measured = df.select(
        (_ms(arrival) - _ms(event_time)).alias("delay"),
        F.greatest(F.coalesce(frontier - _ms(event_time), F.lit(0)), F.lit(0)).alias("behind"))
    stats = measured.agg(
        F.count(F.lit(1)).alias("n"), F.max("behind").alias("max_behind"),
        *[F.percentile("behind", F.lit(c)).alias(f"q{i}") for i, c in enumerate(completeness)],
    ).collect()[0]
    delays: dict[int, int] = dict(measured.groupBy(_bucket(F.col("delay")).alias("b")).count().collect())
    behind: dict[int, int] = dict(measured.groupBy(_bucket(F.col("behind")).alias("b")).count().collect())
    return LatenessProfile(
        events=int(stats["n"]),
        delay_histogram=tuple(int(delays.get(i, 0)) for i in range(len(BUCKETS_MS))),
        behind_histogram=tuple(int(behind.get(i, 0)) for i in range(len(BUCKETS_MS))),
        behind_quantiles={c: int(stats[f"q{i}"] or 0) for i, c in enumerate(completeness)},
        max_behind_ms=int(stats["max_behind"] or 0),
    )
