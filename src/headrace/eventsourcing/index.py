"""What a process knows of one partition of the event log: each aggregate's version and
offset span, and which command ids produced which versions.

The index is built by reading the partition once (``read_committed``) and then only its
tail, before each decision of the partition's writer and before each load; the writer also
folds in its own commits directly. It is what lets a load read only the aggregate's span
(first to last offset, or from its snapshot) instead of the whole partition, answer "no
such aggregate" without reading at all, and what the expected-version check and command-id
idempotence are decided on. Memory: about 200 bytes per aggregate and per command id.

Every record is classified in offset order by ``validity.classify`` (the rule all readers
share): only events are folded in; quarantined records are kept in ``quarantined`` (by
offset) and logged once at WARNING, so loads, the writer and subscriptions skip exactly
the records every other reader skips.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from headrace.eventsourcing.events import StoredEvent
from headrace.eventsourcing.reading import LogReader
from headrace.eventsourcing.validity import Quarantined, classify

log = logging.getLogger("headrace.eventsourcing")


@dataclass(frozen=True)
class AppendResult:
    """Where an append's events went: versions ``first_version..last_version`` of the
    aggregate at ``offsets`` of ``partition``. ``duplicate``: the command id had been
    applied before; nothing new was written and this describes the first application."""

    aggregate_id: str
    first_version: int
    last_version: int
    partition: int
    offsets: tuple[int, ...]
    recorded_at: int
    duplicate: bool = False


@dataclass
class Span:
    """An aggregate's events: up to ``version``, at offsets ``first_offset..last_offset``."""

    version: int
    first_offset: int
    last_offset: int


@dataclass
class PartitionIndex:
    """The index of ``topic``/``partition`` (of ``partitions``) up to ``position`` (the
    next offset to read): every offset below it has been classified. Mutate and read under
    ``lock``; ``catch_up`` takes it itself.

    It also caches the events of recently used aggregates (``cache_limit`` events in all,
    least recently used aggregates evicted whole), kept complete from each one's first
    event: a load of a cached aggregate reads nothing but the partition's new tail. Events
    of a partition are interleaved, so a miss reads the aggregate's whole offset span."""

    topic: str
    partition: int
    partitions: int
    cache_limit: int = 100_000
    spans: dict[str, Span] = field(default_factory=dict)
    cache: OrderedDict[str, list[StoredEvent]] = field(default_factory=OrderedDict)
    cached_events: int = 0
    commands: dict[tuple[str, str], AppendResult] = field(default_factory=dict)
    quarantined: dict[int, Quarantined] = field(default_factory=dict)
    last_time: int = 0
    position: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _reading: threading.Lock = field(default_factory=threading.Lock)

    def version(self, aggregate_id: str) -> int:
        span = self.spans.get(aggregate_id)
        return 0 if span is None else span.version

    def apply(self, ev: StoredEvent) -> None:
        """Fold in one record that ``classify`` found to be the aggregate's next event."""
        span = self.spans.get(ev.aggregate_id)
        if span is None:
            self.spans[ev.aggregate_id] = Span(ev.version, ev.offset, ev.offset)
            self.remember(ev.aggregate_id, [ev])
        elif ev.version > span.version:
            span.version, span.last_offset = ev.version, ev.offset
            cached = self.cache.get(ev.aggregate_id)
            if cached is not None and cached[-1].version == ev.version - 1:
                cached.append(ev)
                self.cached_events += 1
                self._evict()
        self.last_time = max(self.last_time, ev.recorded_at)
        self.position = max(self.position, ev.offset + 1)
        key = (ev.aggregate_id, ev.command_id)
        seen = self.commands.get(key)
        if seen is None:
            self.commands[key] = AppendResult(ev.aggregate_id, ev.version, ev.version,
                                              ev.partition, (ev.offset,), ev.recorded_at, True)
        elif ev.offset not in seen.offsets:
            self.commands[key] = AppendResult(
                ev.aggregate_id, min(seen.first_version, ev.version),
                max(seen.last_version, ev.version), ev.partition,
                tuple(sorted((*seen.offsets, ev.offset))), seen.recorded_at, True)

    def cached(self, aggregate_id: str) -> list[StoredEvent] | None:
        """The aggregate's events from its first, if cached (marks it recently used)."""
        events = self.cache.get(aggregate_id)
        if events is not None:
            self.cache.move_to_end(aggregate_id)
        return events

    def remember(self, aggregate_id: str, events: list[StoredEvent]) -> None:
        """Cache an aggregate's events, complete from version 1."""
        if not events or events[0].version != 1 or len(events) > self.cache_limit:
            return
        old = self.cache.pop(aggregate_id, None)
        self.cached_events += len(events) - (len(old) if old else 0)
        self.cache[aggregate_id] = events
        self._evict()

    def _evict(self) -> None:
        while self.cached_events > self.cache_limit and self.cache:
            _, dropped = self.cache.popitem(last=False)
            self.cached_events -= len(dropped)

    def catch_up(self, reader: LogReader, min_end: int = 0) -> None:
        """Read and classify what the partition gained since ``position``, up to its end;
        at least up to ``position`` itself and to ``min_end`` (a commit that must be
        readable before the caller goes on)."""
        with self._reading:
            start = self.position
            batch: list[tuple[int, bytes | None, bytes | None]] = []
            for m in reader.scan(self.topic, self.partition, start,
                                 min_end=max(start, min_end)):
                batch.append((m.offset() or 0, m.key(), m.value()))
                if len(batch) >= 500:
                    self._classify_all(batch)
                    batch = []
            self._classify_all(batch)

    def _classify_all(self, batch: list[tuple[int, bytes | None, bytes | None]]) -> None:
        with self.lock:
            self.classify_locked(batch)

    def classify_locked(self, batch: list[tuple[int, bytes | None, bytes | None]]) -> None:
        """Classify records ``(offset, key, value)`` in offset order and fold the events in;
        offsets below ``position`` are skipped. The caller holds ``lock`` and vouches that
        no record lies between ``position`` and the batch's first offset."""
        for offset, key, value in batch:
            if offset < self.position:
                continue
            found = classify(self.topic, self.partitions, key, value, self.partition,
                             offset, self.version)
            if isinstance(found, Quarantined):
                self.quarantined[offset] = found
                self.position = offset + 1
                log.warning("%s", found.describe())
            else:
                self.apply(found)
