"""How ``headrace demo fraud`` follows its pipelines: the alerts a read_committed consumer
reads, the micro-batch side's progress and lag, and the drain at the end."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.checker import CheckerProcess
from headrace.pipelines.fraud.live_view import LiveState
from headrace.pipelines.fraud.live_warmup import is_warmup
from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.stream import FraudGenerator


def watch_alerts(bootstrap: str, alerts_topic: str, check_topic: str | None,
                  dead_letters: str, state: LiveState, stop: threading.Event) -> None:
    """Read alerts (and the check's alerts, and count dead letters) as a read_committed
    consumer sees them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headrace-fraud-demo",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
    topics = [alerts_topic, dead_letters] + ([check_topic] if check_topic else [])
    consumer.assign([TopicPartition(t, 0, 0) for t in topics])
    try:
        while not stop.is_set():
            # the first message as soon as it is there (consume(500, t) would wait out t
            # unless 500 came, and that wait would count in every alert's latency)
            first = consumer.poll(0.02)
            for m in ([first, *consumer.consume(499, 0)] if first is not None else []):
                if m.error():
                    continue
                if m.topic() == dead_letters:
                    state.dead_letters += 1
                    continue
                now = time.time() * 1000
                alert = json.loads(m.value() or b"{}")
                if is_warmup(alert["card_id"]):  # before the run: in no figure of it
                    if m.topic() != check_topic:
                        state.warmup_ms.append(int(now - alert["event_time"]))
                    continue
                if m.topic() == check_topic:
                    state.checked.update((alert["card_id"], r) for r in alert["reasons"])
                    continue
                if alert["txn_id"] in state.alert_ids:
                    state.repeats += 1
                    continue
                state.alert_ids.add(alert["txn_id"])
                if alert["event_time"] >= state.measure_from_ms:
                    state.latencies_ms.append(int(now - alert["event_time"]))
                    if "ingest_ms" in alert:
                        alert_ms = m.timestamp()[1]
                        state.stages_ms.append((alert["ingest_ms"] - alert["event_time"],
                                                alert_ms - alert["ingest_ms"],
                                                int(now) - alert_ms))
                state.alerts.appendleft(alert)
                state.all_alerts.append((alert["card_id"], alert["event_time"],
                                         alert["reasons"]))
    finally:
        consumer.close()


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headrace-fraud-demo"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in meta.partitions)
    finally:
        consumer.close()


def follow(query: Any, state: LiveState) -> None:
    """Fold the query's newest progress into the state (lag, rates, observed counts)."""
    if isinstance(query, CheckerProcess):  # it counts over every batch itself
        state.batches, state.late, state.parsed = query.batches, query.late, query.parsed
        state.processed_per_s = query.rows_per_s
        return
    progress = query.lastProgress
    if not progress or progress["batchId"] < state.batches:
        return
    state.batches = progress["batchId"] + 1
    metrics = progress.get("observedMetrics") or {}
    if "out" in metrics:
        state.late += int(metrics["out"]["late"])
    if "parsed" in metrics:
        state.parsed += int(metrics["parsed"]["transactions"])
    state.processed_per_s = float(progress.get("processedRowsPerSecond") or 0.0)


def read_up_to(query: Any, topic: str) -> int:
    """Offsets of ``topic`` the query has finished (its last progress's end offsets)."""
    if isinstance(query, CheckerProcess):
        return query.read.get(topic, 0)
    progress = query.lastProgress
    if not progress:
        return 0
    total = 0
    for src in progress["sources"]:
        end = json.loads(src.get("endOffset") or "{}")
        total += sum(int(o) for o in end.get(topic, {}).values())
    return total


def drain(timeout_s: float, queries: list[Any], mb_query: Any, state: LiveState,
           bootstrap: str, topics: PipelineTopics, refresh: Any,
           rt_counters: Callable[[], tuple[int, int, int]] | None = None) -> None:
    """Wait until the pipelines have read everything: the micro-batch query has no lag,
    the real-time rule operator has handled every parsed transaction and each alert it
    raised has been read, and the real-time alerts stopped changing for 3 s (or the drain
    timeout: ``drain_timeout_s`` without the micro-batch lag going down; the check
    catches up here). A quiet spell alone is not enough: Real-Time Mode stalls for seconds
    at batch boundaries on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    sent_txns = end_offset(bootstrap, topics.transactions)
    seen, still_since = -1, time.monotonic()
    lag: tuple[int, int] | None = None
    while time.monotonic() < deadline:
        tick(queries, mb_query, state, None, bootstrap, topics)
        refresh()
        if lag is not None and (state.lag, -state.batches) < lag:  # progress
            deadline = max(deadline, time.monotonic() + timeout_s)
        lag = (state.lag, -state.batches)
        if len(state.all_alerts) != seen:
            seen, still_since = len(state.all_alerts), time.monotonic()
        mb_done = mb_query is None or (
            state.lag == 0 and state.parsed + state.dead_letters >= sent_txns)
        rt_done = True
        if rt_counters is not None:
            _, events, raised = rt_counters()
            rt_done = (events + state.dead_letters >= sent_txns
                       and raised <= len(state.all_alerts) + state.repeats
                       + len(state.warmup_ms))
        if mb_done and rt_done and time.monotonic() - still_since >= 3.0:
            break
        time.sleep(0.5)
    time.sleep(1.0)


def tick(queries: list[Any], mb_query: Any, state: LiveState,
          generator: FraudGenerator | None, bootstrap: str, topics: PipelineTopics) -> None:
    for q in queries:
        if q.exception() is not None:
            raise PipelineError(f"the pipeline {q.name} failed: {q.exception()}")
    if mb_query is not None:
        follow(mb_query, state)
        # Lag: what the log holds beyond what the query has finished (the progress's own
        # latestOffset is where the running batch stops, not where the log ends).
        state.lag = max(end_offset(bootstrap, topics.transactions)
                        - read_up_to(mb_query, topics.transactions), 0)
        state.lag_samples.append((time.monotonic() - state.started, state.lag))
    if generator is not None:
        # RuntimeError: the generator thread changed it under us; try again next tick.
        with contextlib.suppress(RuntimeError):
            state.truth = generator.truth()
