"""Errors of the event store (``headrace.eventsourcing``)."""

from __future__ import annotations

from headrace.errors import HeadraceError


class EventSourcingError(HeadraceError):
    """Base class of event-store errors."""


class ConcurrencyError(EventSourcingError):
    """An append expected a version the aggregate is no longer (or not yet) at: another
    writer appended first. Nothing of the append was written; reload and decide again."""

    def __init__(self, aggregate_id: str, expected: int, actual: int) -> None:
        super().__init__(f"aggregate {aggregate_id!r}: expected version {expected}, but it is "
                         f"at version {actual} (another writer appended first)")
        self.aggregate_id = aggregate_id
        self.expected = expected
        self.actual = actual


class StoreError(EventSourcingError):
    """The log could not be read or written (broker unreachable, wrong topic layout,
    transaction failed). An append that fails with it may or may not have been committed:
    retry it with the same command id, which never applies twice."""


class EventTypeError(EventSourcingError):
    """An event type is unknown, registered twice, or its payload cannot be decoded
    (including a missing upcaster between two schema versions)."""


class AggregateNotFound(EventSourcingError):
    """The aggregate has no events (at the time or version asked for)."""
