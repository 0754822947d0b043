"""One produce and one consume adapter per real client, all with the same shape.

``<client>_produce(bootstrap, topic, records, codec)`` sends the records in order with one
producer, waits for every acknowledgement and returns where each landed (kcat cannot say:
``None``). ``<client>_consume(bootstrap, topic, partitions)`` reads the given partitions
from the beginning with manual assignment (no consumer group, no offset commits) until
each reaches its end offset, and returns every record. All calls block, are bounded by
``timeout`` seconds and fail loudly; none sleeps.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import scaled
from tests.compat.records import CLIENT_MAX_BYTES, Consumed, Delivered, Header, Record

TIMEOUT = 30.0  # before scaled(): each adapter scales its ``timeout`` where it waits
LINGER_MS = 20  # so each partition's records leave in one batch (and compress together)


def _headers(raw: Iterable[tuple[str, Any]] | None) -> tuple[Header, ...]:
    return tuple((k, None if v is None else bytes(v)) for k, v in (raw or ()))


def _codec(codec: str) -> str | None:
    return None if codec == "none" else codec


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with confluent-kafka's AdminClient (for tools that cannot)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, partitions, 1)], operation_timeout=scaled(TIMEOUT)
    ).values():
        future.result(timeout=scaled(TIMEOUT))


# --- confluent-kafka (librdkafka) -------------------------------------------------------


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> list[Delivered]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": LINGER_MS,
            "message.max.bytes": CLIENT_MAX_BYTES,
            "acks": "all",
        }
    )
    results: list[Delivered | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery(index: int) -> Any:
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                results[index] = Delivered(msg.partition(), msg.offset())

        return report

    for i, r in enumerate(records):
        kwargs: dict[str, Any] = {}
        if r.partition is not None:
            kwargs["partition"] = r.partition
        if r.timestamp_ms is not None:
            kwargs["timestamp"] = r.timestamp_ms
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            headers=list(r.headers) or None,
            on_delivery=on_delivery(i),
            **kwargs,
        )
    assert producer.flush(scaled(timeout)) == 0, "confluent producer did not flush in time"
    assert not errors, errors
    delivered = [d for d in results if d is not None]
    assert len(delivered) == len(records), "a delivery report is missing"
    return delivered


def confluent_consume(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = TIMEOUT
) -> list[Consumed]:
    # librdkafka insists on a group.id; with assign() and no commits it is never used.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "headrace-compat-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }
    )
    wanted = set(partitions)
    # Known leaders before assign() let librdkafka query the start offset at once instead
    # of on its 500 ms offset-query retry timer.
    consumer.list_topics(topic, timeout=scaled(timeout))
    consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
    out: list[Consumed] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + scaled(timeout)
    try:
        while at_end != wanted:
            assert time.monotonic() < deadline, f"confluent consumer: only {at_end} reached the end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            partition, offset, error = msg.partition(), msg.offset(), msg.error()
            assert partition is not None and offset is not None
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(partition)
                continue
            at_end.discard(partition)
            headers = msg.headers()
            out.append(
                Consumed(
                    partition,
                    offset,
                    msg.key(),
                    msg.value(),
                    _headers(headers.items() if isinstance(headers, dict) else headers),
                    msg.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return out


# --- kafka-python ------------------------------------------------------------------------


def kafka_python_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> list[Delivered]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=_codec(codec),
        linger_ms=LINGER_MS,
        max_request_size=CLIENT_MAX_BYTES,
        acks="all",
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp_ms,
            )
            for r in records
        ]
        producer.flush(scaled(timeout))
        metadata = [f.get(scaled(timeout)) for f in futures]
    finally:
        producer.close(scaled(timeout))
    return [Delivered(m.partition, m.offset) for m in metadata]


def kafka_python_consume(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = TIMEOUT
) -> list[Consumed]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    tps = [KpTopicPartition(topic, p) for p in partitions]
    out: list[Consumed] = []
    deadline = time.monotonic() + scaled(timeout)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, "kafka-python consumer did not reach the end"
            for batch in consumer.poll(timeout_ms=500).values():
                out += [
                    Consumed(
                        m.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp
                    )
                    for m in batch
                ]
    finally:
        consumer.close()
    return out


# --- aiokafka ------------------------------------------------------------------------------


async def aiokafka_produce_async(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> list[Delivered]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=_codec(codec),
        linger_ms=LINGER_MS,
        max_request_size=CLIENT_MAX_BYTES,
        acks="all",
        request_timeout_ms=int(scaled(timeout) * 1000),
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp_ms,
            )
            for r in records
        ]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), scaled(timeout))
    finally:
        await producer.stop()
    return [Delivered(m.partition, m.offset) for m in metadata]


async def aiokafka_consume_async(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = TIMEOUT
) -> list[Consumed]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    await consumer.start()
    tps = [AioTopicPartition(topic, p) for p in partitions]
    out: list[Consumed] = []
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in tps])

        async def drain() -> None:
            while await behind():
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(
                        Consumed(
                            m.partition, m.offset, m.key, m.value, _headers(m.headers), m.timestamp
                        )
                        for m in batch
                    )

        await asyncio.wait_for(drain(), scaled(timeout))
    finally:
        await consumer.stop()
    return out


def aiokafka_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> list[Delivered]:
    return asyncio.run(aiokafka_produce_async(bootstrap, topic, records, codec, timeout))


def aiokafka_consume(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = TIMEOUT
) -> list[Consumed]:
    return asyncio.run(aiokafka_consume_async(bootstrap, topic, partitions, timeout))


# --- kcat (librdkafka's command-line client) ---------------------------------------------

KEY_DELIMITER = "\x1f"  # ASCII unit separator: never inside a test key or value


def kcat(*args: str, stdin: bytes | None = None, timeout: float = TIMEOUT) -> bytes:
    """Run ``kcat`` with ``args``; return stdout, failing on a non-zero exit. Blocks."""
    proc = subprocess.run(
        ["kcat", "-q", *args], input=stdin, capture_output=True, timeout=scaled(timeout),
        check=False,
    )
    assert proc.returncode == 0, f"kcat {args} exited {proc.returncode}: {proc.stderr!r}"
    return proc.stdout


def _kcat_group(r: Record) -> tuple[int | None, tuple[Header, ...]]:
    return r.partition, r.headers


def _kcat_line(r: Record, nulls: bool) -> bytes:
    for part in (r.key, r.value):
        if part is not None and (b"\n" in part or KEY_DELIMITER.encode() in part):
            raise ValueError(f"kcat cannot send {r}: a delimiter inside the data")
    if nulls and (r.key == b"" or r.value == b""):
        raise ValueError(f"kcat -Z turns empty into null; cannot send {r}")
    value = r.value or b""
    return value if r.key is None else r.key + KEY_DELIMITER.encode() + value


def kcat_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> None:
    """One ``kcat -P`` per run of records sharing partition and headers (``-H`` applies to
    a whole run; so does ``-Z``, used when the run holds a null value). Lines are
    ``key<US>value``; a line without the delimiter has a null key. kcat cannot set
    timestamps, so records must not carry one."""
    for (partition, headers), run in groupby(records, key=_kcat_group):
        batch = list(run)
        nulls = any(r.value is None for r in batch)
        assert all(r.timestamp_ms is None for r in batch), "kcat cannot set timestamps"
        args = [
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-z",
            codec,
            "-K",
            "\\x1f",
            "-X",
            f"message.max.bytes={CLIENT_MAX_BYTES}",
            "-X",
            f"linger.ms={LINGER_MS}",
        ]
        if partition is not None:
            args += ["-p", str(partition)]
        for name, value in headers:
            args += ["-H", name if value is None else f"{name}={value.decode()}"]
        if nulls:
            args.append("-Z")
        kcat(*args, stdin=b"".join(_kcat_line(r, nulls) + b"\n" for r in batch), timeout=timeout)


def kcat_produce_file(
    bootstrap: str,
    topic: str,
    partition: int,
    key: bytes,
    path: str,
    codec: str = "none",
    timeout: float = TIMEOUT,
) -> None:
    """Send the whole file at ``path`` as one record (how kcat sends a large value)."""
    kcat(
        "-P",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-p",
        str(partition),
        "-k",
        key.decode(),
        "-z",
        codec,
        "-X",
        f"message.max.bytes={CLIENT_MAX_BYTES}",
        path,
        timeout=timeout,
    )


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def kcat_consume(
    bootstrap: str, topic: str, partitions: Iterable[int] | None = None, timeout: float = TIMEOUT
) -> list[Consumed]:
    """``kcat -C -o beginning -e -J``: every partition (or the given ones, one run each)
    from the start until its end. kcat uses assign, never a group."""
    runs: list[list[str]] = [[]] if partitions is None else [["-p", str(p)] for p in partitions]
    out: list[Consumed] = []
    for extra in runs:
        stdout = kcat(
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-J",
            "-X",
            "fetch.wait.max.ms=100",
            *extra,
            timeout=timeout,
        )
        for line in stdout.splitlines():
            m = json.loads(line)
            flat = m.get("headers") or []
            headers = tuple((flat[i], _utf8(flat[i + 1])) for i in range(0, len(flat), 2))
            out.append(
                Consumed(
                    m["partition"],
                    m["offset"],
                    _utf8(m["key"]),
                    _utf8(m["payload"]),
                    headers,
                    m["ts"],
                )
            )
    return out
