"""Failover and replication cost on a local Apache Kafka cluster (``headrace.cluster``:
one KRaft controller, three brokers, RF 3, ``min.insync.replicas=2``).

Usage::

    .venv/bin/python bench/cluster.py                  # every part
    .venv/bin/python bench/cluster.py --records 100000 --runs 3 --parts throughput,failover
    .venv/bin/python bench/cluster.py --parts realtime --rate 100 --duration 60

1. **Throughput, RF 3 against RF 1.** One librdkafka producer (acks=all, linger.ms=5,
   batch.size 1 MB, no compression, idempotent) writes ``--records`` records of 100 B to
   a 3-partition topic, timed from the first ``produce()`` to the end of ``flush()``;
   runs alternate between a topic with replication factor 3 and one with 1, on the same
   cluster. Median of ``--runs``.
2. **Failover.** A producer sends one record every 2 ms (acks=all, idempotent) to a
   1-partition RF 3 topic led by broker 1; 5 s in, broker 1 is killed with SIGKILL. Each
   record's latency is its acknowledgement time minus its ``produce()`` time. Reported:
   latency before the kill (p50, p99), the worst latency of a record sent during the
   failover, the time from the kill until the first record *sent after it* is
   acknowledged (time to recover), and the time from restarting the broker until it is
   back in the ISR.

3. **The real-time fraud path's failover.** A Spark standalone cluster (``SparkCluster``:
   two workers offering 4 cores and 1 GiB each) beside the Kafka cluster; the fraud
   pipeline's real-time path (Real-Time Mode, the JVM rule operator, the exactly-once JVM
   sink; ``tests.cluster.realtime_worker``, checkpoint interval ``--rt-interval``) runs as
   an application on the master, its four topics all led by broker 1. The generator sends
   ``--rate`` transactions/s for ``--duration`` s; a third of the way in, broker 1 is
   killed with SIGKILL, and restarted once its partitions have moved. A read_committed
   consumer times every alert as it arrives: an alert's latency is that moment minus its
   transaction record's Kafka timestamp (record to readable alert, the Spark and sink part
   of the detection latency). Reported: latency before the kill (p50, p99, max), during
   the failover (transactions from the kill until the restarted broker is back in the
   ISR) and after it, the worst latency after the kill, the time from the kill until
   latency stays under 200 ms (the last alert over it), and the exact check: alerts equal
   to the injected incidents, none twice.

The brokers run with C2 (``fast_jvm=False``) and the cluster's 500 ms heartbeat and 4 s
``broker.session.timeout.ms``, which bounds how soon a dead leader is noticed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.cluster import KafkaCluster

VALUE = b"x" * 100


def create(cluster: KafkaCluster, name: str, partitions: int, rf: int,
           leader: int | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    if leader is None:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=rf)
    else:
        order = [leader, *[b for b in cluster.broker_ids if b != leader]][:rf]
        topic = NewTopic(name, num_partitions=partitions, replica_assignment=[order] * partitions)
    admin.create_topics([topic])[name].result(60)
    cluster.wait_for_isr([name])


def produce_timed(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 1_000_000, "enable.idempotence": True,
                         "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("records left unacknowledged")
    return time.perf_counter() - start


def throughput(cluster: KafkaCluster, records: int, runs: int) -> None:
    create(cluster, "bench-rf3", 3, 3)
    create(cluster, "bench-rf1", 3, 1)
    produce_timed(cluster.bootstrap_servers, "bench-rf3", records // 10)  # warm up
    produce_timed(cluster.bootstrap_servers, "bench-rf1", records // 10)
    seconds: dict[int, list[float]] = {3: [], 1: []}
    for _ in range(runs):
        for rf in (3, 1):
            seconds[rf].append(produce_timed(cluster.bootstrap_servers, f"bench-rf{rf}",
                                             records))
    for rf in (3, 1):
        median = statistics.median(seconds[rf])
        print(f"RF {rf}, acks=all: {records / median:,.0f} records/s, "
              f"{records * len(VALUE) / median / 1e6:.1f} MB/s (median of {runs}; runs "
              + ", ".join(f"{s:.2f}" for s in seconds[rf]) + " s)")


def failover(cluster: KafkaCluster) -> None:
    victim = cluster.broker_ids[0]
    create(cluster, "bench-failover", 1, 3, leader=victim)
    sent: dict[int, float] = {}
    acked: dict[int, float] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            with lock:
                acked[int(msg.key())] = time.monotonic()

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 0, "enable.idempotence": True,
                         "on_delivery": on_delivery})

    def send() -> None:
        n = 0
        while not stop.is_set():
            sent[n] = time.monotonic()
            producer.produce("bench-failover", VALUE, key=str(n).encode())
            producer.poll(0)
            n += 1
            time.sleep(0.002)

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(5)
    killed = time.monotonic()
    cluster.kill(victim)
    new_leader = cluster.wait_for_leader("bench-failover", not_on=victim)
    time.sleep(3)
    restarted = time.monotonic()
    cluster.start_broker(victim)
    cluster.wait_for_isr(["bench-failover"])
    back_in_isr = time.monotonic()
    time.sleep(2)
    stop.set()
    sender.join()
    if producer.flush(60):
        raise RuntimeError("records left unacknowledged")
    before = sorted((acked[n] - t) * 1000 for n, t in sent.items() if t < killed - 0.5)
    during = [(acked[n] - t) * 1000 for n, t in sent.items() if killed <= t < restarted]
    first_after = min(acked[n] for n, t in sent.items() if t >= killed)
    lost = len(sent) - len(acked)
    print(f"failover: new leader {new_leader}; {len(sent)} records, {lost} unacknowledged")
    print(f"  latency before the kill: p50 {before[len(before) // 2]:.1f} ms, "
          f"p99 {before[int(len(before) * 0.99)]:.1f} ms")
    print(f"  worst latency of a record sent during the failover: {max(during):.0f} ms")
    print(f"  time to recover (kill -> first ack of a record sent after it): "
          f"{(first_after - killed) * 1000:.0f} ms")
    print(f"  restarted broker back in the ISR after {back_in_isr - restarted:.1f} s "
          f"(JVM start included)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default="throughput,failover,realtime")
    ap.add_argument("--rate", type=float, default=100.0, help="realtime: transactions/s")
    ap.add_argument("--duration", type=float, default=60.0, help="realtime: seconds")
    ap.add_argument("--rt-interval", default="30 seconds",
                    help="realtime: Real-Time Mode's checkpoint interval")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at start "
          f"{load} (1 / 5 / 15 min)")
    with KafkaCluster(fast_jvm=False, heap="512m") as cluster:
        print(f"cluster: {cluster.bootstrap_servers}")
        if "throughput" in parts:
            throughput(cluster, args.records, args.runs)
        if "failover" in parts:
            failover(cluster)
        if "realtime" in parts:
            from cluster_realtime import realtime_failover

            realtime_failover(cluster, args.rate, args.duration, args.rt_interval)


if __name__ == "__main__":
    main()
