"""A million keys: ``windowed`` counts exactly what a batch query over the same log counts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from headrace.spark import read_events
from headrace.streaming import count, results, tumbling, windowed
from headrace.testing import EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic
from tests.streaming.harness import MINUTE, T0

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEYS = 1_000_000
REPEATS = 200_000  # events on keys that already had one, so some windows count 2 or more
SPAN_MS = 10 * MINUTE
DISORDER_MS = 5_000


def produce_events(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10_000, "compression.type": "lz4"})
    for v in values:
        while True:
            try:
                producer.produce(topic, value=v)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(scaled(60)) == 0


def test_tumbling_count_over_a_million_keys_equals_batch(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    keys = list(range(KEYS)) + [rng.randrange(KEYS) for _ in range(REPEATS)]
    rng.shuffle(keys)
    n = len(keys)
    # Event time advances through the log with up to 5 s of disorder, under the 1-minute
    # watermark delay: no event is late.
    values = [json.dumps({"k": f"k{k}", "ts": T0 + i * SPAN_MS // n
                          - rng.randrange(DISORDER_MS)}).encode()
              for i, k in enumerate(keys)]
    create_topic(broker.bootstrap_servers, topic_name, 1)
    produce_events(broker.bootstrap_servers, topic_name, values)
    del values

    def run() -> None:
        events = read_events(spark, topic_name, "k string, ts long", event_time="ts",
                             dead_letter_topic=topic_name + "-dlq",
                             kafka_bootstrap_servers=broker.bootstrap_servers,
                             startingOffsets="earliest", maxOffsetsPerTrigger="250000")
        out = windowed(events, keys=["k"], event_time="event_time",
                       window=tumbling("1 minute"), aggs=[count()], watermark="1 minute")
        q = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination(scaled(1800))
        assert q.exception() is None, q.exception()

    run()
    # A last event an hour later moves the watermark past every window.
    produce_events(broker.bootstrap_servers, topic_name,
                   [json.dumps({"k": "flush", "ts": T0 + 60 * MINUTE}).encode()])
    run()

    emitted = spark.read.parquet(str(tmp_path / "out"))
    assert emitted.where("kind != 'result'").count() == 0  # nothing late, nothing retracted
    # Both sides are cached: the comparisons below would otherwise read the parquet output
    # and parse the whole topic again (through the Python source) for each of them.
    windows = results(emitted).where("k != 'flush'").select(
        "k", "window_start", "window_end", "count", "final").cache()
    batch = (read_events(spark, topic_name, "k string, ts long", event_time="ts",
                         dead_letter_topic=topic_name + "-dlq", streaming=False,
                         kafka_bootstrap_servers=broker.bootstrap_servers)
             .where("k != 'flush'")
             .groupBy("k", F.window("event_time", "1 minute").alias("w"))
             .agg(F.count(F.lit(1)).alias("count"))
             .select("k", F.col("w.start").alias("window_start"),
                     F.col("w.end").alias("window_end"), "count")).cache()
    assert windows.where("final").count() == windows.count()  # each window once, final
    streamed = windows.drop("final")
    assert streamed.select("k").distinct().count() == KEYS
    assert streamed.count() == batch.count()
    assert streamed.exceptAll(batch).count() == 0
    assert batch.exceptAll(streamed).count() == 0
    assert batch.agg(F.sum("count")).first()[0] == n
    windows.unpersist()
    batch.unpersist()
