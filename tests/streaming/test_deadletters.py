"""with_dead_letters: a poison record neither stops the query nor vanishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from headrace.streaming.deadletters import with_dead_letters
from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import read_all
from tests.streaming.harness import StepRunner, at

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def risky(row: dict[str, Any]) -> dict[str, Any]:
    if row["n"] == 13:
        raise ValueError("unlucky number")
    return {"k": row["k"], "inverse": 1 / row["n"]}  # n == 0 raises ZeroDivisionError


def test_failing_rows_go_to_the_dead_letter_topic_once(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    dlq = topic_name + "-dead"
    steps = StepRunner(spark, broker, topic_name, "k string, ts long, n long", lambda df:
                       with_dead_letters(df, risky, "k string, inverse double",
                                         dead_letter_topic=dlq,
                                         bootstrap_servers=broker.bootstrap_servers),
                       tmp_path / "cp", partitions=2)
    out = steps.run([{"k": f"k{n}", "ts": at(n), "n": n} for n in (1, 2, 13, 0, 4)])
    assert sorted((r["k"], r["inverse"]) for r in out) == [("k1", 1.0), ("k2", 0.5),
                                                           ("k4", 0.25)]
    dead = read_all(broker.bootstrap_servers, dlq)
    errors = sorted(dict(m.headers())["headrace.error"].decode() for m in dead)
    assert errors == ["ValueError: unlucky number", "ZeroDivisionError: division by zero"]
    for m in dead:
        headers = dict(m.headers())
        assert headers["headrace.source.topic"].decode() == topic_name
        assert int(headers["headrace.source.offset"]) >= 0
        assert b'"n": ' in m.value()
    # The query keeps going after the poison rows.
    assert [r["k"] for r in steps.run([{"k": "k5", "ts": at(5), "n": 5}])] == ["k5"]
    assert len(read_all(broker.bootstrap_servers, dlq)) == 2
