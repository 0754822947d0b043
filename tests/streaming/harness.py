"""Drive a streaming query micro-batch by micro-batch through the real broker and Spark.

One query runs per ``StepRunner``, reading with ``format("headrace-stepped")``: each step
produces some events, lets the sources read up to their end (all of a query's sources from
the same trigger on: ``stepped_source``), and waits until the query has processed all of
it, so each step is one data micro-batch (plus the no-data batch Spark runs when the
watermark moved); ``run`` checks both. The watermark therefore advances exactly between
steps, which makes "this event arrives when the watermark is X" reproducible without
sleeps.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from headrace.spark import read_events
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, produce
from tests.streaming import stepped_source
from tests.streaming.stepped_source import CAP_OPTION, SteppedSource, new_run, write_cap

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


# The runners of the running test, whose queries the streaming conftest stops after it.
RUNNING: list[StepRunner] = []

# Spark's Python workers may not find the tests package: ship the source's code itself.
cloudpickle.register_pickle_by_value(stepped_source)


class StepRunner:
    """``run(events)`` produces ``events`` (dicts) and returns the rows the query emitted.

    ``topic`` and ``schema`` may be dicts (source name -> topic / schema) for queries over
    several topics; ``build`` then gets a dict of source DataFrames and ``run`` a dict of
    event lists. The query starts at the first ``run`` and runs until ``close``.
    """

    def __init__(self, spark: SparkSession, broker: EmbeddedBroker, topic: str | dict[str, str],
                 schema: str | dict[str, str], build: Callable[[Any], DataFrame],
                 checkpoint: Path, partitions: int = 1, event_time: str = "ts") -> None:
        self.spark, self.broker, self.build, self.checkpoint = spark, broker, build, checkpoint
        self.single = isinstance(topic, str)
        self.topics = {"_": topic} if isinstance(topic, str) else topic
        schemas = {"_": schema} if isinstance(schema, str) else schema
        self.cap = checkpoint.with_name(checkpoint.name + "-steps.json")
        self.ends: dict[tuple[str, int], int] = {}
        write_cap(self.cap, self.ends)
        spark.dataSource.register(SteppedSource)
        self.sources = {}
        for name, t in self.topics.items():
            create_topic(broker.bootstrap_servers, t, partitions)
            self.sources[name] = read_events(
                spark, t, schemas[name], event_time=event_time, dead_letter_topic=t + "-dlq",
                kafka_bootstrap_servers=broker.bootstrap_servers, startingOffsets="earliest",
                source=SteppedSource.name(), options={CAP_OPTION: str(self.cap)})
        self.emitted: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self._seen: set[tuple[int, str]] = set()
        # Keyed by batch id: a batch run again after a restart replaces its first output,
        # as an idempotent sink would.
        self._by_batch: dict[int, list[dict[str, Any]]] = {}
        self._query: StreamingQuery | None = None
        RUNNING.append(self)

    def _collect(self, batch: DataFrame, batch_id: int) -> None:
        self._by_batch[batch_id] = [r.asDict(recursive=True) for r in batch.collect()]

    def _start(self) -> StreamingQuery:
        new_run(self.cap)
        df = self.build(self.sources["_"] if self.single else self.sources)
        return df.writeStream.foreachBatch(self._collect) \
            .option("checkpointLocation", str(self.checkpoint)) \
            .trigger(processingTime="100 milliseconds").start()

    def run(self, events: list[dict[str, Any]] | dict[str, list[dict[str, Any]]],
            key: str = "k") -> list[dict[str, Any]]:
        by_source = {"_": events} if isinstance(events, list) else events
        for name, evs in by_source.items():
            if evs:
                placed = produce(self.broker.bootstrap_servers, self.topics[name],
                                 [(str(e.get(key, "")).encode(), json.dumps(e).encode())
                                  for e in evs])
                for p, o in placed:
                    tp = (self.topics[name], p)
                    self.ends[tp] = max(self.ends.get(tp, 0), o + 1)
        write_cap(self.cap, self.ends)
        first = max(self._by_batch, default=-1) + 1
        seen = len(self.progress)
        for attempt in range(TRANSIENT_RESTARTS + 1):
            if self._query is None or not self._query.isActive:
                self._query = self._start()
            self._await_ends(self._query)
            error = self._query.exception()
            if error is None or attempt == TRANSIENT_RESTARTS or TRANSIENT not in str(error):
                break
            # Spark gives a new Python worker a fixed 10 s to connect back, which a loaded
            # 2-core machine can miss; the query restarts from its checkpoint, as a
            # supervisor would restart it.
            print(f"restarting the query after a transient failure: {TRANSIENT}")
        assert error is None, error
        data = {p["batchId"] for p in self.progress[seen:]
                if any(src["numInputRows"] for src in p["sources"])}
        assert len(data) <= 1, f"one step was read in micro-batches {sorted(data)}"
        out = [row for b, rows in sorted(self._by_batch.items()) if b >= first for row in rows]
        self.emitted.extend(out)
        return out

    def _await_ends(self, query: StreamingQuery) -> None:
        """Wait until ``query`` has processed up to ``self.ends`` (or failed).

        ``processAllAvailable`` alone may return before: a trigger whose sources were asked
        just before the step was handed over still ends with "no new data" after the call
        began, which is all it waits for; so it is called again until the query's progress
        shows the step's ends."""
        deadline = time.monotonic() + scaled(120)
        while True:
            with contextlib.suppress(StreamingQueryException):  # q.exception() has it
                query.processAllAvailable()
            for p in query.recentProgress:
                if (p["batchId"], p["timestamp"]) not in self._seen:
                    self._seen.add((p["batchId"], p["timestamp"]))
                    self.progress.append(p)
            if not query.isActive or self._reached():
                return
            assert time.monotonic() < deadline, f"the query never read up to {self.ends}"

    def _reached(self) -> bool:
        """Whether some micro-batch read up to ``self.ends`` in every partition."""
        read: dict[tuple[str, int], int] = {}
        for p in self.progress:
            for src in p["sources"]:
                end = src["endOffset"]  # JSON text, "null" before a first batch
                end = (json.loads(end) if isinstance(end, str) else end) or {}
                for t, parts in end.items():
                    for part, o in parts.items():
                        read[(t, int(part))] = max(read.get((t, int(part)), 0), int(o))
        return all(read.get(tp, 0) >= o for tp, o in self.ends.items())

    def close(self) -> None:
        """Stop the query (idempotent)."""
        if self._query is not None:
            self._query.stop()
