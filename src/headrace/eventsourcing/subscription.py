"""Subscriptions: every event of the store, catch-up then live, with a checkpoint.

A subscription is a Kafka consumer group (``read_committed``) on the event topic: it starts
from the beginning the first time and from its checkpoint (the group's committed offsets)
afterwards; after the history it keeps delivering new events as they are committed. Events
of one aggregate come in version order (they share a partition); across aggregates there is
one order per partition, as in Kafka. Several processes in one group share the partitions.
Delivery is at-least-once between checkpoints: a handler that stores the aggregate version
it last saw is exactly-once.

A record that is not an event (``validity``: a duplicate or skipped version, a foreign
record) is never delivered: the subscription asks its store, whose index classifies every
record of the partition in order (so it reads each partition once more, from the store's
position), and counts what it skips in ``skipped`` and ``quarantined``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from headrace.eventsourcing.errors import StoreError
from headrace.eventsourcing.events import StoredEvent, decode_envelope
from headrace.eventsourcing.store import EventStore
from headrace.eventsourcing.validity import Quarantined

Handler = Callable[[StoredEvent, Any], None]


class Subscription:
    """The subscription ``name`` to ``store``'s events. Not thread-safe; one per thread."""

    def __init__(self, store: EventStore, name: str) -> None:
        self.store = store
        self.name = name
        self.skipped = 0
        self.quarantined: list[Quarantined] = []
        self._consumer = Consumer({
            **store.config, "group.id": name, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50})
        self._consumer.subscribe([store.topic])

    def poll(self, timeout: float = 1.0, max_events: int = 500) -> list[tuple[StoredEvent, Any]]:
        """The next events (stored form and decoded instance), waiting up to ``timeout`` s
        for the first. A record that is not an event (``validity``) is skipped: counted in
        ``skipped`` and kept in ``quarantined``. Raises ``EventTypeError`` for an event
        this code cannot decode (unknown type, missing upcaster), ``StoreError`` if the
        log cannot be read."""
        try:
            first = self._consumer.poll(timeout)
            if first is None:
                return []
            messages = [first, *self._consumer.consume(max_events - 1, 0)]
        except KafkaException as e:
            raise StoreError(f"subscription {self.name}: {e.args[0].str()}") from e
        records = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.fatal() or (not err.retriable()
                                   and err.code() != KafkaError._PARTITION_EOF):
                    raise StoreError(f"subscription {self.name}: {err.str()}")
                continue
            records.append(m)
        ends: dict[int, int] = {}
        for m in records:
            ends[m.partition() or 0] = max(ends.get(m.partition() or 0, 0), m.offset() or 0)
        quarantined = {(q.partition, q.offset): q for p, end in ends.items()
                       for q in self.store.quarantined(p, until=end)}
        out: list[tuple[StoredEvent, Any]] = []
        for m in records:
            partition, offset = m.partition() or 0, m.offset() or 0
            bad = quarantined.get((partition, offset))
            if bad is not None:
                self.skipped += 1
                self.quarantined.append(bad)
                continue
            stored = decode_envelope(m.value(), partition, offset)
            out.append((stored, self.store.types.decode(stored)))
        return out

    def checkpoint(self) -> None:
        """Commit the position after the events returned so far (synchronously)."""
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise StoreError(f"subscription {self.name}: checkpoint failed: "
                                 f"{e.args[0].str()}") from e

    def run(self, handler: Handler, stop: threading.Event, idle: float = 0.2) -> None:
        """Call ``handler(stored, event)`` for each event until ``stop`` is set,
        checkpointing after each batch."""
        while not stop.is_set():
            events = self.poll(idle)
            for stored, event in events:
                handler(stored, event)
            if events:
                self.checkpoint()

    def close(self) -> None:
        """Leave the group (the checkpoint stays)."""
        self._consumer.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
