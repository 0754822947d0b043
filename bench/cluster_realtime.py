"""Part 3 of ``bench/cluster.py``: the real-time fraud path's latency through a leader kill
(see that script's docstring for the method)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.cluster.conftest import create_fraud_topics
from tests.cluster.realtime_worker import topics
from tests.pipelines.fraud_support import LATE_AFTER_S, check_alerts, end_offsets
from tests.spark.spark_workers.supervisor import SparkWorker

from headrace.cluster import KafkaCluster, SparkCluster
from headrace.pipelines.fraud.config import FraudConfig
from headrace.pipelines.fraud.generator import FraudTopics, run
from headrace.pipelines.fraud.truth import GroundTruth
from report import percentile

RECOVERED_MS = 200.0
INCIDENTS_PER_MIN = 15.0
"""Of each pattern: about 60 alerts a minute, a latency sample every second."""


def bench_config(rate: float, duration: float) -> FraudConfig:
    counts = {name: INCIDENTS_PER_MIN for name in ("velocity_bursts", "impossible_travel",
                                                   "amount_anomalies", "card_testing")}
    probe = FraudConfig(seed=29, rate=rate, duration_s=duration, **counts)
    return FraudConfig(seed=29, rate=rate, duration_s=duration, users=probe.required_users(),
                       late_after_s=LATE_AFTER_S, **counts)


class AlertClock(threading.Thread):
    """A read_committed consumer of the alert topic: (arrival ms, alert JSON) of each."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-rt",
                                  "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.consumer.subscribe([topic])
        self.seen: list[tuple[float, dict[str, Any]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.seen.append((time.time() * 1000, json.loads(msg.value())))
        self.consumer.close()


def _line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name}: 0 alerts"
    ordered = sorted(values)
    return (f"  {name}: {len(values)} alerts, p50 {percentile(ordered, 50):,.0f} ms, "
            f"p99 {percentile(ordered, 99):,.0f} ms, max {ordered[-1]:,.0f} ms")


def realtime_failover(cluster: KafkaCluster, rate: float, duration: float,
                      interval: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-rt-"))
    victim = cluster.broker_ids[0]
    prefix = "bench-rt"
    names = topics(prefix)
    create_fraud_topics(cluster, names, victim)
    bootstrap = cluster.bootstrap_servers
    config = bench_config(rate, duration)
    truth: list[GroundTruth] = []
    streaming = threading.Event()
    with SparkCluster(data_dir=work / "spark") as spark:
        worker = SparkWorker("tests.cluster.realtime_worker",
                             [spark.master_url, bootstrap, str(work / "checkpoint"), prefix,
                              interval], work, "realtime")
        clock = AlertClock(bootstrap, names.alerts)

        def profiles_read() -> None:
            while True:
                progress = [e for e in worker.events() if e.startswith("progress ")]
                if progress and json.loads(progress[-1].split(" ", 1)[1]).get(
                        names.profiles, 0) >= config.users:
                    break
                if worker.exited():
                    raise RuntimeError(worker.stderr_tail())
                time.sleep(0.2)
            streaming.set()

        traffic = threading.Thread(target=lambda: truth.append(run(
            bootstrap, config, topics=FraudTopics(transactions=names.transactions,
                                                  profiles=names.profiles),
            realtime=True, before_stream=profiles_read)), daemon=True)
        try:
            worker.spawn()
            if not worker.wait_for("started", 300):
                raise RuntimeError(worker.stderr_tail())
            clock.start()
            traffic.start()
            if not streaming.wait(300):
                raise RuntimeError("profiles not read: " + worker.stderr_tail())
            time.sleep(duration / 3)
            killed_ms = time.time() * 1000
            cluster.kill(victim)
            for topic in (names.transactions, names.alerts):
                cluster.wait_for_leader(topic, 0, not_on=victim)
            moved_ms = time.time() * 1000
            cluster.start_broker(victim)
            cluster.wait_for_isr()
            back_ms = time.time() * 1000
            traffic.join()
            want = end_offsets(bootstrap, names.transactions)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                progress = [e for e in worker.events() if e.startswith("progress ")]
                if progress and json.loads(progress[-1].split(" ", 1)[1]).get(
                        names.transactions, 0) >= want:
                    break
                time.sleep(0.5)
            time.sleep(2)
        finally:
            worker.kill()
            clock.stop.set()
            clock.join(10)
    shutil.rmtree(work, ignore_errors=True)
    alerts = [a for _, a in clock.seen]
    latency = [(a["ingest_ms"], at - a["ingest_ms"]) for at, a in clock.seen]
    before = [ms for t, ms in latency if t < killed_ms]
    during = [ms for t, ms in latency if killed_ms <= t < back_ms]
    after = [ms for t, ms in latency if t >= back_ms]
    since_kill = [(t, ms) for t, ms in sorted(latency) if t >= killed_ms]
    over = [t for t, ms in since_kill if ms >= RECOVERED_MS]
    twice = [i for i, n in Counter(a["txn_id"] for a in alerts).items() if n > 1]
    print(f"real-time path, leader of its 4 topics killed: {rate:g} transactions/s for "
          f"{duration:g} s, checkpoint interval {interval}; partitions moved "
          f"{(moved_ms - killed_ms) / 1000:.1f} s after the kill, broker back in the ISR "
          f"{(back_ms - killed_ms) / 1000:.1f} s after it")
    print(_line("before the kill", before))
    print(_line("during the failover (kill to back in the ISR)", during))
    print(_line("after", after))
    if not over:
        recovered = "throughout"
    elif over[-1] == since_kill[-1][0]:
        recovered = "not again by the end of the run"
    else:
        # the first alert after the last one over the line
        back = next(t for t, _ms in since_kill if t > over[-1])
        recovered = f"from {(back - killed_ms) / 1000:.1f} s after the kill on"
    worst = max((ms for _t, ms in since_kill), default=0.0)
    print(f"  worst after the kill: {worst:,.0f} ms; every alert under "
          f"{RECOVERED_MS:.0f} ms {recovered}")
    print(f"  {len(alerts)} alerts, {len(twice)} twice")
    check_alerts(alerts, truth[0])
    print("  exact: every injected incident alerted, none twice")
