"""The real-time path (Spark Real-Time Mode, rules on the JVM operator) end to end.

On the fixed seed the micro-batch tests use: exactly the injected incidents are alerted,
once each, and the micro-batch pipeline on the same input raises the same alerts (card,
rule). Killing the real-time driver (kill -9, whole process tree) while traffic flows and
restarting it from its checkpoint loses no alert; Spark's Kafka sink is at-least-once, so
alerts since the last checkpoint may come twice, always identical (counted, not hidden).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.truth import GroundTruth
from headrace.testing import EmbeddedBroker, scaled
from tests.pipelines.fraud_support import (
    MAX_OFFSETS,
    alert_keys,
    alerts_of,
    check_alerts,
    create_topics,
    fraud_config,
    generate,
    wait_caught_up,
    wait_for_profiles,
)
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ALERTS = "fraud-alerts"
CHECK = "fraud-alerts-microbatch"


def realtime_worker(bootstrap: str, tmp_path: Path) -> SparkWorker:
    return SparkWorker("tests.pipelines.realtime_worker",
                       [bootstrap, str(tmp_path / "cp-realtime"), "5 seconds"], tmp_path,
                       "realtime")


def test_exact_alerts_equal_to_the_micro_batch_path(spark: SparkSession, tmp_path: Path
                                                    ) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, ALERTS, CHECK)
        worker = realtime_worker(bootstrap, tmp_path)
        try:
            worker.spawn()
            assert worker.wait_for("started", 180), worker.stderr_tail()
            users = fraud_config(11, 100, 60).users
            truth = generate(bootstrap, seed=11, rate=100, duration=60,
                             before_stream=lambda: wait_for_profiles(worker, users))
            wait_caught_up(worker, bootstrap)
            assert not any(e.startswith("failed") for e in worker.events()), \
                worker.stderr_tail()
        finally:
            worker.kill()
        realtime = alerts_of(bootstrap, ALERTS)
        check_alerts(realtime, truth)
        query = start(spark, PipelineConfig(bootstrap, str(tmp_path / "cp-microbatch"),
                                            topics=PipelineTopics(alerts=CHECK),
                                            max_offsets_per_trigger=MAX_OFFSETS,
                                            available_now=True))
        query.awaitTermination(scaled(600))
        assert query.exception() is None, query.exception()
        microbatch = alerts_of(bootstrap, CHECK)
        check_alerts(microbatch, truth)
        assert alert_keys(realtime) == alert_keys(microbatch)


@pytest.mark.timeout(600)  # Spark applications in turn, ~2 min
def test_kill_9_and_restart_loses_no_alert(tmp_path: Path) -> None:
    rng = random.Random(8)
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, ALERTS)
        worker = realtime_worker(bootstrap, tmp_path)
        users = fraud_config(13, 100, 50).users
        loaded = threading.Event()
        truth_box: list[GroundTruth] = []

        def profiles_then_go() -> None:
            wait_for_profiles(worker, users)
            loaded.set()

        traffic = threading.Thread(target=lambda: truth_box.append(generate(
            bootstrap, seed=13, rate=100, duration=50, before_stream=profiles_then_go,
            realtime=True)), daemon=True)
        try:
            worker.spawn()
            assert worker.wait_for("started", 180), worker.stderr_tail()
            traffic.start()
            assert loaded.wait(scaled(180)), "profiles not loaded"
            kills = 0
            while traffic.is_alive() and kills < 3:
                time.sleep(rng.uniform(4.0, 12.0))
                worker.kill()
                kills += 1
                worker.spawn()
                assert worker.wait_for("started", 180), worker.stderr_tail()
            traffic.join(scaled(120))
            assert truth_box, "the generator did not finish"
            wait_caught_up(worker, bootstrap)
        finally:
            worker.kill()
        alerts = alerts_of(bootstrap, ALERTS)
        assert kills >= 2
        first: dict[str, dict[str, object]] = {}
        for a in alerts:
            # at-least-once: a repeat is the same alert again, never a different one
            assert first.setdefault(a["txn_id"], a) == a
        repeats = sum(n - 1 for n in Counter(a["txn_id"] for a in alerts).values())
        print(f"{kills} kills, {len(first)} alerts, {repeats} repeated")
        check_alerts(list(first.values()), truth_box[0])
