"""What the fraud pipeline tests share: a fixed-seed run, reading alerts, the exact check."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.pipelines.fraud.generator import FraudConfig, FraudTopics, ensure_topics, run
from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.pipelines.fraud.truth import PATTERNS, GroundTruth
from headrace.testing import scaled
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

MAX_OFFSETS = 1000
"""Transactions per micro-batch where a test runs the micro-batch pipeline over a whole
generated run (``maxOffsetsPerTrigger``): a few micro-batches, each advancing the watermark
that decides which records of the next ones are late."""

LATE_AFTER_S = 20.0
"""No late record arrives in a run's first 20 s: the pipeline's first micro-batch has no
watermark yet, so it cannot tell late records from on-time ones. ``MAX_OFFSETS`` records
at 100/s (the fastest generated run read that way) span about 10 s of arrivals."""

ALERTS = "fraud-alerts"
"""The real-time path's alerts (its default topic)."""
DLQ = "transactions-dlq"
"""The real-time path's dead letters (its default topic)."""
CHECK = "fraud-alerts-microbatch"
"""The micro-batch path's alerts on the same input."""
CHECK_DLQ = "transactions-dlq-microbatch"
"""The micro-batch path's dead letters on the same input."""
MICRO_BATCH_TOPICS = PipelineTopics(alerts=CHECK, dead_letters=CHECK_DLQ)
"""Where the micro-batch path writes beside the real-time path (late records: the default
late topic, which the real-time path does not write: it flags late alerts instead)."""


@dataclass(frozen=True)
class SeedRun:
    """One generated run on a broker that stays up for the test session, processed by the
    real-time worker while it was generated and then by the micro-batch pipeline."""

    bootstrap: str
    truth: GroundTruth
    realtime_events: tuple[str, ...]
    """The real-time worker's progress lines (``failed ...`` if its query died)."""
    realtime_stderr: str
    late_by_batch: dict[int, int]
    """The micro-batch query's late-record count per micro-batch (observed metrics)."""


def fraud_config(seed: int, rate: float, duration: float) -> FraudConfig:
    """A fixed-seed run: 4 incidents per pattern per minute of event time (4 each in a
    minute's run), late records from ``LATE_AFTER_S`` on, and just the users it needs."""
    probe = FraudConfig(seed=seed, rate=rate, duration_s=duration)
    return FraudConfig(seed=seed, rate=rate, duration_s=duration,
                       users=probe.required_users(), late_after_s=LATE_AFTER_S,
                       velocity_bursts=4, impossible_travel=4, amount_anomalies=4,
                       card_testing=4)


def generate(bootstrap: str, seed: int, rate: float, duration: float,
             before_stream: Callable[[], None] | None = None,
             realtime: bool = False) -> GroundTruth:
    return run(bootstrap, fraud_config(seed, rate, duration), realtime=realtime,
               before_stream=before_stream)


def check_patterns(truth: GroundTruth) -> None:
    """The run injected every pattern, late records and malformed ones: what the exact
    checks need to mean something."""
    patterns = {i.pattern for i in truth.incidents}
    assert patterns == set(PATTERNS), patterns
    assert truth.late_count and truth.malformed_count, (truth.late_count,
                                                        truth.malformed_count)


def create_topics(bootstrap: str, *names: str) -> None:
    """The generator's topics and ``names`` (one partition each), unless they exist."""
    ensure_topics(bootstrap, FraudTopics())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, num_partitions=1) for n in names]).values():
        f.result(scaled(30))


def alerts_of(bootstrap: str, topic: str = "fraud-alerts") -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in read_all(bootstrap, topic)]


def realtime_worker(bootstrap: str, tmp_path: Path) -> SparkWorker:
    """The real-time path in a Spark application of its own (``tests.pipelines.realtime_worker``),
    checkpointing every 5 s in ``tmp_path``; not started yet."""
    return SparkWorker("tests.pipelines.realtime_worker",
                       [bootstrap, str(tmp_path / "cp-realtime"), "5 seconds"], tmp_path,
                       "realtime")


def wait_for_profiles(worker: SparkWorker, profiles: int, timeout_s: float = 120.0) -> None:
    """Until the real-time worker reports (at a checkpoint) that it read ``profiles``
    profile records."""
    deadline = time.monotonic() + scaled(timeout_s)
    while time.monotonic() < deadline:
        for event in reversed(worker.events()):
            if event.startswith("progress "):
                if json.loads(event.split(" ", 1)[1]).get("user-profiles", 0) >= profiles:
                    return
                break
        time.sleep(0.2)
    raise TimeoutError(f"the real-time worker did not read {profiles} profiles; stderr "
                       f"ends:\n{worker.stderr_tail()}")


def end_offsets(bootstrap: str, topic: str) -> int:
    """The sum of ``topic``'s high watermarks over its partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fraud-tests-ends"})
    try:
        meta = consumer.list_topics(topic, timeout=scaled(10)).topics[topic]
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                  timeout=scaled(10))[1]
                   for p in meta.partitions)
    finally:
        consumer.close()


def wait_caught_up(worker: SparkWorker, bootstrap: str, timeout_s: float = 300.0) -> None:
    """Until the real-time worker's latest checkpoint covers every record now in the topics
    it reads: everything the generator wrote has been processed and its alerts flushed.
    Waiting for quiet on the alert topic alone is not enough after a restart: a driver
    still starting (30-60 s on a loaded machine) writes nothing for a while either."""
    deadline = time.monotonic() + scaled(timeout_s)
    wanted: dict[str, int] = {}
    while time.monotonic() < deadline:
        progress = [e for e in worker.events() if e.startswith("progress ")]
        if progress:
            seen: dict[str, int] = json.loads(progress[-1].split(" ", 1)[1])
            for topic in seen:
                if topic not in wanted:
                    wanted[topic] = end_offsets(bootstrap, topic)
            if wanted and all(seen.get(t, 0) >= n for t, n in wanted.items()):
                return
        assert not worker.exited(), worker.stderr_tail()
        time.sleep(0.5)
    raise TimeoutError(f"the real-time worker did not catch up to {wanted}; stderr ends:\n"
                       f"{worker.stderr_tail()}")


def alert_keys(alerts: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(card, rule) of every alert: what two paths must agree on."""
    return {(a["card_id"], r) for a in alerts for r in a["reasons"]}


def check_alerts(alerts: list[dict[str, Any]], truth: GroundTruth) -> None:
    assert alerts, "no alert at all"
    ids = Counter(a["txn_id"] for a in alerts)
    assert max(ids.values()) == 1, f"duplicate alerts: {[i for i, n in ids.items() if n > 1]}"
    score = truth.score([(a["card_id"], a["event_time"], a["reasons"]) for a in alerts])
    assert (score.precision, score.recall) == (1.0, 1.0), score
    reasons: dict[str, set[str]] = {}
    for a in alerts:
        reasons.setdefault(a["card_id"], set()).update(a["reasons"])
    # an incident a stopped run cut short may or may not have been alerted
    cut_short = {i.card_id for i in truth.partial_incidents}
    assert set(reasons) - cut_short == {i.card_id for i in truth.incidents}
    for incident in truth.incidents:
        assert incident.pattern in reasons[incident.card_id], incident
