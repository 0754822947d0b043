"""The exactly-once pipeline on both clusters at once, started as a person would:
``headrace cluster up`` (a replicated Apache Kafka and a Spark standalone cluster: a master
and two workers, executors in their own JVMs and Python workers), then ``status`` and, at
the end, ``down``.

``format("headrace")`` runs from one topic to another through the exactly-once sink
(``tests.spark.spark_workers.eos_pipeline``: upper-cases values, ``repartition(3)``,
``Trigger.AvailableNow``, ``maxOffsetsPerTrigger``), submitted to the master as any Spark
application is, while the broker leading every input and output partition is killed with
``kill -9`` after the first micro-batch and restarted once its partitions have moved; after
the second micro-batch one of the two Spark workers is killed with ``kill -9`` (its executor
goes with it, and the driver re-runs its tasks on the other). The query must end on its
own, and a read_committed consumer must then see every input value exactly once,
upper-cased.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from headrace.cluster import KafkaCluster, SparkCluster
from headrace.testing import scaled
from tests.cluster.conftest import REPO_ROOT, create_topic, produce
from tests.spark.kafka_helpers import read_all
from tests.spark.spark_workers.supervisor import SparkWorker

pytestmark = pytest.mark.slow

RECORDS = 6_000
MAX_OFFSETS_PER_TRIGGER = 1_000  # six micro-batches: a broker killed after the first,
# a Spark worker after the second


@dataclass(frozen=True)
class Clusters:
    kafka: KafkaCluster
    spark: SparkCluster
    status: str


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.setdefault("HEADRACE_JVM_LIB", str(REPO_ROOT / "jvm" / "lib"))
    return subprocess.run([sys.executable, "-m", "headrace", "cluster", *args],
                          capture_output=True, text=True, env=env, timeout=scaled(300),
                          check=False)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    state = tmp_path_factory.mktemp("clusters")
    up = _cli("up", "--dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kafka = KafkaCluster.attach(state / "kafka")
        spark = SparkCluster.attach(state / "spark")
        assert f"Kafka bootstrap servers: {kafka.bootstrap_servers}" in up.stdout
        assert f"Spark master URL: {spark.master_url}" in up.stdout
        status = _cli("status", "--dir", str(state))
        assert status.returncode == 0, status.stderr
        yield Clusters(kafka, spark, status.stdout)
    finally:
        down = _cli("down", "--dir", str(state))
        assert down.returncode == 0, down.stdout + down.stderr
    assert not any(KafkaCluster.attach(state / "kafka").running(n) for n in range(4))
    assert not any(w.alive() for w in SparkCluster.attach(state / "spark").workers)


def test_status_reports_both_clusters(clusters: Clusters) -> None:
    assert "brokers running: 1, 2, 3 of 3" in clusters.status
    assert "brokers in the cluster's metadata: 1, 2, 3" in clusters.status
    assert f"{clusters.spark.master_url} (running; 2 of 2 workers running)" in clusters.status


T0_MS = 1_800_000_000_000 - 1_800_000_000_000 % 600_000  # a 10-minute window's start
MINUTE_MS = 60_000


def _event(k: str, minute: int, amount: float) -> list[str]:
    return [k, json.dumps({"k": k, "ts": T0_MS + minute * MINUTE_MS, "amount": amount})]


def test_event_time_windows_between_spark_kafka_source_and_sink_on_the_clusters(
        clusters: Clusters, topic_name: str, tmp_path: Path) -> None:
    """Spark's own ``format("kafka")`` source and sink on the replicated cluster, with the
    event-time toolkit's 10-minute windows between them (``windowed``, ``to_topics``), as
    an application on the standalone master (``tests.spark.spark_workers.scaleout``'s
    ``kafka_windows``). First step: six cards' events in the first window and one at
    minute 15 (the watermark moves there); second step: an event at minute 3 (behind the
    watermark: the late side output) and one at minute 12 (its window stays open). Out
    come exactly the six closed windows and the one late event."""
    cluster = clusters.kafka
    source, results, late = (f"{topic_name}-{s}" for s in ("in", "windows", "late"))
    create_topic(cluster, source, partitions=3)
    for t in (results, late):
        create_topic(cluster, t)
    cards = "abcdef"
    first = [_event(k, i + m, amount) for i, k in enumerate(cards)
             for m, amount in ((1, 1.25), (2, 2.5), (3, 10.0))]
    steps = [[*first, _event("z", 15, 1.0)], [_event("a", 3, 7.0), _event("b", 12, 1.0)]]
    plan = [{"name": "windows", "kind": "kafka_windows", "bootstrap": cluster.bootstrap_servers,
             "topic": source, "results": results, "late": late,
             "checkpoint": str(tmp_path / "checkpoint"), "steps": steps}]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    worker = SparkWorker("tests.spark.spark_workers.scaleout",
                         ["--master", clusters.spark.master_url, "--plan",
                          str(tmp_path / "plan.json"), "--result", str(tmp_path / "result.json")],
                         tmp_path, "windows")
    try:
        worker.spawn()
        assert worker.wait_exit(300) == 0, worker.stderr_tail()
    finally:
        worker.kill()
    outcome = json.loads((tmp_path / "result.json").read_text())
    assert outcome["_session"]["master"] == clusters.spark.master_url
    assert outcome["windows"]["ok"], outcome["windows"].get("error")
    rows = [json.loads(m.value()) for m in read_all(cluster.bootstrap_servers, results,
                                                   timeout=60)]
    start = dt.datetime.fromtimestamp(T0_MS / 1000, dt.UTC)
    got = sorted((r["kind"], r["k"], dt.datetime.fromisoformat(r["window_start"]),
                  dt.datetime.fromisoformat(r["window_end"]), r["count"], r["total"],
                  r["final"]) for r in rows)
    assert got == [("result", k, start, start + dt.timedelta(minutes=10), 3, 13.75, True)
                   for k in cards], rows
    dropped = [json.loads(m.value()) for m in read_all(cluster.bootstrap_servers, late,
                                                      timeout=60)]
    assert [(d["k"], d["ts"], d["amount"]) for d in dropped] \
        == [("a", T0_MS + 3 * MINUTE_MS, 7.0)], dropped


def test_exactly_once_query_on_a_spark_cluster_survives_a_leader_and_a_worker_kill(
        clusters: Clusters, topic_name: str, tmp_path: Path) -> None:
    cluster = clusters.kafka
    victim = cluster.broker_ids[0]
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(cluster, source, partitions=3, leader=victim,
                 config={"retention.ms": "-1"})
    create_topic(cluster, sink, partitions=2, leader=victim)
    values = [b"id-%05d" % i for i in range(RECORDS)]
    assert set(produce(cluster.bootstrap_servers, source, values,
                       **{"enable.idempotence": True}).values()) == {None}

    worker = SparkWorker("tests.spark.spark_workers.eos_pipeline",
                         ["--bootstrap", cluster.bootstrap_servers, "--input", source,
                          "--output", sink, "--checkpoint", str(tmp_path / "checkpoint"),
                          "--max-offsets", str(MAX_OFFSETS_PER_TRIGGER),
                          "--master", clusters.spark.master_url],
                         tmp_path, "eos")
    try:
        worker.spawn()
        assert worker.wait_for("batch", 180), worker.stderr_tail()
        cluster.kill(victim)
        cluster.wait_for_leader(source, 0, not_on=victim)
        cluster.start_broker(victim, wait=False)
        deadline = time.monotonic() + scaled(240)
        while sum(e.startswith("batch") for e in worker.events()) < 2:
            assert time.monotonic() < deadline and not worker.exited(), worker.stderr_tail()
            time.sleep(0.2)
        assert not any(e.startswith("done") for e in worker.events())
        clusters.spark.kill_worker(1)
        assert worker.wait_exit(240) == 0, worker.stderr_tail()
    finally:
        worker.kill()
    events = worker.events()
    assert any(e.startswith("done") for e in events), events
    assert sum(e.startswith("batch") for e in events) >= 2, events

    out = [m.value() for m in read_all(cluster.bootstrap_servers, sink, timeout=60)]
    got = Counter(out)
    want = Counter(v.upper() for v in values)
    assert got == want, (f"{len(out)} records for {RECORDS}: {len(want - got)} missing, "
                         f"{len(got - want)} extra")
    cluster.wait_for_brokers()


@pytest.mark.parametrize("command", ["status", "down"])
def test_no_cluster_in_the_directory_is_a_one_line_error(command: str, tmp_path: Path) -> None:
    done = _cli(command, "--dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert f"no cluster in {tmp_path}" in done.stderr
