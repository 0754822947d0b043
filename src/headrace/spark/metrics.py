"""Prometheus metrics of Spark Structured Streaming queries, from their progress events.

``serve_pipeline_metrics(spark, port)`` registers a ``StreamingQueryListener`` that keeps
each query's latest ``StreamingQueryProgress`` (and running totals), and serves them over
HTTP in the broker's style (``headrace_pipeline_*``, label ``query``: the query's name, or
its id when it has none):

- input and processing rates (rows/s), rows in the last batch and in all batches;
- batch duration (the last batch's ``durationMs.triggerExecution``) and batch id;
- watermark delay: how far the query's event-time watermark is behind the wall clock;
- late rows: rows the stateful operators dropped as later than the watermark (Spark's
  ``numRowsDroppedByWatermark``; the toolkit's late side output is a topic, counted by the
  broker's metrics);
- state rows and state memory (summed over stateful operators);
- dead letters: records committed to the query's dead-letter topic
  (``dead_letter_topics``: the tasks write them straight to the log, so they are counted
  there, at scrape time, reading what is new since the last scrape with read_committed;
  transaction markers and aborted records do not count);
- whether the query is active;
- source lag per partition (with ``bootstrap_servers``): the partition's log end offset,
  asked of the cluster at scrape time, minus the offset the query's latest progress has
  read to (its sources' ``endOffset``, for ``format("headrace")`` and ``format("kafka")``
  alike); a query that has read everything shows 0. A partition whose leader cannot be
  asked right now (a broker failing over) has no sample in that scrape rather than a wrong
  one.

The listener runs on the driver; progress arrives after each micro-batch (in Real-Time
Mode, at each checkpoint).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener


@dataclass
class _Query:
    name: str
    active: bool = True
    progress: dict[str, Any] | None = None
    rows_total: int = 0
    late_total: int = 0
    batches: int = 0


def _ms(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
    except (ValueError, AttributeError):
        return None


class PipelineMetrics(StreamingQueryListener, Collector):
    """Listener and Prometheus collector in one; thread-safe (events come on a listener
    thread, scrapes on the HTTP server's)."""

    def __init__(self, dead_letter_topics: dict[str, str] | None = None,
                 bootstrap_servers: str = "") -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._queries: dict[str, _Query] = {}
        self._dead_letter_topics = dict(dead_letter_topics or {})
        self._dead_letter_counts: dict[str, _CommittedCount] = {}
        self._bootstrap = bootstrap_servers

    # -- listener ----------------------------------------------------------------------------

    def onQueryStarted(self, event: Any) -> None:
        with self._lock:  # a restart from the checkpoint keeps the query id and its totals
            q = self._queries.setdefault(str(event.id), _Query(event.name or str(event.id)))
            q.active = True

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        late = sum(int(op.get("numRowsDroppedByWatermark") or 0)
                   for op in progress.get("stateOperators") or [])
        with self._lock:
            q = self._queries.setdefault(str(progress["id"]),
                                         _Query(progress.get("name") or str(progress["id"])))
            q.progress = progress
            q.rows_total += int(progress.get("numInputRows") or 0)
            q.late_total += late
            q.batches += 1

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            q = self._queries.get(str(event.id))
            if q is not None:
                q.active = False
                # its dead-letter reader stops with it (it would retry a stopped broker)
                topic = self._dead_letter_topics.get(q.name)
                counter = self._dead_letter_counts.pop(topic, None) if topic else None
                if counter is not None:
                    counter.close()

    # -- collector ---------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        now_ms = time.time() * 1000
        g = {name: GaugeMetricFamily(f"headrace_pipeline_{name}", text, labels=["query"])
             for name, text in (
                 ("active", "1 while the query runs."),
                 ("input_rows_per_second", "Input rate of the last batch."),
                 ("processed_rows_per_second", "Processing rate of the last batch."),
                 ("batch_input_rows", "Rows the last batch read."),
                 ("batch_duration_seconds", "Duration of the last batch."),
                 ("batch_id", "Id of the last batch."),
                 ("watermark_delay_seconds", "Wall clock minus the event-time watermark."),
                 ("state_rows", "Rows in state, over the stateful operators."),
                 ("state_memory_bytes", "Memory used by state, over the stateful operators."))}
        c = {name: CounterMetricFamily(f"headrace_pipeline_{name}", text, labels=["query"])
             for name, text in (("input_rows", "Rows read, all batches."),
                                ("late_rows", "Rows dropped as late by the watermark."),
                                ("batches", "Micro-batches completed."))}
        with self._lock:
            queries = [(q.name, q.active, q.progress, q.rows_total, q.late_total, q.batches)
                       for q in self._queries.values()]
        for name, active, progress, rows, late, batches in queries:
            label = [name]
            g["active"].add_metric(label, 1 if active else 0)
            c["input_rows"].add_metric(label, rows)
            c["late_rows"].add_metric(label, late)
            c["batches"].add_metric(label, batches)
            if progress is None:
                continue
            g["input_rows_per_second"].add_metric(
                label, float(progress.get("inputRowsPerSecond") or 0.0))
            g["processed_rows_per_second"].add_metric(
                label, float(progress.get("processedRowsPerSecond") or 0.0))
            g["batch_input_rows"].add_metric(label, int(progress.get("numInputRows") or 0))
            duration = (progress.get("durationMs") or {}).get("triggerExecution")
            if duration is not None:
                g["batch_duration_seconds"].add_metric(label, duration / 1000)
            g["batch_id"].add_metric(label, int(progress.get("batchId") or 0))
            watermark = _ms((progress.get("eventTime") or {}).get("watermark", ""))
            if watermark is not None and watermark > 0:
                g["watermark_delay_seconds"].add_metric(label, max(now_ms - watermark, 0) / 1000)
            ops = progress.get("stateOperators") or []
            if ops:
                g["state_rows"].add_metric(label, sum(int(o.get("numRowsTotal") or 0)
                                                      for o in ops))
                g["state_memory_bytes"].add_metric(label, sum(int(o.get("memoryUsedBytes") or 0)
                                                              for o in ops))
        yield from g.values()
        yield from c.values()
        if self._dead_letter_topics:
            dead = CounterMetricFamily("headrace_pipeline_dead_letters",
                                       "Records committed to the query's dead-letter topic.",
                                       labels=["query", "topic"])
            for query, topic in sorted(self._dead_letter_topics.items()):
                counter = self._dead_letter_counts.setdefault(
                    topic, _CommittedCount(self._bootstrap, topic))
                count = counter.update()
                if count is not None:
                    dead.add_metric([query, topic], count)
            yield dead
        if self._bootstrap:
            yield self._source_lag([(name, progress) for name, _a, progress, *_ in queries
                                    if progress is not None])

    def _source_lag(self, queries: list[tuple[str, dict[str, Any]]]) -> Metric:
        lag = GaugeMetricFamily("headrace_pipeline_source_lag_records",
                                "Log end offset now minus the offset the query has read to.",
                                labels=["query", "topic", "partition"])
        read = [(name, topic, int(p), int(o)) for name, progress in queries
                for topic, parts in _source_offsets(progress).items()
                for p, o in parts.items()]
        ends = _log_ends(self._bootstrap, {(t, p) for _n, t, p, _o in read})
        for name, topic, p, offset in sorted(read):
            if (topic, p) in ends:
                lag.add_metric([name, topic, str(p)], max(ends[topic, p] - offset, 0))
        return lag


def _source_offsets(progress: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{topic: {partition: offset}}`` the query's sources have read to (merged)."""
    merged: dict[str, dict[str, int]] = {}
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if isinstance(parts, dict):
                merged.setdefault(topic, {}).update(
                    {str(p): int(o) for p, o in parts.items() if isinstance(o, int)})
    return merged


def _log_ends(bootstrap_servers: str, partitions: set[tuple[str, int]]) -> dict[tuple[str, int],
                                                                                int]:
    """Each partition's log end offset (high watermark); partitions that cannot be asked
    now (no leader, a leader just killed) are left out."""
    if not partitions:
        return {}
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "headrace-metrics",
                         "log_level": 0})
    ends: dict[tuple[str, int], int] = {}
    try:
        for topic, p in sorted(partitions):
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            except KafkaException:
                continue
            ends[topic, p] = int(high)
        return ends
    finally:
        consumer.close()


class _CommittedCount:
    """The records a read_committed reader sees in a topic (not transaction markers, which
    take offsets too, nor aborted records), counted incrementally: each ``update`` reads
    what is new since the last. The dead-letter topics of the exactly-once sinks are
    written in Kafka transactions, so their end minus start offsets overcounts (a commit
    marker after every short transaction of the real-time sink). Thread-safe."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self._bootstrap, self._topic = bootstrap_servers, topic
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []
        self._lock = threading.Lock()
        self.count = 0

    def close(self) -> None:
        """Close the reader (the next ``update`` opens a new one and counts again)."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
                self.count = 0

    def update(self, budget_s: float = 2.0) -> int | None:
        """Read up to the partitions' current ends (at most ``budget_s``: an open
        transaction holds read_committed readers back) and return the count so far; None
        if the topic cannot be read."""
        with self._lock:
            try:
                return self._update_locked(budget_s)
            except KafkaException:
                return None

    def _update_locked(self, budget_s: float) -> int | None:
        if self._consumer is None:
            # log_level 0: a broker that is gone is a missing sample, not lines on the
            # stderr of the process serving the metrics (a demo's terminal)
            consumer = Consumer({"bootstrap.servers": self._bootstrap,
                                 "group.id": "headrace-metrics", "log_level": 0,
                                 "isolation.level": "read_committed",
                                 "enable.auto.commit": False})
            meta = consumer.list_topics(self._topic, timeout=5).topics.get(self._topic)
            if meta is None or meta.error is not None:
                consumer.close()
                return None
            self._partitions = sorted(meta.partitions)
            consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING)
                             for p in self._partitions])
            self._consumer = consumer
        consumer = self._consumer
        ends = {p: consumer.get_watermark_offsets(TopicPartition(self._topic, p), timeout=5)
                for p in self._partitions}
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            at = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(self._topic, p) for p in self._partitions])}
            # before its first fetch a partition has no position: its start stands in
            if all(max(at[p], low) >= high for p, (low, high) in ends.items()):
                break
            self.count += sum(m.error() is None for m in consumer.consume(1000, timeout=0.1))
        return self.count


def serve_pipeline_metrics(spark: SparkSession, port: int = 0, host: str = "127.0.0.1",
                           dead_letter_topics: dict[str, str] | None = None,
                           bootstrap_servers: str = "") -> tuple[PipelineMetrics, str]:
    """Register a ``PipelineMetrics`` listener on ``spark`` and serve it on ``host:port``
    (0: a free port). Returns the listener and the scrape URL. ``dead_letter_topics`` maps
    a query name to its dead-letter topic on ``bootstrap_servers``. The HTTP server is a
    daemon thread; ``spark.streams.removeListener(listener)`` stops the updates."""
    listener = PipelineMetrics(dead_letter_topics, bootstrap_servers)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(listener)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    spark.streams.addListener(listener)
    return listener, f"http://{host}:{server.server_port}/metrics"
