"""Idempotent-producer state of one partition: per producer id, its epoch and the
sequence ranges (with offsets) of its last five batches, as Kafka keeps them.

``check`` decides, before an append, whether a batch is new, a retried duplicate (answer
with the original offset, append nothing), or invalid (fenced epoch, sequence gap). The
state lives in memory, producers idle past ``producer.id.expiration.ms`` are forgotten
(``expire``); the partition log snapshots it at each segment roll and at
shutdown, and on start-up loads the newest snapshot and replays the batches after it. A producer unknown to the partition (new, or its state expired) may
start at any sequence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import BatchHeader

MAX_BATCHES_KEPT = 5
NO_PRODUCER_ID = -1
INT32_MAX = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction's range in this partition: ``last_offset`` is its marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_KEPT))
    # Max timestamp of the producer's latest batch: what expiry is measured against.
    last_timestamp: int = -1
    # Coordinator epoch of the producer's latest transaction marker here (-1: none yet);
    # a marker with an older one is a zombie coordinator's (TRANSACTION_COORDINATOR_FENCED).
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record (sequences wrap at INT32_MAX)."""
    if header.base_sequence < 0:
        return -1
    return (header.base_sequence + header.last_offset_delta) % (INT32_MAX + 1)


class ProducerStateManager:
    """Producer state of one partition. Not thread-safe (event loop only)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # Open transactions: producer id -> first offset of its transaction here.
        self.ongoing: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = []

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a batch before it is appended.

        Returns the stored ``BatchMetadata`` when the batch is a duplicate of one of the
        producer's last five batches (the caller answers with its offset), else None.
        Raises ``KafkaProtocolError`` with INVALID_PRODUCER_EPOCH (a stale epoch) or
        OUT_OF_ORDER_SEQUENCE_NUMBER (a gap in the sequence).
        """
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise KafkaProtocolError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"{entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise KafkaProtocolError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"new epoch {header.producer_epoch} must start at sequence 0")
            return None
        last_seq = last_sequence(header)
        for b in entry.batches:
            if b.first_seq == header.base_sequence and b.last_seq == last_seq:
                return b
        expected = (entry.last_seq + 1) % (INT32_MAX + 1)
        if entry.batches and header.base_sequence != expected:
            raise KafkaProtocolError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {header.producer_id}: sequence {header.base_sequence}, "
                f"expected {expected}")
        return None

    def check_all(self, headers: list[BatchHeader], next_offset: int) -> BatchMetadata | None:
        """``check`` for a whole record set appended at ``next_offset``, batch after batch
        as if the earlier ones were already appended (nothing is recorded). Returns the
        duplicate when the set is a single retried batch; a duplicate inside a larger set
        raises DUPLICATE_SEQUENCE_NUMBER."""
        if len(headers) == 1:
            return self.check(headers[0])
        scratch = ProducerStateManager()
        for h in headers:
            if h.producer_id in self.producers and h.producer_id not in scratch.producers:
                old = self.producers[h.producer_id]
                scratch.producers[h.producer_id] = ProducerEntry(old.epoch, deque(old.batches, maxlen=MAX_BATCHES_KEPT))
            if scratch.check(h) is not None:
                raise KafkaProtocolError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
            scratch.observe(replace(h, base_offset=next_offset))
            next_offset += h.last_offset_delta + 1
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker before it is appended (WriteTxnMarkers), as Kafka:
        INVALID_PRODUCER_EPOCH below the producer's epoch here, TRANSACTION_COORDINATOR_FENCED
        below the coordinator epoch of its last marker. A producer unknown here passes."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise KafkaProtocolError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is older than "
                f"{entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaProtocolError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch}")

    def observe(self, header: BatchHeader, committed: bool | None = None,
                coordinator_epoch: int = -1) -> None:
        """Record an appended batch (with its assigned offsets). A transactional batch
        opens its producer's transaction (if none is open); a control batch closes it,
        ``committed`` telling COMMIT from ABORT (an aborted range is remembered for
        read_committed fetches) and ``coordinator_epoch`` being the marker's. A control
        batch's epoch fences older epochs."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            # A new epoch starts its sequences afresh.
            entry = ProducerEntry(header.producer_epoch)
            self.producers[pid] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.is_control:
            entry.coordinator_epoch = coordinator_epoch
            first = self.ongoing.pop(pid, None)
            if committed is False and first is not None:
                self.aborted.append(AbortedTxn(pid, first, header.base_offset))
            return
        if header.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = header.base_offset
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(header.base_sequence, last_sequence(header),
                                               header.base_offset, header.last_offset))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (Kafka's producer.id.expiration.ms)
        that have no open transaction; returns how many. A forgotten producer may start
        again at any sequence, as a new one."""
        stale = [pid for pid, e in self.producers.items()
                 if now_ms - e.last_timestamp >= expiration_ms and pid not in self.ongoing]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (the LSO), or None."""
        return min(self.ongoing.values(), default=None)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets ``[start, end)``, oldest first."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def forget_aborted_before(self, offset: int) -> None:
        """Drop aborted ranges wholly below ``offset`` (deleted by retention)."""
        self.aborted = [a for a in self.aborted if a.last_offset >= offset]

    def snapshot(self) -> dict[str, object]:
        """The state as JSON-able data (see ``restore``)."""
        return {
            "producers": {str(pid): {"epoch": e.epoch, "last_timestamp": e.last_timestamp,
                                     "coordinator_epoch": e.coordinator_epoch,
                                     "batches": [[b.first_seq, b.last_seq, b.first_offset,
                                                  b.last_offset] for b in e.batches]}
                          for pid, e in self.producers.items()},
            "ongoing": {str(pid): first for pid, first in self.ongoing.items()},
            "aborted": [[a.producer_id, a.first_offset, a.last_offset] for a in self.aborted],
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Replace the state with a ``snapshot``. Raises ``ValueError``/``KeyError``/
        ``TypeError``/``AttributeError`` on malformed data (the caller then rebuilds from
        the log)."""
        producers: dict[int, ProducerEntry] = {}
        for pid, entry in data["producers"].items():
            batches = deque((BatchMetadata(int(a), int(b), int(c), int(d))
                             for a, b, c, d in entry["batches"]), maxlen=MAX_BATCHES_KEPT)
            producers[int(pid)] = ProducerEntry(int(entry["epoch"]), batches,
                                                int(entry.get("last_timestamp", -1)),
                                                int(entry.get("coordinator_epoch", -1)))
        ongoing = {int(pid): int(first) for pid, first in data["ongoing"].items()}
        aborted = [AbortedTxn(int(p), int(f), int(last)) for p, f, last in data["aborted"]]
        self.producers, self.ongoing, self.aborted = producers, ongoing, aborted
