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

Before that, with both Spark workers: one application on the master runs the event-time
toolkit between Spark's own ``format("kafka")`` source and sink (exact windows and late
events), the fraud pipeline's micro-batch path over a generated run (exactly the
injected incidents alerted, each once) and the bank's projections rebuilt from an event
store's log that three writers wrote through a kill -9 of its partitions' leader (versions
contiguous, stale appends refused, read models equal to a replay of the log). A second
application runs the fraud pipeline's real-time path (Real-Time Mode, 4-core executors)
through a kill -9 of the broker leading all its topics: alerts exactly once, alerting on
after the kill, and its pipeline metrics (input rate, per-partition source lag down to 0,
rows read, dead letters) right.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headrace.cluster import KafkaCluster, SparkCluster
from headrace.eventsourcing import ConcurrencyError, EventStore, Repository, StoreError
from headrace.eventsourcing.projection import latest_by_key
from headrace.pipelines.bank.domain import Account, Deposited, bank_events, transfer
from headrace.pipelines.fraud.generator import FraudTopics, run
from headrace.pipelines.fraud.truth import GroundTruth
from headrace.testing import scaled
from tests.cluster.conftest import REPO_ROOT, create_fraud_topics, create_topic, produce
from tests.cluster.realtime_worker import QUERY, topics
from tests.eventsourcing.conftest import by_aggregate, fold, log_events
from tests.pipelines.fraud_support import (
    alerts_of,
    check_alerts,
    check_patterns,
    end_offsets,
    fraud_config,
    generate,
)
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
CARDS = "abcdef"


def _event(k: str, minute: int, amount: float) -> list[str]:
    return [k, json.dumps({"k": k, "ts": T0_MS + minute * MINUTE_MS, "amount": amount})]


@dataclass(frozen=True)
class AppRun:
    """One application on the standalone master (``tests.spark.spark_workers.scaleout``)
    that ran the jobs below in turn: one driver and executor start-up for both."""

    results: dict[str, Any]
    topics: dict[str, str]
    truth: GroundTruth

    def job(self, name: str) -> dict[str, Any]:
        found = self.results.get(name)
        assert found is not None, f"job {name} did not run: {list(self.results)}"
        assert found["ok"], found["error"]
        return found


BANK_ACCOUNTS = [f"acc-{i}" for i in range(4)]
BANK_COMMANDS = 60  # by three writers; the leader is killed after 20, restarted after 40


@dataclass(frozen=True)
class BankLog:
    """An event store's log written on the cluster through a leader kill."""

    topic: str
    stale: dict[str, str]
    """Where a stale append was tried (``leader down``, ``after restart``) -> its outcome
    (``refused``: ConcurrencyError, nothing written; anything else is wrong)."""
    applied: list[str]
    """The command ids the writers saw applied (each exactly once in the log)."""


def _stale_append(store: EventStore, accounts: Repository[Account], command_id: str) -> str:
    """Append a deposit to ``acc-0`` expecting a version one behind its current one."""
    deadline = time.monotonic() + scaled(120)
    while True:
        try:
            version = accounts.load("acc-0").version
            store.append("acc-0", [Deposited(1, "stale")], expected_version=version - 1,
                         aggregate_type=Account.type_name(), command_id=command_id)
            return "written"
        except ConcurrencyError:
            return "refused"
        except StoreError:  # outcome unknown while the partition moves: ask again
            assert time.monotonic() < deadline, command_id
            time.sleep(0.2)


@pytest.fixture(scope="module")
def bank_log(clusters: Clusters) -> BankLog:
    """The bank's commands from three writers racing on four shared accounts (deposits and
    transfers: optimistic concurrency at work, conflicts decided again), each command with
    an id and retried while its outcome is unknown. The broker leading both partitions of
    the event topic is killed with ``kill -9`` a third of the way in and restarted two
    thirds in; a stale append is tried while it is down and once it is back."""
    cluster = clusters.kafka
    victim = cluster.broker_ids[0]
    topic = f"cluster-bank-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, partitions=2, leader=victim,
                 config={"cleanup.policy": "delete", "retention.ms": "-1",
                         "retention.bytes": "-1"})
    create_topic(cluster, f"{topic}.snapshots", partitions=2, leader=victim,
                 config={"cleanup.policy": "compact"})
    stale: dict[str, str] = {}
    applied: list[str] = []
    done = threading.Semaphore(0)
    lock = threading.Lock()
    with EventStore(cluster.bootstrap_servers, topic, bank_events, partitions=2,
                    timeout=scaled(30)) as store:
        accounts = Repository(store, Account)
        for name in BANK_ACCOUNTS:
            accounts.execute(name, lambda a, n=name: a.open(f"owner {n}"),
                             command_id=f"open-{name}")
            accounts.execute(name, lambda a: a.deposit(1_000), command_id=f"seed-{name}")

        def command(command_id: str, step: Any) -> None:
            deadline = time.monotonic() + scaled(120)
            while True:
                try:
                    step(command_id)
                    break
                except StoreError:  # outcome unknown: the same id never applies twice
                    assert time.monotonic() < deadline, command_id
                    time.sleep(0.2)
            with lock:
                applied.append(command_id)
            done.release()

        def writer(w: int) -> None:
            rng = random.Random(w)
            for i in range(BANK_COMMANDS // 3):
                # drawn once: a retried command must be the same command
                source, target = rng.sample(BANK_ACCOUNTS, 2)
                amount = rng.randint(1, 20)
                if i % 3 == 2:
                    command(f"w{w}-{i}", lambda cid, s=source, t=target, n=amount: transfer(
                        accounts, s, t, n, cid))
                else:
                    command(f"w{w}-{i}", lambda cid, t=target, n=amount: accounts.execute(
                        t, lambda a: a.deposit(n), command_id=cid, retries=20))

        writers = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(3)]
        for t in writers:
            t.start()
        for _ in range(BANK_COMMANDS // 3):
            assert done.acquire(timeout=scaled(180))
        cluster.kill(victim)
        stale["leader down"] = _stale_append(store, accounts, "stale-down")
        for _ in range(BANK_COMMANDS // 3):
            assert done.acquire(timeout=scaled(180))
        cluster.start_broker(victim)
        stale["after restart"] = _stale_append(store, accounts, "stale-after")
        for t in writers:
            t.join(scaled(180))
        assert not any(t.is_alive() for t in writers)
    cluster.wait_for_isr([topic], timeout=120)
    return BankLog(topic, stale, applied)


@pytest.fixture(scope="module")
def app_run(clusters: Clusters, bank_log: BankLog,
            tmp_path_factory: pytest.TempPathFactory) -> AppRun:
    """The event-time toolkit between Spark's own ``format("kafka")`` source and sink
    (job ``windows``: ``kafka_windows``) and the fraud pipeline's micro-batch path over a
    generated run (job ``fraud``), both against the replicated cluster.

    ``windows``' first step: six cards' events in the first 10-minute window and one at
    minute 15 (the watermark moves there); second step: an event at minute 3 (behind the
    watermark: the late side output) and one at minute 12 (its window stays open)."""
    work = tmp_path_factory.mktemp("apps")
    cluster = clusters.kafka
    bootstrap = cluster.bootstrap_servers
    topics = {s: f"cluster-windows-{s}-{uuid.uuid4().hex[:8]}" for s in ("in", "out", "late")}
    create_topic(cluster, topics["in"], partitions=3)
    create_topic(cluster, topics["out"])
    create_topic(cluster, topics["late"])
    first = [_event(k, i + m, amount) for i, k in enumerate(CARDS)
             for m, amount in ((1, 1.25), (2, 2.5), (3, 10.0))]
    steps = [[*first, _event("z", 15, 1.0)], [_event("a", 3, 7.0), _event("b", 12, 1.0)]]
    # 1,500 transactions, 500 per micro-batch: each pattern injected twice, late records
    # from 20 s of arrivals on (the first micro-batch spans 10 s)
    truth = generate(bootstrap, seed=11, rate=50, duration=30)
    check_patterns(truth)
    plan = [{"name": "windows", "kind": "kafka_windows", "bootstrap": bootstrap,
             "topic": topics["in"], "results": topics["out"], "late": topics["late"],
             "checkpoint": str(work / "windows"), "steps": steps},
            {"name": "fraud", "kind": "fraud", "bootstrap": bootstrap,
             "checkpoint": str(work / "fraud"), "max_offsets": 500},
            {"name": "projections", "kind": "bank_projections", "bootstrap": bootstrap,
             "topic": bank_log.topic, "checkpoint": str(work / "projections")}]
    (work / "plan.json").write_text(json.dumps(plan))
    result = work / "result.json"
    worker = SparkWorker("tests.spark.spark_workers.scaleout",
                         ["--master", clusters.spark.master_url, "--plan",
                          str(work / "plan.json"), "--result", str(result)], work, "apps")
    try:
        worker.spawn()
        assert worker.wait_exit(600) == 0 and result.exists(), worker.stderr_tail()
    finally:
        worker.kill()
    results = json.loads(result.read_text())
    assert results["_session"]["master"] == clusters.spark.master_url
    return AppRun(results, topics, truth)


def test_event_time_windows_between_spark_kafka_source_and_sink_on_the_clusters(
        clusters: Clusters, app_run: AppRun) -> None:
    """Out of the ``windows`` job come exactly the six closed windows and the late event."""
    app_run.job("windows")
    bootstrap = clusters.kafka.bootstrap_servers
    rows = [json.loads(m.value()) for m in read_all(bootstrap, app_run.topics["out"],
                                                   timeout=60)]
    start = dt.datetime.fromtimestamp(T0_MS / 1000, dt.UTC)
    got = sorted((r["kind"], r["k"], dt.datetime.fromisoformat(r["window_start"]),
                  dt.datetime.fromisoformat(r["window_end"]), r["count"], r["total"],
                  r["final"]) for r in rows)
    assert got == [("result", k, start, start + dt.timedelta(minutes=10), 3, 13.75, True)
                   for k in CARDS], rows
    dropped = [json.loads(m.value()) for m in read_all(bootstrap, app_run.topics["late"],
                                                      timeout=60)]
    assert [(d["k"], d["ts"], d["amount"]) for d in dropped] \
        == [("a", T0_MS + 3 * MINUTE_MS, 7.0)], dropped


def test_fraud_micro_batch_pipeline_on_the_clusters_alerts_exactly(
        clusters: Clusters, app_run: AppRun) -> None:
    """The fraud pipeline's micro-batch path, the code of one machine, over a generated
    run on the replicated cluster: exactly the injected incidents are alerted, each once,
    and the pipeline's topics are replicated as the cluster says."""
    assert app_run.job("fraud")["batches"] >= 3
    bootstrap = clusters.kafka.bootstrap_servers
    check_alerts(alerts_of(bootstrap), app_run.truth)
    for topic in ("transactions", "fraud-alerts"):
        assert {len(p.replicas) for p in clusters.kafka.partitions(topic).values()} == {3}


def _alerts_after(bootstrap: str, topic: str, since_ms: int) -> int:
    """How many committed alerts are on transactions that reached the broker after
    ``since_ms``."""
    return sum(a["ingest_ms"] > since_ms for a in alerts_of(bootstrap, topic))


def test_event_store_and_its_projections_across_a_leader_kill(
        clusters: Clusters, bank_log: BankLog, app_run: AppRun) -> None:
    """After the writers' run through the leader kill (``bank_log``): every aggregate's
    versions are contiguous from 1, each command applied once; the stale appends were
    refused both while the leader was down and after its return; and the read models the
    Spark application rebuilt from the log (balances, daily summary) equal a replay of the
    log folded in Python."""
    assert bank_log.stale == {"leader down": "refused", "after restart": "refused"}
    bootstrap = clusters.kafka.bootstrap_servers
    events = by_aggregate(log_events(bootstrap, bank_log.topic))
    assert sorted(events) == BANK_ACCOUNTS
    for name, history in events.items():
        assert [e.version for e in history] == list(range(1, len(history) + 1)), name
    ids = Counter(e.command_id for h in events.values() for e in h)
    assert max(ids.values()) == 1, [i for i, n in ids.items() if n > 1]
    assert not any(i.startswith("stale") for i in ids)
    writers = {i.split(":")[0] for i in ids if i.startswith("w")}
    assert writers == {i for i in bank_log.applied if i.startswith("w")}
    assert len(writers) == BANK_COMMANDS
    app_run.job("projections")
    replay = {name: fold(history) for name, history in events.items()}
    got = latest_by_key(bootstrap, f"{bank_log.topic}.balances", timeout=scaled(30))
    assert {k: (v["balance"], v["version"], v["owner"]) for k, v in got.items()} == \
        {k: (a.balance, a.version, f"owner {k}") for k, a in replay.items()}
    all_events = [e for h in events.values() for e in h]
    days = {dt.datetime.fromtimestamp(e.recorded_at / 1000, dt.UTC).strftime("%Y-%m-%d")
            for e in all_events}
    daily = latest_by_key(bootstrap, f"{bank_log.topic}.daily", timeout=scaled(30))
    assert set(daily) == days
    assert sum(d["opened"] for d in daily.values()) == len(BANK_ACCOUNTS)
    assert sum(d["deposited"] for d in daily.values()) == sum(
        e.data["amount"] for e in all_events if e.type == "MoneyDeposited")
    assert sum(d["withdrawn"] for d in daily.values()) == sum(
        e.data["amount"] for e in all_events if e.type == "MoneyWithdrawn")


def test_realtime_fraud_path_on_the_clusters_alerts_exactly_once_across_a_leader_kill(
        clusters: Clusters, tmp_path: Path) -> None:
    """The real-time path (Real-Time Mode, the JVM rule operator, the exactly-once JVM sink)
    as an application on the standalone master (one 4-core executor per worker: the
    query's 7 tasks run at once), its topics all led by one broker. Once alerts flow, that
    broker is killed with ``kill -9`` while transactions keep coming, and restarted once
    its partitions have moved. Alerting goes on (alerts on transactions that arrived after
    the kill), and the alerts read with read_committed are the injected incidents one for
    one: none missing, none twice. The query's pipeline metrics (served by the driver,
    lag asked of the cluster) showed an input rate while transactions flowed, and at the
    end a lag of 0 on each of the five source partitions, every record read and each
    dead letter counted once (the sink's transaction markers take offsets too)."""
    cluster = clusters.kafka
    victim = cluster.broker_ids[0]
    prefix = f"cluster-rt-{uuid.uuid4().hex[:8]}"
    names = topics(prefix)
    create_fraud_topics(cluster, names, victim)
    bootstrap = cluster.bootstrap_servers
    worker = SparkWorker("tests.cluster.realtime_worker",
                         [clusters.spark.master_url, bootstrap, str(tmp_path / "checkpoint"),
                          prefix], tmp_path, "realtime")
    config = fraud_config(23, RT_RATE, RT_DURATION_S)
    generator_topics = FraudTopics(transactions=names.transactions, profiles=names.profiles)
    truth_box: list[GroundTruth] = []

    def profiles_read() -> None:
        _wait_progress(worker, names.profiles, config.users)

    traffic = threading.Thread(target=lambda: truth_box.append(run(
        bootstrap, config, topics=generator_topics, realtime=True,
        before_stream=profiles_read)), daemon=True)
    try:
        worker.spawn()
        assert worker.wait_for("started", 240), worker.stderr_tail()
        traffic.start()
        deadline = time.monotonic() + scaled(180)
        while end_offsets(bootstrap, names.alerts) == 0:
            assert time.monotonic() < deadline and not worker.exited(), worker.stderr_tail()
            time.sleep(0.2)
        url = next(e.split(" ", 1)[1] for e in worker.events() if e.startswith("metrics "))
        flowing = _scrape(url)
        killed_ms = int(time.time() * 1000)
        cluster.kill(victim)
        for topic in (names.transactions, names.alerts):
            cluster.wait_for_leader(topic, 0, not_on=victim)
        cluster.start_broker(victim, wait=False)
        deadline = time.monotonic() + scaled(180)
        while _alerts_after(bootstrap, names.alerts, killed_ms) == 0:
            assert time.monotonic() < deadline and not worker.exited(), worker.stderr_tail()
            time.sleep(0.5)
        traffic.join(scaled(180))
        assert truth_box, "the generator did not finish"
        records = {t: end_offsets(bootstrap, t) for t in (names.transactions, names.profiles)}
        _wait_progress(worker, names.transactions, records[names.transactions])
        assert not any(e.startswith("failed") for e in worker.events()), worker.stderr_tail()
        # the metrics listener hears of that checkpoint's progress a moment after the query
        caught_up = _scrape(url)
        dead = ("headrace_pipeline_dead_letters_total", (QUERY, names.dead_letters))
        deadline = time.monotonic() + scaled(60)
        while any(_lag(caught_up).values()) or len(_lag(caught_up)) < 5 or \
                caught_up.get(dead) != truth_box[0].malformed_count:
            assert time.monotonic() < deadline, caught_up
            time.sleep(0.5)
            caught_up = _scrape(url)
    finally:
        worker.kill()
        traffic.join(scaled(60))
    check_patterns(truth_box[0])
    check_alerts(alerts_of(bootstrap, names.alerts), truth_box[0])
    assert len(read_all(bootstrap, names.dead_letters)) == truth_box[0].malformed_count
    # The pipeline metrics of the job on the cluster: an input rate while transactions
    # flowed; at the end every source partition's lag 0, every record read, and the dead
    # letters the exactly-once sink committed counted once each.
    assert flowing[("headrace_pipeline_input_rows_per_second", (QUERY,))] > 0, flowing
    assert _lag(caught_up) == {(names.transactions, str(p)): 0 for p in range(4)} | \
        {(names.profiles, "0"): 0}, caught_up
    assert caught_up[("headrace_pipeline_input_rows_total", (QUERY,))] == sum(records.values())
    assert caught_up[dead] == truth_box[0].malformed_count  # not the transaction markers
    cluster.wait_for_brokers()


def _lag(samples: dict[tuple[str, tuple[str, ...]], float]) -> dict[tuple[str, ...], float]:
    """The real-time query's source lag per (topic, partition) in scraped ``samples``."""
    return {labels[1:]: v for (name, labels), v in samples.items()
            if name == "headrace_pipeline_source_lag_records" and labels[0] == QUERY}


def _scrape(url: str) -> dict[tuple[str, tuple[str, ...]], float]:
    """The Prometheus samples at ``url``: (name, values of its labels ``query``, ``topic``,
    ``partition`` that it has, in that order) -> value."""
    with urllib.request.urlopen(url, timeout=scaled(30)) as r:
        text = r.read().decode()
    return {(s.name, tuple(s.labels[k] for k in ("query", "topic", "partition")
                           if k in s.labels)): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


RT_RATE, RT_DURATION_S = 100, 40  # 4,000 transactions over 40 s of arrivals


def _wait_progress(worker: SparkWorker, topic: str, at_least: int) -> None:
    """Until the real-time worker's latest checkpoint has read ``at_least`` records of
    ``topic`` (summed over its partitions)."""
    deadline = time.monotonic() + scaled(240)
    while True:
        progress = [e for e in worker.events() if e.startswith("progress ")]
        if progress and json.loads(progress[-1].split(" ", 1)[1]).get(topic, 0) >= at_least:
            return
        assert time.monotonic() < deadline and not worker.exited(), worker.stderr_tail()
        time.sleep(0.2)


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
