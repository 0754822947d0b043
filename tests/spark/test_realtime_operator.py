"""The JVM rule operator (``headrace.realtime``) against the micro-batch path's evaluator.

Rules written in Python compile to Spark SQL plus one Java transformWithState operator; on
the same rows each key's alerts must equal what ``rules.CardState`` (the micro-batch
detector's evaluator) raises, row for row. Batch DataFrames hand the operator each key's
rows at once, in (event time, id) order, as CardState sees them here.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.realtime import RealtimeConfig, alerts, fraud_rules
from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn, score
from headrace.realtime import (
    NotRealTimeError,
    RuleError,
    RuleSet,
    WindowCount,
    WindowSum,
    apply_rules,
    python_operators,
    require_real_time,
)
from headrace.testing import EmbeddedBroker

pytestmark = pytest.mark.spark

SCHEMA = ("topic string, card_id string, txn_id string, user_id string, amount double, "
          "lat double, lon double, city string, event_time long, avg_amount double, "
          "std_amount double, updated_at long, ingest_ms long")
CITIES = [(48.85, 2.35), (48.86, 2.36), (51.5, -0.12), (40.71, -74.0)]


def random_rows(seed: int, cards: int, per_card: int) -> list[tuple[Any, ...]]:
    """Transactions built to hit every rule now and then: bursts of small charges, quick
    hops between far cities, amounts far above the profile; one profile row per card."""
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    for c in range(cards):
        card = f"card-{c}"
        mean, std = rng.uniform(20, 80), rng.uniform(5, 20)
        rows.append(("user-profiles", card, None, None, None, None, None, None, None, mean,
                     std, 0, 0))
        t = 1_767_225_600_000 + rng.randrange(0, 60_000)
        for n in range(per_card):
            t += rng.choice([1_000, 5_000, 20_000, 45_000, 90_000, 400_000])
            if rng.random() < 0.1:
                t -= rng.randrange(0, 120_000)  # out of order
            lat, lon = rng.choice(CITIES)
            amount = rng.choice([rng.uniform(0.5, 1.99), rng.uniform(5, 100),
                                 rng.uniform(1000, 5000)])
            rows.append(("transactions", card, f"{card}-{n:03d}", "u", round(amount, 2), lat,
                         lon, "c", t, None, None, None, t))
            if rng.random() < 0.05:  # a replayed record raises nothing new
                rows.append(rows[-1])
    return rows


def expected_alerts(rows: list[tuple[Any, ...]], th: Thresholds) -> set[tuple[Any, ...]]:
    by_card: dict[str, list[tuple[Any, ...]]] = {}
    profile: dict[str, tuple[float, float]] = {}
    for r in rows:
        if r[0] == "user-profiles":
            profile[r[1]] = (r[9], r[10])
        else:
            by_card.setdefault(r[1], []).append(r)
    out = set()
    for card, txns in by_card.items():
        state = CardState()
        mean, std = profile.get(card, (None, None))
        for r in sorted(txns, key=lambda r: (r[8], r[2])):
            reasons = state.evaluate(Txn(r[2], r[8], r[5], r[6], r[4], r[7]), mean, std, th)
            if reasons:
                out.add((card, r[2], r[8], tuple(reasons), score(reasons)))
    return out


def run_rules(spark: SparkSession, rows: list[tuple[Any, ...]], rules: RuleSet) -> DataFrame:
    return apply_rules(spark.createDataFrame(rows, SCHEMA), rules)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_jvm_operator_equals_the_micro_batch_evaluator(spark: SparkSession, seed: int) -> None:
    th = Thresholds()
    rows = random_rows(seed, cards=40, per_card=30)
    expected = expected_alerts(rows, th)
    assert {r for a in expected for r in a[3]} == {"velocity", "impossible_travel",
                                                   "amount_anomaly", "card_testing"}
    got = {(r["key"], r["id"], r["event_time_ms"], tuple(r["reasons"]), r["score"])
           for r in run_rules(spark, rows, fraud_rules(th)).collect()}
    assert got == expected


def test_window_sum_and_tumbling_windows(spark: SparkSession) -> None:
    base = 1_767_225_600_000
    rows = [("transactions", "k", f"t{n}", "u", amount, 0.0, 0.0, "c", base + ms, None,
             None, None, 0)
            for n, (ms, amount) in enumerate([(0, 40.0), (10_000, 40.0), (59_000, 30.0),
                                               (61_000, 200.0)])]
    rules = RuleSet(rules=(WindowSum("big_spend", of="amount", window="1 minute",
                                     at_least=100, weight=0.5),), key="card_id",
                    id="txn_id", event_time="event_time", carry=("amount",))
    got = [(r["id"], list(r["reasons"])) for r in run_rules(spark, rows, rules).collect()]
    # 40 + 40 + 30 reach 100 in the first minute; the second minute's 200 fires too but
    # within the default 10-minute cool-down, so it stays quiet
    assert got == [("t2", ["big_spend"])]
    rules = RuleSet(rules=(WindowSum("big_spend", of="amount", window="1 minute",
                                     at_least=100, weight=0.5, cooldown=0),),
                    key="card_id", id="txn_id", event_time="event_time")
    got = [(r["id"], list(r["reasons"])) for r in run_rules(spark, rows, rules).collect()]
    assert sorted(got) == [("t2", ["big_spend"]), ("t3", ["big_spend"])]


def test_real_time_plan_has_no_python_operator(spark: SparkSession, broker: EmbeddedBroker,
                                               tmp_path: Any) -> None:
    out = alerts(spark, RealtimeConfig(broker.bootstrap_servers, str(tmp_path)))
    assert out.isStreaming
    plan = str(out._jdf.queryExecution().analyzed().toString())
    assert "TransformWithState" in plan and "KafkaTable" in plan
    assert python_operators(out) == []
    require_real_time(out)


def test_a_python_udf_is_named_and_refused(spark: SparkSession) -> None:
    rows = random_rows(5, cards=2, per_card=3)
    df = spark.createDataFrame(rows, SCHEMA)
    halve = F.udf(lambda x: x / 2 if x is not None else None, "double")
    udf_df = df.withColumn("amount", halve(F.col("amount")))
    rules = RuleSet(rules=(WindowSum("much", of="amount", window="1 minute", at_least=3),),
                    key="card_id", id="txn_id", event_time="event_time")
    out = apply_rules(udf_df, rules)
    assert python_operators(out) == ["PythonUDF"]
    with pytest.raises(NotRealTimeError, match="Python"):
        require_real_time(out)


def test_bad_rule_sets_get_clear_errors(spark: SparkSession) -> None:
    df = spark.createDataFrame(random_rows(6, cards=1, per_card=2), SCHEMA)
    with pytest.raises(RuleError, match=r"\['no_such'\]"):
        apply_rules(df, RuleSet(rules=(WindowSum("s", of="no_such", at_least=1),),
                                key="card_id", id="txn_id", event_time="event_time"))
    with pytest.raises(RuleError, match="hop"):
        apply_rules(df, RuleSet(rules=(WindowCount("w", window="1 minute", hop="2 minutes",
                                                   at_least=1),),
                                key="card_id", id="txn_id", event_time="event_time"))


def test_topics_default_to_the_micro_batch_pipelines() -> None:
    assert RealtimeConfig("x", "y").topics == PipelineTopics()


def test_initial_profiles_are_in_state_before_the_first_row(spark: SparkSession) -> None:
    base = 1_767_225_600_000
    events = [("transactions", "card-1", "t1", "u", 900.0, 0.0, 0.0, "c", base, None, None,
               None, 0),
              ("transactions", "card-2", "t2", "u", 900.0, 0.0, 0.0, "c", base, None, None,
               None, 0)]
    # card-1's profile makes 900 an outlier; card-2 has none, so nothing can fire for it
    initial = spark.createDataFrame([("card-1", base - 1, 50.0, 10.0)],
                                    "card_id string, updated_at long, avg_amount double, "
                                    "std_amount double")
    rules = fraud_rules(Thresholds())
    out = apply_rules(spark.createDataFrame(events, SCHEMA), rules, initial_profiles=initial)
    assert [(r["key"], list(r["reasons"])) for r in out.collect()] == \
        [("card-1", ["amount_anomaly"])]
    with pytest.raises(RuleError, match="lacks columns"):
        apply_rules(spark.createDataFrame(events, SCHEMA), rules,
                    initial_profiles=initial.drop("std_amount"))
