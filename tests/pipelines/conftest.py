"""The fixed-seed fraud run two modules check: generated once, processed by both paths once.

``test_fraud_pipeline`` checks the micro-batch path's alerts, late records and dead letters
on seed 11 (100 tx/s of event time for 60 s); ``test_fraud_realtime`` checks the real-time
path's on the same seed and that both paths agree. Both need the same run through the
micro-batch pipeline, which costs about a minute of CPU on 2 cores: ``seed_11`` does it once
per test session (the two modules run in one xdist group, on one worker: ``tests/timing.py``).

The real-time path must have read the user profiles before the first transaction arrives
(its rule operator reads profiles and transactions as one stream), so the run is generated
while the real-time worker is running; the micro-batch pipeline then reads the same topics
from the start. A module run alone still gets the whole fixture (the real-time worker
included).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from headrace.pipelines.fraud.pipeline import PipelineConfig, start
from headrace.testing import EmbeddedBroker, scaled
from tests.pipelines.fraud_support import (
    ALERTS,
    CHECK,
    CHECK_DLQ,
    DLQ,
    MAX_OFFSETS,
    MICRO_BATCH_TOPICS,
    SeedRun,
    create_topics,
    fraud_config,
    generate,
    realtime_worker,
    wait_caught_up,
    wait_for_profiles,
)


@pytest.fixture(scope="session")
def seed_11(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[SeedRun]:
    """Seed 11 at 100 tx/s for 60 s of event time (about 6,000 transactions), with every
    pattern, late and malformed records: the real-time path's alerts in ``ALERTS`` and
    ``DLQ``, the micro-batch path's in ``CHECK``, ``CHECK_DLQ`` and the late topic."""
    tmp_path = tmp_path_factory.mktemp("seed-11")
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, ALERTS, CHECK, DLQ, CHECK_DLQ)
        worker = realtime_worker(bootstrap, tmp_path)
        try:
            worker.spawn()
            assert worker.wait_for("started", 180), worker.stderr_tail()
            users = fraud_config(11, 100, 60).users
            truth = generate(bootstrap, seed=11, rate=100, duration=60,
                             before_stream=lambda: wait_for_profiles(worker, users))
            wait_caught_up(worker, bootstrap)
            events, stderr = tuple(worker.events()), worker.stderr_tail()
        finally:
            worker.kill()
        query = start(spark, PipelineConfig(bootstrap, str(tmp_path / "cp-microbatch"),
                                            topics=MICRO_BATCH_TOPICS,
                                            max_offsets_per_trigger=MAX_OFFSETS,
                                            available_now=True))
        assert query.awaitTermination(scaled(600)), query.lastProgress
        assert query.exception() is None, query.exception()
        late = {p["batchId"]: int(p["observedMetrics"]["out"]["late"])
                for p in query.recentProgress}
        yield SeedRun(bootstrap, truth, events, stderr, late)
