"""windowed(): exact outputs for deterministic event sequences, step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from headrace.streaming import (
    approx_distinct,
    avg_of,
    count,
    hopping,
    max_of,
    min_of,
    session,
    sliding,
    sum_of,
    tumbling,
    windowed,
)
from headrace.streaming.timeutil import to_ms
from headrace.testing import EmbeddedBroker, scaled
from tests.streaming.harness import MINUTE, StepRunner, at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "k string, ts long, amount double, user string"


def ev(minutes: float, k: str = "a", amount: float = 1.0, user: str = "u") -> dict[str, Any]:
    return {"k": k, "ts": at(minutes), "amount": amount, "user": user}


def summary(rows: list[dict[str, Any]], *cols: str) -> list[tuple[Any, ...]]:
    """(kind, key, window start/end in minutes after T0, *cols) per row, in order."""
    out = []
    for r in rows:
        if r["kind"] == "late":
            out.append(("late", round((to_ms(r["event_time"]) - at(0)) / MINUTE, 3),
                        r["lateness_ms"] / MINUTE))
        else:
            out.append((r["kind"], r["k"], (to_ms(r["window_start"]) - at(0)) / MINUTE,
                        (to_ms(r["window_end"]) - at(0)) / MINUTE,
                        *(r[c] for c in cols)))
    return out


def test_seed_worked_example_2_late_update_then_side_output(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """10-minute tumbling windows, allowed lateness 2 minutes (watermark = max event time).
    On time: 10:01, 10:04, 10:09. 10:08 arrives at watermark 10:11 -> the count becomes 4.
    10:07 arrives at watermark 10:13 -> beyond 10:12, the late side output."""
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=tumbling("10 minutes"),
        aggs=[count()], watermark=0, allowed_lateness="2 minutes"), tmp_path / "cp")
    assert steps.run([ev(1), ev(4), ev(9)]) == []
    assert summary(steps.run([ev(11)]), "count") == [("result", "a", 0, 10, 3)]
    assert summary(steps.run([ev(8)]), "count") == [("result", "a", 0, 10, 4)]
    assert summary(steps.run([ev(13)]), "count") == []
    assert summary(steps.run([ev(7)])) == [("late", 7.0, 6.0)]
    assert summary(steps.run([ev(25)]), "count") == [("result", "a", 10, 20, 2)]


def test_updates_mode_and_every_aggregate(spark: SparkSession, broker: EmbeddedBroker,
                                          topic_name: str, tmp_path: Path) -> None:
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=tumbling("10 minutes"),
        aggs=[count(), sum_of("amount"), avg_of("amount"), min_of("amount"),
              max_of("amount"), approx_distinct("user")],
        watermark="1 minute", emit="updates"), tmp_path / "cp")
    cols = ("count", "sum_amount", "avg_amount", "min_amount", "max_amount",
            "distinct_user", "final")
    assert summary(steps.run([ev(1, amount=2, user="x"), ev(2, amount=4, user="y")]), *cols) \
        == [("result", "a", 0, 10, 2, 6.0, 3.0, 2.0, 4.0, 2, False)]
    assert summary(steps.run([ev(3, amount=9, user="x")]), *cols) == [
        ("result", "a", 0, 10, 3, 15.0, 5.0, 2.0, 9.0, 2, False)]
    assert summary(steps.run([ev(12, k="b")]), *cols) == [
        ("result", "b", 10, 20, 1, 1.0, 1.0, 1.0, 1.0, 1, False),
        ("result", "a", 0, 10, 3, 15.0, 5.0, 2.0, 9.0, 2, True)]


def test_hopping_windows(spark: SparkSession, broker: EmbeddedBroker, topic_name: str,
                         tmp_path: Path) -> None:
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=hopping("10 minutes", "5 minutes"),
        aggs=[count()], watermark=0), tmp_path / "cp")
    # The watermark reaches 10:07 after the first step: [09:55, 10:05) closes.
    assert summary(steps.run([ev(1), ev(6), ev(7)]), "count") == [("result", "a", -5, 5, 1)]
    assert summary(steps.run([ev(30)]), "count") == [
        ("result", "a", 0, 10, 3), ("result", "a", 5, 15, 2)]


def test_late_event_bridging_two_sessions_merges_them(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=session("5 minutes"),
        aggs=[count()], watermark=0, allowed_lateness="30 minutes"), tmp_path / "cp")
    # Watermark 10:11 closes [0, 7); watermark 10:20 closes [10, 16).
    assert summary(steps.run([ev(0), ev(2), ev(10), ev(11)]), "count") == [
        ("result", "a", 0, 7, 2)]
    assert summary(steps.run([ev(20, k="z")]), "count") == [("result", "a", 10, 16, 2)]
    # 10:06 is within 5 minutes of 10:02 and of 10:10: one session [0, 16) of 5 events.
    assert sorted(summary(steps.run([ev(6)]), "count")) == [
        ("result", "a", 0, 16, 5), ("retract", "a", 0, 7, 2), ("retract", "a", 10, 16, 2)]


def test_an_event_exactly_a_gap_after_a_session_joins_it(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """As Spark's session_window (and Flink and Kafka Streams) have it: 10:05 is exactly the
    5-minute gap after 10:00, so one session [10:00, 10:10); 10:10:30 is past its end."""
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=session("5 minutes"),
        aggs=[count()], watermark=0), tmp_path / "cp")
    assert summary(steps.run([ev(0), ev(5), ev(10.5), ev(30, k="z")]), "count") == [
        ("result", "a", 0, 10, 2), ("result", "a", 10.5, 15.5, 1)]


def test_per_event_sliding_counts(spark: SparkSession, broker: EmbeddedBroker,
                                  topic_name: str, tmp_path: Path) -> None:
    """"More than 3 failed logins within 10 minutes of each other": one window per event."""
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=sliding("10 minutes"),
        aggs=[count()], watermark=0, allowed_lateness="5 minutes"), tmp_path / "cp")
    assert summary(steps.run([ev(0), ev(3), ev(8), ev(12), ev(30)]), "count") == [
        ("result", "a", -10, 0, 1), ("result", "a", -7, 3, 2), ("result", "a", -2, 8, 3),
        ("result", "a", 2, 12, 3), ("result", "a", 20, 30, 1)]
    # At watermark 10:30, 10:09 is 21 minutes behind (beyond 5): side output. 10:28 is
    # within lateness: its own window and the one ending at 10:30 are (re-)emitted.
    assert summary(steps.run([ev(9), ev(28)]), "count") == [
        ("late", 9.0, 21.0), ("result", "a", 18, 28, 1), ("result", "a", 20, 30, 2)]


def test_results_and_late_events_to_two_topics_exactly_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """to_topics(): window results and the late side output through one exactly-once sink."""
    import json

    from headrace.spark import read_events
    from headrace.streaming import late_events, results, to_topics
    from tests.spark.kafka_helpers import create_topic, produce, read_all

    create_topic(broker.bootstrap_servers, topic_name)
    counts, late = topic_name + "-counts", topic_name + "-late"
    source = read_events(spark, topic_name, SCHEMA, event_time="ts",
                         dead_letter_topic=topic_name + "-dlq",
                         kafka_bootstrap_servers=broker.bootstrap_servers,
                         startingOffsets="earliest")
    out = windowed(source, keys=["k"], event_time="event_time", window=tumbling("10 minutes"),
                   aggs=[count()], watermark=0)
    assert results(out).columns == ["k", "window_start", "window_end", "count", "final"]
    assert late_events(out).columns == ["event_time", "lateness_ms", "event"]
    for step in ([ev(1), ev(2)], [ev(15)], [ev(3)]):
        produce(broker.bootstrap_servers, topic_name,
                [(b"a", json.dumps(e).encode()) for e in step])
        q = (to_topics(out, ["k"], counts, late).writeStream.format("headrace")
             .option("kafka.bootstrap.servers", broker.bootstrap_servers)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination(scaled(120))
        assert q.exception() is None, q.exception()
    emitted = [json.loads(m.value()) for m in read_all(broker.bootstrap_servers, counts)]
    assert [(r["kind"], r["count"]) for r in emitted] == [("result", 2)]
    dropped = [json.loads(m.value()) for m in read_all(broker.bootstrap_servers, late)]
    assert [(d["ts"], d["k"]) for d in dropped] == [(ev(3)["ts"], "a")]


def test_lateness_boundary_is_end_plus_allowed_lateness_at_or_behind_the_watermark(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """The one rule: late when ``end + allowed_lateness <= watermark``. At the boundary the
    event is late; a millisecond before the boundary it still updates its window."""
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=tumbling("10 minutes"),
        aggs=[count()], watermark=0, allowed_lateness="2 minutes"), tmp_path / "cp")
    assert summary(steps.run([ev(1)]), "count") == []
    assert summary(steps.run([ev(12)]), "count") == [("result", "a", 0, 10, 1)]
    # watermark 10:12 = end 10:10 + 2 minutes: exactly at the boundary -> late
    assert summary(steps.run([ev(5)])) == [("late", 5.0, 7.0)]
    # watermark 10:21:59.999, one millisecond before 10:20 + 2 minutes -> a late update
    assert summary(steps.run([ev(15), ev(22 - 1 / MINUTE)]), "count") == [
        ("result", "a", 10, 20, 2)]  # 10:12 and 10:15
    assert summary(steps.run([ev(14)]), "count") == [("result", "a", 10, 20, 3)]


def test_wrong_options_get_a_clear_error(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from headrace.streaming import SpecError
    from headrace.streaming.joins import latest_join

    df = spark.createDataFrame([("a", 1)], "k string, ts long") \
        .withColumn("event_time", F.timestamp_millis("ts"))

    def build(**kw: Any) -> Any:
        spec = {"keys": ["k"], "event_time": "event_time", "window": tumbling("1 minute"),
                "aggs": [count()], "watermark": 0, **kw}
        return windowed(df, **spec)

    with pytest.raises(SpecError, match="buckets must be at least 1, got 0"):
        build(buckets=0)
    with pytest.raises(SpecError, match="emit must be"):
        build(emit="sometimes")
    with pytest.raises(SpecError, match=r"columns \['nope'\] are not in the stream"):
        build(keys=["nope"])
    with pytest.raises(SpecError, match="buckets must be at least 1"):
        latest_join(df, df, on=["k"], buckets=-1)


@pytest.mark.parametrize("window", [tumbling("10 minutes"), session("10 minutes")],
                         ids=["tumbling", "session"])
def test_null_inputs_are_skipped_as_sql_skips_them(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path,
        window: Any) -> None:
    steps = StepRunner(spark, broker, topic_name, SCHEMA, lambda df: windowed(
        df, keys=["k"], event_time="event_time", window=window,
        aggs=[count(), sum_of("amount"), avg_of("amount"), min_of("amount"),
              max_of("amount")], watermark=0), tmp_path / "cp")
    cols = ("count", "sum_amount", "avg_amount", "min_amount", "max_amount")
    events = [ev(1, amount=2), {"k": "a", "ts": at(2), "amount": None}, ev(3, amount=4),
              {"k": "b", "ts": at(4), "amount": None}, ev(60, k="z")]
    got = sorted(r[:2] + r[4:] for r in summary(steps.run(events), *cols))
    assert got == [("result", "a", 3, 6.0, 3.0, 2.0, 4.0),
                   ("result", "b", 1, None, None, None, None)]
