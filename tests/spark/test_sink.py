"""format("headrace") as a sink: columns, routing, both delivery modes, and the exactly-once
protocol skipping a micro-batch Spark replays after a restart.

At-least-once (``delivery=at-least-once``) is documented as such: a task that runs again
writes its rows again. The kill -9 tests of exactly-once live in test_exactly_once_crash.py.
Writes with both delivery modes and the replayed-batch protocol also run against Apache
Kafka (``any_broker``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, forget_last_commit, produce, read_all

pytestmark = pytest.mark.spark

Broker = EmbeddedBroker | ApacheKafka


def sink(df: DataFrame, broker: Broker, **options: str) -> None:
    writer = df.write.format("headrace").option("kafka.bootstrap.servers",
                                                broker.bootstrap_servers)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.mode("append").save()


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_batch_write_keys_values_headers_partitions(spark: SparkSession, any_broker: Broker,
                                                    topic_name: str, delivery: str) -> None:
    broker = any_broker
    create_topic(broker.bootstrap_servers, topic_name, 4)
    df = spark.createDataFrame(
        [(f"k{i}", f"value-{i}".encode(), i % 4, [("src", b"test"), ("i", str(i).encode())])
         for i in range(200)],
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>")
    sink(df, broker, topic=topic_name, delivery=delivery)
    got = read_all(broker.bootstrap_servers, topic_name)
    assert sorted((m.key(), m.value(), m.partition(), tuple(m.headers())) for m in got) == sorted(
        (f"k{i}".encode(), f"value-{i}".encode(), i % 4, (("src", b"test"), ("i", str(i).encode())))
        for i in range(200))


def test_topic_column_routes_rows(spark: SparkSession, broker: EmbeddedBroker,
                                  topic_name: str) -> None:
    a, b = topic_name + "-a", topic_name + "-b"
    create_topic(broker.bootstrap_servers, a)
    create_topic(broker.bootstrap_servers, b)
    df = spark.createDataFrame([(a if i % 3 else b, f"v{i}") for i in range(30)],
                               "topic string, value string")
    sink(df, broker)
    assert sorted(m.value() for m in read_all(broker.bootstrap_servers, a)) == sorted(
        f"v{i}".encode() for i in range(30) if i % 3)
    assert len(read_all(broker.bootstrap_servers, b)) == 10


@pytest.mark.parametrize(("schema", "options", "message"), [
    ("key string", {"topic": "t"}, "needs a 'value' column"),
    ("value string", {}, "option 'topic' or a 'topic' column"),
    ("value int", {"topic": "t"}, "must be string or binary"),
    ("value string", {"topic": "t", "delivery": "twice"}, "exactly-once or at-least-once"),
])
def test_bad_sink_input_fails_clearly(spark: SparkSession, broker: EmbeddedBroker,
                                      schema: str, options: dict[str, str], message: str) -> None:
    df = spark.createDataFrame([], schema)
    with pytest.raises(Exception, match=message):
        sink(df, broker, **options)


def test_batch_write_with_a_write_id_is_skipped_when_repeated(
        spark: SparkSession, any_broker: Broker, topic_name: str) -> None:
    """What ``foreachBatch`` needs: the same (writeId, writeSequence) writes once."""
    create_topic(any_broker.bootstrap_servers, topic_name, 2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(50)], "key string, value string")
    for sequence in (0, 0, 1, 1, 0):
        sink(df.repartition(3), any_broker, topic=topic_name, writeId=f"w-{topic_name}",
             writeSequence=str(sequence))
    assert len(read_all(any_broker.bootstrap_servers, topic_name)) == 100
    with pytest.raises(Exception, match="needs 'writeId'"):
        sink(df, any_broker, topic=topic_name, writeSequence="3")
    with pytest.raises(Exception, match="must be an integer"):
        sink(df, any_broker, topic=topic_name, writeId="w", writeSequence="x")


def _stream_copy(spark: SparkSession, broker: Broker, source_topic: str, out: str,
                 checkpoint: Path, delivery: str = "exactly-once") -> None:
    q = (spark.readStream.format("headrace")
         .option("kafka.bootstrap.servers", broker.bootstrap_servers)
         .option("subscribe", source_topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "40").load()
         .selectExpr("key", "concat(value, '!') as value")
         .writeStream.format("headrace")
         .option("kafka.bootstrap.servers", broker.bootstrap_servers)
         .option("topic", out).option("delivery", delivery)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(scaled(120))
    assert q.exception() is None, q.exception()


@pytest.mark.parametrize(("delivery", "duplicates"), [("exactly-once", 0),
                                                     ("at-least-once", 40)])
def test_replayed_micro_batch(spark: SparkSession, any_broker: Broker, topic_name: str,
                              tmp_path: Path, delivery: str, duplicates: int) -> None:
    broker = any_broker
    src, out = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap_servers, src, 2)
    create_topic(broker.bootstrap_servers, out, 3)
    produce(broker.bootstrap_servers, src, [(f"k{i}".encode(), f"v{i}".encode())
                                            for i in range(200)])
    _stream_copy(spark, broker, src, out, tmp_path / "cp", delivery)
    assert len(read_all(broker.bootstrap_servers, out)) == 200
    forget_last_commit(tmp_path / "cp")
    _stream_copy(spark, broker, src, out, tmp_path / "cp", delivery)
    values: list[Any] = [m.value() for m in read_all(broker.bootstrap_servers, out)]
    assert len(values) == 200 + duplicates
    assert set(values) == {f"v{i}!".encode() for i in range(200)}


def test_restart_after_lost_checkpoint_offsets_is_new_output(
        spark: SparkSession, broker: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """A new checkpoint is a new query (new id): it writes again, as Spark's contract says."""
    src, out = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap_servers, src)
    create_topic(broker.bootstrap_servers, out)
    produce(broker.bootstrap_servers, src, [(None, b"x")] * 10)
    _stream_copy(spark, broker, src, out, tmp_path / "cp")
    shutil.rmtree(tmp_path / "cp")
    _stream_copy(spark, broker, src, out, tmp_path / "cp")
    assert len(read_all(broker.bootstrap_servers, out)) == 20


def test_a_zombie_run_of_a_task_is_fenced(spark: SparkSession, broker: EmbeddedBroker,
                                          topic_name: str, tmp_path: Path) -> None:
    """A run of a task that is still alive elsewhere (here: a producer with the task's
    transactional id, which leaves a transaction open) is fenced by the next batch's run
    of that task: that batch writes each row once, and the zombie's record never becomes
    visible. The rows go to both source partitions explicitly, so every batch runs both
    tasks: a task that does not run again leaves its zombie's transaction to the
    transaction timeout, and the output partition it wrote to unreadable until then (with
    null keys, librdkafka put all 100 rows in one partition in a loaded run)."""
    import json

    from confluent_kafka import Producer

    src, out = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap_servers, src, 2)
    create_topic(broker.bootstrap_servers, out, 2)
    produce(broker.bootstrap_servers, src, [(None, f"a{i}".encode(), i % 2) for i in range(100)])
    _stream_copy(spark, broker, src, out, tmp_path / "cp")
    query_id = json.loads((tmp_path / "cp" / "metadata").read_text())["id"]
    intruders = []
    for partition in range(2):
        p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                      "transactional.id": f"headrace-sink-{query_id}-{partition}"})
        p.init_transactions(scaled(30))
        p.begin_transaction()
        p.produce(out, b"intruder", partition=partition)
        assert p.flush(scaled(10)) == 0
        intruders.append(p)  # left open: the sink's next producer must abort it
    produce(broker.bootstrap_servers, src, [(None, f"b{i}".encode(), i % 2) for i in range(100)])
    _stream_copy(spark, broker, src, out, tmp_path / "cp")
    values = sorted(m.value() for m in read_all(broker.bootstrap_servers, out))
    assert values == sorted([f"a{i}!".encode() for i in range(100)]
                            + [f"b{i}!".encode() for i in range(100)])


def _create_topics_requests(metrics_url: str) -> float:
    import urllib.request
    with urllib.request.urlopen(metrics_url, timeout=scaled(10)) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('kafka_network_requestmetrics_requests_total{request="'
                                  'CreateTopics"}'))


def test_the_marker_topic_is_not_created_again_for_every_micro_batch(
        spark: SparkSession, topic_name: str, tmp_path: Path) -> None:
    """PySpark builds the sink's writer anew for every micro-batch; sending CreateTopics
    (to the controller) each time tied every batch commit to the controller being up.
    Three micro-batches cost at most one CreateTopics now."""
    with EmbeddedBroker(extra_args=["--metrics-port", "0"]) as broker:
        assert broker.metrics_url is not None
        src, out = topic_name + "-in", topic_name + "-out"
        create_topic(broker.bootstrap_servers, src)
        create_topic(broker.bootstrap_servers, out)
        produce(broker.bootstrap_servers, src, [(None, b"x%d" % i) for i in range(120)])
        before = _create_topics_requests(broker.metrics_url)
        _stream_copy(spark, broker, src, out, tmp_path / "cp")  # 40 rows per micro-batch
        assert len(read_all(broker.bootstrap_servers, out)) == 120
        assert _create_topics_requests(broker.metrics_url) - before <= 1
