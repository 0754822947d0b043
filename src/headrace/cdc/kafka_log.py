"""The Kafka side every CDC connector shares (PostgreSQL's and MySQL's): creating its
topics, reading back the last offsets record it committed, and writing a batch of change
events together with the offsets record that says what the log now holds, in one Kafka
transaction.

The exactly-once rule lives here: a connector's position in the database's log is
committed in the same transaction as the events up to it, so after a crash it resumes
from what read_committed readers can see, never from what it merely sent. ``kafka`` is
the librdkafka configuration (``bootstrap.servers`` and any security settings).
Blocking; every failure is a ``CdcError``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.cdc.errors import CdcError

# (topic, key, value): a change event, a tombstone (value None) or an offsets record
Record = tuple[str, bytes, bytes | None]

KAFKA_LOG = logging.getLogger("headrace.cdc.librdkafka")
"""librdkafka's own log (its "Connection refused" retries would flood stderr): silent
unless a handler is added; what matters reaches the operator as one ``CdcError`` line."""
KAFKA_LOG.addHandler(logging.NullHandler())
KAFKA_LOG.propagate = False

# librdkafka's codes for "no broker answered": an unreachable cluster, not a refusal
_UNREACHABLE = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def kafka_config(bootstrap_servers: str, client_config: Mapping[str, Any]) -> dict[str, Any]:
    """A connector's librdkafka configuration: the brokers, librdkafka's log silenced
    (``KAFKA_LOG``), then the user's settings (``-X``)."""
    return {"bootstrap.servers": bootstrap_servers, "logger": KAFKA_LOG, **client_config}


def unreachable(kafka: Mapping[str, Any], timeout_s: float) -> CdcError:
    """The one-line error for a cluster that did not answer within ``timeout_s``."""
    return CdcError(f"cannot reach the Kafka brokers at {kafka['bootstrap.servers']} "
                    f"within {timeout_s:g} s (--timeout-seconds)")


def ensure_topics(kafka: Mapping[str, Any], topics: Sequence[str], offsets_topic: str,
                  timeout_s: float) -> None:
    """Create the event ``topics`` (one partition each: a table's changes keep their
    order) and the compacted ``offsets_topic``; those that exist are left as they are."""
    # log_level 4: an unreachable broker is our one line, not one per connection attempt
    admin = AdminClient({"log_level": 4, **kafka})
    wanted = [NewTopic(t, 1) for t in topics]
    wanted.append(NewTopic(offsets_topic, 1, config={"cleanup.policy": "compact"}))
    deadline = time.monotonic() + timeout_s
    for topic, future in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            future.result(max(0.1, deadline - time.monotonic()))
        except TimeoutError as e:
            raise unreachable(kafka, timeout_s) from e
        except KafkaException as e:
            code = e.args[0].code()
            if code in _UNREACHABLE:
                raise unreachable(kafka, timeout_s) from e
            if code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CdcError(f"cannot create {topic}: {e.args[0].str()}") from e


def last_offsets_record(kafka: Mapping[str, Any], offsets_topic: str, key: bytes,
                        timeout_s: float) -> dict[str, Any] | None:
    """The last committed offsets record under ``key`` (read_committed), or None."""
    consumer = Consumer({**kafka, "group.id": f"headrace-cdc-reader-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    found: dict[str, Any] | None = None
    try:
        consumer.assign([TopicPartition(offsets_topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    return found
                raise CdcError(f"reading {offsets_topic}: {err.str()}")
            if msg.key() == key:
                value = msg.value()
                found = None if value is None else json.loads(value)
        raise CdcError(f"timed out reading {offsets_topic}")
    finally:
        consumer.close()


def counted(events: Mapping[str, int], batch: Sequence[Record]) -> dict[str, int]:
    """``events`` (change events written per topic) plus those of ``batch``."""
    total = dict(events)
    for topic, _key, value in batch:
        if value is not None:
            total[topic] = total.get(topic, 0) + 1
    return total


def commit_batch(producer: Producer, batch: Sequence[Record], offsets_topic: str, key: bytes,
                 offsets: Mapping[str, Any], timeout_s: float) -> None:
    """``batch`` and the offsets record ``offsets`` (JSON, under ``key``) in one Kafka
    transaction of the transactional ``producer``. Returns once committed."""
    records = [*batch, (offsets_topic, key, json.dumps(dict(offsets)).encode())]
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str())

    try:
        producer.begin_transaction()
        for topic, record_key, value in records:
            while True:
                try:
                    producer.produce(topic, value, record_key, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(timeout_s)
    except KafkaException as e:
        raise CdcError(f"writing to Kafka failed: {e.args[0].str()}") from e
    if errors:
        raise CdcError(f"writing to Kafka failed: {errors[0]}")
