"""state(savepoint(q)) == state(q), for random inputs, for the windowed operator, the
fraud detector, the interval join (a card's transactions with its next ones, left outer)
and the real-time path's rule operator (the fraud rules on the JVM; one query holds the
four, a savepoint then has four operators).

An example: random transactions in two steps. The reference query runs both steps on one
checkpoint; after the first, a savepoint of it is taken, and a second query started from
the savepoint (other shuffle partitions) runs the second step. Both then hold the same
state, key by key and bucket by bucket (timers too), and emitted the same rows. One
example per suite run (each costs three short query runs; the suite's time is scarce):
raise ``max_examples`` to search further.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from headrace.pipelines.fraud.pipeline import detect
from headrace.pipelines.fraud.rules import Thresholds
from headrace.savepoints import Savepoint, create
from headrace.savepoints.state import decode, jvm_state, per_key
from headrace.spark import read_events
from headrace.streaming import count, sum_of, tumbling, windowed
from headrace.streaming.joins import interval_join
from headrace.testing import EmbeddedBroker, scaled
from tests.savepoints.corpus_cases import TXN_SCHEMA, normalized, rule_operator
from tests.spark.kafka_helpers import create_topic, produce
from tests.streaming.harness import T0

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

TXN = st.tuples(st.integers(0, 4), st.integers(0, 40), st.sampled_from([1.0, 30.0, 900.0]),
                st.booleans())


def _txn(n: int, card: int, seconds: int, amount: float, oslo: bool) -> dict[str, Any]:
    return {"card_id": f"c{card}", "txn_id": f"t{n}", "user_id": f"u{card}",
            "amount": amount, "lat": 59.9 if oslo else 48.85, "lon": 2.35,
            "city": "Oslo" if oslo else "Paris", "event_time": T0 + seconds * 15_000,
            "avg_amount": 25.0, "std_amount": 5.0}


def _build(source: DataFrame, sp: Savepoint | None) -> DataFrame:
    """The four operators over one stream, their rows as JSON in one column."""
    windows = windowed(source, keys=["card_id"], event_time="event_time",
                       window=tumbling("2 minutes"), aggs=[count(), sum_of("amount")],
                       watermark="30 seconds", allowed_lateness="1 minute", buckets=4,
                       from_savepoint=sp)
    alerts = detect(source, Thresholds(), "30 seconds", "1 minute", sp)
    rules = rule_operator(source, sp)
    pairs = interval_join(
        source.selectExpr("card_id", "txn_id as first", "event_time as first_at"),
        source.selectExpr("card_id", "txn_id as then", "event_time as then_at"),
        on=["card_id"], left_time="first_at", right_time="then_at", lower=1,
        upper="1 minute", left_watermark="30 seconds", right_watermark="30 seconds",
        how="left_outer", buckets=4, from_savepoint=sp)
    return pairs.select(F.to_json(F.struct("*")).alias("row")).unionByName(
        windows.select(F.to_json(F.struct("*")).alias("row"))).unionByName(
        alerts.select(F.to_json(F.struct("*")).alias("row"))).unionByName(
        rules.select(F.to_json(F.struct("*")).alias("row")))


def _state(spark: SparkSession, checkpoint: Path) -> dict[Any, Any]:
    """Each operator's state by key, and each bucket's timer."""
    held: dict[Any, Any] = {}
    meta = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    for op in meta:
        props = json.loads(op.operatorProperties)
        (var,) = [v["stateName"] for v in props["stateVariables"]
                  if not v["stateName"].startswith("$")]
        rows = spark.read.format("statestore").option("operatorId", op.operatorId) \
            .option("stateVarName", var).load(str(checkpoint)).collect()
        if op.operatorName == "transformWithStateExec":  # the JVM rule operator
            for row in rows:
                held[("realtime.rules", row.key.value)] = json.dumps(
                    jvm_state(row.value.value), sort_keys=True)  # rule firings: a HashMap
            continue
        for row in rows:
            keys, timer, head = decode(row.value.keys)
            assert head is not None
            name = head["operator"]
            held[(name, "timer", row.key[0])] = timer
            for key, state in per_key(name, keys):
                held[(name, key)] = sorted(map(repr, state)) if isinstance(state, list) \
                    else repr(state)
    return held


@settings(max_examples=1, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=st.lists(TXN, min_size=3, max_size=25), second=st.lists(TXN, min_size=1,
                                                                       max_size=25))
def test_state_of_a_query_started_from_a_savepoint_is_the_state_it_saved(
        spark: SparkSession, broker: EmbeddedBroker, first: list[Any],
        second: list[Any]) -> None:
    topic = f"sp-prop-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, 2)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    outputs: dict[str, list[dict[str, Any]]] = {"ref": [], "sp": []}

    def run(name: str, checkpoint: Path, sp: Savepoint | None) -> None:
        source = read_events(spark, topic, TXN_SCHEMA, event_time="event_time",
                             dead_letter_topic=topic + "-dlq",
                             kafka_bootstrap_servers=broker.bootstrap_servers,
                             startingOffsets="earliest", from_savepoint=sp)

        def collect(batch: DataFrame, _: int) -> None:
            outputs[name].extend(json.loads(r.row) for r in batch.collect())

        q = (_build(source, sp).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
             .start())
        assert q.awaitTermination(scaled(180)), "the query did not finish"
        assert q.exception() is None, q.exception()

    def send(txns: list[Any], base: int) -> None:
        produce(broker.bootstrap_servers, topic,
                [(f"c{t[0]}".encode(), json.dumps(_txn(base + i, *t)).encode())
                 for i, t in enumerate(txns)])

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            send(first, 0)
            run("ref", work / "ref", None)
            create(spark, work / "ref", work / "sp")
            outputs["ref"].clear()
            send(second, len(first))
            run("ref", work / "ref", None)
            spark.conf.set("spark.sql.shuffle.partitions", "3")
            run("sp", work / "fresh", Savepoint(work / "sp"))
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", before)
        assert normalized(outputs["sp"]) == normalized(outputs["ref"])
        state = _state(spark, work / "ref")
        assert any(k[0] == "realtime.rules" for k in state)
        assert any(k[0] == "interval_join" for k in state)
        assert _state(spark, work / "fresh") == state
