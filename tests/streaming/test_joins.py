"""Joins: exact outputs step by step — latest value, temporal under out-of-order updates,
table-table updates, and interval joins (when outer rows come out)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from headrace.streaming.errors import SpecError
from headrace.streaming.joins import interval_join, latest_join, table_join, temporal_join
from headrace.streaming.timeutil import to_ms
from headrace.testing import EmbeddedBroker
from tests.streaming.harness import MINUTE, StepRunner, at, state_by_key

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def names(topic: str) -> dict[str, str]:
    return {"events": topic + "-ev", "table": topic + "-tb"}


def stream_table_steps(spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path,
                       build: Callable[[dict[str, DataFrame]], DataFrame]) -> StepRunner:
    """Events ``(k, ts, n)`` and a price table ``(k, ts, price)``, joined by ``build``."""
    return StepRunner(
        spark, broker, names(topic),
        {"events": "k string, ts long, n long", "table": "k string, ts long, price double"},
        build, tmp_path / "cp")


def temporal(watermark: str | int) -> Callable[[dict[str, DataFrame]], DataFrame]:
    """The events joined with the price valid at their time."""
    return lambda s: temporal_join(s["events"].select("k", "n", "event_time"),
                                   s["table"].select("k", "price", "event_time"), on=["k"],
                                   event_time="event_time", valid_from="event_time",
                                   watermark=watermark)


def orders_products_steps(spark: SparkSession, broker: EmbeddedBroker, topic: str,
                          tmp_path: Path) -> StepRunner:
    """Orders ``(k = product, order_id, qty)`` joined with products ``(k, price)``."""
    return StepRunner(
        spark, broker, {"orders": topic + "-o", "products": topic + "-p"},
        {"orders": "k string, ts long, order_id string, qty long",
         "products": "k string, ts long, price double"},
        lambda s: table_join(s["orders"].select("k", "order_id", "qty"),
                             s["products"].select("k", "price"), on=["k"], left_key="order_id"),
        tmp_path / "cp")


def test_latest_join(spark: SparkSession, broker: EmbeddedBroker, topic_name: str,
                     tmp_path: Path) -> None:
    steps = stream_table_steps(spark, broker, topic_name, tmp_path,
        lambda s: latest_join(s["events"].select("k", "n", "event_time"),
                              s["table"].select("k", "price"), on=["k"]))
    out = steps.run({"table": [{"k": "a", "ts": at(0), "price": 1.0}],
                     "events": [{"k": "a", "ts": at(1), "n": 1}]})
    assert [(r["k"], r["left"]["n"], r["right"]["price"]) for r in out] == [("a", 1, 1.0)]
    out = steps.run({"table": [{"k": "a", "ts": at(2), "price": 2.0}],
                     "events": [{"k": "a", "ts": at(3), "n": 2}, {"k": "b", "ts": at(3), "n": 3}]})
    assert sorted((r["k"], r["left"]["n"], r["right"] and r["right"]["price"]) for r in out) == [
        ("a", 2, 2.0), ("b", 3, None)]


def test_latest_join_carries_every_field_exactly(spark: SparkSession, broker: EmbeddedBroker,
                                                 topic_name: str, tmp_path: Path) -> None:
    """Rows cross the join as JSON text: longs past 2^53, microseconds, decimals, NaN,
    binary, arrays, maps and nested structs come out as they went in."""
    def rich(df: DataFrame) -> DataFrame:
        return df.select(
            "k", (F.col("n") + F.lit(2**53 + 1)).alias("big"),
            F.timestamp_micros(F.col("ts") * 1000 + 7).alias("at"),
            F.lit("12345678901234567890.123456789012345678").cast("decimal(38,18)").alias("dec"),
            F.lit(float("nan")).alias("nan"), F.encode(F.col("k"), "utf-8").alias("raw"),
            F.array(F.col("n"), F.lit(None).cast("long")).alias("list"),
            F.create_map(F.lit("n"), F.col("n")).alias("attrs"),
            F.struct(F.col("k").alias("inner"),
                     F.array(F.struct(F.col("n").alias("x"))).alias("items")).alias("nested"))

    steps = stream_table_steps(spark, broker, topic_name, tmp_path,
        lambda s: latest_join(rich(s["events"]), s["table"].select("k", "price", "event_time"),
                              on=["k"]))
    out = steps.run({"table": [{"k": "é\u2028\"x", "ts": at(0), "price": -0.0}],
                     "events": [{"k": "é\u2028\"x", "ts": at(1), "n": 1}]})
    assert len(out) == 1
    left, right = out[0]["left"], out[0]["right"]
    assert out[0]["k"] == left["k"] == "é\u2028\"x"
    assert left["big"] == 2**53 + 2
    assert to_ms(left["at"]) == at(1) and left["at"].microsecond % 1000 == 7
    assert str(left["dec"]) == "12345678901234567890.123456789012345678"
    assert math.isnan(left["nan"])
    assert bytes(left["raw"]) == "é\u2028\"x".encode()
    assert left["list"] == [1, None] and left["attrs"] == {"n": 1}
    assert left["nested"] == {"inner": "é\u2028\"x", "items": [{"x": 1}]}
    assert math.copysign(1.0, right["price"]) == -1.0 and to_ms(right["event_time"]) == at(0)


def test_joins_refuse_maps_json_cannot_carry(spark: SparkSession) -> None:
    events = spark.createDataFrame([("a", {1: "x"})], "k string, m map<int,string>")
    table = spark.createDataFrame([("a", 1.0)], "k string, price double")
    with pytest.raises(SpecError, match="left stream's m is a map with int keys"):
        latest_join(events, table, on=["k"])


def test_temporal_join_with_out_of_order_versions(spark: SparkSession, broker: EmbeddedBroker,
                                                  topic_name: str, tmp_path: Path) -> None:
    steps = stream_table_steps(spark, broker, topic_name, tmp_path, temporal("10 minutes"))
    # Versions 10:00 and 10:20 arrive first; the event at 10:15 waits for the watermark.
    assert steps.run({"table": [{"k": "a", "ts": at(0), "price": 1.0},
                                {"k": "a", "ts": at(20), "price": 3.0}],
                      "events": [{"k": "a", "ts": at(15), "n": 1}]}) == []
    # The 10:10 version arrives after the 10:20 one, before the watermark passes 10:15;
    # the event at 10:25 moves the watermark to 10:15, which releases the 10:15 event.
    out = steps.run({"table": [{"k": "a", "ts": at(10), "price": 2.0}],
                     "events": [{"k": "a", "ts": at(25), "n": 2}]})
    assert [(r["left"]["n"], r["right"]["price"], (to_ms(r["valid_from"]) - at(0)) / MINUTE,
             r["late"]) for r in out] == [(1, 2.0, 10.0, False)]
    out = steps.run({"events": [{"k": "z", "ts": at(40), "n": 9}]})
    assert [(r["left"]["n"], r["right"]["price"], (to_ms(r["valid_from"]) - at(0)) / MINUTE,
             r["late"]) for r in out] == [(2, 3.0, 20.0, False)]


def test_table_table_join_updates_the_view(spark: SparkSession, broker: EmbeddedBroker,
                                           topic_name: str, tmp_path: Path) -> None:
    steps = orders_products_steps(spark, broker, topic_name, tmp_path)

    def view(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["left"]["order_id"], r["left"]["qty"],
                       r["right"] and r["right"]["price"]) for r in out)

    assert view(steps.run({"products": [{"k": "p1", "ts": 0, "price": 10.0}],
                           "orders": [{"k": "p1", "ts": 0, "order_id": "o1", "qty": 2},
                                      {"k": "p1", "ts": 0, "order_id": "o2", "qty": 1}]})) \
        == [("o1", 2, 10.0), ("o2", 1, 10.0)]
    assert view(steps.run({"products": [{"k": "p1", "ts": 1, "price": 12.0}]})) == [
        ("o1", 2, 12.0), ("o2", 1, 12.0)]
    assert view(steps.run({"orders": [{"k": "p1", "ts": 2, "order_id": "o1", "qty": 5}]})) == [
        ("o1", 5, 12.0)]


@pytest.mark.parametrize("how", ["inner", "left_outer"])
def test_interval_join(spark: SparkSession, broker: EmbeddedBroker, topic_name: str,
                       tmp_path: Path, how: str) -> None:
    """Clicks within an hour of their impression; an unmatched impression comes out (left
    outer) once the watermark passes its hour plus the click side's delay. A null ad
    matches nothing, not even another null (as in Spark's join)."""

    def build(s: dict[str, DataFrame]) -> DataFrame:
        imps = s["imps"].selectExpr("k as ad", "n as imp_id", "event_time as imp_time")
        clicks = s["clicks"].selectExpr("k as click_ad", "n as click_id",
                                        "event_time as click_time")
        return interval_join(imps, clicks.withColumnRenamed("click_ad", "ad"), on=["ad"],
                             left_time="imp_time", right_time="click_time", lower=0,
                             upper="1 hour", left_watermark=0, right_watermark=0, how=how)

    steps = StepRunner(spark, broker, {"imps": topic_name + "-i", "clicks": topic_name + "-c"},
                       {"imps": "k string, ts long, n long", "clicks": "k string, ts long, n long"},
                       build, tmp_path / "cp")

    def pairs(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["imp_id"], r["click_id"]) for r in out)

    assert pairs(steps.run({"imps": [{"k": "ad1", "ts": at(0), "n": 1},
                                     {"k": "ad2", "ts": at(5), "n": 2},
                                     {"k": None, "ts": at(5), "n": 5}],
                            "clicks": [{"k": "ad1", "ts": at(30), "n": 10},
                                       {"k": "ad2", "ts": at(70), "n": 20},
                                       {"k": None, "ts": at(30), "n": 50}]})) == [(1, 10)]
    # Spark's watermark is the minimum over both inputs: both sides must move on.
    # Watermark 10:40: impression 2's hour (until 11:05) is still open.
    assert pairs(steps.run({"imps": [{"k": "xx", "ts": at(40), "n": 3}],
                            "clicks": [{"k": "zz", "ts": at(40), "n": 99}]})) == []
    expected = [(2, None), (3, None), (5, None)] if how == "left_outer" else []
    assert pairs(steps.run({"imps": [{"k": "yy", "ts": at(130), "n": 4}],
                            "clicks": [{"k": "zz", "ts": at(130), "n": 98}]})) == expected


def test_temporal_join_refuses_a_null_time(spark: SparkSession, broker: EmbeddedBroker,
                                          topic_name: str, tmp_path: Path) -> None:
    """An event without a time could never be joined (no watermark reaches it): the query
    fails with a clear error instead of holding it forever."""
    steps = stream_table_steps(spark, broker, topic_name, tmp_path, lambda s: temporal_join(
        s["events"].select("k", "n", F.when(F.col("n") > 0, F.col("event_time"))
                           .alias("event_time")),
        s["table"].select("k", "price", "event_time"), on=["k"], event_time="event_time",
        valid_from="event_time", watermark=0))
    with pytest.raises(AssertionError, match="an event time or valid_from is null"):
        steps.run({"table": [{"k": "a", "ts": at(0), "price": 1.0}],
                   "events": [{"k": "a", "ts": at(1), "n": 0}]})


def test_temporal_join_state_stays_bounded_without_events(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """A key with table updates and no events keeps only the versions the watermark can
    still reach."""
    steps = stream_table_steps(spark, broker, topic_name, tmp_path, temporal(0))
    held = []
    # Three steps of ten versions: the first shows the eviction, the next two that the count
    # stays flat while versions keep coming.
    for step in range(3):
        steps.run({"table": [{"k": "a", "ts": at(step * 10 + i), "price": float(i)}
                             for i in range(10)]})
        held.append(len(state_by_key(spark, tmp_path / "cp")[("a",)]["versions"]))
    # The watermark is each step's last version: older ones are gone, whatever the length.
    assert held == [1] * 3, held


@pytest.mark.parametrize("join", ["latest", "temporal"])
def test_a_key_without_table_rows_leaves_no_state(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path,
        join: str) -> None:
    build = temporal(0) if join == "temporal" else lambda s: latest_join(
        s["events"].select("k", "n"), s["table"].select("k", "price"), on=["k"])
    steps = stream_table_steps(spark, broker, topic_name, tmp_path, build)
    out = steps.run({"table": [{"k": "a", "ts": at(0), "price": 1.0}],
                     "events": [{"k": "nobody", "ts": at(1), "n": 1}]})
    out += steps.run({"events": [{"k": "a", "ts": at(5), "n": 2}]})
    assert sorted((r["k"], r["left"]["n"], r["right"] and r["right"]["price"])
                  for r in out) == [("a", 2, 1.0), ("nobody", 1, None)]
    # The event without a table row was joined (with nothing) and is gone from state.
    assert set(state_by_key(spark, tmp_path / "cp")) == {("a",)}


def test_temporal_join_late_events_after_eviction(spark: SparkSession, broker: EmbeddedBroker,
                                                  topic_name: str, tmp_path: Path) -> None:
    """Late events: the version valid at their time while it is held; once evicted, the
    oldest version held (``valid_from`` after the event says so); none before the key's
    first version."""
    steps = stream_table_steps(spark, broker, topic_name, tmp_path, temporal(0))

    def rows(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["left"]["n"], r["right"] and r["right"]["price"],
                       r["valid_from"] and (to_ms(r["valid_from"]) - at(0)) / MINUTE, r["late"])
                      for r in out)

    # Versions at 10:10, 10:20, 10:30; the watermark moves to 10:40 and evicts 10:10 and
    # 10:20 (the newest at or before it, 10:30, stays).
    steps.run({"table": [{"k": "a", "ts": at(m), "price": float(m)} for m in (10, 20, 30)],
               "events": [{"k": "z", "ts": at(40), "n": 0}]})
    steps.run({"events": [{"k": "z", "ts": at(41), "n": 0}]})
    out = steps.run({"events": [{"k": "a", "ts": at(35), "n": 1},    # version held: exact
                                {"k": "a", "ts": at(15), "n": 2},    # 10:10 evicted: oldest held
                                {"k": "a", "ts": at(5), "n": 3}]})   # before the first version
    assert rows([r for r in out if r["k"] == "a"]) == [
        (1, 30.0, 30.0, True), (2, 30.0, 30.0, True), (3, None, None, True)]


def test_latest_join_applies_a_batchs_updates_before_its_events(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """The documented rule: an event sees a table update of the same micro-batch, even one
    produced after it."""
    steps = stream_table_steps(spark, broker, topic_name, tmp_path,
        lambda s: latest_join(s["events"].select("k", "n", "event_time"),
                              s["table"].select("k", "price"), on=["k"]))
    steps.run({"table": [{"k": "a", "ts": at(0), "price": 1.0}]})
    out = steps.run({"events": [{"k": "a", "ts": at(1), "n": 1}],
                     "table": [{"k": "a", "ts": at(2), "price": 2.0}]})
    assert [(r["left"]["n"], r["right"]["price"]) for r in out] == [(1, 2.0)]


def test_table_join_follows_a_changed_foreign_key(spark: SparkSession, broker: EmbeddedBroker,
                                                  topic_name: str, tmp_path: Path) -> None:
    """An order moved from product p1 to p2 joins p2; p1's later price change no longer
    re-emits it."""
    steps = orders_products_steps(spark, broker, topic_name, tmp_path)

    def view(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["k"], r["left"]["order_id"], r["left"]["qty"],
                       r["right"] and r["right"]["price"]) for r in out)

    assert view(steps.run({"products": [{"k": "p1", "ts": 0, "price": 10.0},
                                        {"k": "p2", "ts": 0, "price": 20.0}],
                           "orders": [{"k": "p1", "ts": 0, "order_id": "o1", "qty": 2},
                                      {"k": "p1", "ts": 0, "order_id": "o2", "qty": 1}]})) \
        == [("p1", "o1", 2, 10.0), ("p1", "o2", 1, 10.0)]
    assert view(steps.run({"orders": [{"k": "p2", "ts": 1, "order_id": "o1", "qty": 3}]})) == [
        ("p2", "o1", 3, 20.0)]
    assert view(steps.run({"products": [{"k": "p1", "ts": 2, "price": 11.0}]})) == [
        ("p1", "o2", 1, 11.0)]
    assert view(steps.run({"products": [{"k": "p2", "ts": 3, "price": 21.0}]})) == [
        ("p2", "o1", 3, 21.0)]


def test_table_join_matches_a_model_over_many_orders(spark: SparkSession,
                                                     broker: EmbeddedBroker, topic_name: str,
                                                     tmp_path: Path) -> None:
    """Many orders sharing few buckets, moved between products and repriced at random over
    several micro-batches: each batch emits exactly the view rows it changes, as a model
    of the view says (the updated orders, and every order of a repriced product)."""
    rng = random.Random(7)
    steps = StepRunner(
        spark, broker, {"orders": topic_name + "-o", "products": topic_name + "-p"},
        {"orders": "k string, ts long, order_id string, qty long",
         "products": "k string, ts long, price double"},
        lambda s: table_join(s["orders"].select("k", "order_id", "qty"),
                             s["products"].select("k", "price"), on=["k"],
                             left_key="order_id", buckets=3),
        tmp_path / "cp")
    products = [f"p{i}" for i in range(8)]
    view: dict[str, tuple[str, int]] = {}  # order -> (product, qty)
    prices: dict[str, float] = {}
    for step in range(4):
        repriced = rng.sample(products, 3)
        for p in repriced:
            prices[p] = float(rng.randrange(100, 999))
        orders = [{"k": rng.choice(products), "ts": step, "order_id": f"o{rng.randrange(60)}",
                   "qty": rng.randrange(1, 9)} for _ in range(50)]
        for o in orders:  # the last row of an order wins
            view[o["order_id"]] = (o["k"], o["qty"])
        changed = {o["order_id"] for o in orders} | {
            order for order, (p, _) in view.items() if p in repriced}
        expected = sorted((o, view[o][0], view[o][1], prices.get(view[o][0])) for o in changed)
        # one partition per topic: a product's price and an order's changes keep their order
        out = steps.run({"products": [{"k": p, "ts": step, "price": prices[p]}
                                      for p in repriced], "orders": orders})
        assert sorted((r["left"]["order_id"], r["k"], r["left"]["qty"],
                       r["right"] and r["right"]["price"]) for r in out) == expected, step
