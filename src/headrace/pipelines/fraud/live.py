"""``headrace demo fraud``: broker, generator and Spark pipeline together, with a live view.

Starts an embedded broker (unless given one), a SparkSession on ``local[2]``, the fraud
pipeline (``pipeline.start``), the generator in real time on a thread, and a read_committed
consumer of the alerts topic that measures detection latency: the time an alert becomes
readable minus its transaction's event time. The terminal view (rich) refreshes twice a
second; at the end the generator stops, the pipeline drains what is left, and a summary
with precision, recall and latency percentiles is printed. Topics stay for
``headrace consume``.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudTopics, run
from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.stream import FraudGenerator
from headrace.pipelines.fraud.truth import GroundTruth, Score


@dataclass(frozen=True)
class LiveSettings:
    rate: float = 200.0
    duration_s: float = 40.0
    seed: int = 7
    bootstrap_servers: str | None = None
    checkpoint: str | None = None
    drain_timeout_s: float = 120.0
    steady_after_s: float = 0.0
    """Latency counts only alerts on transactions this long after the stream started (the
    first micro-batch also loads every profile; benchmarks skip that warm-up)."""
    topics: PipelineTopics = field(default_factory=PipelineTopics)


@dataclass
class LiveState:
    """What the view shows; written by the threads, read by the view (GIL-consistent)."""

    sent: int = 0
    started: float = field(default_factory=time.monotonic)
    alerts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=8))
    all_alerts: list[tuple[str, int, Any]] = field(default_factory=list)
    latencies_ms: list[int] = field(default_factory=list)
    late: int = 0
    parsed: int = 0
    dead_letters: int = 0
    lag: int = 0
    processed_per_s: float = 0.0
    batches: int = 0
    truth: GroundTruth | None = None
    phase: str = "starting"
    measure_from_ms: float = 0.0
    lag_samples: list[tuple[float, int]] = field(default_factory=list)


@dataclass(frozen=True)
class LiveSummary:
    lag_samples: list[tuple[float, int]]
    events: int
    alerts: int
    score: Score
    p50_ms: int
    p99_ms: int
    late: int
    expected_late: int
    dead_letters: int
    expected_dead_letters: int
    elapsed_s: float

    def render(self) -> str:
        s = self.score
        return "\n".join([
            f"fraud demo: {self.events} records in {self.elapsed_s:.0f} s, "
            f"{self.alerts} alerts",
            f"precision {s.precision:.3f}  recall {s.recall:.3f}  "
            f"({s.matched_incidents}/{s.incidents} incidents found)",
            f"detection latency p50 {self.p50_ms} ms  p99 {self.p99_ms} ms "
            "(event time to alert readable, read_committed)",
            f"late (side output) {self.late}  expected {self.expected_late}; "
            f"dead letters {self.dead_letters}  expected {self.expected_dead_letters}",
            "topics kept: transactions, user-profiles, fraud-alerts, transactions-late, "
            "transactions-dlq (try: headrace consume fraud-alerts)",
        ])


def percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spark(log: Console) -> Any:
    from headrace.spark.session import local_session

    log.print("starting Spark (local[2]) ...")
    return local_session("headrace-fraud")


def _ensure_output_topics(bootstrap: str, topics: PipelineTopics) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=1) for t in
                                   (topics.alerts, topics.late, topics.dead_letters)])
    for name, f in futures.items():
        try:
            f.result(30)
        except Exception as e:  # an existing topic is fine; anything else is not
            if getattr(e.args[0], "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise PipelineError(f"cannot create topic {name}: {e}") from e


def _watch_alerts(bootstrap: str, topics: PipelineTopics, state: LiveState,
                  stop: threading.Event) -> None:
    """Read alerts (and count dead letters) as a read_committed consumer sees them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headrace-fraud-demo",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topics.alerts, 0, 0),
                     TopicPartition(topics.dead_letters, 0, 0)])
    try:
        while not stop.is_set():
            for m in consumer.consume(500, timeout=0.05):
                if m.error():
                    continue
                if m.topic() == topics.dead_letters:
                    state.dead_letters += 1
                    continue
                now = time.time() * 1000
                alert = json.loads(m.value() or b"{}")
                if alert["event_time"] >= state.measure_from_ms:
                    state.latencies_ms.append(int(now - alert["event_time"]))
                state.alerts.appendleft(alert)
                state.all_alerts.append((alert["card_id"], alert["event_time"],
                                         alert["reasons"]))
    finally:
        consumer.close()


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headrace-fraud-demo"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in meta.partitions)
    finally:
        consumer.close()


def _follow(query: Any, state: LiveState) -> None:
    """Fold the query's newest progress into the state (lag, rates, observed counts)."""
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


def _read_up_to(query: Any, topic: str) -> int:
    """Offsets of ``topic`` the query has finished (its last progress's end offsets)."""
    progress = query.lastProgress
    if not progress:
        return 0
    total = 0
    for src in progress["sources"]:
        end = json.loads(src.get("endOffset") or "{}")
        total += sum(int(o) for o in end.get(topic, {}).values())
    return total


def view(state: LiveState, settings: LiveSettings) -> Group:
    elapsed = max(time.monotonic() - state.started, 0.001)
    stats = Table(title=f"headrace fraud detection - {state.phase}", show_header=False)
    score = state.truth.score(state.all_alerts) if state.truth else None
    rows = [
        ("events in", f"{state.sent} ({state.sent / elapsed:.0f}/s, target {settings.rate:g}/s)"),
        ("pipeline", f"{state.parsed} transactions parsed, {state.processed_per_s:.0f} rows/s "
                     f"in the last batch, {state.batches} batches, lag {state.lag}"),
        ("alerts", str(len(state.all_alerts))),
        ("detection latency", f"p50 {percentile(state.latencies_ms, 0.5)} ms, "
                              f"p99 {percentile(state.latencies_ms, 0.99)} ms"),
        ("precision / recall", f"{score.precision:.3f} / {score.recall:.3f}" if score
         else "-"),
        ("late / dead letters", f"{state.late} / {state.dead_letters}"),
    ]
    for k, v in rows:
        stats.add_row(k, v)
    alerts = Table(title="latest alerts", show_lines=False)
    for col in ("card", "amount", "city", "reasons", "score"):
        alerts.add_column(col)
    for a in list(state.alerts):
        alerts.add_row(a["card_id"], f"{a['amount']:.2f}", a["city"], ", ".join(a["reasons"]),
                       f"{a['score']:.2f}")
    return Group(stats, alerts)


def run_live(settings: LiveSettings, console: Console | None = None) -> LiveSummary:
    """Run the demo end to end. Blocks for about ``duration_s`` plus start-up and drain."""
    from headrace.testing import EmbeddedBroker

    console = console or Console(stderr=True)
    broker = None
    bootstrap = settings.bootstrap_servers
    if bootstrap is None:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
        console.print(f"embedded broker on {bootstrap}")
    checkpoint = settings.checkpoint or tempfile.mkdtemp(prefix="headrace-fraud-cp-")
    probe = FraudConfig(seed=settings.seed, rate=settings.rate, duration_s=settings.duration_s)
    config = FraudConfig(seed=settings.seed, rate=settings.rate,
                         duration_s=settings.duration_s, users=probe.required_users(),
                         late_after_s=10.0)
    try:
        spark = _spark(console)
        topics = settings.topics
        _ensure_output_topics(bootstrap, topics)
        generator = FraudGenerator(config)
        state = LiveState()
        stop = threading.Event()
        gen_topics = FraudTopics(transactions=topics.transactions, profiles=topics.profiles)
        truth_box: list[GroundTruth] = []

        query = start(spark, PipelineConfig(bootstrap, checkpoint, topics=topics,
                                            trigger_ms=0))

        def profiles_loaded() -> None:
            state.phase = "loading user profiles"
            wanted = _end_offset(bootstrap, topics.profiles)
            deadline = time.monotonic() + settings.drain_timeout_s
            while time.monotonic() < deadline and _read_up_to(query, topics.profiles) < wanted:
                time.sleep(0.2)
            state.measure_from_ms = time.time() * 1000 + settings.steady_after_s * 1000
            state.phase = "running"

        def generate() -> None:
            truth_box.append(run(bootstrap, generator=generator, topics=gen_topics,
                                 before_stream=profiles_loaded,
                                 on_progress=lambda n, _t: setattr(state, "sent", n)))

        gen_thread = threading.Thread(target=generate, daemon=True)
        gen_thread.start()
        watcher = threading.Thread(target=_watch_alerts, daemon=True,
                                   args=(bootstrap, topics, state, stop))
        watcher.start()
        state.started = time.monotonic()
        with Live(view(state, settings), console=console, refresh_per_second=2) as live:
            while gen_thread.is_alive() or not truth_box:
                _tick(query, state, generator, bootstrap, topics)
                live.update(view(state, settings))
                time.sleep(0.5)
                if query.exception() is not None:
                    raise PipelineError(f"the pipeline failed: {query.exception()}")
            state.truth = truth_box[0]
            state.phase = "draining"
            deadline = time.monotonic() + settings.drain_timeout_s
            sent_txns = _end_offset(bootstrap, topics.transactions)
            while time.monotonic() < deadline:
                _tick(query, state, None, bootstrap, topics)
                live.update(view(state, settings))
                if state.lag == 0 and state.parsed + state.dead_letters >= sent_txns:
                    break
                time.sleep(0.5)
            time.sleep(1.0)
            state.phase = "done"
            live.update(view(state, settings))
        query.stop()
        stop.set()
        watcher.join(5)
        truth = truth_box[0]
        return LiveSummary(
            lag_samples=state.lag_samples, events=state.sent, alerts=len(state.all_alerts), score=truth.score(state.all_alerts),
            p50_ms=percentile(state.latencies_ms, 0.5),
            p99_ms=percentile(state.latencies_ms, 0.99), late=state.late,
            expected_late=truth.late_count, dead_letters=state.dead_letters,
            expected_dead_letters=truth.malformed_count,
            elapsed_s=time.monotonic() - state.started)
    finally:
        if broker is not None:
            broker.stop()


def _tick(query: Any, state: LiveState, generator: FraudGenerator | None, bootstrap: str,
          topics: PipelineTopics) -> None:
    _follow(query, state)
    # Lag: what the log holds beyond what the query has finished (the progress's own
    # latestOffset is where the running batch stops, not where the log ends).
    state.lag = max(_end_offset(bootstrap, topics.transactions)
                    - _read_up_to(query, topics.transactions), 0)
    state.lag_samples.append((time.monotonic() - state.started, state.lag))
    if generator is not None:
        # RuntimeError: the generator thread changed it under us; try again next tick.
        with contextlib.suppress(RuntimeError):
            state.truth = generator.truth()
