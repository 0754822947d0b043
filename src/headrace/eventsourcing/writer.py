"""The single writer of one partition of the event log: expected-version appends.

Why a fenced single writer. Kafka has no conditional append ("write if the last offset is
still X"), so the version check must happen in a writer that knows every committed event
of the aggregate, and only one writer may decide at a time. Every process that appends to
partition ``p`` uses the same ``transactional.id`` (``headrace-es-<topic>-<p>``) and writes
only inside transactions. Taking over the partition is ``init_transactions``, which bumps
the producer epoch: the broker then rejects every later write and commit of the previous
owner (PRODUCER_FENCED) and aborts what it had open. After the takeover the new owner reads
the partition (``read_committed``) to its end and only then decides. So a decision is
always taken on a view that holds every committed event, and if anyone else took over in
between, this writer's commit fails before anything of it is visible; it then takes over
again, catches up and decides again (the loser of a race gets ``ConcurrencyError``). This
needs only Kafka's transaction APIs, so it holds on Apache Kafka as on headrace's broker.

Inside a process, appends to one partition are group-committed: concurrent callers queue
their appends, whichever holds the partition's lock decides them all in order and writes
them in one transaction. Outcomes are handed out only after the commit succeeded.

The writer decides on the process's ``PartitionIndex``: each aggregate's version and which
command ids produced which versions (idempotent commands: a command id already applied
returns its first result and writes nothing, even after a crash left its caller without an
answer). A takeover reads only the tail the index has not seen.

The index classifies the writer's own records in offset order with everything else
(``validity``), so it agrees with every other reader even if another producer wrote into
the partition meanwhile. When the committed records are contiguous and follow directly
what the index has read (nothing but this writer's previous commit marker can lie between:
the steady state of one writer), they are classified as written; otherwise the writer reads
the partition back up to its last record first. An append whose records are then not
events (a record from another producer took their version first) fails:
``ConcurrencyError`` if none of them counts, ``StoreError`` naming the offsets if only
some do.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from headrace.eventsourcing.errors import ConcurrencyError, StoreError
from headrace.eventsourcing.events import StoredEvent
from headrace.eventsourcing.index import AppendResult, PartitionIndex
from headrace.eventsourcing.reading import LogReader
from headrace.fencing import fenced_producer

log = logging.getLogger("headrace.eventsourcing")
_ATTEMPTS = 6


@dataclass
class PendingAppend:
    """One caller's append, waiting in a partition's queue. ``expected_version`` is the
    version the caller saw (0: a new aggregate); None appends whatever the version."""

    aggregate_id: str
    aggregate_type: str
    expected_version: int | None
    command_id: str
    events: list[tuple[str, int, dict[str, Any]]]
    result: AppendResult | None = None
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def outcome(self) -> AppendResult:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class PartitionWriter:
    """Appends to ``topic``/``partition``; thread-safe; see the module docstring."""

    def __init__(self, config: dict[str, Any], index: PartitionIndex,
                 reader: Callable[[], LogReader], timeout: float) -> None:
        self.topic = topic = index.topic
        self.partition = partition = index.partition
        self.transactional_id = f"headrace-es-{topic}-{partition}"
        self.timeout = timeout
        self._config = config
        self._new_reader = reader
        self._reader: LogReader | None = None
        self._producer: Producer | None = None
        self._index = index
        self._lock = threading.Lock()
        self._queue: list[PendingAppend] = []
        self._queue_lock = threading.Lock()
        self._marker = -1  # where the last commit's marker lies, if at the index's position
        self.takeovers = 0

    def append(self, pending: PendingAppend) -> AppendResult:
        """Decide and write ``pending`` (with whatever else is queued); blocks until its
        transaction committed. Raises ``ConcurrencyError`` or ``StoreError``."""
        with self._queue_lock:
            self._queue.append(pending)
        with self._lock:
            if not pending.done.is_set():
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._drain(batch)
        return pending.outcome()

    def command_result(self, aggregate_id: str, command_id: str) -> AppendResult | None:
        """The first result of ``command_id`` on the aggregate, if it was applied. Takes the
        partition over if this process does not own it."""
        with self._lock:
            self._own()
            with self._index.lock:
                return self._index.commands.get((aggregate_id, command_id))

    def refresh(self) -> None:
        """Take the partition over now and read what it gained: afterwards the index holds
        every commit acknowledged to anyone before this call (a takeover waits for commits
        in flight to complete). Costs the other writers a takeover of their own."""
        with self._lock:
            self._producer = None
            self._own()

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the next owner)."""
        with self._lock:
            self._producer = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    # -- deciding and writing --------------------------------------------------------------

    def _drain(self, batch: list[PendingAppend]) -> None:
        last = "no attempt"
        refreshed = False
        for _ in range(_ATTEMPTS):
            try:
                producer = self._own()
            except StoreError as e:  # the broker refused or is gone: say so now
                last = str(e)
                break
            with self._index.lock:
                decided = self._decide(batch)
                if decided is None and refreshed:
                    decided = self._decide(batch, final=True)
            if decided is None:  # a caller saw a version we have not: we may be stale
                refreshed = True
                self._producer = None
                continue
            writes, tentative = decided
            try:
                written = self._write(producer, writes)
            except KafkaException as e:
                last = self._recover(producer, e.args[0])
                continue
            except StoreError as e:  # not acknowledged: outcome unknown, take over again
                self._producer, last = None, str(e)
                continue
            try:
                if written and not self._classify_own(written):
                    self._catch_up(min_end=written[-1].offset + 1)
            except StoreError as e:  # committed, but not read back: outcome unknown
                self._producer, last = None, str(e)
                continue
            with self._index.lock:  # this commit's marker is owed at ``position``, if next
                self._marker = (self._index.position
                                if written and self._index.position == written[-1].offset + 1
                                else -1)
            for pending in batch:
                outcome = tentative[id(pending)]
                if isinstance(outcome, Exception):
                    pending.error = outcome
                else:
                    try:
                        pending.result = self._result_of(pending, outcome, written)
                    except (ConcurrencyError, StoreError) as refused:
                        pending.error = refused
                pending.done.set()
            return
        for pending in batch:
            pending.error = StoreError(f"append to {self.topic}[{self.partition}] failed, "
                                       f"outcome unknown (retry with the same command id): "
                                       f"{last}")
            pending.done.set()

    def _decide(self, batch: list[PendingAppend], final: bool = False) -> tuple[
            list[StoredEvent], dict[int, AppendResult | Exception | str]] | None:
        """Check each append in order against the index plus the appends before it.
        Returns the events to write and each append's tentative outcome (a duplicate's
        earlier result, a ``ConcurrencyError``, "write" or "repeat"); None if some caller expects
        a version beyond what the index knows (and not ``final``). Holds the index lock."""
        versions: dict[str, int] = {}
        commands: set[tuple[str, str]] = set()
        now = max(int(time.time() * 1000), self._index.last_time)
        writes: list[StoredEvent] = []
        outcomes: dict[int, AppendResult | Exception | str] = {}
        for p in batch:
            key = (p.aggregate_id, p.command_id)
            if key in self._index.commands:
                outcomes[id(p)] = self._index.commands[key]
                continue
            if key in commands:
                outcomes[id(p)] = "repeat"  # the same command twice in one batch
                continue
            current = versions.get(p.aggregate_id, self._index.version(p.aggregate_id))
            if p.expected_version is not None and p.expected_version != current:
                if p.expected_version > current and not final:
                    return None
                outcomes[id(p)] = ConcurrencyError(p.aggregate_id, p.expected_version, current)
                continue
            for i, (name, schema, data) in enumerate(p.events, start=1):
                writes.append(StoredEvent(p.aggregate_id, p.aggregate_type, current + i, name,
                                          schema, data, p.command_id, now, self.partition))
            versions[p.aggregate_id] = current + len(p.events)
            commands.add(key)
            outcomes[id(p)] = "write"
        return writes, outcomes

    def _classify_own(self, written: list[StoredEvent]) -> bool:
        """Classify this writer's just-committed records without reading them, if nothing
        else can lie before or among them: their offsets are consecutive and the first is
        the index's ``position``, or the one after it when that offset holds this writer's
        previous commit marker (a transaction marker takes one offset). False: read back."""
        first = written[0].offset
        if [ev.offset for ev in written] != list(range(first, first + len(written))):
            return False  # another producer's records interleaved with this transaction's
        with self._index.lock:
            position = self._index.position
            if first != position and not (position == self._marker and first == position + 1):
                return False
            self._index.classify_locked([(ev.offset, ev.aggregate_id.encode(), ev.envelope())
                                         for ev in written])
        return True

    def _result_of(self, pending: PendingAppend, outcome: AppendResult | str,
                   written: list[StoredEvent]) -> AppendResult:
        if isinstance(outcome, AppendResult):
            return outcome
        mine = [ev for ev in written
                if (ev.aggregate_id, ev.command_id) == (pending.aggregate_id, pending.command_id)]
        with self._index.lock:
            lost = [self._index.quarantined[ev.offset] for ev in mine
                    if ev.offset in self._index.quarantined]
            version = self._index.version(pending.aggregate_id)
        if len(lost) == len(mine):
            log.warning("append to %s lost to another producer's record: %s",
                        pending.aggregate_id, lost[0].describe())
            raise ConcurrencyError(pending.aggregate_id, mine[0].version - 1, version)
        if lost:
            raise StoreError(f"append to {pending.aggregate_id!r} counts only in part: "
                             f"another producer wrote into {self.topic}[{self.partition}] "
                             f"meanwhile; " + "; ".join(q.describe() for q in lost))
        return AppendResult(pending.aggregate_id, mine[0].version, mine[-1].version,
                            self.partition, tuple(ev.offset for ev in mine), mine[0].recorded_at,
                            duplicate=outcome == "repeat")

    def _write(self, producer: Producer, events: list[StoredEvent]) -> list[StoredEvent]:
        if not events:
            return []
        offsets: dict[int, int] = {}
        failures: list[str] = []

        def delivered(i: int) -> Callable[[KafkaError | None, Any], None]:
            def report(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    failures.append(err.str())
                else:
                    offsets[i] = int(msg.offset())
            return report

        producer.begin_transaction()
        for i, ev in enumerate(events):
            producer.produce(self.topic, key=ev.aggregate_id.encode(), value=ev.envelope(),
                             partition=self.partition, timestamp=ev.recorded_at,
                             on_delivery=delivered(i))
        producer.commit_transaction(self.timeout)
        producer.poll(0)
        if failures or len(offsets) != len(events):
            raise StoreError(f"append to {self.topic}[{self.partition}] not acknowledged: "
                             f"{failures}")
        return [StoredEvent(ev.aggregate_id, ev.aggregate_type, ev.version, ev.type, ev.schema,
                            ev.data, ev.command_id, ev.recorded_at, self.partition, offsets[i])
                for i, ev in enumerate(events)]

    def _recover(self, producer: Producer, err: KafkaError) -> str:
        if err.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(self.timeout)
        else:  # fenced, fatal, or an unknown outcome: take over again and re-read
            self._producer = None
        log.info("append to %s[%d] retried: %s", self.topic, self.partition, err.str())
        return str(err.str())

    # -- owning the partition ------------------------------------------------------------

    def _own(self) -> Producer:
        """The producer of the current epoch, after a takeover and catch-up if needed."""
        if self._producer is not None:
            return self._producer
        try:
            producer = fenced_producer(self._config, self.transactional_id, self.timeout)
        except KafkaException as e:
            raise StoreError(f"cannot become the writer of {self.topic}[{self.partition}]: "
                             f"{e.args[0].str()}") from e
        self.takeovers += 1
        self._marker = -1
        self._catch_up()
        self._producer = producer
        return producer

    def _catch_up(self, min_end: int = 0) -> None:
        if self._reader is None:
            self._reader = self._new_reader()
        self._index.catch_up(self._reader, min_end)
