"""The checkpoint compatibility corpus: small checkpoints and savepoints written by this
version's stateful operators, kept in ``tests/savepoints/corpus`` and restored by
``test_corpus.py``. ``scripts/savepoint_corpus.py`` writes them; a later change that
cannot restore one must ship a migration (``headrace.savepoints.migrations``), not
regenerate the corpus.

Each case: a topic, its events in two steps, and the query. The corpus holds, per case,
the checkpoint after the first step (``checkpoint/``), a savepoint of it (``savepoint/``)
and what the query emits for the second step (``expected.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from headrace.pipelines.fraud.pipeline import detect
from headrace.pipelines.fraud.realtime import fraud_rules
from headrace.pipelines.fraud.rules import Thresholds
from headrace.realtime import apply_rules
from headrace.savepoints import Savepoint
from headrace.streaming import approx_distinct, count, sliding, sum_of, tumbling, windowed
from headrace.streaming.joins import interval_join, temporal_join
from tests.streaming.harness import MINUTE, T0

CORPUS = Path(__file__).with_name("corpus")


@dataclass(frozen=True)
class Case:
    name: str
    schema: str
    steps: tuple[list[dict[str, Any]], list[dict[str, Any]]]
    build: Callable[[DataFrame, Savepoint | None], DataFrame]
    key: str
    restore: Callable[[DataFrame, Savepoint | None], DataFrame] | None = None
    """The query started from the case's savepoint, when it is not ``build`` (a checkpoint
    of an operator this version replaced: the test takes a savepoint of the checkpoint
    with today's code and starts today's operator from it; the checkpoint itself does
    not restore, and the corpus keeps no savepoint of it)."""

    @property
    def topic(self) -> str:
        return f"corpus-{self.name}"


def _events(start: float, end: float, keys: int, late: tuple[float, ...] = ()
            ) -> list[dict[str, Any]]:
    out = [{"k": f"k{i}", "ts": T0 + round((t + i / 10) * MINUTE), "amount": float(i + t),
            "user": f"u{int(t) % 3}"}
           for t in range(int(start), int(end), 2) for i in range(keys)]
    return out + [{"k": "k0", "ts": T0 + round(m * MINUTE), "amount": 0.5, "user": "u9"}
                  for m in late]


def _txns(start: int, end: int) -> list[dict[str, Any]]:
    """Card transactions every 20 s: card c1 flies between Paris and Oslo (impossible
    travel, quiet for 10 minutes after each alert), c3's last is an amount anomaly, and
    every card makes a velocity burst."""
    out = []
    for t in range(start, end):
        for c in range(4):
            out.append({"card_id": f"c{c}", "txn_id": f"t{t}-{c}", "user_id": f"u{c}",
                        "amount": 20.0 + c + (900.0 if (t, c) == (end - 1, 3) else 0),
                        "lat": 48.85 + (10.0 * (t % 2) if c == 1 else 0.0),
                        "lon": 2.35, "city": "Paris" if c != 1 or t % 2 == 0 else "Oslo",
                        "event_time": T0 + t * 20_000 + c * 1000,
                        "avg_amount": 25.0, "std_amount": 5.0})
    return out


def _prices(start: int, end: int) -> list[dict[str, Any]]:
    """Events of keys k0..k2 every 2 minutes and, every 6 minutes, a new price version of
    each (some out of order: the versions at minute 6n arrive after the events of 6n + 2)."""
    out: list[dict[str, Any]] = []
    for t in range(start, end, 2):
        for i in range(3):
            out.append({"k": f"k{i}", "ts": T0 + (t * 60 + i) * 1000, "kind": "e",
                        "n": t * 10 + i, "price": None})
        if t % 6 == 2:
            out += [{"k": f"k{i}", "ts": T0 + (t - 2) * MINUTE, "kind": "t", "n": None,
                     "price": float(t + i)} for i in range(3)]
    return out


def _temporal(df: DataFrame, sp: Savepoint | None) -> DataFrame:
    """Events joined with the price valid at their time, both sides from one topic."""
    return temporal_join(df.where(F.col("kind") == "e").select("k", "n", "event_time"),
                         df.where(F.col("kind") == "t").select("k", "price", "event_time"),
                         on=["k"], event_time="event_time", valid_from="event_time",
                         watermark="3 minutes", buckets=4, from_savepoint=sp)


def _impressions(start: int, end: int) -> list[dict[str, Any]]:
    """Impressions of ads k0..k2 every 2 minutes and, two rounds in three, a click a
    minute after the round's impression (numbered after the impression of the round
    before); a third of the impressions stay unmatched."""
    out: list[dict[str, Any]] = []
    for t in range(start, end, 2):
        for i in range(3):
            out.append({"k": f"k{i}", "ts": T0 + (t * 60 + i) * 1000, "kind": "i",
                        "n": t * 10 + i, "price": None})
            if (t // 2 + i) % 3 and t >= 2:
                out.append({"k": f"k{i}", "ts": T0 + ((t + 1) * 60 + i) * 1000, "kind": "c",
                            "n": (t - 2) * 10 + i, "price": None})
    return out


def _straddling() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``_impressions`` in two steps, the clicks of the first step's last round held back
    to the second: impressions held in state before the switch are matched after it."""
    first, second = _impressions(0, 14), _impressions(14, 26)
    held = [e for e in first if e["kind"] == "c" and e["ts"] >= T0 + 13 * MINUTE]
    return [e for e in first if e not in held], held + second


def _interval(df: DataFrame, sp: Savepoint | None) -> DataFrame:
    """Clicks within 2 minutes of their impression, left outer (unmatched impressions come
    out as the watermark passes), both sides from one topic."""
    imps = df.where(F.col("kind") == "i").selectExpr("k", "n as imp", "event_time as imp_time")
    clicks = df.where(F.col("kind") == "c").selectExpr("k", "n as click",
                                                       "event_time as click_time")
    return interval_join(imps, clicks, on=["k"], left_time="imp_time",
                         right_time="click_time", lower=0, upper="2 minutes",
                         left_watermark="1 minute", right_watermark="1 minute",
                         how="left_outer", buckets=4, from_savepoint=sp)


def _spark_interval(df: DataFrame, sp: Savepoint | None) -> DataFrame:
    """``_interval`` as ``interval_join`` built it before it moved onto transformWithState
    (state schema version 0: Spark's own stream-stream join, left outer), for the corpus
    case of a checkpoint written then."""
    assert sp is None, "Spark's own join cannot start from a savepoint"
    imps = df.where(F.col("kind") == "i").selectExpr("k", "n as imp", "event_time as imp_time")
    clicks = df.where(F.col("kind") == "c").selectExpr("k", "n as click",
                                                       "event_time as click_time")
    lw = imps.withWatermark("imp_time", "60000 milliseconds")
    rw = clicks.withWatermark("click_time", "60000 milliseconds")
    r = rw.select(*[F.col(c).alias(f"__r_{c}") if c == "k" else F.col(c) for c in rw.columns])
    cond = (lw["k"] == r["__r_k"]) \
        & (r["click_time"] >= lw["imp_time"] + F.expr("INTERVAL 0 MILLISECONDS")) \
        & (r["click_time"] <= lw["imp_time"] + F.expr("INTERVAL 120000 MILLISECONDS"))
    return lw.join(r, cond, "leftouter").drop("__r_k")


def rule_operator(df: DataFrame, sp: Savepoint | None) -> DataFrame:
    """The real-time path's rule operator (the fraud rules, JVM) in micro-batch mode: its
    state is the same as in Real-Time Mode. Profiles come with each transaction (no
    profile rows: every row is an event). No state TTL: it would make the query run a batch
    at every trigger (processing-time mode), which never lets a step end."""
    rows = df.select("card_id", "txn_id", "user_id", "amount", "lat", "lon", "city",
                     F.unix_millis("event_time").alias("event_time"),
                     F.lit("transactions").alias("topic"), F.lit(0).cast("long").alias("ingest_ms"),
                     F.lit(None).cast("long").alias("updated_at"), "avg_amount", "std_amount")
    return apply_rules(rows, replace(fraud_rules(Thresholds()), state_ttl=0), from_savepoint=sp)


WINDOW_SCHEMA = "k string, ts long, amount double, user string"
PRICE_SCHEMA = "k string, ts long, kind string, n long, price double"
TXN_SCHEMA = ("card_id string, txn_id string, user_id string, amount double, lat double, "
              "lon double, city string, event_time long, avg_amount double, "
              "std_amount double")

CASES = (
    Case("windowed-columnar", WINDOW_SCHEMA,
         (_events(0, 14, 3), _events(12, 30, 3, late=(1, 11))),
         lambda df, sp: windowed(df, keys=["k"], event_time="event_time",
                                 window=tumbling("10 minutes"),
                                 aggs=[count(), sum_of("amount")], watermark="1 minute",
                                 allowed_lateness="2 minutes", buckets=4,
                                 from_savepoint=sp), "k"),
    Case("windowed-per-event", WINDOW_SCHEMA,
         (_events(0, 10, 2), _events(8, 20, 2, late=(1,))),
         lambda df, sp: windowed(df, keys=["k"], event_time="event_time",
                                 window=sliding("5 minutes"),
                                 aggs=[count(), approx_distinct("user")],
                                 watermark="1 minute", buckets=4, from_savepoint=sp), "k"),
    # the second step 12 minutes on: past the rules' quiet period, within the cards' keep
    Case("fraud-detector", TXN_SCHEMA, (_txns(0, 8), _txns(36, 42)),
         lambda df, sp: detect(df, Thresholds(), "10 seconds", "30 seconds", sp), "card_id"),
    Case("temporal-join", PRICE_SCHEMA, (_prices(0, 14), _prices(14, 26)), _temporal, "k"),
    Case("interval-join", PRICE_SCHEMA, (_impressions(0, 14), _impressions(14, 26)),
         _interval, "k"),
    # a checkpoint of interval_join from before transformWithState, migrated by savepoint
    Case("interval-join-spark", PRICE_SCHEMA, _straddling(), _spark_interval, "k",
         restore=_interval),
    # the real-time path's operator on the detector's transactions
    Case("realtime-rules", TXN_SCHEMA, (_txns(0, 8), _txns(36, 42)), rule_operator, "card_id"),
)


def normalized(rows: list[dict[str, Any]]) -> list[Any]:
    """Rows as JSON values (timestamps as text), in a fixed order: a query's output as the
    corpus records it."""
    plain = [json.loads(json.dumps(r, default=str, sort_keys=True)) for r in rows]
    for r in plain:  # a late event's record timestamp is when it was produced
        if isinstance(r.get("event"), str) and "kafka_timestamp" in r["event"]:
            r["event"] = json.dumps({k: v for k, v in json.loads(r["event"]).items()
                                     if k != "kafka_timestamp"}, sort_keys=True)
    return sorted(plain, key=lambda r: json.dumps(r, sort_keys=True))


PLACEHOLDER = "{CHECKPOINT}"


def relocate(checkpoint: Path, old: str, new: str) -> None:
    """Rewrite the checkpoint's own location in its operators' metadata: Spark 4.3's
    transformWithState records its state schema files by absolute path, so a checkpoint
    restores only where it was written (a savepoint has no such tie). The corpus keeps
    ``PLACEHOLDER`` there."""
    for meta in checkpoint.glob("state/*/_metadata/v2/*"):
        if meta.is_file():
            meta.write_text(meta.read_text().replace(f"file:{old}/", f"file:{new}/"))
