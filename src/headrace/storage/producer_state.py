"""Idempotent-producer state of one partition: per producer id, its epoch and the
sequence ranges (with offsets) of its last five batches, as Kafka keeps them.

``check`` decides, before an append, whether a batch is new, a retried duplicate (answer
with the original offset, append nothing), or invalid (fenced epoch, sequence gap). The
state lives in memory and is rebuilt from the log on start-up (``observe`` over the
recovered batches). A producer unknown to the partition (new, or its state expired) may
start at any sequence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_KEPT))

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

    def observe(self, header: BatchHeader) -> None:
        """Record an appended batch (with its assigned offsets)."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            self.producers[header.producer_id] = entry
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(header.base_sequence, last_sequence(header),
                                               header.base_offset, header.last_offset))
