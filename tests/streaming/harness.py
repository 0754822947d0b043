"""Drive a streaming query micro-batch by micro-batch through the real broker and Spark.

Each step produces some events, then runs the query with ``availableNow`` on the same
checkpoint, so each step is one data micro-batch (plus the no-data batch Spark runs when
the watermark moved). The watermark therefore advances exactly between steps, which
makes "this event arrives when the watermark is X" reproducible without sleeps.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from headrace.spark import read_events
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, produce

MINUTE = 60_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % (60 * MINUTE)  # an hour boundary


# A failure of Spark's Python worker start-up, not of the query: worth one restart.
TRANSIENT = "Python worker failed to connect back"
TRANSIENT_RESTARTS = 1


def state_by_key(spark: SparkSession, checkpoint: Path) -> dict[Any, Any]:
    """What a stream-table join holds per key as of its last batch, read with Spark's state
    reader: every bucket's pickled key map (keyed by the join key's JSON text), merged, by
    the tuple of the key's values. The temporal join's columns are shown per key too:
    ``versions`` (valid_from -> row) and ``pending`` (event time -> events)."""
    held: dict[Any, Any] = {}
    for b in spark.read.format("statestore").option("stateVarName", "bucket") \
            .load(str(checkpoint)).collect():
        keys = pickle.loads(b.value.keys)[0]
        if "vk" in keys:  # temporal_join: columns
            per_key: dict[str, dict[str, Any]] = {}
            for k, t, row in zip(keys["vk"], keys["vt"], keys["vr"], strict=True):
                per_key.setdefault(k, {"versions": {}, "pending": {}})["versions"][t] = row
            for k, t, event in zip(keys["pk"], keys["pt"], keys["pe"], strict=True):
                per_key.setdefault(k, {"versions": {}, "pending": {}})["pending"] \
                    .setdefault(t, []).append(event)
            keys = per_key
        for key, state in keys.items():
            held[tuple(json.loads(key).values())] = state
    return held


def windows_by_key(spark: SparkSession, checkpoint: Path) -> dict[Any, int]:
    """How many windows ``windowed`` holds per key as of its last batch, for the columnar
    processor (module ``columnar``: tumbling, hopping and session windows): each bucket's
    table, one row per (key, window)."""
    held: dict[Any, int] = {}
    for b in spark.read.format("statestore").option("stateVarName", "bucket") \
            .load(str(checkpoint)).collect():
        columns, _timer = pickle.loads(b.value.keys)[:2]  # then the header
        for key in zip(*(v for c, v in columns.items() if c.startswith("k")), strict=True):
            held[key] = held.get(key, 0) + 1
    return held


def at(minutes: float) -> int:
    """Event time ``minutes`` after T0, in epoch ms."""
    return T0 + round(minutes * MINUTE)


class StepRunner:
    """``run(events)`` produces ``events`` (dicts) and returns the rows the query emitted.

    ``topic`` and ``schema`` may be dicts (source name -> topic / schema) for queries over
    several topics; ``build`` then gets a dict of source DataFrames and ``run`` a dict of
    event lists.
    """

    def __init__(self, spark: SparkSession, broker: EmbeddedBroker, topic: str | dict[str, str],
                 schema: str | dict[str, str], build: Callable[[Any], DataFrame],
                 checkpoint: Path, partitions: int = 1, event_time: str = "ts") -> None:
        self.spark, self.broker, self.build, self.checkpoint = spark, broker, build, checkpoint
        self.single = isinstance(topic, str)
        self.topics = {"_": topic} if isinstance(topic, str) else topic
        schemas = {"_": schema} if isinstance(schema, str) else schema
        self.sources = {}
        for name, t in self.topics.items():
            create_topic(broker.bootstrap_servers, t, partitions)
            self.sources[name] = read_events(
                spark, t, schemas[name], event_time=event_time, dead_letter_topic=t + "-dlq",
                kafka_bootstrap_servers=broker.bootstrap_servers, startingOffsets="earliest")
        self.emitted: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []

    def run(self, events: list[dict[str, Any]] | dict[str, list[dict[str, Any]]],
            key: str = "k") -> list[dict[str, Any]]:
        by_source = {"_": events} if isinstance(events, list) else events
        for name, evs in by_source.items():
            if evs:
                produce(self.broker.bootstrap_servers, self.topics[name],
                        [(str(e.get(key, "")).encode(), json.dumps(e).encode()) for e in evs])
        # Keyed by batch id: a batch run again after a restart replaces its first output,
        # as an idempotent sink would.
        by_batch: dict[int, list[dict[str, Any]]] = {}

        def collect(batch: DataFrame, batch_id: int) -> None:
            by_batch[batch_id] = [r.asDict(recursive=True) for r in batch.collect()]

        for attempt in range(TRANSIENT_RESTARTS + 1):
            df = self.build(self.sources["_"] if self.single else self.sources)
            q = df.writeStream.foreachBatch(collect) \
                .option("checkpointLocation", str(self.checkpoint)) \
                .trigger(availableNow=True).start()
            with contextlib.suppress(StreamingQueryException):  # q.exception() has it
                if not q.awaitTermination(scaled(180)):
                    q.stop()
                    raise AssertionError(f"the step's query ran past {scaled(180):g} s")
            self.progress.extend(q.recentProgress)
            error = q.exception()
            if error is None or attempt == TRANSIENT_RESTARTS or TRANSIENT not in str(error):
                break
            # Spark gives a new Python worker a fixed 10 s to connect back, which a loaded
            # 2-core machine can miss; the query restarts from its checkpoint, as a
            # supervisor would restart it.
            print(f"restarting the query after a transient failure: {TRANSIENT}")
        assert error is None, error
        out = [row for _, rows in sorted(by_batch.items()) for row in rows]
        self.emitted.extend(out)
        return out
