"""The Kappa principle: once the watermark has passed everything, the streaming result
equals a batch computation over the same log. And state stays bounded as time moves on."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import Window as SparkWindow
from pyspark.sql import functions as F

from headrace.spark import read_events
from headrace.streaming import (
    Window,
    count,
    hopping,
    session,
    sliding,
    sum_of,
    tumbling,
    windowed,
)
from headrace.streaming.timeutil import to_ms
from headrace.testing import EmbeddedBroker
from tests.streaming.harness import MINUTE, StepRunner, at, windows_by_key

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "k string, ts long, amount double"
STEPS = 4  # steps of test_state_stays_bounded: enough to show the count flat


def final_results(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[int, float]]:
    """The last emitted value per (key, window), minus windows retracted afterwards."""
    out: dict[tuple[Any, ...], tuple[int, float]] = {}
    for r in rows:
        w = (r["k"], to_ms(r["window_start"]), to_ms(r["window_end"]))
        if r["kind"] == "result":
            out[w] = (r["count"], round(r["sum_amount"], 6))
        elif r["kind"] == "retract":
            out.pop(w, None)
    return out


def batch_results(df: DataFrame, window: Window) -> dict[tuple[Any, ...], tuple[int, float]]:
    size = f"{window.size_ms} milliseconds"
    if window.kind == "sliding":
        ms = (F.col("event_time").cast("double") * 1000).cast("long")
        over = SparkWindow.partitionBy("k").orderBy(ms).rangeBetween(-window.size_ms, 0)
        per_event = df.select("k", ms.alias("end"), F.count(F.lit(1)).over(over).alias("n"),
                              F.sum("amount").over(over).alias("s")).distinct()
        return {(r.k, r.end - window.size_ms, r.end): (r.n, round(r.s, 6))
                for r in per_event.collect()}
    if window.kind == "session":
        grouped = df.groupBy("k", F.session_window("event_time", size).alias("w"))
    elif window.kind == "hopping":
        grouped = df.groupBy("k", F.window("event_time", size, f"{window.slide_ms} milliseconds")
                             .alias("w"))
    else:
        grouped = df.groupBy("k", F.window("event_time", size).alias("w"))
    rows = grouped.agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("s")).collect()
    return {(r.k, to_ms(r.w.start), to_ms(r.w.end)): (r.n, round(r.s, 6)) for r in rows}


@pytest.mark.parametrize("window", [tumbling("10 minutes"), hopping("10 minutes", "5 minutes"),
                                    session("4 minutes"), sliding("7 minutes")],
                         ids=["tumbling", "hopping", "session", "sliding"])
def test_stream_equals_batch(spark: SparkSession, broker: EmbeddedBroker, topic_name: str,
                             tmp_path: Path, window: Window) -> None:
    rng = random.Random(42)
    events = [{"k": f"k{rng.randrange(4)}", "ts": at(rng.uniform(0, 90)),
               "amount": round(rng.uniform(1, 100), 2)} for _ in range(160)]
    events.sort(key=lambda e: e["ts"] + rng.uniform(0, 8 * MINUTE))  # out of order arrival
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=window,
        aggs=[count(), sum_of("amount")], watermark="2 minutes",
        allowed_lateness="1 day"), tmp_path / "cp", partitions=2)
    for i in range(0, len(events), 40):
        steps.run(events[i:i + 40])
    steps.run([{"k": "flush", "ts": at(3 * 24 * 60), "amount": 0.0}])
    assert not [r for r in steps.emitted if r["kind"] == "late"]
    streamed = {w: v for w, v in final_results(steps.emitted).items() if w[0] != "flush"}
    batch = read_events(spark, topic_name, SCHEMA, event_time="ts",
                        dead_letter_topic=topic_name + "-dlq", streaming=False,
                        kafka_bootstrap_servers=broker.bootstrap_servers).where("k != 'flush'")
    assert streamed == batch_results(batch, window)


def test_state_stays_bounded(spark: SparkSession, broker: EmbeddedBroker, topic_name: str,
                             tmp_path: Path) -> None:
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=tumbling("1 minute"),
        aggs=[count()], watermark=0, allowed_lateness="1 minute"), tmp_path / "cp")
    held = []
    # Every step moves the watermark 10 windows on: from the second step on, each adds as
    # many windows as it evicts, so a few steps show the count flat.
    for step in range(STEPS):
        steps.run([{"k": f"k{i}", "ts": at(step * 10 + j), "amount": 1.0}
                   for i in range(5) for j in range(10)])
        by_key = windows_by_key(spark, tmp_path / "cp")
        assert set(by_key) == {(f"k{i}",) for i in range(5)}
        held.append(sum(by_key.values()))
        # State is per bucket of keys: at most one row per bucket, whatever the windows.
        assert steps.progress[-1]["stateOperators"][0]["numRowsTotal"] <= 5
    # After each step the watermark is the step's last event time W; a window stays while
    # W <= end + 1 minute of lateness: the 3 windows ending at W - 1, W and W + 1 minute.
    # 5 keys x 3, however long the run.
    assert held == [5 * 3] * STEPS
