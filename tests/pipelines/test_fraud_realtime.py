"""The real-time path (Spark Real-Time Mode, rules on the JVM operator) end to end.

On the fixed seed the micro-batch tests use: exactly the injected incidents are alerted,
once each, and the micro-batch pipeline on the same input raises the same alerts (card,
rule) and writes the same dead letters (every malformed transaction, with its bytes and
coordinates). Killing the real-time driver (kill -9, whole process tree) five times while
traffic flows, and the broker once, and restarting each: the alerts read with
read_committed are exactly the expected ones, none missing and none twice (the exactly-once
sink skips on replay what it had committed since the checkpoint), one for one the
micro-batch path's on the same input; the same on Apache Kafka (one driver kill).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from headrace.pipelines.fraud.generator import run
from headrace.pipelines.fraud.pipeline import PipelineConfig, PipelineTopics, start
from headrace.pipelines.fraud.realtime import input_rows
from headrace.pipelines.fraud.truth import GroundTruth
from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.pipelines.fraud_support import (
    ALERTS,
    CHECK,
    CHECK_DLQ,
    DLQ,
    MAX_OFFSETS,
    MICRO_BATCH_TOPICS,
    SeedRun,
    alert_keys,
    alerts_of,
    check_alerts,
    create_topics,
    end_offsets,
    fraud_config,
    realtime_worker,
    wait_caught_up,
    wait_for_profiles,
)
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import REPO_ROOT, SparkWorker

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _micro_batch_alerts(spark: SparkSession, bootstrap: str,
                        tmp_path: Path) -> list[dict[str, Any]]:
    """The micro-batch path's alerts on the same input (to CHECK, in the module's session),
    run to the end of what is there."""
    query = start(spark, PipelineConfig(bootstrap, str(tmp_path / "cp-microbatch"),
                                        topics=MICRO_BATCH_TOPICS,
                                        max_offsets_per_trigger=MAX_OFFSETS,
                                        available_now=True))
    query.awaitTermination(scaled(600))
    assert query.exception() is None, query.exception()
    return alerts_of(bootstrap, CHECK)


@pytest.mark.timeout(600)  # may set up seed_11: a Spark application, then a pipeline run
def test_exact_alerts_and_dead_letters_equal_to_the_micro_batch_path(
        seed_11: SeedRun) -> None:
    """On seed 11 (``tests/pipelines/conftest.py``: the run generated while the real-time
    worker ran, then the micro-batch pipeline over the same topics)."""
    bootstrap, truth = seed_11.bootstrap, seed_11.truth
    assert not any(e.startswith("failed") for e in seed_11.realtime_events), \
        seed_11.realtime_stderr
    realtime = alerts_of(bootstrap, ALERTS)
    check_alerts(realtime, truth)
    dead = dead_letters(bootstrap, DLQ)
    microbatch = alerts_of(bootstrap, CHECK)
    check_alerts(microbatch, truth)
    assert alert_keys(realtime) == alert_keys(microbatch)
    # every malformed transaction, once, with its bytes and coordinates, as the
    # micro-batch path dead-letters it (the error texts are each path's own)
    assert len(dead) == truth.malformed_count
    assert set(dead) == set(dead_letters(bootstrap, CHECK_DLQ))
    assert all(error for error in dead.values())
    assert [a["txn_id"] for a in realtime if a["late"]] == \
        [a["txn_id"] for a in realtime if a["ingest_ms"] - a["event_time"] > 60_000]


def dead_letters(bootstrap: str, topic: str) -> dict[tuple[str, str, str, str, bytes], str]:
    """(source topic, partition, offset, timestamp, value) -> error of each dead letter."""
    out: dict[tuple[str, str, str, str, bytes], str] = {}
    for m in read_all(bootstrap, topic):
        h = {k: v.decode() for k, v in m.headers() or []}
        coordinates = (h["headrace.source.topic"], h["headrace.source.partition"],
                       h["headrace.source.offset"], h["headrace.source.timestamp"],
                       m.value())
        assert coordinates not in out, f"dead letter twice: {coordinates}"
        out[coordinates] = h["headrace.error"]
    return out


def _run_with_kills(bootstrap: str, tmp_path: Path, seed: int, duration: float,
                    driver_kills: int, kill_broker: Callable[[], None] | None = None
                    ) -> tuple[GroundTruth, int]:
    """A generated run while the real-time driver is SIGKILLed (its whole process tree)
    ``driver_kills`` times and restarted from its checkpoint. Each kill comes just after
    the incarnation wrote a new alert, so it lands inside an epoch with alerts committed
    (checkpoints every 5 s) and the restart replays them. With ``kill_broker`` (kill -9,
    start again on the same data), the broker goes down once under the second incarnation.
    The traffic (at most ``duration`` s) stops once the last incarnation wrote an alert:
    restarts take 10 s on a quiet machine and a minute on a busy one, and each kill needs
    traffic. Returns the run's truth and the alerts the sink skipped as already committed."""
    rng = random.Random(seed)
    worker = realtime_worker(bootstrap, tmp_path)
    users = fraud_config(seed, 100, duration).users
    loaded = threading.Event()
    truth_box: list[GroundTruth] = []

    def profiles_then_go() -> None:
        wait_for_profiles(worker, users)
        loaded.set()

    stop = threading.Event()
    traffic = threading.Thread(target=lambda: truth_box.append(run(
        bootstrap, fraud_config(seed, 100, duration), before_stream=profiles_then_go,
        realtime=True, stop=stop)), daemon=True)

    def new_alert_or_exit(mark: int) -> None:
        deadline = time.monotonic() + scaled(180)
        while end_offsets(bootstrap, ALERTS) <= mark and not worker.exited():
            assert time.monotonic() < deadline, "no new alert: " + worker.stderr_tail()
            time.sleep(0.2)

    skipped = 0
    try:
        worker.spawn()
        assert worker.wait_for("started", 180), worker.stderr_tail()
        traffic.start()
        assert loaded.wait(scaled(180)), "profiles not loaded"
        for kill in range(driver_kills):
            new_alert_or_exit(end_offsets(bootstrap, ALERTS))
            if kill == 1 and kill_broker is not None:
                kill_broker()
                new_alert_or_exit(end_offsets(bootstrap, ALERTS))
            time.sleep(rng.uniform(0.0, 1.0))
            skipped += worker_skipped(worker)
            worker.kill()
            worker.spawn()
            assert worker.wait_for("started", 180), worker.stderr_tail()
        new_alert_or_exit(end_offsets(bootstrap, ALERTS))
        stop.set()
        traffic.join(scaled(180))
        assert truth_box, "the generator did not finish"
        wait_caught_up(worker, bootstrap)
        skipped += worker_skipped(worker)
    finally:
        worker.kill()
    return truth_box[0], skipped


def worker_skipped(worker: SparkWorker) -> int:
    """The sink's skipped-row count the worker's incarnation last reported."""
    said = [e for e in worker.events() if e.startswith("skipped ")]
    return int(said[-1].split()[1]) if said else 0


@pytest.mark.parametrize(("schema_id", "decoders"), [
    (None, {"from_json(": 2, "from_avro(": 0}),
    (1, {"from_json(": 1, "from_avro(": 1})])
def test_each_record_is_decoded_once_by_its_topics_decoder(
        spark: SparkSession, schema_id: int | None, decoders: dict[str, int]) -> None:
    """The real-time path's input plan decodes a record once: one decoder per topic (the
    transactions' JSON or Avro, the profiles' JSON), not one per reference to a field (the
    plan had 130 ``from_json``, about twenty parses per transaction)."""
    raw = spark.createDataFrame([], "topic string, key binary, value binary, partition int, "
                                "offset long, timestamp timestamp")
    rows = input_rows(raw, PipelineTopics(), transaction_schema_id=schema_id,
                      profiles_envelope="debezium")
    plan = rows._jdf.queryExecution().executedPlan().toString()
    assert {name: plan.count(name) for name in decoders} == decoders


@pytest.mark.timeout(900)  # Spark applications in turn, ~5 min
def test_kill_9_of_driver_and_broker_alerts_exactly_once(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers

        def kill_broker() -> None:
            broker.kill()
            broker.start()

        create_topics(bootstrap, ALERTS, DLQ, CHECK, CHECK_DLQ)
        truth, skipped = _run_with_kills(bootstrap, tmp_path, seed=13, duration=300,
                                         driver_kills=5, kill_broker=kill_broker)
        alerts = alerts_of(bootstrap, ALERTS)
        uncommitted = read_all(bootstrap, ALERTS, read_committed=False)
        # the micro-batch path on the same input, in the module's session
        microbatch = _micro_batch_alerts(spark, bootstrap, tmp_path)
    print(f"{len(alerts)} alerts read_committed, {len(uncommitted)} read_uncommitted, "
          f"{skipped} skipped on replay")
    check_alerts(alerts, truth)
    # one for one: each (card, rule) alerted as often by both paths, none twice
    assert Counter((a["card_id"], r) for a in alerts for r in a["reasons"]) == \
        Counter((a["card_id"], r) for a in microbatch for r in a["reasons"])
    assert skipped > 0, "no kill landed after a committed alert: the replay path is untested"


@pytest.mark.timeout(600)
def test_kill_9_alerts_exactly_once_on_apache_kafka(tmp_path: Path) -> None:
    os.environ.setdefault("HEADRACE_JVM_LIB", str(REPO_ROOT / "jvm" / "lib"))
    with ApacheKafka() as kafka:
        bootstrap = kafka.bootstrap_servers
        create_topics(bootstrap, ALERTS, DLQ)
        truth, skipped = _run_with_kills(bootstrap, tmp_path, seed=17, duration=25,
                                         driver_kills=1)
        alerts = alerts_of(bootstrap, ALERTS)
    print(f"{len(alerts)} alerts read_committed, {skipped} skipped on replay")
    check_alerts(alerts, truth)
