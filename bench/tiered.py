"""Tiered storage: hot read vs cold read through the broker, and the copy to the store.

Usage::

    .venv/bin/python bench/tiered.py               # 100 MB of 1 KiB records
    .venv/bin/python bench/tiered.py --mb 20       # smoke run

One broker (S3 tiering to a SeaweedFS started here, ``weed`` from ``make setup``), one
topic of one partition, 16 MB segments:

1. produce ``--mb`` MB of 1 KiB records (not yet tiered);
2. hot read: a fresh librdkafka consumer reads them all from the broker's disk (page cache);
3. copy: turn on ``remote.storage.enable`` with ``local.retention.bytes=1`` and time it
   until every closed segment is in the store and gone locally (ListOffsets -4/-5), with
   the broker process's CPU seconds over that time;
4. cold read: a fresh consumer reads from offset 0, served from the object store through
   the broker's remote reader (chunk cache 64 MB, smaller than the data: every chunk is a
   GET);
5. with ``--spark`` (a local[2] SparkSession): a batch read of the whole topic,
   ``count(*), sum(length(value))``, three ways: hot (before step 3, through the broker),
   cold through the broker, and cold straight from the store (the source given the
   store's ``headrace.remote.storage.*`` settings: one task per remote segment, the hot
   tail through the broker). Each is run twice; the faster run is reported (the first
   run also warms the Python workers).

MB are 10^6 bytes of record values. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import EmbeddedBroker, SeaweedS3

sys.path.insert(0, str(Path(__file__).resolve().parent))

RECORD = 1024
SEGMENT = 16 * 1024 * 1024
TOPIC = "tiered-bench"


def produce(bootstrap: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * RECORD
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def read_all(bootstrap: str, end: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.max.bytes": 50_000_000})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    started = None
    seen = 0
    while True:
        msgs = consumer.consume(10_000, 1.0)
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= end:
                    consumer.close()
                    assert started is not None
                    return time.perf_counter() - started
                if m.error().code() != KafkaError._PARTITION_EOF:
                    print("  consumer:", m.error())
                continue
            if started is None:
                started = time.perf_counter()
            seen += 1


def offsets(bootstrap: str) -> dict[int, int]:
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        return {spec: int(next(iter(admin.list_partition_offsets(
            {KpTopicPartition(TOPIC, 0): spec}).values())).offset) for spec in (-4, -5, -1)}


def spark_read(spark: Any, bootstrap: str, count: int, store: dict[str, str]) -> float:
    """The faster of two batch reads of the topic (``count(*)``, ``sum(length(value))``)."""
    from pyspark.sql import functions as F

    runs = []
    for _ in range(2):
        reader = spark.read.format("headrace").option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", TOPIC)
        for k, v in store.items():
            reader = reader.option(k, v)
        started = time.perf_counter()
        row = reader.load().agg(F.count("*").alias("n"),
                                F.sum(F.length("value")).alias("b")).collect()[0]
        runs.append(time.perf_counter() - started)
        if row.n != count or row.b != count * RECORD:
            raise RuntimeError(f"read {row.n} rows / {row.b} bytes, expected {count}")
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--spark", action="store_true",
                        help="also time Spark batch reads: hot, cold through the broker, "
                             "cold straight from the store")
    args = parser.parse_args()
    count = args.mb * 1_000_000 // RECORD
    spark: Any = None
    if args.spark:
        from clients import spark_session

        spark = spark_session("bench-tiered", kafka_connector=False)
    spark_s: dict[str, float] = {}
    with SeaweedS3() as s3:
        broker = EmbeddedBroker(extra_args=[
            "--config", "remote.log.storage.system.enable=true",
            "--config", "headrace.remote.storage.kind=s3",
            "--config", f"headrace.remote.storage.s3.endpoint={s3.endpoint}",
            "--config", "headrace.remote.storage.s3.bucket=bench",
            "--config", "headrace.remote.storage.s3.access.key=any",
            "--config", "headrace.remote.storage.s3.secret.key=any",
            "--config", "remote.log.manager.task.interval.ms=200",
            "--log-retention-check-interval-ms", "200"])
        with broker:
            bootstrap = broker.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1, config={
                "segment.bytes": str(SEGMENT)})])[TOPIC].result(30)
            mb = count * RECORD / 1e6
            produce_s = produce(bootstrap, count)
            end = offsets(bootstrap)[-1]
            hot_s = read_all(bootstrap, end)
            if spark is not None:
                spark_s["hot"] = spark_read(spark, bootstrap, count, {})
            proc = psutil.Process(broker.pid)
            cpu0 = sum(proc.cpu_times()[:2])
            started = time.perf_counter()
            resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
                ConfigEntry("remote.storage.enable", "true",
                            incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("local.retention.bytes", "1",
                            incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource])[resource].result(30)
            while True:
                o = offsets(bootstrap)
                # every closed segment copied and deleted locally: only the active one left
                if o[-5] >= 0 and o[-4] == o[-5] + 1 and end - o[-4] <= SEGMENT // RECORD:
                    break
                time.sleep(0.05)
            copy_s = time.perf_counter() - started
            copy_cpu = sum(proc.cpu_times()[:2]) - cpu0
            tiered_mb = o[-4] * RECORD / 1e6
            cold_s = read_all(bootstrap, end)
            if spark is not None:
                spark_s["broker"] = spark_read(spark, bootstrap, count, {})
                spark_s["store"] = spark_read(spark, bootstrap, count, {
                    "headrace.remote.storage.kind": "s3",
                    "headrace.remote.storage.s3.endpoint": s3.endpoint,
                    "headrace.remote.storage.s3.bucket": "bench",
                    "headrace.remote.storage.s3.access.key": "any",
                    "headrace.remote.storage.s3.secret.key": "any"})
                spark.stop()
    print(f"\n{count:,} records of {RECORD} B ({mb:.0f} MB), one partition, "
          f"16 MB segments; produced in {produce_s:.1f} s\n")
    print("| what | seconds | MB/s | records/s |")
    print("|---|---:|---:|---:|")
    print(f"| hot read (local segments, through the broker) | {hot_s:.2f} | {mb / hot_s:.0f} "
          f"| {count / hot_s:,.0f} |")
    print(f"| cold read (S3 store, through the broker) | {cold_s:.2f} | {mb / cold_s:.0f} "
          f"| {count / cold_s:,.0f} |")
    print(f"| copy to the store ({tiered_mb:.0f} MB of closed segments, then deleted "
          f"locally) | {copy_s:.2f} | {tiered_mb / copy_s:.0f} | - |")
    for key, what in (("hot", "Spark batch read, hot (local segments, through the broker)"),
                      ("broker", "Spark batch read, cold through the broker"),
                      ("store", "Spark batch read, cold straight from the store")):
        if key in spark_s:
            t = spark_s[key]
            print(f"| {what} | {t:.2f} | {mb / t:.0f} | {count / t:,.0f} |")
    print(f"\nbroker CPU while copying: {copy_cpu:.2f} s, "
          f"{copy_cpu / tiered_mb * 1000:.1f} ms per MB copied")


if __name__ == "__main__":
    main()
