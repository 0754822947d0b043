"""Loading aggregates (snapshot + tail, or as of a version or a time) and running commands."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from headrace.eventsourcing.aggregate import Aggregate
from headrace.eventsourcing.errors import AggregateNotFound, ConcurrencyError, StoreError
from headrace.eventsourcing.events import StoredEvent
from headrace.eventsourcing.index import AppendResult
from headrace.eventsourcing.store import EventStore, Snapshot

A = TypeVar("A", bound=Aggregate)
Decide = Callable[[A], Sequence[Any]]


def epoch_ms(at: dt.datetime | int) -> int:
    """Milliseconds since the epoch of a datetime (naive means UTC) or of an int as is."""
    if isinstance(at, int):
        return at
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)


class Repository(Generic[A]):
    """Aggregates of class ``cls`` in ``store``. With ``snapshot_every=N`` a snapshot is
    written each time a command crosses a multiple of N events; loads use the latest
    snapshot when one is usable. Thread-safe (each call works on its own instance)."""

    def __init__(self, store: EventStore, cls: type[A], *, snapshot_every: int = 0) -> None:
        self.store = store
        self.cls = cls
        self.snapshot_every = snapshot_every

    def load(self, aggregate_id: str, *, version: int | None = None,
             at: dt.datetime | int | None = None, use_snapshot: bool | None = None) -> A:
        """The aggregate folded from its events, all of them, or up to ``version``, or up to
        those recorded at or before ``at`` (time travel). An aggregate without events
        (then) comes back at version 0. ``use_snapshot`` (default: when this repository
        writes snapshots) starts from the latest usable snapshot."""
        until = None if at is None else epoch_ms(at)
        agg = self.cls(aggregate_id)
        start = 0
        if use_snapshot is None:
            use_snapshot = self.snapshot_every > 0
        snap = self.store.snapshot(aggregate_id) if use_snapshot else None
        if snap is not None and self._usable(snap, version, until):
            agg.restore_state(snap.state)
            agg.version, agg.recorded_at, start = snap.version, snap.recorded_at, snap.offset + 1
        events = self.store.read(aggregate_id, from_offset=start, after_version=agg.version,
                                 to_version=version, until_time=until)
        self._fold(agg, events)
        return agg

    def get(self, aggregate_id: str, **kwargs: Any) -> A:
        """``load``, but ``AggregateNotFound`` for an aggregate without events."""
        agg = self.load(aggregate_id, **kwargs)
        if agg.version == 0:
            raise AggregateNotFound(f"{self.cls.type_name()} {aggregate_id!r} has no events")
        return agg

    def execute(self, aggregate_id: str, decide: Decide[A], *, command_id: str | None = None,
                retries: int = 0) -> tuple[A, AppendResult | None]:
        """Load the aggregate, run ``decide`` on it (a command: it returns the events to
        append or raises to reject) and append them expecting the loaded version. On a
        ``ConcurrencyError`` reload and decide again up to ``retries`` times, then re-raise.
        With ``command_id`` the command applies at most once, across crashes and processes:
        a repeat returns the current aggregate and the first result (``duplicate=True``),
        even if the command would now be rejected. Returns the aggregate after the command
        and the append's result (None if the command decided no events).

        A rejection is confirmed before it is raised: the store is refreshed (a takeover of
        the partition, which sees every acknowledged commit) and the command decided once
        more, so a load that lagged another process's commit never rejects wrongly."""
        conflicts = 0
        confirmed = False
        while True:
            agg = self.load(aggregate_id)
            try:
                events = list(decide(agg))
            except Exception:
                if not confirmed:  # the load may have missed a commit: confirm, re-decide
                    confirmed = True
                    self.store.refresh(aggregate_id)
                    continue
                earlier = (self.store.command_result(aggregate_id, command_id)
                           if command_id else None)
                if earlier is not None:
                    return self.load(aggregate_id), earlier
                raise
            if not events:
                return agg, None
            try:
                result = self.store.append(aggregate_id, events, expected_version=agg.version,
                                           aggregate_type=self.cls.type_name(),
                                           command_id=command_id)
            except ConcurrencyError:
                conflicts += 1
                if conflicts > retries:
                    raise
                continue
            if result.duplicate:
                return self.load(aggregate_id), result
            for event in events:
                agg.apply(event)
            agg.version, agg.recorded_at = result.last_version, result.recorded_at
            self._maybe_snapshot(agg, result)
            return agg, result

    def snapshot(self, agg: A, offset: int) -> None:
        """Write a snapshot of ``agg`` whose last event is at ``offset``."""
        self.store.save_snapshot(Snapshot(agg.id, self.cls.type_name(), agg.version, offset,
                                          agg.recorded_at, self.cls.snapshot_schema,
                                          agg.snapshot_state()))

    def _maybe_snapshot(self, agg: A, result: AppendResult) -> None:
        n = self.snapshot_every
        if n > 0 and result.last_version // n > (result.first_version - 1) // n:
            self.snapshot(agg, result.offsets[-1])

    def _usable(self, snap: Snapshot, version: int | None, until: int | None) -> bool:
        return (snap.aggregate_type == self.cls.type_name()
                and snap.schema == self.cls.snapshot_schema
                and (version is None or snap.version <= version)
                and (until is None or snap.recorded_at <= until))

    def _fold(self, agg: A, events: list[StoredEvent]) -> None:
        for ev in events:
            # The store hands out events only (``validity`` quarantines the rest), so this
            # fails only if the store itself broke its contract.
            if ev.version != agg.version + 1:
                raise StoreError(f"{self.cls.type_name()} {agg.id!r}: version {ev.version} "
                                 f"follows {agg.version} in {self.store.topic}[{ev.partition}] "
                                 f"at offset {ev.offset}; the log is not a valid history")
            agg.apply(self.store.types.decode(ev))
            agg.version, agg.recorded_at = ev.version, ev.recorded_at
