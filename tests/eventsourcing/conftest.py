"""Fixtures of the event-store tests: a store on each broker (headrace's and Apache Kafka),
and a plain Kafka consumer's view of the log to check the store against."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from headrace.eventsourcing import EventStore, Repository, StoredEvent
from headrace.eventsourcing.events import decode_envelope
from headrace.pipelines.bank.domain import Account, bank_events
from headrace.testing import scaled
from tests.conftest import AnyBroker


@pytest.fixture
def store(any_broker: AnyBroker, topic_name: str) -> Iterator[EventStore]:
    with EventStore(any_broker.bootstrap_servers, topic_name, bank_events,
                    timeout=scaled(30)) as s:
        yield s


@pytest.fixture
def accounts(store: EventStore) -> Repository[Account]:
    return Repository(store, Account)


def log_events(bootstrap: str, topic: str) -> list[StoredEvent]:
    """Every committed event of ``topic``, by a plain read_committed consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    parts = c.list_topics(topic, timeout=scaled(10)).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    found: list[StoredEvent] = []
    at_end: set[int] = set()
    while len(at_end) < len(parts):
        m = c.poll(scaled(30))
        assert m is not None, f"the log did not reach its end within {scaled(30):g} s"
        err = m.error()
        if err is not None:
            assert err.code() == KafkaError._PARTITION_EOF, err.str()
            at_end.add(m.partition() or 0)
            continue
        found.append(decode_envelope(m.value(), m.partition() or 0, m.offset() or 0))
    c.close()
    return found


def by_aggregate(events: list[StoredEvent]) -> dict[str, list[StoredEvent]]:
    grouped: dict[str, list[StoredEvent]] = {}
    for ev in sorted(events, key=lambda e: (e.partition, e.offset)):
        grouped.setdefault(ev.aggregate_id, []).append(ev)
    return grouped


def fold(events: list[StoredEvent]) -> Account:
    """A brute-force fold of an account's events, asserting the invariant at every step."""
    acc = Account(events[0].aggregate_id if events else "?")
    for ev in events:
        acc.apply(bank_events.decode(ev))
        acc.version, acc.recorded_at = ev.version, ev.recorded_at
        assert acc.balance >= 0, f"{acc.id} overdrawn at version {ev.version}"
    return acc
