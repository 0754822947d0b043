"""Drive a streaming query micro-batch by micro-batch through the real broker and Spark.

Each step produces some events, then runs the query with ``availableNow`` on the same
checkpoint, so each step is one data micro-batch (plus the no-data batch Spark runs when
the watermark moved). The watermark therefore advances exactly between steps, which
makes "this event arrives when the watermark is X" reproducible without sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from headrace.spark import read_events
from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import create_topic, produce

MINUTE = 60_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % (60 * MINUTE)  # an hour boundary


def at(minutes: float) -> int:
    """Event time ``minutes`` after T0, in epoch ms."""
    return T0 + round(minutes * MINUTE)


class StepRunner:
    """``run(events)`` produces ``events`` (dicts) and returns the rows the query emitted."""

    def __init__(self, spark: SparkSession, broker: EmbeddedBroker, topic: str, schema: str,
                 build: Callable[[DataFrame], DataFrame], checkpoint: Path,
                 partitions: int = 1) -> None:
        self.spark, self.broker, self.topic = spark, broker, topic
        self.build, self.checkpoint = build, checkpoint
        create_topic(broker.bootstrap_servers, topic, partitions)
        self.source = read_events(spark, topic, schema, event_time="ts",
                                  dead_letter_topic=topic + "-dlq",
                                  kafka_bootstrap_servers=broker.bootstrap_servers,
                                  startingOffsets="earliest")
        self.emitted: list[dict[str, Any]] = []

    def run(self, events: list[dict[str, Any]], key: str = "k") -> list[dict[str, Any]]:
        if events:
            produce(self.broker.bootstrap_servers, self.topic,
                    [(str(e.get(key, "")).encode(), json.dumps(e).encode()) for e in events])
        out: list[dict[str, Any]] = []

        def collect(batch: DataFrame, _: int) -> None:
            out.extend(r.asDict(recursive=True) for r in batch.collect())

        q = self.build(self.source).writeStream.foreachBatch(collect) \
            .option("checkpointLocation", str(self.checkpoint)) \
            .trigger(availableNow=True).start()
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()
        self.emitted.extend(out)
        return out
