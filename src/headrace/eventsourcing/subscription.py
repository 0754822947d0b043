"""Subscriptions: every event of the store, catch-up then live, with a checkpoint.

A subscription is a Kafka consumer group (``read_committed``) on the event topic: it starts
from the beginning the first time and from its checkpoint (the group's committed offsets)
afterwards; after the history it keeps delivering new events as they are committed. Events
of one aggregate come in version order (they share a partition); across aggregates there is
one order per partition, as in Kafka. Several processes in one group share the partitions.
Delivery is at-least-once between checkpoints: a handler that stores the aggregate version
it last saw is exactly-once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from headrace.eventsourcing.errors import EventTypeError, StoreError
from headrace.eventsourcing.events import StoredEvent, decode_envelope
from headrace.eventsourcing.store import EventStore

Handler = Callable[[StoredEvent, Any], None]


class Subscription:
    """The subscription ``name`` to ``store``'s events. Not thread-safe; one per thread."""

    def __init__(self, store: EventStore, name: str) -> None:
        self.store = store
        self.name = name
        self.skipped = 0
        self._consumer = Consumer({
            **store.config, "group.id": name, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50})
        self._consumer.subscribe([store.topic])

    def poll(self, timeout: float = 1.0, max_events: int = 500) -> list[tuple[StoredEvent, Any]]:
        """The next events (stored form and decoded instance), waiting up to ``timeout`` s
        for the first. A record that is not an event is skipped (counted in ``skipped``)."""
        try:
            first = self._consumer.poll(timeout)
            if first is None:
                return []
            messages = [first, *self._consumer.consume(max_events - 1, 0)]
        except KafkaException as e:
            raise StoreError(f"subscription {self.name}: {e.args[0].str()}") from e
        out: list[tuple[StoredEvent, Any]] = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.fatal() or (not err.retriable()
                                   and err.code() != KafkaError._PARTITION_EOF):
                    raise StoreError(f"subscription {self.name}: {err.str()}")
                continue
            try:
                stored = decode_envelope(m.value(), m.partition() or 0, m.offset() or 0)
                out.append((stored, self.store.types.decode(stored)))
            except EventTypeError:
                self.skipped += 1
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
