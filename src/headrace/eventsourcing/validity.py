"""Which records of the event topic are events: the one rule every reader applies.

Anything can write to a Kafka topic, so the event topic may hold records the store did not
write (a plain producer, a replayed backup, a bug). The store's writer never writes such a
record, but every reader must still decide what to do with one, and all of them must decide
the same: the aggregate loaded through the repository, the subscriptions and the Spark
projections (``projection.read_event_log``) all call ``classify`` below, in offset order
within a partition, so they agree on every record.

**The rule.** A record of partition ``p`` of the event topic is an *event* if and only if

1. its value is an event envelope (``events.decode_envelope``);
2. its key is the envelope's aggregate id (UTF-8) and ``p`` is that key's partition
   (Kafka's default partitioner, murmur2 modulo the topic's partition count);
3. its version is exactly one more than the version of the aggregate's last *event* before
   it in the partition (1 for the first).

Every other record is **quarantined**: a second "version 3", a version that skips ahead, a
record keyed by one aggregate but naming another, one in the wrong partition, a value that
is not an envelope. A quarantined record is skipped by every read path, changes no
aggregate, no version, no command id and no read model, and is reported (``Quarantined``:
topic, partition, offset, aggregate id, version, the version expected and why): the store
logs it once per process at WARNING and lists it (``EventStore.quarantined``), a
subscription counts it (``Subscription.quarantined``), and the Spark side has it as rows
(``projection.read_quarantine``, written by convention to ``<topic>.quarantine``).

What the rule cannot tell: a record from another producer that carries exactly the next
version, the right key and partition is an event like any other (every reader agrees on
that too). The store's writer reads its own commits back in offset order, so if such a
record got in just before one of its appends, that append is refused rather than
half-counted (see ``writer``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from headrace.eventsourcing.errors import EventTypeError
from headrace.eventsourcing.events import StoredEvent, decode_envelope
from headrace.protocol.partitioner import java_partition


@dataclass(frozen=True)
class Quarantined:
    """A record of ``topic`` at ``partition``/``offset`` that is not an event, and why.
    ``aggregate_id`` is the envelope's id (else the key as text, or None); ``version`` the
    envelope's version and ``expected`` the one the rule wanted (None if not an envelope)."""

    topic: str
    partition: int
    offset: int
    aggregate_id: str | None
    version: int | None
    expected: int | None
    reason: str

    def describe(self) -> str:
        """One line for logs and errors."""
        who = f"aggregate {self.aggregate_id!r}" if self.aggregate_id is not None else "a record"
        return (f"{who} at {self.topic}[{self.partition}] offset {self.offset} is quarantined "
                f"(not an event; every reader skips it): {self.reason}")

    def to_json(self) -> str:
        """The quarantine topic's record value."""
        return json.dumps({"topic": self.topic, "partition": self.partition,
                           "offset": self.offset, "aggregate_id": self.aggregate_id,
                           "version": self.version, "expected": self.expected,
                           "reason": self.reason}, separators=(",", ":"))


def classify(topic: str, partitions: int, key: bytes | None, value: bytes | None,
             partition: int, offset: int, last_version: Callable[[str], int]
             ) -> StoredEvent | Quarantined:
    """Apply the rule to one record. ``last_version(aggregate_id)`` is the version of the
    aggregate's last event before this record in the partition (0 if none). Pure: the
    caller updates its own view with the event that comes back."""
    try:
        ev = decode_envelope(value, partition, offset)
    except EventTypeError:
        name = key.decode("utf-8", "replace") if key is not None else None
        return Quarantined(topic, partition, offset, name, None, None,
                           "the value is not an event envelope")
    if key != ev.aggregate_id.encode():
        shown = key.decode("utf-8", "replace") if key is not None else None
        return Quarantined(topic, partition, offset, ev.aggregate_id, ev.version, None,
                           f"the record's key {shown!r} is not its aggregate id")
    home = java_partition(key, partitions)
    if home != partition:
        return Quarantined(topic, partition, offset, ev.aggregate_id, ev.version, None,
                           f"the aggregate's events belong in partition {home}")
    expected = last_version(ev.aggregate_id) + 1
    if ev.version != expected:
        why = (f"the aggregate already has version {ev.version}" if ev.version < expected
               else f"it skips ahead of version {expected - 1}")
        return Quarantined(topic, partition, offset, ev.aggregate_id, ev.version, expected,
                           f"version {ev.version} is not the next version {expected}: {why}")
    return ev
