"""Spark reading a topic through ``format("headrace")`` and through Spark's own
``format("kafka")``, side by side with the same rows read from Parquet.

Usage::

    .venv/bin/python bench/spark_read.py                       # 10M records, headrace + Tansu
    .venv/bin/python bench/spark_read.py --records 2000000 --brokers headrace
    .venv/bin/python bench/spark_read.py --brokers headrace,kafka   # + Apache Kafka
    .venv/bin/python bench/spark_read.py --write-md            # also refresh BENCHMARKS.md

Per broker: a fresh broker, one topic of ``--partitions`` partitions filled with
``--records`` records of 100-byte incompressible values and no key, produced by
``--producers`` processes (librdkafka, acks=all, linger.ms=5, batch.size=1 MB, **no
compression**: the values are random bytes, lz4 would only cost CPU). The same values are
written once to Parquet (pyarrow, snappy, with the source's other columns: null key, topic,
partition, offset, timestamp, timestampType). Then, in one local SparkSession, alternately
``--runs`` times: ``spark.read.format("headrace")...load()``, ``spark.read.format("kafka")``
(Spark's connector, when its jars are built: ``headrace.spark.session.kafka_connector_jars``)
and ``spark.read.parquet()``, each aggregated with ``count(*), sum(length(value))`` and
checked against the known totals. Reported: the median wall time per read and rows/s, and
each reader / Parquet. Brokers: ``headrace``, ``tansu`` and ``kafka`` (Apache Kafka 4.3.1,
KRaft, one JVM with a 2 GB heap: ``headrace.testing.ApacheKafka``).

Tansu 0.6.0 reports a partition's end as the base offset of its last record batch + 1, so
a reader misses the rest of that batch: every partition's last record is produced alone
(the same for every broker, so the rows are the same everywhere).

Other work on the machine (2 cores here, shared by Spark, the broker and the producers)
moves these figures; the load average at the start is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer

from brokers import BrokerSpec, add_brokers_option, create_topic, running
from clients import DeliveryErrors, spark_session
from report import arguments, fmt_float, fmt_int, publish, show_environment, table

VALUE_BYTES = 100
CHUNK = 100_000
DEFAULT_RECORDS = 10_000_000
PROJECTION = "value binary"
SPEC_CHOICES = (BrokerSpec("headrace"), BrokerSpec("tansu"), BrokerSpec("kafka"))

PRODUCER_CONFIG: dict[str, object] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    "log_level": 3,
}


# --- the records ---------------------------------------------------------------------------


def chunk_values(index: int, records: int) -> bytes:
    """The values of records ``[index * CHUNK, ...)``, concatenated (incompressible,
    the same on every run)."""
    n = min(CHUNK, records - index * CHUNK)
    return np.random.default_rng(index).bytes(n * VALUE_BYTES)


def _produce_chunks(bootstrap: str, topic: str, records: int, partitions: int,
                    chunks: list[int]) -> None:
    """One producer process: records of ``chunks``, record i to partition i % partitions;
    each partition's very last record is left out (``produce_tails`` sends it alone)."""
    errors = DeliveryErrors()
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG,
                         "delivery.report.only.error": True, "on_delivery": errors})
    send, poll = producer.produce, producer.poll
    tails = set(range(records - partitions, records))
    for c in chunks:
        values = chunk_values(c, records)
        base = c * CHUNK
        for j in range(len(values) // VALUE_BYTES):
            i = base + j
            if i in tails:
                continue
            value = values[j * VALUE_BYTES:(j + 1) * VALUE_BYTES]
            while True:
                try:
                    send(topic, value, partition=i % partitions)
                    break
                except BufferError:
                    poll(0.005)
        poll(0)
    if producer.flush(300) or errors:
        raise SystemExit(f"produce failed: {errors[:1]}")


def fill_topic(bootstrap: str, topic: str, records: int, partitions: int,
               producers: int) -> float:
    """Produce the records with ``producers`` processes, then each partition's last record
    in a batch of its own. Returns the seconds taken (all acknowledged)."""
    chunks = list(range((records + CHUNK - 1) // CHUNK))
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_produce_chunks,
                         args=(bootstrap, topic, records, partitions, chunks[k::producers]))
             for k in range(producers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a producer process failed (exit {p.exitcode})")
    produce_tails(bootstrap, topic, records, partitions)
    return time.perf_counter() - start


def produce_tails(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
    for i in range(max(records - partitions, 0), records):
        values = chunk_values(i // CHUNK, records)
        j = i % CHUNK
        producer.produce(topic, values[j * VALUE_BYTES:(j + 1) * VALUE_BYTES],
                         partition=i % partitions)
        if producer.flush(30):  # one record, one batch
            raise RuntimeError("a tail record was not acknowledged")


def write_parquet(path: Path, topic: str, records: int, partitions: int) -> None:
    """The same rows, with the columns ``format("headrace")`` gives them."""
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")),
                        ("timestampType", pa.int32())])
    now = int(time.time() * 1e6)
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for c in range((records + CHUNK - 1) // CHUNK):
            raw = chunk_values(c, records)
            n = len(raw) // VALUE_BYTES
            ids = np.arange(c * CHUNK, c * CHUNK + n, dtype=np.int64)
            values = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(VALUE_BYTES), n, [None, pa.py_buffer(raw)]).cast(pa.binary())
            writer.write_batch(pa.RecordBatch.from_arrays([
                pa.nulls(n, pa.binary()), values, pa.repeat(pa.scalar(topic), n),
                pa.array(ids % partitions, pa.int32()), pa.array(ids // partitions),
                pa.array(np.full(n, now), pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(n, np.int32))], schema=schema))


# --- Spark -----------------------------------------------------------------------------


def timed_aggregate(df: Any, records: int) -> float:
    """Seconds to run ``count(*), sum(length(value))`` on ``df``; checks both totals."""
    from pyspark.sql import functions as F

    start = time.perf_counter()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    seconds = time.perf_counter() - start
    if row.n != records or row.b != records * VALUE_BYTES:
        raise RuntimeError(f"read {row.n} rows / {row.b} bytes, expected {records} / "
                           f"{records * VALUE_BYTES}")
    return seconds


@dataclass(frozen=True)
class Result:
    spec: BrokerSpec
    records: int
    produce_s: float
    headrace_s: list[float]
    tuned_s: list[float]
    parquet_s: list[float]
    error: str | None = None
    spark_kafka_s: list[float] = field(default_factory=list)
    projected_s: list[float] = field(default_factory=list)

    @property
    def headrace_rate(self) -> float:
        return self.records / statistics.median(self.headrace_s)

    @property
    def tuned_rate(self) -> float | None:
        return self.records / statistics.median(self.tuned_s) if self.tuned_s else None

    @property
    def spark_kafka_rate(self) -> float | None:
        return self.records / statistics.median(self.spark_kafka_s) if self.spark_kafka_s \
            else None

    @property
    def projected_rate(self) -> float | None:
        return self.records / statistics.median(self.projected_s) if self.projected_s else None

    @property
    def parquet_rate(self) -> float:
        return self.records / statistics.median(self.parquet_s)


@contextlib.contextmanager
def start_broker(spec: BrokerSpec) -> Iterator[Any]:
    """``bench/brokers.running`` for headrace and Tansu; Apache Kafka through
    ``headrace.testing.ApacheKafka``. Yields an object with ``bootstrap_servers``."""
    if spec.kind != "kafka":
        with running(spec) as broker:
            yield broker
        return
    from headrace.testing import ApacheKafka

    with ApacheKafka(heap="2g") as kafka:
        yield kafka


def has_spark_kafka(spark: Any) -> bool:
    from headrace.spark.session import has_kafka_connector

    return bool(has_kafka_connector(spark))


def run_broker(spark: Any, spec: BrokerSpec, parquet: Path, args: argparse.Namespace
               ) -> Result:
    topic = "spark-read"
    try:
        with start_broker(spec) as broker:
            bs = broker.bootstrap_servers
            create_topic(bs, topic, args.partitions)
            print(f"[{spec.name}] producing {args.records:,} records ...", flush=True)
            produce_s = fill_topic(bs, topic, args.records, args.partitions, args.producers)
            print(f"[{spec.name}] produced in {produce_s:.1f} s", flush=True)
            reader = (spark.read.format("headrace").option("kafka.bootstrap.servers", bs)
                      .option("subscribe", topic))
            source = reader.load()
            projected = reader.schema(PROJECTION).load()
            tuned = (reader.option("headrace.reader", "librdkafka")
                     .option("kafka.fetch.queue.backoff.ms", "10").load())
            files = spark.read.parquet(str(parquet))
            spark_kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", bs)
                           .option("subscribe", topic).load()
                           if args.spark_kafka and has_spark_kafka(spark) else None)
            # Start the Python workers (and load Spark's Kafka classes): 100 records of
            # each partition.
            ends = {topic: {str(p): 100 for p in range(args.partitions)}}
            timed_aggregate(reader.option("endingOffsets", json.dumps(ends)).load(),
                            100 * args.partitions)
            if spark_kafka is not None:
                timed_aggregate(spark.read.format("kafka").option("kafka.bootstrap.servers", bs)
                                .option("subscribe", topic)
                                .option("endingOffsets", json.dumps(ends)).load(),
                                100 * args.partitions)
            kafka_s: list[float] = []
            projected_s: list[float] = []
            tuned_s: list[float] = []
            spark_kafka_s: list[float] = []
            parquet_s: list[float] = []
            for run in range(args.runs):
                kafka_s.append(timed_aggregate(source, args.records))
                projected_s.append(timed_aggregate(projected, args.records))
                if args.tuned:
                    tuned_s.append(timed_aggregate(tuned, args.records))
                if spark_kafka is not None:
                    spark_kafka_s.append(timed_aggregate(spark_kafka, args.records))
                parquet_s.append(timed_aggregate(files, args.records))
                print(f"[{spec.name}] run {run + 1}: headrace {kafka_s[-1]:.2f} s, "
                      f"value only {projected_s[-1]:.2f} s, "
                      + (f"librdkafka {tuned_s[-1]:.2f} s, " if tuned_s else "")
                      + (f"format(kafka) {spark_kafka_s[-1]:.2f} s, " if spark_kafka_s
                         else "")
                      + f"parquet {parquet_s[-1]:.2f} s", flush=True)
            return Result(spec, args.records, produce_s, kafka_s, tuned_s, parquet_s,
                          spark_kafka_s=spark_kafka_s, projected_s=projected_s)
    except Exception as e:  # one broker failing must not lose the other's figures
        traceback.print_exc()
        return Result(spec, args.records, 0.0, [], [], [], f"{type(e).__name__}: {e}")


def render(results: list[Result]) -> str:
    rows = []
    for r in results:
        if r.error is not None:
            rows.append([r.spec.name, "failed", *["-"] * 6])
            continue
        parquet = [fmt_float(statistics.median(r.parquet_s), 2), fmt_int(r.parquet_rate)]
        rows.append([r.spec.name, "format(\"headrace\")", fmt_float(statistics.median(r.headrace_s), 2),
                     fmt_int(r.headrace_rate), *parquet,
                     f"{r.headrace_rate / r.parquet_rate:.2f}x", fmt_float(r.produce_s)])
        if r.projected_rate is not None:
            rows.append([r.spec.name, f"format(\"headrace\").schema(\"{PROJECTION}\")",
                         fmt_float(statistics.median(r.projected_s), 2),
                         fmt_int(r.projected_rate), *parquet,
                         f"{r.projected_rate / r.parquet_rate:.2f}x", "-"])
        if r.tuned_rate is not None:
            rows.append([r.spec.name, "format(\"headrace\"), headrace.reader=librdkafka",
                         fmt_float(statistics.median(r.tuned_s), 2), fmt_int(r.tuned_rate),
                         *parquet, f"{r.tuned_rate / r.parquet_rate:.2f}x", "-"])
        if r.spark_kafka_rate is not None:
            rows.append([r.spec.name, "Spark's format(\"kafka\")",
                         fmt_float(statistics.median(r.spark_kafka_s), 2),
                         fmt_int(r.spark_kafka_rate), *parquet,
                         f"{r.spark_kafka_rate / r.parquet_rate:.2f}x", "-"])
    return table(["broker", "reader", "read s", "rows/s", "parquet read s",
                  "parquet rows/s", "reader / parquet", "produce s"], rows)


def notes(args: argparse.Namespace) -> list[str]:
    return [
        f"{args.records:,} records in {args.partitions} partitions, 100-byte random values, no key; produced by "
        f"{args.producers} librdkafka producer processes, acks=all, linger.ms=5, "
        "batch.size=1 MB, no compression (random values do not compress)",
        "query: `count(*), sum(length(value))`, checked against the known totals; "
        "SparkSession local[2] (2 cores shared with the broker), spark.driver.memory=4g; "
        "a read of 100 records per partition first, to start the Python workers",
        "format(\"headrace\"): the Python data source, one task per partition, fetching raw "
        "record batches (Fetch v11) and decoding them into Arrow columns with a compiled "
        "(numba) scan; the Python Data Source API cannot prune columns, so all seven Kafka "
        "columns cross from Python to the JVM",
        f"format(\"headrace\").schema(\"{PROJECTION}\"): the same source with a declared schema "
        "naming only the column the query reads (the user's way to prune): only values are "
        "copied out of the fetched batches and cross to the JVM",
        "headrace.reader=librdkafka: the same source reading through librdkafka consumers "
        "(its path for TLS/SASL), with `kafka.fetch.queue.backoff.ms=10`",
        "Spark's format(\"kafka\"): spark-sql-kafka-0-10 4.2.0 with kafka-clients 3.9.2 "
        "(JVM consumers, one task per partition, options as shipped), same topic, same run",
        "parquet: the same rows with the same seven columns in one snappy file written by "
        "pyarrow; Spark's vectorized reader prunes to `value`",
        (f"median of {args.runs} alternating runs" if args.runs > 1 else "one run each")
        + "; 'reader / parquet' = rows/s ratio (goal for format(\"headrace\") >= 0.5)",
        "Tansu: every partition's last record is produced alone (Tansu 0.6.0 reports a "
        "partition's end as its last batch's base offset + 1); done for every broker",
    ]


def python_source_ceiling(spark: Any, records: int, partitions: int, runs: int,
                          value_only: bool = False) -> list[float]:
    """Seconds for ``count(*), sum(length(value))`` over a Python data source that yields
    pre-built Arrow batches of the source's seven columns (or its value column only): no
    Kafka, no decoding. What any Python data source can reach here, the bound of
    ``format("headrace")`` (with the same columns)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from headrace.spark.options import SCHEMA_DDL
    from headrace.spark.reading import ARROW_SCHEMA

    per_task, rows = records // partitions, 50_000

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            n = min(rows, per_task)
            offsets = pa.array(np.arange(0, VALUE_BYTES * n + 1, VALUE_BYTES, dtype=np.int32))
            value = pa.Array.from_buffers(pa.binary(), n, [
                None, offsets.buffers()[1], pa.py_buffer(np.random.bytes(VALUE_BYTES * n))])
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(n, pa.binary()), value, pa.repeat(pa.scalar("spark-read"), n),
                pa.repeat(pa.scalar(0, pa.int32()), n), pa.array(np.arange(n)),
                pa.array(np.arange(n) * 1000).cast(pa.timestamp("us", tz="UTC")),
                pa.repeat(pa.scalar(0, pa.int32()), n)], schema=ARROW_SCHEMA)
            if value_only:
                batch = batch.select(["value"])
            left = per_task
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow-ceiling"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(Ceiling)
    reader = spark.read.format("arrow-ceiling")
    df = (reader.schema(PROJECTION) if value_only else reader).load()
    timed_aggregate(df, per_task * partitions)  # start the workers
    return [timed_aggregate(df, per_task * partitions) for _ in range(runs)]


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__, "spark_read")
    ap.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2, help="producer processes")
    ap.add_argument("--runs", type=int, default=3)
    add_brokers_option(ap, SPEC_CHOICES, "headrace,tansu")
    ap.add_argument("--no-spark-kafka", dest="spark_kafka", action="store_false",
                    help="skip Spark's own format(\"kafka\") reader")
    ap.add_argument("--no-tuned", dest="tuned", action="store_false",
                    help="skip the read through librdkafka (headrace.reader=librdkafka)")
    args = ap.parse_args(argv)
    specs: list[BrokerSpec] = args.brokers

    env = show_environment()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-read-"))
    try:
        parquet = work / "rows.parquet"
        start = time.perf_counter()
        write_parquet(parquet, "spark-read", args.records, args.partitions)
        print(f"parquet written in {time.perf_counter() - start:.1f} s "
              f"({parquet.stat().st_size / 1e6:,.0f} MB)", flush=True)
        spark = spark_session("bench-spark-read")
        results = [run_broker(spark, spec, parquet, args) for spec in specs]
        ceiling = python_source_ceiling(spark, args.records, args.partitions, args.runs)
        ceiling_value = python_source_ceiling(spark, args.records, args.partitions, args.runs,
                                              value_only=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parquet_rates = [r.parquet_rate for r in results if not r.error]

    def ceiling_note(runs: list[float], columns: str) -> str:
        rate = args.records // args.partitions * args.partitions / statistics.median(runs)
        bound = (f"; {rate / statistics.median(parquet_rates):.2f}x Parquet" if parquet_rates
                 else "")
        return (f"ceiling, {columns}: a Python data source yielding pre-built Arrow batches "
                f"(no Kafka, no decoding) reads at {fmt_int(rate)} rows/s (median of "
                f"{len(runs)}{bound}), runs " + ", ".join(f"{c:.2f}" for c in runs)
                + " s: the most any Python data source with these columns can reach here")

    ceilings = [ceiling_note(ceiling, "seven columns"),
                ceiling_note(ceiling_value, "value column only")]
    print("\n".join(ceilings), flush=True)
    publish("spark_read", "Spark read: format(\"headrace\") vs Parquet", env, render(results),
            [*notes(args), *ceilings], args.write_md, args.md_file)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
