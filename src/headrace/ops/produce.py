"""``headrace produce``: one record per input line, through confluent-kafka's ``Producer``.

Keyed records are placed by librdkafka's ``murmur2_random`` partitioner, which is Kafka's
Java default: ``toPositive(murmur2(key)) % partitions``, so a key lands on the partition a Java
client would choose. Records without a key go to a random partition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from headrace.ops.clients import REQUEST_TIMEOUT_S, ClientSession, error_text, kafka_error
from headrace.ops.errors import DeliveryError, InvalidInputError

# How long librdkafka may keep retrying one record before reporting it failed.
DELIVERY_TIMEOUT_S = 30.0
ACKS_CHOICES = ("all", "1", "0")


@dataclass(frozen=True)
class ProduceOptions:
    """What to produce where. ``key_separator`` None: lines are values without keys."""

    bootstrap_servers: str
    topic: str
    key_separator: bytes | None = None
    partition: int | None = None
    acks: str = "all"
    timeout: float = REQUEST_TIMEOUT_S


@dataclass(frozen=True)
class ProduceResult:
    """Records acknowledged by the broker, in total and per partition."""

    records: int
    per_partition: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))


class DeliveryTally:
    """A producer's ``on_delivery`` callback counting acknowledged and failed records.

    librdkafka calls it from ``poll``/``flush`` on the producing thread; no locking needed.
    """

    def __init__(self) -> None:
        self.per_partition: Counter[int] = Counter()
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or error
        else:
            self.per_partition[message.partition() or 0] += 1


def produce_lines(lines: Iterable[bytes], options: ProduceOptions) -> ProduceResult:
    """Produce each line of ``lines`` (``\\n`` or ``\\r\\n`` stripped) as one record.

    Blocks until every record is acknowledged (per ``options.acks``) or failed. With a key
    separator, the bytes before its first occurrence are the key; a line without it stops the
    input (``InvalidInputError``) after the records before it were delivered. Raises
    ``DeliveryError`` if any record failed, ``UnknownTopicError`` if the topic or the requested
    partition does not exist (a broker that auto-creates topics creates it instead).
    """
    session = ClientSession(
        Producer,
        options.bootstrap_servers,
        {
            "acks": options.acks,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
        },
        options.timeout,
    )
    producer = session.client
    # Fails fast for a missing topic or partition (a producer's metadata request may
    # auto-create the topic, as Kafka's producers do).
    session.partitions(options.topic, None if options.partition is None else [options.partition])
    deliveries = DeliveryTally()
    try:
        sent, bad_line = _send_all(producer, lines, options, deliveries)
    finally:
        # Also on Ctrl-C or a rejected record: what was queued still gets its chance.
        unfinished = producer.flush(DELIVERY_TIMEOUT_S + 5)
    acked = sum(deliveries.per_partition.values())
    if unfinished or deliveries.failed:
        if deliveries.first_error is not None:
            reason = error_text(deliveries.first_error)
        else:
            reason = f"no acknowledgement within {DELIVERY_TIMEOUT_S:g} s"
        raise DeliveryError(
            f"{sent - acked} of {sent} records were not delivered to {options.topic!r}: {reason}"
        )
    if bad_line is not None:
        separator = (options.key_separator or b"").decode(errors="replace")
        raise InvalidInputError(
            f"line {bad_line} has no key separator {separator!r}; "
            f"records produced before it: {acked}"
        )
    return ProduceResult(acked, MappingProxyType(dict(sorted(deliveries.per_partition.items()))))


def _send_all(
    producer: Producer, lines: Iterable[bytes], options: ProduceOptions, deliveries: DeliveryTally
) -> tuple[int, int | None]:
    """Queue every line; return (records queued, number of the first unkeyed line or None)."""
    sent = 0
    partition = -1 if options.partition is None else options.partition
    for line_number, raw in enumerate(lines, start=1):
        line = raw.removesuffix(b"\n").removesuffix(b"\r")
        key: bytes | None = None
        value = line
        if options.key_separator is not None:
            key, found, value = line.partition(options.key_separator)
            if not found:
                return sent, line_number
        while True:
            try:
                producer.produce(
                    options.topic, value=value, key=key, partition=partition, on_delivery=deliveries
                )
                break
            except BufferError:
                # The local queue is full: wait for acknowledgements to free room.
                producer.poll(0.1)
            except KafkaException as e:
                raise DeliveryError(
                    f"line {line_number} was rejected: {error_text(kafka_error(e))}"
                ) from e
        sent += 1
        producer.poll(0)
    return sent, None
