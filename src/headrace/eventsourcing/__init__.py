"""Event sourcing and CQRS on the log (seed 003): the log is the system of record.

- ``events``: typed events (dataclasses), their stored names, schema versions, upcasters,
  and the JSON envelope each event is stored in (one Kafka record per event, keyed by
  aggregate id).
- ``aggregate`` / ``repository``: aggregates folded from events (snapshot + tail, or as of a
  version or a time), commands that decide new events and append them expecting the version
  they saw; idempotent by command id.
- ``store`` / ``writer``: the event and snapshot topics; **expected-version appends on any
  Kafka-protocol broker** through one fenced transactional writer per partition (the
  reasoning is in ``writer``'s docstring).
- ``validity``: which records of the topic are events; the rule every reader applies, so
  a record another producer wrote is quarantined (skipped and reported) alike everywhere.
- ``subscription``: all events in order per aggregate, catch-up then live, checkpointed.
- ``projection``: CQRS read models as Spark Structured Streaming queries over the events.
"""

from headrace.eventsourcing.aggregate import Aggregate
from headrace.eventsourcing.errors import (
    AggregateNotFound,
    ConcurrencyError,
    EventSourcingError,
    EventTypeError,
    StoreError,
)
from headrace.eventsourcing.events import EventTypes, StoredEvent
from headrace.eventsourcing.index import AppendResult
from headrace.eventsourcing.repository import Repository
from headrace.eventsourcing.store import EventStore, Snapshot
from headrace.eventsourcing.subscription import Subscription
from headrace.eventsourcing.validity import Quarantined

__all__ = [
    "Aggregate", "AggregateNotFound", "AppendResult", "ConcurrencyError", "EventSourcingError",
    "EventStore", "EventTypeError", "EventTypes", "Quarantined", "Repository", "Snapshot",
    "StoreError", "StoredEvent", "Subscription",
]
