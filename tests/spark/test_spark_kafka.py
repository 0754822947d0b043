"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 4.2.0 on PySpark
4.3.0) against headrace's broker and against Apache Kafka 4.3.1.

Every test runs twice (the ``any_broker`` fixture): the Apache Kafka run is the reference,
and the proof that a pipeline written for Kafka runs on headrace unchanged, and back.
Reads are checked as exact row sets ``(partition, offset, key, value)``; writes are read
back with a plain confluent-kafka consumer. Streaming queries run with ``availableNow`` or
``processAllAvailable()``, never sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession

from headrace.spark.session import has_kafka_connector
from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, produce, read_all

pytestmark = pytest.mark.spark

Broker = EmbeddedBroker | ApacheKafka
Rows = list[tuple[Any, ...]]
Placed = list[tuple[int, int]]


@pytest.fixture(autouse=True)
def _connector(spark: SparkSession) -> None:
    if not has_kafka_connector(spark):
        pytest.skip("Spark's Kafka connector is not on the classpath (jvm/lib/spark-kafka)")


def kafka(spark: SparkSession, broker: Broker, streaming: bool = False,
          **options: str) -> DataFrame:
    reader = (spark.readStream if streaming else spark.read).format("kafka") \
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_of(df: DataFrame) -> set[tuple[Any, ...]]:
    return {(r.partition, r.offset, r.key, r.value) for r in df.collect()}


def expected(rows: Rows, placed: Placed, keep: Callable[[int, int], bool] = lambda p, o: True
             ) -> set[tuple[Any, ...]]:
    return {(p, o, r[0], r[1]) for r, (p, o) in zip(rows, placed, strict=True) if keep(p, o)}


def run_available_now(df: DataFrame, checkpoint: Path, out: list[Any]) -> list[int]:
    """Run ``df`` to the current end (``availableNow``) into ``out``; the input rows of each
    micro-batch that had any."""
    def collect(batch: DataFrame, _batch_id: int) -> None:
        out.extend((r.partition, r.offset, r.key, r.value) for r in batch.collect())

    q = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    q.awaitTermination(scaled(120))
    assert q.exception() is None, q.exception()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0]


@pytest.fixture
def three_partitions(any_broker: Broker, topic_name: str) -> tuple[str, Rows, Placed]:
    """300 records round-robin over 3 partitions, record i with timestamp 1_000_000 + 10 i."""
    create_topic(any_broker.bootstrap_servers, topic_name, 3)
    rows: Rows = [(f"k{i}".encode(), f"v{i}".encode(), i % 3, 1_000_000 + i * 10)
                  for i in range(300)]
    return topic_name, rows, produce(any_broker.bootstrap_servers, topic_name, rows)


# --- batch reads -------------------------------------------------------------------------


def test_batch_subscribe_has_every_record_and_kafka_columns(
        spark: SparkSession, any_broker: Broker, three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    df = kafka(spark, any_broker, subscribe=topic)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert rows_of(df) == expected(rows, placed)
    first = df.where("partition = 1 and offset = 0").collect()[0]
    assert first.topic == topic and first.timestampType == 0
    assert int(first.timestamp.timestamp() * 1000) == 1_000_000 + 10


def test_batch_assign_pattern_and_json_offsets(spark: SparkSession, any_broker: Broker,
                                               three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    assigned = kafka(spark, any_broker, assign=json.dumps({topic: [0, 2]}))
    assert rows_of(assigned) == expected(rows, placed, lambda p, o: p != 1)
    pattern = kafka(spark, any_broker, subscribePattern=topic[:-8] + ".*",
                    startingOffsets="earliest", endingOffsets="latest")
    assert rows_of(pattern) == expected(rows, placed)
    window = kafka(spark, any_broker, subscribe=topic,
                   startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": 95}}),
                   endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}))
    bounds = {0: (10, 20), 1: (0, 5), 2: (95, 100)}
    assert rows_of(window) == expected(rows, placed,
                                       lambda p, o: bounds[p][0] <= o < bounds[p][1])


def test_batch_from_timestamps(spark: SparkSession, any_broker: Broker,
                               three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    cut = 1_000_000 + 150 * 10 + 5  # between record 150 and record 151
    ts = {pl: r[3] for r, pl in zip(rows, placed, strict=True)}
    df = kafka(spark, any_broker, subscribe=topic, startingTimestamp=str(cut))
    assert rows_of(df) == expected(rows, placed, lambda p, o: ts[(p, o)] >= cut)
    by_partition = kafka(spark, any_broker, subscribe=topic,
                         startingOffsetsByTimestamp=json.dumps(
                             {topic: {"0": cut, "1": 0, "2": 10**15}}),
                         startingOffsetsByTimestampStrategy="latest")
    assert rows_of(by_partition) == expected(
        rows, placed, lambda p, o: p == 1 or (p == 0 and ts[(p, o)] >= cut))
    ending = kafka(spark, any_broker, subscribe=topic, endingTimestamp=str(cut))
    assert rows_of(ending) == expected(rows, placed, lambda p, o: ts[(p, o)] < cut)


def test_batch_include_headers(spark: SparkSession, any_broker: Broker,
                               topic_name: str) -> None:
    create_topic(any_broker.bootstrap_servers, topic_name)
    p = Producer({"bootstrap.servers": any_broker.bootstrap_servers})
    p.produce(topic_name, value=b"v", headers=[("a", b"1"), ("b", None), ("a", b"2")])
    p.produce(topic_name, value=b"w")
    assert p.flush(scaled(10)) == 0
    rows = kafka(spark, any_broker, subscribe=topic_name, includeHeaders="true") \
        .orderBy("offset").collect()
    assert [(h.key, h.value) for h in rows[0].headers] == [("a", b"1"), ("b", None),
                                                           ("a", b"2")]
    assert rows[1].headers is None  # Spark's connector: no headers is null, not []


def test_read_committed_hides_an_aborted_transaction(spark: SparkSession, any_broker: Broker,
                                                     topic_name: str, tmp_path: Path) -> None:
    create_topic(any_broker.bootstrap_servers, topic_name)
    p = Producer({"bootstrap.servers": any_broker.bootstrap_servers,
                  "transactional.id": f"t-{topic_name}"})
    p.init_transactions(scaled(10))
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic_name, value=f"{outcome}-{i}".encode())
        p.flush(scaled(10))
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(10)
    committed = sorted([f"commit-{i}".encode() for i in range(5)] * 2)
    batch = kafka(spark, any_broker, subscribe=topic_name,
                  **{"kafka.isolation.level": "read_committed"})
    assert sorted(r.value for r in batch.collect()) == committed
    stream = kafka(spark, any_broker, streaming=True, subscribe=topic_name,
                   startingOffsets="earliest", **{"kafka.isolation.level": "read_committed"})
    got: list[Any] = []
    run_available_now(stream, tmp_path / "cp", got)
    assert sorted(r[3] for r in got) == committed
    # Spark's default is read_uncommitted: the aborted records are there.
    assert kafka(spark, any_broker, subscribe=topic_name).count() == 15


# --- streaming reads ---------------------------------------------------------------------


@pytest.mark.parametrize("start", ["subscribe-earliest", "assign-json", "pattern-timestamp",
                                   "subscribe-by-timestamp"])
def test_stream_starting_positions(spark: SparkSession, any_broker: Broker,
                                   three_partitions: Any, tmp_path: Path, start: str) -> None:
    topic, rows, placed = three_partitions
    cut = 1_000_000 + 150 * 10 + 5
    ts = {pl: r[3] for r, pl in zip(rows, placed, strict=True)}
    options: dict[str, str]
    keep: Callable[[int, int], bool]
    if start == "subscribe-earliest":
        options, keep = {"subscribe": topic, "startingOffsets": "earliest"}, lambda p, o: True
    elif start == "assign-json":
        options = {"assign": json.dumps({topic: [0, 2]}),
                   "startingOffsets": json.dumps({topic: {"0": 90, "2": -2}})}
        keep = lambda p, o: p == 2 or (p == 0 and o >= 90)  # noqa: E731
    elif start == "pattern-timestamp":
        options = {"subscribePattern": topic[:-8] + ".*", "startingTimestamp": str(cut)}
        keep = lambda p, o: ts[(p, o)] >= cut  # noqa: E731
    else:
        options = {"subscribe": topic, "startingOffsetsByTimestamp": json.dumps(
            {topic: {"0": cut, "1": 0, "2": cut}})}
        keep = lambda p, o: p == 1 or ts[(p, o)] >= cut  # noqa: E731
    got: list[Any] = []
    run_available_now(kafka(spark, any_broker, streaming=True, **options), tmp_path / "cp", got)
    assert sorted(got) == sorted(expected(rows, placed, keep))


def test_stream_latest_then_resume_from_checkpoint(spark: SparkSession, any_broker: Broker,
                                                   three_partitions: Any,
                                                   tmp_path: Path) -> None:
    topic, _, _ = three_partitions
    stream = kafka(spark, any_broker, streaming=True, subscribe=topic)  # latest by default
    got: list[Any] = []
    run_available_now(stream, tmp_path / "cp", got)
    assert got == []
    more: Rows = [(f"n{i}".encode(), f"new{i}".encode(), i % 3) for i in range(30)]
    placed = produce(any_broker.bootstrap_servers, topic, more)
    run_available_now(stream, tmp_path / "cp", got)
    assert sorted(got) == sorted(expected(more, placed))
    run_available_now(stream, tmp_path / "cp", got)
    assert len(got) == 30  # nothing read twice


def test_max_offsets_per_trigger(spark: SparkSession, any_broker: Broker,
                                 three_partitions: Any, tmp_path: Path) -> None:
    """Spark splits the limit over partitions in proportion to their lag, rounding down:
    70 over three partitions of 100 is 23 each, so 69 per batch, then the last 24."""
    topic, rows, placed = three_partitions
    got: list[Any] = []
    stream = kafka(spark, any_broker, streaming=True, subscribe=topic,
                   startingOffsets="earliest", maxOffsetsPerTrigger="70")
    sizes = run_available_now(stream, tmp_path / "cp", got)
    assert sizes == [69, 69, 69, 69, 24]
    assert sorted(got) == sorted(expected(rows, placed))


@pytest.mark.parametrize("fail", ["true", "false"])
def test_records_deleted_under_a_running_query(spark: SparkSession, any_broker: Broker,
                                               topic_name: str, fail: str) -> None:
    """DeleteRecords removes offsets a running query has planned but not yet read (its
    micro-batch is held in ``foreachBatch`` until they are gone): with failOnDataLoss=true
    the query fails with Spark's data-loss error; with false it skips them and goes on."""
    bs = any_broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, [(f"a{i}".encode(), f"a{i}".encode(), i % 2) for i in range(20)])
    gate, held = threading.Event(), threading.Event()
    gate.set()
    got: list[Any] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        if not gate.is_set():
            held.set()
            assert gate.wait(scaled(60)), "the test never opened the gate"
        got.extend((r.partition, r.offset, r.key, r.value) for r in batch.collect())

    stream = kafka(spark, any_broker, streaming=True, subscribe=topic_name,
                   startingOffsets="earliest", failOnDataLoss=fail)
    q = stream.writeStream.foreachBatch(collect).start()
    try:
        q.processAllAvailable()
        assert len(got) == 20  # read up to offset 10 of each partition
        gate.clear()
        more: Rows = [(f"b{i}".encode(), f"b{i}".encode(), i % 2) for i in range(100)]
        placed = produce(bs, topic_name, more)
        assert held.wait(scaled(60)), "no micro-batch planned the new records"
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.delete_records([TopicPartition(topic_name, 0, 30)]).values():
            f.result()
        got.clear()
        gate.set()
        if fail == "true":
            with pytest.raises(Exception, match=r"KAFKA_DATA_LOSS|Some data may have been lost"):
                q.processAllAvailable()
            return
        q.processAllAvailable()
        assert q.exception() is None
        assert sorted(got) == sorted(expected(more, placed, lambda p, o: p != 0 or o >= 30))
    finally:
        gate.set()
        q.stop()


# --- writes ------------------------------------------------------------------------------

WRITE_SCHEMA = ("key string, value binary, partition int, "
                "headers array<struct<key:string,value:binary>>")


def written(i: int) -> tuple[Any, ...]:
    return (f"k{i}", f"value-{i}".encode(), i % 4, [("src", b"spark"), ("i", str(i).encode())])


def as_read(msgs: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((m.key(), m.value(), m.partition(), tuple(m.headers() or ())) for m in msgs)


def want_read(n: int) -> list[tuple[Any, ...]]:
    return sorted((f"k{i}".encode(), f"value-{i}".encode(), i % 4,
                   (("src", b"spark"), ("i", str(i).encode()))) for i in range(n))


def test_batch_write_keys_values_headers_partitions(spark: SparkSession, any_broker: Broker,
                                                    topic_name: str) -> None:
    bs = any_broker.bootstrap_servers
    create_topic(bs, topic_name, 4)
    other = topic_name + "-other"
    create_topic(bs, other)
    df = spark.createDataFrame([written(i) for i in range(200)], WRITE_SCHEMA)
    df.write.format("kafka").option("kafka.bootstrap.servers", bs) \
        .option("topic", topic_name).save()
    assert as_read(read_all(bs, topic_name)) == want_read(200)
    routed = spark.createDataFrame([(other if i % 3 else topic_name, f"r{i}") for i in range(30)],
                                   "topic string, value string")
    routed.write.format("kafka").option("kafka.bootstrap.servers", bs).mode("append").save()
    assert sorted(m.value() for m in read_all(bs, other)) == sorted(
        f"r{i}".encode() for i in range(30) if i % 3)


def test_stream_write_from_a_topic(spark: SparkSession, any_broker: Broker, topic_name: str,
                                   tmp_path: Path) -> None:
    """format("kafka") in and out, 50 rows per micro-batch: each input row once on the
    output, in the partition and with the headers the query gave it; a re-run of the
    finished query (same checkpoint) writes nothing."""
    bs = any_broker.bootstrap_servers
    src, out = topic_name + "-in", topic_name + "-out"
    create_topic(bs, src, 2)
    create_topic(bs, out, 4)
    produce(bs, src, [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(200)])

    def run() -> list[int]:
        q = (kafka(spark, any_broker, streaming=True, subscribe=src,
                   startingOffsets="earliest", maxOffsetsPerTrigger="50")
             .selectExpr("cast(key as string) as key", "value",
                         "cast(substr(cast(value as string), 7) as int) % 4 as partition",
                         "array(named_struct('key', 'src', 'value', cast('spark' as binary)),"
                         " named_struct('key', 'i', 'value', substr(value, 7))) as headers")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", bs)
             .option("topic", out).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination(scaled(120))
        assert q.exception() is None, q.exception()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0]

    assert sum(run()) == 200
    assert as_read(read_all(bs, out)) == want_read(200)
    assert run() == []
    assert len(read_all(bs, out)) == 200


# --- the session without the connector's jars ----------------------------------------

WITHOUT_JARS = """
import sys
from headrace.spark.session import has_kafka_connector, kafka_connector_jars, local_session
assert kafka_connector_jars() == []
spark = local_session("no-connector")
print("connector", has_kafka_connector(spark))
df = (spark.read.format("headrace").option("kafka.bootstrap.servers", sys.argv[1])
      .option("subscribe", sys.argv[2]).load())
print("rows", df.count())
try:
    spark.read.format("kafka").option("kafka.bootstrap.servers", sys.argv[1]) \\
        .option("subscribe", sys.argv[2]).load().count()
except Exception as e:
    print("kafka format fails", type(e).__name__)
spark.stop()
"""


@pytest.mark.slow
def test_session_without_the_jars_has_format_headrace_only(broker: EmbeddedBroker,
                                                           topic_name: str,
                                                           tmp_path: Path) -> None:
    """``local_session`` with no ``jvm/lib/spark-kafka`` (HEADRACE_JVM_LIB pointing at an
    empty folder): a session of its own (a subprocess) reads with ``format("headrace")``,
    ``format("kafka")`` is simply not there, and nothing about jars is logged."""
    create_topic(broker.bootstrap_servers, topic_name)
    produce(broker.bootstrap_servers, topic_name, [(None, b"x")] * 5)
    env = dict(os.environ, HEADRACE_JVM_LIB=str(tmp_path / "empty"),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-c", WITHOUT_JARS, broker.bootstrap_servers,
                           topic_name], capture_output=True, text=True, env=env,
                          timeout=scaled(180))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["connector False", "rows 5",
                                        "kafka format fails AnalysisException"], done.stdout
    assert not [line for line in done.stderr.splitlines()
                if "jar" in line.lower() or "spark-kafka" in line], done.stderr[-3000:]


@pytest.mark.slow
def test_real_time_mode_topic_to_topic(spark: SparkSession, any_broker: Broker,
                                       topic_name: str, tmp_path: Path) -> None:
    """Spark's Real-Time Mode (``trigger(realTime=...)``, which admits only JVM sources and
    sinks) with ``format("kafka")`` in and out: long-running tasks deliver every row while
    the 5 s batch is still open. Two source partitions, no shuffle: two task slots do."""
    bs = any_broker.bootstrap_servers
    src, out = topic_name + "-in", topic_name + "-out"
    create_topic(bs, src, 2)
    create_topic(bs, out, 2)
    q = (kafka(spark, any_broker, streaming=True, subscribe=src, startingOffsets="earliest")
         .selectExpr("key", "upper(cast(value as string)) as value")
         .writeStream.format("kafka").option("kafka.bootstrap.servers", bs)
         .option("topic", out).option("checkpointLocation", str(tmp_path / "cp"))
         .outputMode("update").trigger(realTime="5 seconds").start())
    try:
        produce(bs, src, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)])
        deadline = time.monotonic() + scaled(90)
        got: list[Any] = []
        while len(got) < 100 and time.monotonic() < deadline and q.exception() is None:
            got = read_all(bs, out)
        assert q.exception() is None, q.exception()
        assert sorted(m.value() for m in got) == sorted(f"V{i}".encode() for i in range(100))
    finally:
        q.stop()
