"""Card-fraud data generator: users, cards and merchants in 42 world cities, normal card
traffic with network delay and late records, injected fraud with ground-truth labels, and
``run()`` to publish it all to a Kafka-protocol cluster.

- ``generate(config)`` yields ``GeneratedEvent``s in arrival order: every user's profile
  first, then transactions, malformed records and profile updates. Deterministic for a seed.
- ``FraudGenerator`` does the same and also reports the ``GroundTruth`` of what it yielded.
- ``run(bootstrap_servers, config)`` creates the topics, publishes the profiles, then the
  stream: paced on the wall clock (``realtime``, event times from now) or flat out.

The guarantees that separate normal traffic from fraud are listed in ``config.py``.

Records: transactions (key = card id, topic ``transactions``) are UTF-8 JSON
``{"txn_id", "card_id", "user_id", "merchant_id", "amount", "currency": "EUR", "lat",
"lon", "city", "country", "category", "event_time"}`` with ``event_time`` in epoch ms;
profiles (key = user id, compacted topic ``user-profiles``) are ``{"user_id", "home_city",
"home_lat", "home_lon", "avg_amount", "std_amount", "card_ids", "updated_at"}``.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from threading import Event
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.config import DEFAULT_START_MS, FraudConfig, FraudConfigError
from headrace.pipelines.fraud.stream import FraudGenerator, GeneratedEvent
from headrace.pipelines.fraud.truth import GroundTruth, Incident, Score

__all__ = [
    "DEFAULT_START_MS",
    "FraudConfig",
    "FraudConfigError",
    "FraudGenerator",
    "FraudRunError",
    "FraudTopics",
    "GeneratedEvent",
    "GroundTruth",
    "Incident",
    "Score",
    "ensure_topics",
    "generate",
    "run",
]

ProgressCallback = Callable[[int, float], None]
TIMEOUT_S = 30.0


class FraudRunError(PipelineError):
    """Publishing failed: a topic could not be created or records were not delivered."""


@dataclass(frozen=True)
class FraudTopics:
    """Where ``run`` publishes: transactions keyed by card id, profiles (compacted) by user.
    ``replication_factor`` -1: the cluster's ``default.replication.factor``."""

    transactions: str = "transactions"
    profiles: str = "user-profiles"
    transaction_partitions: int = 4
    replication_factor: int = -1


def generate(config: FraudConfig | None = None) -> Iterator[GeneratedEvent]:
    """All records of ``config``'s run in arrival order (profiles first), lazily; use a
    ``FraudGenerator`` to also get the ground truth."""
    return FraudGenerator(config or FraudConfig()).events()


def ensure_topics(bootstrap_servers: str, topics: FraudTopics,
                  client_config: Mapping[str, Any] | None = None) -> None:
    """Create the transactions topic and the compacted profiles topic unless they exist.
    Blocks until the cluster answers; idempotent. ``FraudRunError`` on any other failure."""
    admin = AdminClient({"log_level": 4, **(client_config or {}),
                         "bootstrap.servers": bootstrap_servers})
    new = [NewTopic(topics.transactions, num_partitions=topics.transaction_partitions,
                    replication_factor=topics.replication_factor),
           NewTopic(topics.profiles, num_partitions=1,
                    replication_factor=topics.replication_factor,
                    config={"cleanup.policy": "compact"})]
    futures = admin.create_topics(new, request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
    for name, future in futures.items():
        try:
            future.result(TIMEOUT_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise FraudRunError(f"cannot create topic {name!r}: {e}") from e
        except concurrent.futures.TimeoutError as e:
            raise FraudRunError(f"cannot create topic {name!r}: no answer in "
                                f"{TIMEOUT_S:g} s") from e


def run(bootstrap_servers: str, config: FraudConfig | None = None, *,
        topics: FraudTopics | None = None, realtime: bool = True, stop: Event | None = None,
        on_progress: ProgressCallback | None = None, truth_path: str | Path | None = None,
        producer_config: Mapping[str, Any] | None = None,
        progress_interval_s: float = 0.5,
        generator: FraudGenerator | None = None,
        before_stream: Callable[[], None] | None = None,
        encode_transaction: Callable[[bytes], bytes] | None = None,
        profile_sink: Callable[[list[GeneratedEvent]], None] | None = None) -> GroundTruth:
    """Publish one generated run and return its ground truth. Blocks until done or stopped.

    Creates the topics if missing (``ensure_topics``), publishes every profile, then the
    stream with confluent-kafka (key = card id, Kafka's murmur2 partitioner, lz4, idempotent,
    ``acks=all``). ``realtime``: the stream starts at the wall clock once the profiles are
    flushed (``config.start_ms`` is ignored) and each record is sent at its ``arrival_ms``,
    so detection latency is alert time minus ``event_time``; otherwise records go out as
    fast as the producer takes them, with the config's event times. Record timestamps are
    the producer's clock either way (retention must not see the default 2026 event times).

    ``stop`` (checked between records and while pacing) ends the run early: the record in
    hand is still sent, and the truth covers exactly the records sent (incidents cut short
    are listed as partial). ``on_progress(sent, elapsed_s)`` is called from this thread every
    ``progress_interval_s`` and once at the end. ``generator`` (built from ``config`` when
    not given) lets a caller watch ``generator.truth()`` while it runs (best effort: the
    generator is not thread-safe). ``before_stream`` is called once the profiles are
    acknowledged, before the first transaction: a demo or test waits there for its pipeline
    to load them. ``encode_transaction`` turns each transaction value into its wire form
    (Avro through a registry: ``avro.TransactionEncoder.encode``). ``profile_sink`` takes
    the profiles instead of the profile topic (all initial ones in one call, then each
    update): ``profiles_db.ProfileTable.write`` keeps them in PostgreSQL, from where CDC
    brings them into the log. The truth is also written to
    ``truth_path`` if given. ``FraudRunError`` if a record is not acknowledged.
    """
    config = generator.config if generator is not None else config or FraudConfig()
    topics = topics or FraudTopics()
    generator = generator or FraudGenerator(config)
    ensure_topics(bootstrap_servers, topics, producer_config)
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"compression.type": "lz4", "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "partitioner": "murmur2_random",
                         **(producer_config or {}), "bootstrap.servers": bootstrap_servers,
                         "on_delivery": delivered})
    t0 = time.monotonic()
    sender = _Sender(producer, t0, on_progress, progress_interval_s)
    start = _now_ms() if realtime else config.start_ms
    initial = generator.profile_events(start)
    if profile_sink is not None:
        profile_sink(list(initial))
        initial = iter(())
    for event in initial:
        sender.send(topics.profiles, event)
        if stop is not None and stop.is_set():
            break
    else:
        sender.flush(errors)
        if before_stream is not None:
            before_stream()
        if realtime:
            start = _now_ms()
        for event in generator.stream(start):
            if realtime:
                _wait_until(producer, event.arrival_ms, stop)
            if event.kind == "profile" and profile_sink is not None:
                profile_sink([event])
            elif event.kind == "profile":
                sender.send(topics.profiles, event)
            else:
                sender.send(topics.transactions, event, encode_transaction)
            if stop is not None and stop.is_set():
                break
    sender.flush(errors)
    truth = generator.truth()
    if truth_path is not None:
        Path(truth_path).write_text(truth.to_json(), encoding="utf-8")
    if on_progress is not None:
        on_progress(sender.sent, time.monotonic() - t0)
    return truth


class _Sender:
    def __init__(self, producer: Producer, t0: float, on_progress: ProgressCallback | None,
                 interval: float) -> None:
        self.producer, self.t0 = producer, t0
        self.on_progress, self.interval = on_progress, interval
        self.sent = 0
        self.next_progress = t0 + interval

    def send(self, topic: str, event: GeneratedEvent,
             encode: Callable[[bytes], bytes] | None = None) -> None:
        value = event.value if encode is None else encode(event.value)
        while True:
            try:
                self.producer.produce(topic, value, event.key)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1
        if self.sent % 1000 == 0:
            self.producer.poll(0)
        if self.on_progress is not None:
            now = time.monotonic()
            if now >= self.next_progress:
                self.next_progress = now + self.interval
                self.on_progress(self.sent, now - self.t0)

    def flush(self, errors: list[KafkaError]) -> None:
        left = self.producer.flush(TIMEOUT_S)
        if errors:
            raise FraudRunError(f"{len(errors)} records not delivered, first: {errors[0]}")
        if left:
            raise FraudRunError(f"{left} records still undelivered after {TIMEOUT_S:g} s")


def _wait_until(producer: Producer, arrival_ms: int, stop: Event | None) -> None:
    """Serve delivery reports until the wall clock reaches ``arrival_ms`` or ``stop``."""
    while stop is None or not stop.is_set():
        wait_s = (arrival_ms - _now_ms()) / 1000
        if wait_s <= 0:
            return
        producer.poll(min(wait_s, 0.1))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
