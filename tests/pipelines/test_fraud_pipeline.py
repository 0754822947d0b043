"""The fraud pipeline end to end on a fixed seed: exactly the injected incidents are
alerted, late and dead-letter counts equal what the generator injected, and a kill -9 of
the pipeline (driver and JVM) followed by a restart neither loses nor repeats an alert."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from headrace.pipelines.fraud.generator import FraudConfig, run
from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.truth import GroundTruth
from headrace.testing import EmbeddedBroker
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def generate(bootstrap: str, seed: int, rate: float, duration: float) -> GroundTruth:
    probe = FraudConfig(seed=seed, rate=rate, duration_s=duration)
    config = FraudConfig(seed=seed, rate=rate, duration_s=duration,
                         users=probe.required_users(), late_after_s=10.0,
                         velocity_bursts=4, impossible_travel=4, amount_anomalies=4,
                         card_testing=4)
    return run(bootstrap, config, realtime=False)


def alerts_of(bootstrap: str) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in read_all(bootstrap, PipelineTopics().alerts)]


def check_alerts(alerts: list[dict[str, Any]], truth: GroundTruth) -> None:
    assert alerts, "no alert at all"
    ids = Counter(a["txn_id"] for a in alerts)
    assert max(ids.values()) == 1, f"duplicate alerts: {[i for i, n in ids.items() if n > 1]}"
    score = truth.score([(a["card_id"], a["event_time"], a["reasons"]) for a in alerts])
    assert (score.precision, score.recall) == (1.0, 1.0), score
    reasons: dict[str, set[str]] = {}
    for a in alerts:
        reasons.setdefault(a["card_id"], set()).update(a["reasons"])
    assert set(reasons) == {i.card_id for i in truth.incidents}
    for incident in truth.incidents:
        assert incident.pattern in reasons[incident.card_id], incident


def test_exact_alerts_late_and_dead_letters(spark: SparkSession, tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        truth = generate(bootstrap, seed=11, rate=100, duration=90)
        assert truth.incidents and truth.late_count and truth.malformed_count
        query = start(spark, PipelineConfig(bootstrap, str(tmp_path / "cp"),
                                            max_offsets_per_trigger=300, available_now=True))
        query.awaitTermination(600)
        assert query.exception() is None, query.exception()
        check_alerts(alerts_of(bootstrap), truth)
        topics = PipelineTopics()
        assert len(read_all(bootstrap, topics.late)) == truth.late_count
        assert len(read_all(bootstrap, topics.dead_letters)) == truth.malformed_count
        observed = [p["observedMetrics"]["out"]["late"] for p in query.recentProgress]
        assert sum(int(n) for n in observed) == truth.late_count


def test_kill_9_and_restart_repeats_no_alert(tmp_path: Path) -> None:
    rng = random.Random(5)
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        truth = generate(bootstrap, seed=12, rate=50, duration=120)
        worker = SparkWorker("tests.pipelines.fraud_worker", [bootstrap, str(tmp_path / "cp")],
                             tmp_path, "fraud")
        try:
            kills = 0
            for _ in range(3):
                worker.spawn()
                worker.wait_for("started", 120)
                before = len(alerts_of(bootstrap))
                # Kill mid-run: after a random number of micro-batches have committed.
                deadline_batches = rng.randint(2, 6)
                commits = tmp_path / "cp" / "commits"
                stop_at = time.monotonic() + 90
                while time.monotonic() < stop_at and not worker.exited():
                    done = [p for p in commits.iterdir() if p.name.isdigit()] \
                        if commits.exists() else []
                    if len(done) >= deadline_batches * (kills + 1):
                        break
                    time.sleep(0.1)
                if worker.exited():
                    break
                worker.kill()
                kills += 1
                assert len(alerts_of(bootstrap)) >= before
            worker.spawn()
            assert worker.wait_for("done", 600), worker.stderr_tail()
            assert worker.wait_exit(60) == 0, worker.stderr_tail()
            assert kills >= 2
        finally:
            worker.kill()
        check_alerts(alerts_of(bootstrap), truth)
