"""The event store: an event topic, a snapshot topic, fenced writers and readers.

Layout on any Kafka-protocol broker (created if missing, checked if present):

- ``<topic>``: the events, ``partitions`` partitions, ``cleanup.policy=delete`` with
  ``retention.ms=-1`` and ``retention.bytes=-1`` (the log is the system of record: nothing
  may ever expire). An aggregate's events all go to partition ``murmur2(id) % partitions``
  (Kafka's default partitioner), so every Kafka consumer sees them in version order.
- ``<topic>.snapshots``: ``cleanup.policy=compact``, keyed by aggregate id. Snapshots are a
  cache: any of them is a correct fold at its version, losing one costs only replay time.

Appends go through the partition's ``PartitionWriter`` (see ``writer``: one fenced writer per
partition across all processes, expected-version checks, idempotent command ids).

Records of the event topic that are not events (written by another producer: a second
"version 3", a version that skips ahead, ...) are quarantined by the rule in ``validity``,
the same for loads, appends, subscriptions and the Spark projections: skipped, logged and
listed by ``quarantined``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.eventsourcing.errors import EventSourcingError, StoreError
from headrace.eventsourcing.events import EventTypes, StoredEvent, decode_envelope
from headrace.eventsourcing.index import AppendResult, PartitionIndex
from headrace.eventsourcing.reading import LogReader
from headrace.eventsourcing.validity import Quarantined
from headrace.eventsourcing.writer import PartitionWriter, PendingAppend
from headrace.protocol.partitioner import java_partition
from headrace.settling import topic_configs


@dataclass(frozen=True)
class Snapshot:
    """An aggregate's state folded up to ``version``, whose event is at ``offset`` and was
    recorded at ``recorded_at`` (ms). ``schema`` is the aggregate class's snapshot schema."""

    aggregate_id: str
    aggregate_type: str
    version: int
    offset: int
    recorded_at: int
    schema: int
    state: dict[str, Any]

    def encode(self) -> bytes:
        return json.dumps({"id": self.aggregate_id, "aggregate": self.aggregate_type,
                           "version": self.version, "offset": self.offset,
                           "time": self.recorded_at, "schema": self.schema,
                           "state": self.state}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> Snapshot:
        doc = json.loads(value)
        return cls(str(doc["id"]), str(doc["aggregate"]), int(doc["version"]),
                   int(doc["offset"]), int(doc["time"]), int(doc["schema"]), doc["state"])


class EventStore:
    """Events of many aggregates in ``topic`` on the cluster at ``bootstrap_servers``.

    Thread-safe. ``client_config`` is extra librdkafka configuration for every client
    (security settings, for instance); ``timeout`` (s) bounds each broker wait;
    ``cache_events``: events cached per partition (``PartitionIndex``). Call ``start``
    first (or use it as a context manager).

    Cost model: the first load or append on a partition reads that partition once to
    build its index (as a Kafka Streams store restores from its changelog); afterwards
    each load costs one fetch of the new tail plus, for an aggregate not in the cache,
    a read of its offset span (from its latest snapshot, if the repository uses them)."""

    def __init__(self, bootstrap_servers: str, topic: str, types: EventTypes, *,
                 partitions: int = 4, client_config: dict[str, Any] | None = None,
                 timeout: float = 30.0, cache_events: int = 100_000) -> None:
        self.topic = topic
        self.snapshot_topic = f"{topic}.snapshots"
        self.types = types
        self.timeout = timeout
        self.partitions = partitions
        self.cache_events = cache_events
        self.config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers,
                                       **(client_config or {})}
        self._writers: dict[int, PartitionWriter] = {}
        self._indexes: dict[int, PartitionIndex] = {}
        self._readers: list[LogReader] = []
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self._snapshot_positions: dict[int, int] = {}
        self._snapshot_lock = threading.Lock()
        self._snapshot_producer: Producer | None = None

    def start(self) -> EventStore:
        """Create or check both topics. Raises ``StoreError`` on a layout that could lose
        events (compaction or finite retention on the event topic)."""
        # log_level 4: no info line about the admin handle's queue when it is dropped
        admin = AdminClient({"log_level": 4, **self.config})
        self.partitions = self._ensure(admin, self.topic, {
            "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"})
        snapshot_partitions = self._ensure(admin, self.snapshot_topic,
                                           {"cleanup.policy": "compact"})
        if snapshot_partitions != self.partitions:
            raise StoreError(f"{self.snapshot_topic} has {snapshot_partitions} partitions, "
                             f"{self.topic} {self.partitions}: they must be equal")
        self._check_events_topic(admin)
        return self

    def close(self) -> None:
        """Release every client. Idempotent."""
        with self._lock:
            writers, self._writers = list(self._writers.values()), {}
            readers, self._readers = self._readers, []
        for w in writers:
            w.close()
        for r in readers:
            r.close()
        if self._snapshot_producer is not None:
            self._snapshot_producer.flush(self.timeout)
            self._snapshot_producer = None

    def __enter__(self) -> EventStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partition_of(self, aggregate_id: str) -> int:
        """The partition holding the aggregate's events."""
        return java_partition(aggregate_id.encode(), self.partitions)

    # -- writing ---------------------------------------------------------------------------

    def append(self, aggregate_id: str, events: Sequence[Any], *, expected_version: int | None,
               aggregate_type: str = "", command_id: str | None = None) -> AppendResult:
        """Append ``events`` (registered event instances) as versions ``expected_version+1``
        onwards, atomically, if the aggregate is at ``expected_version`` (0: it has no events
        yet; None: no check). Blocks until committed. ``command_id`` makes the append
        idempotent: if it was applied to this aggregate before, nothing is written and its
        first result comes back with ``duplicate=True`` (even if the version moved since).
        Raises ``ConcurrencyError`` (nothing written) or ``StoreError`` (outcome unknown:
        retry with the same command id)."""
        if not events:
            raise EventSourcingError("append needs at least one event")
        encoded = [self.types.encode(e) for e in events]
        pending = PendingAppend(aggregate_id, aggregate_type, expected_version,
                                command_id or uuid.uuid4().hex, encoded)
        return self._writer(self.partition_of(aggregate_id)).append(pending)

    def command_result(self, aggregate_id: str, command_id: str) -> AppendResult | None:
        """The first result of ``command_id`` on the aggregate, or None if never applied.
        Authoritative: asks the partition's writer (taking it over if need be)."""
        return self._writer(self.partition_of(aggregate_id)).command_result(
            aggregate_id, command_id)

    def refresh(self, aggregate_id: str) -> None:
        """Make the next load of the aggregate see every commit acknowledged before this
        call, in any process (``PartitionWriter.refresh``). A load alone may lag another
        process's commit by the moment Apache Kafka takes to write its markers."""
        self._writer(self.partition_of(aggregate_id)).refresh()

    def _writer(self, partition: int) -> PartitionWriter:
        with self._lock:
            writer = self._writers.get(partition)
            if writer is None:
                writer = PartitionWriter(self.config, self._index_locked(partition),
                                         lambda: LogReader(self.config, self.timeout),
                                         self.timeout)
                self._writers[partition] = writer
            return writer

    def _index_locked(self, partition: int) -> PartitionIndex:
        index = self._indexes.get(partition)
        if index is None:
            index = self._indexes[partition] = PartitionIndex(self.topic, partition,
                                                              self.partitions,
                                                              self.cache_events)
        return index

    # -- reading ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def reader(self) -> Iterator[LogReader]:
        """Borrow a ``LogReader`` for the duration of the block."""
        with self._lock:
            reader = self._readers.pop() if self._readers else None
        if reader is None:
            reader = LogReader(self.config, self.timeout)
        try:
            yield reader
        finally:
            with self._lock:
                self._readers.append(reader)

    def read(self, aggregate_id: str, *, from_offset: int = 0, after_version: int = 0,
             to_version: int | None = None, until_time: int | None = None) -> list[StoredEvent]:
        """The aggregate's committed events with ``after_version < version <= to_version``
        and ``recorded_at <= until_time`` (ms), in version order. Brings the partition's
        index up to date first (one fetch when nothing is new); then answers from the
        index's cache, or reads the aggregate's offset span (from ``from_offset`` if later:
        a snapshot's offset + 1) when that is less than the span."""
        partition = self.partition_of(aggregate_id)
        with self._lock:
            index = self._index_locked(partition)
        with self.reader() as r:
            index.catch_up(r)
            with index.lock:
                span = index.spans.get(aggregate_id)
                if span is None:
                    return []
                cached = index.cached(aggregate_id)
                version, first, last = span.version, span.first_offset, span.last_offset
            stop = version if to_version is None else min(version, to_version)
            if cached is None:
                if from_offset <= first or after_version == 0:
                    cached = self._scan(r, index, aggregate_id, first, last, version)
                    with index.lock:
                        index.remember(aggregate_id, cached)
                else:  # a snapshot's tail: read only that
                    cached = self._scan(r, index, aggregate_id, from_offset, last, version)
        return [ev for ev in cached if after_version < ev.version <= stop
                and (until_time is None or ev.recorded_at <= until_time)]

    def quarantined(self, partition: int | None = None, until: int | None = None
                    ) -> list[Quarantined]:
        """The records of the event topic this store found not to be events (``validity``),
        in (partition, offset) order: of the partitions it has read so far, or of
        ``partition``, read up to at least offset ``until`` first (one fetch at most when
        the store has read that far). Never raises for a quarantined record: it is a
        report, every read path already skips it."""
        if partition is not None:
            with self._lock:
                index = self._index_locked(partition)
            if until is not None and index.position <= until:
                with self.reader() as r:
                    index.catch_up(r, min_end=until + 1)
            indexes = [index]
        else:
            with self._lock:
                indexes = list(self._indexes.values())
        found: list[Quarantined] = []
        for ix in indexes:
            with ix.lock:
                found += ix.quarantined.values()
        return sorted(found, key=lambda q: (q.partition, q.offset))

    def _scan(self, r: LogReader, index: PartitionIndex, aggregate_id: str, start: int,
              last: int, version: int) -> list[StoredEvent]:
        """The aggregate's events at offsets ``start..last``; the index has classified them
        all (it is past ``last``), so a quarantined record is simply not read as one."""
        key = aggregate_id.encode()
        partition = index.partition
        found: list[StoredEvent] = []
        with index.lock:
            skip = {o for o in index.quarantined if start <= o <= last}
        for m in r.scan(self.topic, partition, start, last + 1, min_end=last + 1):
            if m.key() != key or (m.offset() or 0) in skip:
                continue
            ev = decode_envelope(m.value(), partition, m.offset() or 0)
            if ev.aggregate_id == aggregate_id and ev.version <= version:
                found.append(ev)
                if ev.version == version:
                    break
        return found

    # -- snapshots -------------------------------------------------------------------------

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Write a snapshot (not transactional: a snapshot is a cache). Blocks until acked."""
        with self._snapshot_lock:
            if self._snapshot_producer is None:
                self._snapshot_producer = Producer({**self.config, "enable.idempotence": True,
                                                    "acks": "all", "linger.ms": 5})
            producer = self._snapshot_producer
        failures: list[str] = []
        producer.produce(self.snapshot_topic, key=snapshot.aggregate_id.encode(),
                         value=snapshot.encode(), partition=self.partition_of(
                             snapshot.aggregate_id),
                         on_delivery=lambda err, _m: failures.append(err.str()) if err else None)
        if producer.flush(self.timeout) or failures:
            raise StoreError(f"snapshot of {snapshot.aggregate_id!r} not written: {failures}")

    def snapshot(self, aggregate_id: str) -> Snapshot | None:
        """The latest snapshot of the aggregate, reading what the snapshot topic gained
        since the last call (a compacted topic keeps about one record per aggregate)."""
        partition = self.partition_of(aggregate_id)
        with self._snapshot_lock:
            start = self._snapshot_positions.get(partition, 0)
            with self.reader() as r:
                for m in r.scan(self.snapshot_topic, partition, start):
                    start = (m.offset() or 0) + 1
                    if m.value() is None:
                        continue
                    try:
                        snap = Snapshot.decode(m.value() or b"")
                    except (ValueError, KeyError, TypeError):
                        continue  # a foreign or damaged snapshot is only a missed shortcut
                    held = self._snapshots.get(snap.aggregate_id)
                    if held is None or held.version <= snap.version:
                        self._snapshots[snap.aggregate_id] = snap
            self._snapshot_positions[partition] = start
            return self._snapshots.get(aggregate_id)

    # -- topics ----------------------------------------------------------------------------

    def _ensure(self, admin: AdminClient, topic: str, config: dict[str, str]) -> int:
        wanted = NewTopic(topic, num_partitions=self.partitions, replication_factor=-1,
                          config=config)
        try:
            admin.create_topics([wanted], request_timeout=self.timeout)[topic].result(
                self.timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StoreError(f"cannot create {topic}: {e.args[0].str()}") from e
        deadline = time.monotonic() + self.timeout
        while True:  # a new topic reaches the metadata a moment after it was created
            try:
                metadata = admin.list_topics(topic, timeout=self.timeout)
            except KafkaException as e:
                raise StoreError(f"cannot describe {topic}: {e.args[0].str()}") from e
            found = metadata.topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return len(found.partitions)
            if time.monotonic() > deadline:
                raise StoreError(f"{topic} has no partitions after {self.timeout:g} s")
            time.sleep(0.05)

    def _check_events_topic(self, admin: AdminClient) -> None:
        try:
            configs = topic_configs(admin, self.topic, self.timeout)
        except KafkaException as e:
            raise StoreError(f"cannot read the configuration of {self.topic}: "
                             f"{e.args[0].str()}") from e
        def value(name: str, default: str) -> str:
            return str(configs[name].value) if name in configs else default
        policy = value("cleanup.policy", "delete")
        if "compact" in policy:
            raise StoreError(f"{self.topic} has cleanup.policy={policy}: compaction would "
                             f"delete events; the event topic needs cleanup.policy=delete")
        for name in ("retention.ms", "retention.bytes"):
            if value(name, "-1") != "-1":
                raise StoreError(f"{self.topic} has {name}={value(name, '-1')}: events would "
                                 f"expire; the event topic needs {name}=-1")
