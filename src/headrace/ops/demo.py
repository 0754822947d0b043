"""``headrace demo``: card payments through a broker, read back and verified.

Runs entirely through confluent-kafka against an ``EmbeddedBroker`` (or a broker the caller
names): creates a topic, produces keyed JSON payments (acks=all, lz4), reads them back with a
manually assigned consumer (no group) and checks that every record came back, that each
card's payments kept their order, and that each card landed on the partition Java's murmur2
partitioner picks.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from headrace.ops.clients import ClientSession, error_text
from headrace.ops.demo_report import Check, DemoReport
from headrace.ops.errors import TopicExistsError
from headrace.ops.produce import DeliveryTally
from headrace.ops.topics import TopicAdmin
from headrace.protocol.partitioner import java_partition

Progress = Callable[[str], object]
_MERCHANTS = (
    "Blue Bottle Coffee", "Lidl", "Shell", "Amazon EU", "Uber", "Deutsche Bahn", "IKEA",
    "Zalando", "Spotify", "Apotheke am Markt", "Carrefour", "Steam",
)  # fmt: skip


@dataclass(frozen=True)
class DemoSettings:
    """The demo's knobs; ``read_timeout`` bounds how long reading back may stall."""

    records: int = 5000
    partitions: int = 3
    topic: str = "demo-payments"
    cards: int = 200
    seed: int = 7
    read_timeout: float = 30.0


def run_demo(
    settings: DemoSettings, bootstrap_servers: str | None, progress: Progress
) -> DemoReport:
    """Run the demo against ``bootstrap_servers``, or an embedded broker when it is None.

    Blocks for the whole run; ``progress`` receives one line per step. Failed verification is
    reported in ``DemoReport.checks``; broker or client failures raise ``OpsError``.
    """
    started = time.monotonic()
    if bootstrap_servers is not None:
        return _run(
            settings, bootstrap_servers, f"broker at {bootstrap_servers}", None, started, progress
        )
    from headrace.testing import EmbeddedBroker

    progress("Starting an embedded broker ...")
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        startup = time.monotonic() - started
        return _run(settings, servers, f"embedded broker at {servers}", startup, started, progress)


def _run(
    settings: DemoSettings,
    servers: str,
    broker: str,
    startup: float | None,
    started: float,
    progress: Progress,
) -> DemoReport:
    payments = _payments(settings)
    admin = TopicAdmin(servers)
    try:
        admin.create(settings.topic, settings.partitions)
        progress(f"Created topic {settings.topic} with {settings.partitions} partitions.")
    except TopicExistsError:
        progress(f"Topic {settings.topic} exists already; appending to it.")
    partitions = admin.partition_count(settings.topic)
    start_offsets = _end_offsets(servers, settings.topic, partitions)

    progress(f"Producing {len(payments)} payments (acks=all, lz4) ...")
    t0 = time.monotonic()
    deliveries = _produce(servers, settings.topic, payments)
    produce_seconds = time.monotonic() - t0

    progress("Reading them back ...")
    t0 = time.monotonic()
    consumed, read_error = _consume(
        servers, settings.topic, start_offsets, len(payments), settings.read_timeout
    )
    consume_seconds = time.monotonic() - t0

    return DemoReport(
        broker=broker,
        topic=settings.topic,
        partitions=partitions,
        produced=sum(deliveries.per_partition.values()),
        consumed=len(consumed),
        cards=len({key for key, _ in payments}),
        payload_bytes=sum(len(k) + len(v) for k, v in payments),
        per_partition=MappingProxyType(dict(sorted(deliveries.per_partition.items()))),
        startup_seconds=startup,
        produce_seconds=produce_seconds,
        consume_seconds=consume_seconds,
        total_seconds=time.monotonic() - started,
        checks=_verify(payments, deliveries, consumed, read_error, partitions),
    )


def _payments(settings: DemoSettings) -> list[tuple[bytes, bytes]]:
    """Deterministic (key, JSON value) pairs; ``seq`` numbers each card's payments from 0."""
    rng = random.Random(settings.seed)
    seq: Counter[str] = Counter()
    ts = int(time.time() * 1000)
    out = []
    for _ in range(settings.records):
        card = f"card-{rng.randrange(settings.cards):04d}"
        ts += rng.randrange(1, 20)
        value = {
            "card_id": card,
            "seq": seq[card],
            "amount": round(rng.lognormvariate(3.0, 1.0), 2),
            "currency": "EUR",
            "merchant": rng.choice(_MERCHANTS),
            "ts": ts,
        }
        seq[card] += 1
        out.append((card.encode(), json.dumps(value, separators=(",", ":")).encode()))
    return out


def _end_offsets(servers: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log end offset: where this run's records will start."""
    session = ClientSession(Consumer, servers, {"group.id": "headrace-demo-no-group"})
    consumer = session.client
    try:
        session.metadata(topic)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _produce(servers: str, topic: str, payments: list[tuple[bytes, bytes]]) -> DeliveryTally:
    producer = ClientSession(
        Producer,
        servers,
        {
            "acks": "all",
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "message.timeout.ms": 30_000,
        },
    ).client
    deliveries = DeliveryTally()
    for key, value in payments:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=deliveries)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(40)
    return deliveries


def _consume(
    servers: str, topic: str, start: dict[int, int], expected: int, idle_timeout: float
) -> tuple[list[tuple[int, bytes, bytes]], str | None]:
    """Read ``expected`` records from ``start``, giving up after ``idle_timeout`` s without one.

    Returns (partition, key, value) triples in read order, and the first error reported.
    """
    consumer = ClientSession(
        Consumer, servers, {"group.id": "headrace-demo-no-group", "enable.auto.commit": False}
    ).client
    out: list[tuple[int, bytes, bytes]] = []
    first_error: KafkaError | None = None
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in start.items()])
        deadline = time.monotonic() + idle_timeout
        while len(out) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                if error is not None:
                    first_error = first_error or error
                else:
                    out.append(
                        (message.partition() or 0, message.key() or b"", message.value() or b"")
                    )
                    deadline = time.monotonic() + idle_timeout
    finally:
        consumer.close()
    return out, (error_text(first_error) if first_error else None)


def _verify(
    payments: list[tuple[bytes, bytes]],
    deliveries: DeliveryTally,
    consumed: list[tuple[int, bytes, bytes]],
    read_error: str | None,
    partitions: int,
) -> tuple[Check, ...]:
    sent: defaultdict[bytes, list[bytes]] = defaultdict(list)
    for key, value in payments:
        sent[key].append(value)
    got: defaultdict[bytes, list[bytes]] = defaultdict(list)
    placed: defaultdict[bytes, set[int]] = defaultdict(set)
    for partition, key, value in consumed:
        got[key].append(value)
        placed[key].add(partition)
    failed = (
        f"; first error: {error_text(deliveries.first_error)}" if deliveries.first_error else ""
    )
    disordered = sum(1 for key, values in sent.items() if got.get(key) != values)
    misplaced = sum(
        1 for key, parts in placed.items() if parts != {java_partition(key, partitions)}
    )
    return (
        Check(
            "acknowledged",
            deliveries.failed == 0 and sum(deliveries.per_partition.values()) == len(payments),
            f"{sum(deliveries.per_partition.values())} of {len(payments)} records acknowledged"
            f"{failed}",
        ),
        Check(
            "read back",
            len(consumed) == len(payments),
            f"{len(consumed)} of {len(payments)} records read back"
            + (f"; first error: {read_error}" if read_error else ""),
        ),
        Check(
            "per-card order",
            disordered == 0,
            f"{len(sent) - disordered} of {len(sent)} cards read back complete and in order",
        ),
        Check(
            "murmur2 placement",
            misplaced == 0,
            f"{len(placed) - misplaced} of {len(placed)} cards on the partition Java's murmur2 picks",
        ),
    )
