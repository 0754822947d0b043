"""The checkpoint compatibility corpus (``corpus_cases.py``): today's code restores each
checkpoint and each savepoint written by the version that made the corpus, and continues
with exactly the output that version recorded. A checkpoint of an operator replaced since
(``interval_join`` on Spark's own join) restores through a savepoint that today's
``create`` takes of it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from headrace.savepoints import Savepoint, create
from headrace.spark import read_events
from headrace.testing import EmbeddedBroker, scaled
from tests.savepoints.corpus_cases import (
    CASES,
    CORPUS,
    PLACEHOLDER,
    Case,
    normalized,
    relocate,
)
from tests.spark.kafka_helpers import create_topic, produce

Build = Callable[[DataFrame, Savepoint | None], DataFrame]

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


def _run(spark: SparkSession, broker: EmbeddedBroker, case: Case, checkpoint: Path,
         sp: Savepoint | None, build: Build | None = None) -> list[dict[str, Any]]:
    """One availableNow run of the case's query; the rows it emitted."""
    source = read_events(spark, case.topic, case.schema,
                         event_time="ts" if "ts" in case.schema else "event_time",
                         dead_letter_topic=case.topic + "-dlq",
                         kafka_bootstrap_servers=broker.bootstrap_servers,
                         startingOffsets="earliest", from_savepoint=sp)
    rows: dict[int, list[dict[str, Any]]] = {}

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows[batch_id] = [r.asDict(recursive=True) for r in batch.collect()]

    q = ((build or case.build)(source, sp).writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert q.awaitTermination(scaled(180)), "the query did not finish"
    assert q.exception() is None, q.exception()
    return [r for _, batch in sorted(rows.items()) for r in batch]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_restores_and_continues_exactly(spark: SparkSession, broker: EmbeddedBroker,
                                               case: Case, tmp_path: Path) -> None:
    folder = CORPUS / case.name
    expected = json.loads((folder / "expected.json").read_text())
    # the topic as the corpus's query saw it (name, partitions, offsets), then step two
    create_topic(broker.bootstrap_servers, case.topic, 2)
    for step in case.steps:
        produce(broker.bootstrap_servers, case.topic,
                [(str(e[case.key]).encode(), json.dumps(e).encode()) for e in step])
    shutil.copytree(folder / "checkpoint", tmp_path / "checkpoint")
    relocate(tmp_path / "checkpoint", PLACEHOLDER, str(tmp_path / "checkpoint"))
    if case.restore is not None:
        # an operator this version replaced: its checkpoint migrates through a savepoint
        create(spark, tmp_path / "checkpoint", tmp_path / "savepoint")
        sp = Savepoint(tmp_path / "savepoint")
        out = _run(spark, broker, case, tmp_path / "fresh", sp, case.restore)
        assert normalized(out) == expected
        return
    assert normalized(_run(spark, broker, case, tmp_path / "checkpoint", None)) == expected
    sp = Savepoint(folder / "savepoint")
    assert normalized(_run(spark, broker, case, tmp_path / "fresh", sp)) == expected
