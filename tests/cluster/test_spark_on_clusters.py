"""The exactly-once pipeline on both clusters at once: a Spark standalone cluster
(``headrace.cluster.SparkCluster``: a master and two workers, executors in their own JVMs
and Python workers) running ``format("headrace")`` from one topic to another through the
exactly-once sink, against a replicated Apache Kafka whose broker leading every input and
output partition is killed with ``kill -9`` after the first micro-batch and restarted.

The query (``tests.spark.spark_workers.eos_pipeline``: upper-cases values,
``repartition(3)``, ``Trigger.AvailableNow``, ``maxOffsetsPerTrigger``) is submitted to
the master as any Spark application is. It must end on its own, and a read_committed
consumer must then see every input value exactly once, upper-cased: the source re-plans
on the new leaders (FENCED_LEADER_EPOCH, NOT_LEADER, timeouts are retried), the sink's
transactions survive the coordinator and leaders moving.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cluster import KafkaCluster, SparkCluster
from tests.cluster.conftest import create_topic, read_committed
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = pytest.mark.slow

RECORDS = 6_000
MAX_OFFSETS_PER_TRIGGER = 1_000  # six micro-batches, the kill after the first


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[SparkCluster]:
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    with SparkCluster(workers=2, worker_memory="1g") as cluster:
        yield cluster


def test_exactly_once_query_on_a_spark_cluster_survives_a_leader_kill(
        healed: KafkaCluster, spark_cluster: SparkCluster, topic_name: str,
        tmp_path: Path) -> None:
    cluster = healed
    victim = cluster.broker_ids[0]
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(cluster, source, partitions=3, leader=victim,
                 config={"retention.ms": "-1"})
    create_topic(cluster, sink, partitions=2, leader=victim)
    from tests.cluster.test_failover import _produce
    values = [b"id-%05d" % i for i in range(RECORDS)]
    assert set(_produce(cluster.bootstrap_servers, source, values,
                        **{"enable.idempotence": True}).values()) == {None}

    worker = SparkWorker("tests.spark.spark_workers.eos_pipeline",
                         ["--bootstrap", cluster.bootstrap_servers, "--input", source,
                          "--output", sink, "--checkpoint", str(tmp_path / "checkpoint"),
                          "--max-offsets", str(MAX_OFFSETS_PER_TRIGGER),
                          "--master", spark_cluster.master_url],
                         tmp_path, "eos")
    try:
        worker.spawn()
        assert worker.wait_for("batch", 180), worker.stderr_tail()
        cluster.kill(victim)
        cluster.wait_for_leader(source, 0, not_on=victim)
        cluster.start_broker(victim, wait=False)
        assert worker.wait_exit(240) == 0, worker.stderr_tail()
    finally:
        worker.kill()
    events = worker.events()
    assert any(e.startswith("done") for e in events), events
    assert sum(e.startswith("batch") for e in events) >= 2, events

    out = [m.value() for m in read_committed(cluster.bootstrap_servers, sink)]
    got = Counter(out)
    want = Counter(v.upper() for v in values)
    assert got == want, (f"{len(out)} records for {RECORDS}: {len(want - got)} missing, "
                         f"{len(got - want)} extra")
