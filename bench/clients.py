"""The clients the benchmarks drive, and their timing: librdkafka (confluent-kafka)
producers and consumers, a local SparkSession, raw Kafka request frames.

``produce`` and ``consume`` run in the calling thread and block until done; both raise
``RuntimeError`` on a delivery error, a stall or a short read, so a figure is only ever
reported for a complete, verified run.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

PRODUCE_TIMEOUT_S = 300.0
CONSUME_IDLE_TIMEOUT_S = 30.0

# A throughput-tuned producer: big batches, short linger, a deep local queue.
PRODUCER_CONFIG: dict[str, object] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 10_000_000,
    "queue.buffering.max.kbytes": 2 * 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    "log_level": 3,
}

CONSUMER_CONFIG: dict[str, object] = {
    # confluent-kafka insists on a group.id; with assign() and no commits it is never joined.
    "group.id": "headrace-bench",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "max.partition.fetch.bytes": 1024 * 1024,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "queued.max.messages.kbytes": 64 * 1024,
    # Once its local queue holds queued.min.messages (100k) librdkafka postpones the next
    # fetch by fetch.queue.backoff.ms, 1 s by default: with small records and a fast broker
    # that idles the consumer most of the time and punishes the faster broker.
    "fetch.queue.backoff.ms": 10,
    "log_level": 3,
}


@dataclass(frozen=True)
class Phase:
    """One timed phase: ``records`` records of ``value_bytes`` total in ``seconds``."""

    records: int
    value_bytes: int
    seconds: float
    broker_cpu_s: float
    # Producer only: how long the produce() loop itself took (the client's own ceiling).
    loop_s: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / 1e6 / self.seconds


def payload(size: int) -> bytes:
    """A fixed pseudo-random value (incompressible, the same on every run)."""
    return random.Random(size).randbytes(size)


def cpu_seconds(pid: int) -> Callable[[], float]:
    """A reader of the user+system CPU seconds used so far by process ``pid``."""
    proc = psutil.Process(pid)

    def read() -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    return read


class DeliveryErrors(list[KafkaError]):
    """A producer's ``on_delivery`` callback that keeps the errors. Meant for producers with
    ``delivery.report.only.error`` (successes do not call it); it runs in whichever thread
    calls the producer's ``poll``/``flush``."""

    def __call__(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.append(err)


def frame(request: object, version: int, correlation_id: int = 1,
          client_id: str = "bench") -> bytes:
    """A kafka-python request encoded for the wire (size, header, body), for the scripts
    that speak the protocol over a raw socket."""
    request.with_header(correlation_id=correlation_id,  # type: ignore[attr-defined]
                        client_id=client_id)
    return bytes(request.encode(version=version, header=True,  # type: ignore[attr-defined]
                                framed=True))


def spark_session(app: str, extra: dict[str, str] | None = None, *,
                  kafka_connector: bool = True) -> Any:
    """A local[2] SparkSession with ``format("headrace")`` registered (imports pyspark
    late: the producer processes do not need it). ``extra`` settings are applied last;
    ``kafka_connector`` puts Spark's own ``format("kafka")`` on the classpath when its jars
    were built."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from headrace.spark import register
    from headrace.spark.session import kafka_connector_jars

    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "4g"))
    jars = kafka_connector_jars() if kafka_connector else []
    if jars:  # Spark's own format("kafka")
        builder = builder.config("spark.jars", ",".join(jars))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _no_cpu() -> float:
    return 0.0


def _progress(label: str | None, done: int, total: int, step: int) -> None:
    if label is not None and total >= 10 and done % max(1, total // 10) < step:
        print(f"  {label}: {done:,}/{total:,}", file=sys.stderr, flush=True)


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    partitions: int,
    *,
    broker_cpu: Callable[[], float] = _no_cpu,
    overrides: dict[str, object] | None = None,
    label: str | None = None,
) -> Phase:
    """Produce ``records`` values of ``size`` bytes round-robin over the partitions.

    Timed from the first ``produce()`` until ``flush()`` returns, i.e. until every record is
    acknowledged (acks=all). ``label`` turns on progress lines on stderr.
    """
    errors = DeliveryErrors()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_CONFIG,
            **(overrides or {}),
            "delivery.report.only.error": True,
            "on_delivery": errors,
        }
    )
    producer.list_topics(topic, timeout=10.0)  # warm the connection and metadata cache
    value = payload(size)
    send, poll = producer.produce, producer.poll
    cpu0 = broker_cpu()
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                send(topic, value, partition=i % partitions)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                poll(0.005)
        if i % 20_000 == 0:
            poll(0)
            _progress(label, i, records, 20_000)
    loop_s = time.perf_counter() - start
    remaining = producer.flush(PRODUCE_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    cpu = broker_cpu() - cpu0
    if remaining:
        raise RuntimeError(f"{remaining} records still unacknowledged after {PRODUCE_TIMEOUT_S}s")
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return Phase(records, records * size, elapsed, cpu, loop_s)


def consume(
    bootstrap: str,
    topic: str,
    records: int,
    partitions: int,
    *,
    broker_cpu: Callable[[], float] = _no_cpu,
    label: str | None = None,
    overrides: dict[str, object] | None = None,
) -> Phase:
    """Read ``records`` records back with a fresh consumer assigned at OFFSET_BEGINNING.

    Timed from the first batch received to the last; the first batch's records arrive
    together at the start, so the rate counts only the records after it.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG, **(overrides or {})})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = nbytes = 0
        first_count = first_bytes = 0
        first = last = 0.0
        cpu0 = broker_cpu()
        last_progress = time.monotonic()
        while count < records:
            # consume(n, timeout) waits for n records or the timeout: never ask for more
            # than remain, or the last batch would wait out the timeout.
            batch = consumer.consume(min(10_000, records - count), 0.5)
            if not batch:
                if time.monotonic() - last_progress > CONSUME_IDLE_TIMEOUT_S:
                    raise RuntimeError(f"consumer stalled at {count:,}/{records:,} records")
                continue
            now = time.perf_counter()
            for m in batch:
                if m.error() is not None:
                    raise RuntimeError(f"consume error: {m.error()}")
                nbytes += len(m.value() or b"")
            _progress(label, count + len(batch), records, len(batch))
            count += len(batch)
            if first == 0.0:
                first, first_count, first_bytes = now, count, nbytes
            last = now
            last_progress = time.monotonic()
        cpu = broker_cpu() - cpu0
    finally:
        consumer.close()
    if count != records:
        raise RuntimeError(f"consumed {count:,} records, expected {records:,}")
    if count == first_count:
        raise RuntimeError("every record arrived in the first batch; use more records")
    return Phase(count - first_count, nbytes - first_bytes, last - first, cpu)
