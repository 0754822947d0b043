"""Jobs of ``format("headrace")`` on a Spark master given on the command line (the
scale-out test runs it on ``local-cluster[2,1,1024]``: two executor JVMs of their own).

Run from the repository root::

    python -m tests.spark.spark_workers.scaleout --master 'local-cluster[2,1,1024]' \\
        --plan plan.json --result result.json

``plan.json`` is a list of jobs, run in order in one SparkSession (it takes ~20 s to
start a local cluster, so one session serves every broker under test):

- ``{"name": N, "kind": "batch_read", "bootstrap": B, "topic": T}``: reads ``T`` with
  ``spark.read.format("headrace")``; the result has every row as
  ``[partition, offset, key hex, value hex]`` and the executor JVMs that read them;
- ``{"name": N, "kind": "batch_read", "format": "kafka", ...}``: the same read with
  Spark's own ``format("kafka")`` connector (its jars reach the executors through
  ``spark.jars``);
- ``{"name": N, "kind": "stream_copy", "bootstrap": B, "topic": T, "output": O,
  "delivery": D, "checkpoint": C}``: a streaming query ``T`` -> ``O`` (values upper-cased)
  through the sink with ``delivery`` D, ``Trigger.AvailableNow``, at most
  ``maxOffsetsPerTrigger`` (job key ``max_offsets``, default 1000) per micro-batch; the
  result has the number of micro-batches and rows;
- ``{"name": N, "kind": "kafka_windows", "bootstrap": B, "topic": T, "results": R,
  "late": L, "checkpoint": C, "steps": [[[key, value JSON], ...], ...]}``: the event-time
  toolkit between Spark's own ``format("kafka")`` source and sink: JSON events
  (``k string, ts long`` in ms, ``amount double``) windowed per ``k`` in 10-minute tumbling
  windows (count and sum of ``amount``, watermark at the maximum event time, no allowed
  lateness), results to ``R`` and late events to ``L`` (``to_topics``). Each step's events
  are produced to ``T`` (acks=all), then the query runs on checkpoint ``C`` under
  ``Trigger.AvailableNow``; the result has the micro-batches of each step;
- ``{"name": N, "kind": "fraud", "bootstrap": B, "checkpoint": C, "max_offsets": M}``: the
  fraud pipeline's micro-batch path (``headrace.pipelines.fraud.pipeline``) over its
  topics on ``B`` under ``Trigger.AvailableNow``, ``M`` transactions per micro-batch; the
  result has the number of micro-batches;
- ``{"name": N, "kind": "bank_projections", "bootstrap": B, "topic": T, "checkpoint": C}``:
  the bank's read models (``headrace.pipelines.bank.projections``: balances and the daily
  summary) rebuilt from event topic ``T`` into ``T.balances`` and ``T.daily``
  (``write_projection(rebuild=True)``); the result has the micro-batches of each.

Each job's result is ``{"ok": true, "seconds": S, ...}`` or ``{"ok": false, "error":
traceback}``; ``result.json`` is rewritten after every job. Progress lines on stdout
(``common.say``): ``session``, ``job <name>``, ``ok|failed <name>``, ``end``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from headrace.testing import scaled
from tests.spark.spark_workers.common import build_session, say

POLL_TIMEOUT_MS = str(round(scaled(20_000)))  # a fetch must answer within it
STREAM_TIMEOUT_S = scaled(120.0)


def executor_jvm(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Tags each row with the pid of the JVM whose Python worker read it (the worker's
    parent is the PySpark daemon, whose parent is the executor JVM)."""
    import psutil

    jvm = psutil.Process(os.getppid()).ppid()
    for batch in batches:
        yield batch.append_column("jvm", pa.repeat(pa.scalar(jvm, pa.int32()),
                                                   batch.num_rows))


def batch_read(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    df = (spark.read.format(job.get("format", "headrace"))
          .option("kafka.bootstrap.servers", job["bootstrap"])
          .option("subscribe", job["topic"])
          .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS)
          .load()
          .select("partition", "offset", "key", "value"))
    tagged = df.mapInArrow(executor_jvm, "partition int, offset long, key binary, "
                                         "value binary, jvm int")
    rows = tagged.collect()
    return {"rows": [[r.partition, r.offset, r.key.hex() if r.key is not None else None,
                      r.value.hex()] for r in rows],
            "jvms": sorted({r.jvm for r in rows})}


def stream_copy(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    query = (spark.readStream.format("headrace")
             .option("kafka.bootstrap.servers", job["bootstrap"])
             .option("subscribe", job["topic"])
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(job.get("max_offsets", 1000)))
             .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS)
             .load()
             .selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("headrace")
             .option("kafka.bootstrap.servers", job["bootstrap"])
             .option("topic", job["output"])
             .option("delivery", job["delivery"])
             .option("checkpointLocation", job["checkpoint"])
             .trigger(availableNow=True)
             .start())
    if not query.awaitTermination(STREAM_TIMEOUT_S):
        query.stop()
        raise TimeoutError(f"the query did not finish within {STREAM_TIMEOUT_S:g} s; last "
                           f"progress: {query.lastProgress}")
    progress = query.recentProgress
    return {"batches": len(progress), "rows": sum(p["numInputRows"] for p in progress)}


def kafka_windows(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer
    from pyspark.sql import functions as F

    from headrace.streaming import configure, count, sum_of, to_topics, tumbling, windowed

    configure(spark)
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", job["bootstrap"])
              .option("subscribe", job["topic"])
              .option("startingOffsets", "earliest")
              .load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "k string, ts long, amount double").alias("e"))
              .select("e.*", F.timestamp_millis("e.ts").alias("event_time")))
    out = windowed(events, keys=["k"], event_time="event_time", window=tumbling("10 minutes"),
                   aggs=[count(), sum_of("amount", "total")], watermark=0)
    producer = Producer({"bootstrap.servers": job["bootstrap"], "acks": "all"})
    batches = []
    for step in job["steps"]:
        for key, value in step:
            producer.produce(job["topic"], value.encode(), key.encode())
        if producer.flush(scaled(60)):
            raise TimeoutError("the step's events were not acknowledged")
        query = (to_topics(out, ["k"], job["results"], job["late"]).writeStream
                 .format("kafka")
                 .option("kafka.bootstrap.servers", job["bootstrap"])
                 .option("checkpointLocation", job["checkpoint"])
                 .trigger(availableNow=True)
                 .start())
        if not query.awaitTermination(STREAM_TIMEOUT_S):
            query.stop()
            raise TimeoutError(f"the query did not finish within {STREAM_TIMEOUT_S:g} s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches.append(len(query.recentProgress))
    return {"batches": batches}


def fraud(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    from headrace.pipelines.fraud.pipeline import PipelineConfig, start
    from headrace.streaming import configure

    configure(spark)
    query = start(spark, PipelineConfig(job["bootstrap"], job["checkpoint"],
                                        max_offsets_per_trigger=job["max_offsets"],
                                        available_now=True))
    if not query.awaitTermination(scaled(400)):
        query.stop()
        raise TimeoutError(f"the pipeline did not finish; last progress: {query.lastProgress}")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return {"batches": len(query.recentProgress)}


def bank_projections(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    from headrace.eventsourcing.projection import read_event_log, write_projection
    from headrace.pipelines.bank.projections import balances, daily_summary

    events = read_event_log(spark, job["bootstrap"], job["topic"])
    batches = []
    for name, rows in (("balances", balances(events)), ("daily", daily_summary(events))):
        query = write_projection(rows, job["bootstrap"], f"{job['topic']}.{name}",
                                 f"{job['checkpoint']}/{name}", rebuild=True)
        if not query.awaitTermination(STREAM_TIMEOUT_S):
            query.stop()
            raise TimeoutError(f"the projection did not finish within {STREAM_TIMEOUT_S:g} s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches.append(len(query.recentProgress))
    return {"batches": batches}


JOBS = {"batch_read": batch_read, "stream_copy": stream_copy, "kafka_windows": kafka_windows,
        "fraud": fraud, "bank_projections": bank_projections}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--plan", required=True, type=Path)
    ap.add_argument("--result", required=True, type=Path)
    args = ap.parse_args(argv)
    plan: list[dict[str, Any]] = json.loads(args.plan.read_text())

    t0 = time.monotonic()
    spark = build_session(args.master, "headrace-scaleout", kafka_connector=True)
    results: dict[str, Any] = {"_session": {"ok": True, "seconds": time.monotonic() - t0,
                                            "master": spark.sparkContext.master,
                                            "driver_jvm": _driver_jvm(spark)}}
    say("session")
    for job in plan:
        say(f"job {job['name']}")
        t = time.monotonic()
        try:
            out = {"ok": True, **JOBS[job["kind"]](spark, job)}
            say(f"ok {job['name']}")
        except Exception:
            out = {"ok": False, "error": traceback.format_exc()}
            say(f"failed {job['name']}")
        out["seconds"] = round(time.monotonic() - t, 2)
        results[job["name"]] = out
        args.result.write_text(json.dumps(results, indent=1))
    say("end")
    spark.stop()
    return 0


def _driver_jvm(spark: SparkSession) -> int:
    """The pid of the driver's JVM (the py4j gateway process)."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    return int(gateway.jvm.ProcessHandle.current().pid())


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
