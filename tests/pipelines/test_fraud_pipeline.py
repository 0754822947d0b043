"""The fraud pipeline end to end on a fixed seed: exactly the injected incidents are
alerted, late and dead-letter counts equal what the generator injected, and a kill -9 of
the pipeline (driver and JVM) followed by a restart neither loses nor repeats an alert."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from headrace.testing import EmbeddedBroker, scaled
from tests.pipelines.fraud_support import (
    MICRO_BATCH_TOPICS,
    SeedRun,
    alerts_of,
    check_alerts,
    check_patterns,
    generate,
)
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(600)  # may set up seed_11: a Spark application, then a pipeline run
def test_exact_alerts_late_and_dead_letters(seed_11: SeedRun) -> None:
    """On seed 11, run through the micro-batch pipeline once for this module and
    ``test_fraud_realtime`` (``tests/pipelines/conftest.py``), writing alerts and dead
    letters to ``MICRO_BATCH_TOPICS``."""
    bootstrap, truth = seed_11.bootstrap, seed_11.truth
    check_patterns(truth)
    check_alerts(alerts_of(bootstrap, MICRO_BATCH_TOPICS.alerts), truth)
    assert len(read_all(bootstrap, MICRO_BATCH_TOPICS.late)) == truth.late_count
    assert len(read_all(bootstrap, MICRO_BATCH_TOPICS.dead_letters)) == truth.malformed_count
    late = seed_11.late_by_batch
    assert sum(late.values()) == truth.late_count
    # told late by the watermarks of several earlier micro-batches, not of one
    assert len([b for b, n in late.items() if n]) >= 2, late


@pytest.mark.timeout(900)  # three Spark applications in turn
def test_kill_9_and_restart_repeats_no_alert(tmp_path: Path) -> None:
    rng = random.Random(5)
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        truth = generate(bootstrap, seed=12, rate=50, duration=60)
        check_patterns(truth)
        checkpoint = tmp_path / "cp"
        # About 3,000 transactions, 500 per micro-batch: 7 micro-batches. Two kills, each
        # while a different one is in flight (its offsets logged, a moment into it), the
        # second in a restarted application that recovered from the checkpoint.
        kill_in = sorted(rng.sample(range(1, 6), 2))
        worker = SparkWorker("tests.pipelines.fraud_worker",
                             [bootstrap, str(checkpoint), "500"], tmp_path, "fraud")
        try:
            kills = 0
            for batch in kill_in:
                worker.spawn()
                worker.wait_for("started", 120)
                before = len(alerts_of(bootstrap))
                planned = checkpoint / "offsets" / str(batch)
                stop_at = time.monotonic() + scaled(90)
                while time.monotonic() < stop_at and not worker.exited() \
                        and not planned.exists():
                    time.sleep(0.1)
                time.sleep(rng.uniform(0.0, 2.0))
                if worker.exited():
                    break
                worker.kill()
                kills += 1
                assert len(alerts_of(bootstrap)) >= before
            worker.spawn()
            assert worker.wait_for("done", 600), worker.stderr_tail()
            assert worker.wait_exit(60) == 0, worker.stderr_tail()
            assert kills == len(kill_in)
        finally:
            worker.kill()
        check_alerts(alerts_of(bootstrap), truth)
