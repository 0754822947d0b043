"""The fraud pipeline end to end on a fixed seed: exactly the injected incidents are
alerted, late and dead-letter counts equal what the generator injected, and a kill -9 of
the pipeline (driver and JVM) followed by a restart neither loses nor repeats an alert."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.testing import EmbeddedBroker, scaled
from tests.pipelines.fraud_support import alerts_of, check_alerts, generate
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_exact_alerts_late_and_dead_letters(spark: SparkSession, tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        truth = generate(bootstrap, seed=11, rate=100, duration=90)
        assert truth.incidents and truth.late_count and truth.malformed_count
        query = start(spark, PipelineConfig(bootstrap, str(tmp_path / "cp"),
                                            max_offsets_per_trigger=300, available_now=True))
        query.awaitTermination(scaled(600))
        assert query.exception() is None, query.exception()
        check_alerts(alerts_of(bootstrap), truth)
        topics = PipelineTopics()
        assert len(read_all(bootstrap, topics.late)) == truth.late_count
        assert len(read_all(bootstrap, topics.dead_letters)) == truth.malformed_count
        observed = [p["observedMetrics"]["out"]["late"] for p in query.recentProgress]
        assert sum(int(n) for n in observed) == truth.late_count


@pytest.mark.timeout(900)  # four Spark applications in turn, ~4 min
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
                stop_at = time.monotonic() + scaled(90)
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
