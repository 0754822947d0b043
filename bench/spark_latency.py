"""Latency of a Spark pipeline through ``format("headrace")``: micro-batch durations and
produce-to-visible time, per sink delivery mode.

Usage::

    .venv/bin/python bench/spark_latency.py                   # 5 records/s for 30 s per mode
    .venv/bin/python bench/spark_latency.py --rate 2 --seconds 60 --brokers headrace,tansu
    .venv/bin/python bench/spark_latency.py --write-md        # also refresh BENCHMARKS.md

Per broker (a fresh one) and delivery mode: a streaming query with nothing in it but the
connector (``readStream.format("headrace")`` -> ``select(key, value)`` ->
``writeStream.format("headrace")``, ``Trigger.ProcessingTime(0)``: a new micro-batch as
soon as the last one ends and there is data) runs in a local SparkSession. A producer
thread sends single records at ``--rate`` per second (linger.ms=0), each carrying its
``time.time()`` at ``produce()``; a read_committed consumer thread on the output topic
(fetch.wait.max.ms=5) takes the time each one becomes visible. Reported:

- micro-batch duration (``durationMs.triggerExecution`` of every progress event with
  rows, and its ``addBatch`` part: the Spark job that reads and writes), p50 / p99: the
  floor a micro-batch costs with next to no data in it;
- end-to-end latency (visible to the read_committed consumer minus produce time), p50 /
  p99 / max, over the records after the first ``--warmup`` seconds.

Percentiles are nearest-rank. The clock is the same host's ``time.time()``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from brokers import BrokerSpec, add_brokers_option, create_topic, running
from clients import spark_session
from report import arguments, fmt_float, fmt_int, publish, receive, show_environment, table
from report import percentile as sorted_percentile

MODES = ("exactly-once", "at-least-once")
SPEC_CHOICES = (BrokerSpec("headrace"), BrokerSpec("tansu"))
PARTITIONS = 1


def percentile(values: list[float], q: float) -> float:
    """Percentile ``q`` (0..100) of a non-empty, unsorted list."""
    return sorted_percentile(sorted(values), q)


@dataclass
class Run:
    spec: BrokerSpec
    delivery: str
    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    trigger_ms: list[float] = field(default_factory=list)
    add_batch_ms: list[float] = field(default_factory=list)
    rows_per_batch: list[int] = field(default_factory=list)
    lost: int = 0
    error: str | None = None


def produce_paced(bootstrap: str, topic: str, rate: float, seconds: float,
                  sent: list[float]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                         "log_level": 3})
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.time()
        producer.produce(topic, f"{i} {now:.6f}".encode(), key=b"%d" % i)
        producer.poll(0)
        sent.append(now)
    if producer.flush(30):
        raise RuntimeError("records left unacknowledged")


def consume_visible(bootstrap: str, topic: str, expected: int, stop: threading.Event,
                    seen: dict[int, float]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-latency",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 5, "fetch.min.bytes": 1, "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while len(seen) < expected and not stop.is_set():
            for m in receive(consumer, 100, 0.05):
                now = time.time()
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}: {m.error()}")
                    continue
                i, produced = m.value().split(b" ")
                seen.setdefault(int(i), now - float(produced))
    finally:
        consumer.close()


def run_one(spark: Any, bs: str, spec: BrokerSpec, delivery: str, work: Path, n: int,
            args: argparse.Namespace) -> Run:
    run = Run(spec, delivery)
    source, sink = f"lat-in-{n}", f"lat-out-{n}"
    create_topic(bs, source, PARTITIONS)
    create_topic(bs, sink, PARTITIONS)
    query = (spark.readStream.format("headrace").option("kafka.bootstrap.servers", bs)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .select("key", "value")
             .writeStream.format("headrace").option("kafka.bootstrap.servers", bs)
             .option("topic", sink).option("delivery", delivery)
             .option("checkpointLocation", str(work / f"checkpoint-{spec.key}-{n}"))
             .trigger(processingTime="0 seconds").start())
    sent: list[float] = []
    seen: dict[int, float] = {}
    expected = int(args.rate * args.seconds)
    stop = threading.Event()
    reader = threading.Thread(target=consume_visible, args=(bs, sink, expected, stop, seen))
    reader.start()
    try:
        produce_paced(bs, source, args.rate, args.seconds, sent)
        deadline = time.monotonic() + 60
        while len(seen) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        reader.join()
        progress = query.recentProgress
        query.stop()
    warm_end = sent[0] + args.warmup if sent else 0.0
    run.sent = expected
    run.lost = expected - len(seen)
    run.latencies_ms = [seen[i] * 1000 for i in sorted(seen) if sent[i] >= warm_end]
    for p in progress:
        if p["numInputRows"] > 0 and p["batchId"] > 0:
            run.trigger_ms.append(p["durationMs"]["triggerExecution"])
            run.add_batch_ms.append(p["durationMs"].get("addBatch", 0))
            run.rows_per_batch.append(p["numInputRows"])
    return run


def warm_up(spark: Any, bs: str, spec: BrokerSpec, work: Path) -> None:
    """One short query per sink mode first: the first streaming query of a session and
    the first tasks of each kind pay seconds of start-up that no later batch does."""
    create_topic(bs, "warm-in", PARTITIONS)
    producer = Producer({"bootstrap.servers": bs, "log_level": 3})
    for i in range(10):
        producer.produce("warm-in", b"%d 0" % i)
    producer.flush(30)
    for delivery in MODES:
        create_topic(bs, f"warm-out-{delivery}", PARTITIONS)
        query = (spark.readStream.format("headrace").option("kafka.bootstrap.servers", bs)
                 .option("subscribe", "warm-in").option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "3").load()
                 .select("key", "value")
                 .writeStream.format("headrace").option("kafka.bootstrap.servers", bs)
                 .option("topic", f"warm-out-{delivery}").option("delivery", delivery)
                 .option("checkpointLocation", str(work / f"warm-{spec.key}-{delivery}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()


def run_broker(spark: Any, spec: BrokerSpec, work: Path, args: argparse.Namespace
               ) -> list[Run]:
    runs = []
    try:
        with running(spec) as broker:
            warm_up(spark, broker.bootstrap_servers, spec, work)
            for n, delivery in enumerate(MODES):
                print(f"[{spec.name}] {delivery}: {args.rate:g} records/s for "
                      f"{args.seconds:g} s ...", flush=True)
                runs.append(run_one(spark, broker.bootstrap_servers, spec, delivery, work, n,
                                    args))
    except Exception as e:  # one broker failing must not lose the other's figures
        traceback.print_exc()
        runs.append(Run(spec, "?", error=f"{type(e).__name__}: {e}"))
    return runs


def render(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        if r.error is not None or not r.latencies_ms or not r.trigger_ms:
            rows.append([r.spec.name, r.delivery, "failed", *["-"] * 8])
            continue
        rows.append([
            r.spec.name, r.delivery, str(len(r.trigger_ms)),
            fmt_float(sum(r.rows_per_batch) / len(r.rows_per_batch), 1),
            fmt_int(percentile(r.trigger_ms, 50)), fmt_int(percentile(r.trigger_ms, 99)),
            fmt_int(percentile(r.add_batch_ms, 50)),
            fmt_int(percentile(r.latencies_ms, 50)), fmt_int(percentile(r.latencies_ms, 99)),
            fmt_int(max(r.latencies_ms)), str(r.lost)])
    return table(["broker", "sink", "batches", "rows/batch", "batch p50 ms", "batch p99 ms",
                  "addBatch p50 ms", "e2e p50 ms", "e2e p99 ms", "e2e max ms", "lost"], rows)


def notes(args: argparse.Namespace) -> list[str]:
    return [
        f"{args.rate:g} single records/s for {args.seconds:g} s per row, one partition in and "
        "out; producer linger.ms=0, acks=all; fresh broker per broker row, fresh topics and "
        "checkpoint per sink mode",
        "query: readStream.format(\"headrace\") -> select(key, value) -> "
        "writeStream.format(\"headrace\"), Trigger.ProcessingTime(0), SparkSession local[2], "
        "2 cores shared with the broker and the client threads; per broker, a short "
        "query per sink mode first as warm-up",
        "batch = durationMs.triggerExecution of progress events with rows (batch 0 left "
        "out); addBatch = its Spark job (read tasks + sink tasks)",
        f"e2e = read_committed consumer (fetch.wait.max.ms=5) receive time - produce time, "
        f"records of the first {args.warmup:g} s left out; lost = sent - seen within 60 s "
        "after the last send",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "spark_latency")
    ap.add_argument("--rate", type=float, default=5.0, help="records per second")
    ap.add_argument("--seconds", type=float, default=30.0, help="per delivery mode")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds not measured")
    add_brokers_option(ap, SPEC_CHOICES, "headrace")
    args = ap.parse_args(argv)
    specs: list[BrokerSpec] = args.brokers

    env = show_environment()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-latency-"))
    try:
        spark = spark_session("bench-spark-latency",
                              {"spark.sql.streaming.numRecentProgressUpdates": "100000"})
        runs = [r for spec in specs for r in run_broker(spark, spec, work, args)]
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    publish("spark_latency", "Spark pipeline latency", env, render(runs), notes(args),
            args.write_md, args.md_file)
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
