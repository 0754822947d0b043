"""format("headrace") as a source: exact row sets for every way to start and end, admission
control, resuming from a checkpoint, new partitions, isolation levels and bad options.

The main read path (every record and column, read_committed, maxOffsetsPerTrigger) also
runs against Apache Kafka (``any_broker``): the connector only speaks the Kafka protocol."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import DataFrame, SparkSession

from headrace.testing import ApacheKafka, EmbeddedBroker, scaled
from tests.spark.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.spark

Broker = EmbeddedBroker | ApacheKafka


def source(spark: SparkSession, broker: Broker, streaming: bool = False,
           **options: str) -> DataFrame:
    reader = (spark.readStream if streaming else spark.read).format("headrace") \
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_of(df: DataFrame) -> set[tuple[Any, ...]]:
    return {(r.partition, r.offset, r.key, r.value) for r in df.collect()}


def expected(rows: list[tuple[Any, ...]], placed: list[tuple[int, int]],
             keep: Any = lambda p, o: True) -> set[tuple[Any, ...]]:
    return {(p, o, r[0], r[1]) for r, (p, o) in zip(rows, placed, strict=True) if keep(p, o)}


def fill_three(broker: Broker, topic_name: str
               ) -> tuple[str, list[tuple[Any, ...]], list[tuple[int, int]]]:
    create_topic(broker.bootstrap_servers, topic_name, 3)
    rows = [(f"k{i}".encode(), f"v{i}".encode(), i % 3, 1_000_000 + i * 10) for i in range(300)]
    return topic_name, rows, produce(broker.bootstrap_servers, topic_name, rows)


@pytest.fixture
def three_partitions(broker: EmbeddedBroker, topic_name: str
                     ) -> tuple[str, list[tuple[Any, ...]], list[tuple[int, int]]]:
    return fill_three(broker, topic_name)


@pytest.fixture
def three_partitions_any(any_broker: Broker, topic_name: str
                         ) -> tuple[str, list[tuple[Any, ...]], list[tuple[int, int]]]:
    """``three_partitions`` on headrace, then on Apache Kafka."""
    return fill_three(any_broker, topic_name)


def test_batch_read_earliest_has_every_record_and_kafka_columns(
        spark: SparkSession, any_broker: Broker, three_partitions_any: Any) -> None:
    topic, rows, placed = three_partitions_any
    df = source(spark, any_broker, subscribe=topic)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert rows_of(df) == expected(rows, placed)
    first = df.where("partition = 1 and offset = 0").collect()[0]
    assert first.topic == topic and first.timestampType == 0
    assert int(first.timestamp.timestamp() * 1000) == 1_000_000 + 10


def test_batch_read_json_start_and_end(spark: SparkSession, broker: EmbeddedBroker,
                                       three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    df = source(spark, broker, subscribe=topic,
                startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": 95}}),
                endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}))
    window = {0: (10, 20), 1: (0, 5), 2: (95, 100)}
    assert rows_of(df) == expected(rows, placed,
                                   lambda p, o: window[p][0] <= o < window[p][1])


def test_batch_read_from_timestamp(spark: SparkSession, broker: EmbeddedBroker,
                                   three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    cut = 1_000_000 + 150 * 10 + 5  # between row 150 and row 151
    df = source(spark, broker, subscribe=topic, startingTimestamp=str(cut))
    ts = {pl: r[3] for r, pl in zip(rows, placed, strict=True)}
    assert rows_of(df) == expected(rows, placed, lambda p, o: ts[(p, o)] >= cut)
    by_partition = source(spark, broker, subscribe=topic, startingOffsetsByTimestamp=json.dumps(
        {topic: {"0": cut, "1": 0, "2": 10**15}}), startingOffsetsByTimestampStrategy="latest")
    assert rows_of(by_partition) == expected(
        rows, placed, lambda p, o: p == 1 or (p == 0 and ts[(p, o)] >= cut))


def test_timestamp_with_no_record_fails_by_default(spark: SparkSession, broker: EmbeddedBroker,
                                                    three_partitions: Any) -> None:
    topic, _, _ = three_partitions
    with pytest.raises(Exception, match="no record at or after timestamp"):
        source(spark, broker, subscribe=topic, startingTimestamp=str(10**15)).collect()


def test_assign_and_pattern(spark: SparkSession, broker: EmbeddedBroker,
                            three_partitions: Any) -> None:
    topic, rows, placed = three_partitions
    assigned = source(spark, broker, assign=json.dumps({topic: [0, 2]}))
    assert rows_of(assigned) == expected(rows, placed, lambda p, o: p != 1)
    pattern = source(spark, broker, subscribePattern=topic[:-8] + ".*")
    assert rows_of(pattern) == expected(rows, placed)


def test_headers_column(spark: SparkSession, broker: EmbeddedBroker, topic_name: str) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce(topic_name, value=b"v", headers=[("a", b"1"), ("b", None), ("a", b"2")])
    p.flush(scaled(10))
    row = source(spark, broker, subscribe=topic_name, includeHeaders="true").collect()[0]
    assert [(h.key, h.value) for h in row.headers] == [("a", b"1"), ("b", None), ("a", b"2")]


def test_read_committed_hides_aborted_records(spark: SparkSession, any_broker: Broker,
                                              topic_name: str) -> None:
    broker = any_broker
    create_topic(broker.bootstrap_servers, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                  "transactional.id": f"t-{topic_name}"})
    p.init_transactions(scaled(10))
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic_name, value=f"{outcome}-{i}".encode())
        p.flush(scaled(10))
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(10)
    committed = [r.value for r in source(spark, broker, subscribe=topic_name).collect()]
    assert sorted(committed) == sorted([f"commit-{i}".encode() for i in range(5)] * 2)
    everything = source(spark, broker, subscribe=topic_name, **{"isolation.level":
                                                                "read_uncommitted"})
    assert everything.count() == 15


def run_available_now(df: DataFrame, checkpoint: Path, out: list[Any]) -> list[dict[str, Any]]:
    """Run ``df`` with availableNow into ``out`` (a foreachBatch collector); progress list."""
    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend((r.partition, r.offset, r.key, r.value) for r in batch.collect())

    q = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    q.awaitTermination(scaled(120))
    assert q.exception() is None, q.exception()
    return [p for p in q.recentProgress if p["numInputRows"] > 0]


def test_stream_latest_then_resume_from_checkpoint(spark: SparkSession, broker: EmbeddedBroker,
                                                   three_partitions: Any,
                                                   tmp_path: Path) -> None:
    topic, _, _ = three_partitions
    got: list[Any] = []
    stream = source(spark, broker, streaming=True, subscribe=topic)  # latest by default
    run_available_now(stream, tmp_path / "cp", got)
    assert got == []
    more = [(f"n{i}".encode(), f"new{i}".encode(), i % 3) for i in range(30)]
    placed = produce(broker.bootstrap_servers, topic, more)
    run_available_now(stream, tmp_path / "cp", got)
    assert sorted(got) == sorted(expected(more, placed))
    run_available_now(stream, tmp_path / "cp", got)
    assert len(got) == 30  # nothing read twice


def test_max_offsets_per_trigger_bounds_every_batch(spark: SparkSession, any_broker: Broker,
                                                    three_partitions_any: Any,
                                                    tmp_path: Path) -> None:
    topic, rows, placed = three_partitions_any
    broker = any_broker
    got: list[Any] = []
    stream = source(spark, broker, streaming=True, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="70")
    progress = run_available_now(stream, tmp_path / "cp", got)
    assert [p["numInputRows"] for p in progress] == [70, 70, 70, 70, 20]
    assert sorted(got) == sorted(expected(rows, placed))
    latest = json.loads(progress[0]["sources"][0]["latestOffset"])
    assert latest == {topic: {"0": 100, "1": 100, "2": 100}}


def test_new_partitions_are_read_from_their_start(spark: SparkSession, broker: EmbeddedBroker,
                                                  three_partitions: Any,
                                                  tmp_path: Path) -> None:
    topic, rows, placed = three_partitions
    got: list[Any] = []
    stream = source(spark, broker, streaming=True, subscribe=topic, startingOffsets="earliest")
    run_available_now(stream, tmp_path / "cp", got)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result()
    extra = [(b"x", f"late{i}".encode(), 3 + i % 2) for i in range(10)]
    extra_placed = produce(broker.bootstrap_servers, topic, extra)
    run_available_now(stream, tmp_path / "cp", got)
    assert sorted(got) == sorted(expected(rows, placed) | expected(extra, extra_placed))


def test_deleted_topic_is_data_loss(spark: SparkSession, broker: EmbeddedBroker,
                                    three_partitions: Any, tmp_path: Path) -> None:
    topic, _, _ = three_partitions
    other = topic + "-other"
    create_topic(broker.bootstrap_servers, other)
    got: list[Any] = []
    for fail, cp in (("true", "strict"), ("false", "lenient")):
        stream = source(spark, broker, streaming=True, subscribe=f"{topic},{other}",
                        startingOffsets="earliest", failOnDataLoss=fail)
        run_available_now(stream, tmp_path / cp, got)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result()
    produce(broker.bootstrap_servers, other, [(None, b"after")])
    strict = source(spark, broker, streaming=True, subscribe=f"{topic},{other}",
                    failOnDataLoss="true")
    q = strict.writeStream.foreachBatch(lambda b, i: None) \
        .option("checkpointLocation", str(tmp_path / "strict")).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="no longer exist"):
        q.awaitTermination(scaled(60))
    got.clear()
    lenient = source(spark, broker, streaming=True, subscribe=f"{topic},{other}",
                     failOnDataLoss="false")
    run_available_now(lenient, tmp_path / "lenient", got)
    assert [r[3] for r in got] == [b"after"]


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "x:1"}, "exactly one of"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "assign": "{}"}, "exactly one of"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "startingOffsets": "{bad"},
     "startingoffsets"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "maxOffsetsPerTrigger": "-5"},
     "positive integer"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "startingOfsets": "earliest"},
     "unknown source option 'startingofsets'"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "kafka.group.id": "g"},
     "kafka.group.id"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "failOnDataLoss": "maybe"},
     "true or false"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "headrace.reader": "jvm"},
     "fetch or librdkafka"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "headrace.reader": "fetch",
      "kafka.security.protocol": "SASL_SSL"}, "PLAINTEXT only"),
])
def test_bad_options_fail_with_a_clear_message(spark: SparkSession, options: dict[str, str],
                                               message: str) -> None:
    reader = spark.readStream.format("headrace")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load().writeStream.format("console").start().awaitTermination(scaled(30))


@pytest.mark.parametrize("fail", ["true", "false"])
def test_retention_gap_is_data_loss(spark: SparkSession, broker: EmbeddedBroker,
                                    topic_name: str, tmp_path: Path, fail: str) -> None:
    """Offsets deleted (DeleteRecords, as retention does) before the query read them: the
    query fails with a clear message, or (failOnDataLoss=false) skips them."""
    from confluent_kafka import TopicPartition

    create_topic(broker.bootstrap_servers, topic_name, 2)
    first = [(f"a{i}".encode(), f"a{i}".encode(), i % 2) for i in range(20)]
    produce(broker.bootstrap_servers, topic_name, first)
    got: list[Any] = []
    stream = source(spark, broker, streaming=True, subscribe=topic_name,
                    startingOffsets="earliest", failOnDataLoss=fail)
    run_available_now(stream, tmp_path / "cp", got)  # read up to offset 10 of each
    more = [(f"b{i}".encode(), f"b{i}".encode(), i % 2) for i in range(100)]
    placed = produce(broker.bootstrap_servers, topic_name, more)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for f in admin.delete_records([TopicPartition(topic_name, 0, 30)]).values():
        f.result()
    got.clear()
    if fail == "true":
        q = stream.writeStream.foreachBatch(lambda b, i: None) \
            .option("checkpointLocation", str(tmp_path / "cp")) \
            .trigger(availableNow=True).start()
        with pytest.raises(Exception, match=r"offsets 10\.\.29 were deleted"):
            q.awaitTermination(scaled(60))
        return
    run_available_now(stream, tmp_path / "cp", got)
    assert sorted(got) == sorted(expected(more, placed, lambda p, o: p != 0 or o >= 30))


def test_fetch_reader_equals_librdkafka_reader(spark: SparkSession, any_broker: Broker,
                                               topic_name: str) -> None:
    """The raw Fetch reader (the default) and the librdkafka reader return the same rows,
    every column and header, for batches in each codec, with null keys and values, spread
    over several fetches; on headrace and on Apache Kafka."""
    broker = any_broker
    create_topic(broker.bootstrap_servers, topic_name, 5)
    for partition, codec in enumerate(("none", "gzip", "snappy", "lz4", "zstd")):
        # Idempotent: a retried first batch (a leader not yet known) keeps its place.
        p = Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.codec": codec,
                      "linger.ms": 5, "batch.size": 65536, "enable.idempotence": True})
        for i in range(3000):
            p.produce(topic_name, partition=partition,
                      key=None if i % 7 == 0 else f"key-{i % 50}".encode(),
                      value=None if i % 11 == 0 else f"{codec}-{i}-".encode() * (i % 9 + 1),
                      headers=[("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else None,
                      timestamp=1_700_000_000_000 + i)
        p.flush(scaled(30))

    def read(reader: str) -> list[tuple[Any, ...]]:
        df = source(spark, broker, subscribe=topic_name, includeHeaders="true",
                    **{"headrace.reader": reader})
        return sorted((r.partition, r.offset, r.key, r.value, r.timestamp, r.timestampType,
                       [(h.key, h.value) for h in r.headers or []], r.topic)
                      for r in df.collect())

    fetched = read("fetch")
    assert len(fetched) == 5 * 3000
    assert fetched == read("librdkafka")
    for _p, _o, key, value, _ts, _tt, headers, _t in fetched:
        if value is None:
            continue
        i = int(value.split(b"-")[1])  # each value names the record it came from
        assert key == (None if i % 7 == 0 else f"key-{i % 50}".encode())
        assert headers == ([("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else [])


def test_compacted_log_reads_the_same_through_both_readers(spark: SparkSession,
                                                           topic_name: str) -> None:
    """A compacted partition (gaps, batches starting below the offset asked for, emptied
    batches, tombstones): the Fetch reader returns exactly what
    librdkafka returns, and what the log holds."""
    from tests.integration.test_compaction import (
        FAST_CLEANER,
        create_compacted,
        read_with_tombstones,
        roll_after_segment_ms,
        wait_for,
    )
    from tests.integration.test_compaction import produce as produce_records

    with EmbeddedBroker(extra_args=FAST_CLEANER) as broker:
        bootstrap = broker.bootstrap_servers
        create_compacted(bootstrap, topic_name, **{"segment.bytes": "4096"})
        produce_records(bootstrap, topic_name, [
            (b"k%d" % (i * 7 % 30), None if i % 10 == 3 else b"v%d" % i) for i in range(2000)])
        roll_after_segment_ms(bootstrap, topic_name)
        wait_for("compaction",
                 lambda: len(read_with_tombstones(bootstrap, topic_name)) <= 31,
                 timeout=30, interval=0.3)
        held = [(o, k, v) for o, k, v in read_with_tombstones(bootstrap, topic_name)]

        def read(reader: str) -> list[tuple[Any, ...]]:
            df = source(spark, broker, subscribe=topic_name, **{"headrace.reader": reader})
            return sorted((r.offset, r.key, r.value) for r in df.collect())

        fetched = read("fetch")
        assert fetched == read("librdkafka")
        assert [(o, k, v) for o, k, v in fetched] == held


# --- declared schemas: reading only some columns ----------------------------------------


@pytest.mark.parametrize("reader", ["fetch", "librdkafka"])
def test_declared_schema_reads_only_its_columns(spark: SparkSession, broker: EmbeddedBroker,
                                                topic_name: str, reader: str) -> None:
    """``.schema(...)`` naming some of the source's columns, in any order: the batches carry
    exactly those, with the values the full read has; a ``headers`` column needs no
    ``includeHeaders``. The same through both readers."""
    create_topic(broker.bootstrap_servers, topic_name, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(500):
        p.produce(topic_name, partition=i % 2, key=None if i % 5 == 0 else f"k{i}".encode(),
                  value=None if i % 7 == 0 else f"v{i}".encode(),
                  headers=[("n", str(i).encode())] if i % 3 == 0 else None)
    assert p.flush(scaled(10)) == 0
    base = (spark.read.format("headrace").option("kafka.bootstrap.servers",
                                                 broker.bootstrap_servers)
            .option("subscribe", topic_name).option("headrace.reader", reader))
    full = {(r.partition, r.offset): r for r in base.option("includeHeaders", "true")
            .load().collect()}
    assert len(full) == 500

    values = base.schema("value binary").load()
    assert values.columns == ["value"]
    assert sorted(r.value or b"" for r in values.collect()) == \
        sorted(r.value or b"" for r in full.values())

    picked = base.schema("offset bigint, headers array<struct<key:string,value:binary>>, "
                         "partition int, key binary, timestamp timestamp").load()
    assert picked.columns == ["offset", "headers", "partition", "key", "timestamp"]
    rows = picked.collect()
    assert len(rows) == 500
    for r in rows:
        f = full[(r.partition, r.offset)]
        assert (r.key, r.timestamp, r.headers) == (f.key, f.timestamp, f.headers)


def test_declared_schema_in_a_stream(spark: SparkSession, broker: EmbeddedBroker,
                                     three_partitions: Any, tmp_path: Path) -> None:
    topic, rows, _ = three_partitions
    stream = (spark.readStream.format("headrace").schema("value binary, partition int")
              .option("kafka.bootstrap.servers", broker.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    seen: list[Any] = []
    q = stream.writeStream.foreachBatch(lambda b, _i: seen.extend(b.collect())) \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    q.awaitTermination(scaled(120))
    assert q.exception() is None, q.exception()
    assert sorted((r.partition, r.value) for r in seen) == \
        sorted((partition, value) for _key, value, partition, _ts in rows)


@pytest.mark.parametrize(("schema", "message"), [
    ("value string", "column 'value' is binary, not string"),
    ("payload binary", "column 'payload' is not one of the source's columns"),
    ("value binary, value binary", "column 'value' is declared twice"),
    ("value binary not null", "column 'value' must be declared nullable"),
    ("offset int", "column 'offset' is bigint, not int"),
])
def test_declared_schema_mistakes_fail_clearly(spark: SparkSession, broker: EmbeddedBroker,
                                               topic_name: str, schema: str,
                                               message: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name)
    reader = (spark.read.format("headrace").schema(schema)
              .option("kafka.bootstrap.servers", broker.bootstrap_servers)
              .option("subscribe", topic_name))
    with pytest.raises(Exception, match=message):
        reader.load().collect()
