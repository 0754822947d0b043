"""Transaction metadata and its durable log, the internal topic ``__transaction_state``.

Records use Kafka's layouts (key v0: transactional id; value v0: producer id and epoch,
timeout, status, partitions, timestamps), one record per state change, the latest per
key winning (a compacted topic). Replayed on start.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from enum import Enum

from kafka.record.default_records import DefaultRecordBatch

from headrace.protocol.records import build_batch, validate_batches
from headrace.storage.manager import LogManager

TXN_TOPIC = "__transaction_state"
TXN_TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1",
                    "segment.bytes": str(100 * 1024 * 1024)}

TopicPartition = tuple[str, int]


class TxnState(Enum):
    """Kafka's transaction states, with their status byte in the log."""

    EMPTY = ("Empty", 0)
    ONGOING = ("Ongoing", 1)
    PREPARE_COMMIT = ("PrepareCommit", 2)
    PREPARE_ABORT = ("PrepareAbort", 3)
    COMPLETE_COMMIT = ("CompleteCommit", 4)
    COMPLETE_ABORT = ("CompleteAbort", 5)
    DEAD = ("Dead", 6)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def status(self) -> int:
        return self.value[1]

    @classmethod
    def from_status(cls, status: int) -> TxnState:
        for s in cls:
            if s.status == status:
                return s
        raise ValueError(f"unknown transaction status {status}")


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def encode_value(t: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(t.partitions):
        by_topic.setdefault(topic, []).append(p)
    out = bytearray(struct.pack(">hqhib", 0, t.producer_id, t.producer_epoch, t.timeout_ms,
                                t.state.status))
    out += struct.pack(">i", len(by_topic))
    for topic, parts in by_topic.items():
        out += _string(topic) + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">qq", t.last_update_ms, t.start_ms)
    return bytes(out)


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """``(transactional_id, metadata)``; None metadata for a tombstone. Raises
    ``struct.error``/``ValueError``/``UnicodeDecodeError`` on a malformed record."""
    (n,) = struct.unpack_from(">h", key, 2)
    tid = key[4 : 4 + n].decode()
    if value is None:
        return tid, None
    _, pid, epoch, timeout, status = struct.unpack_from(">hqhib", value, 0)
    pos = struct.calcsize(">hqhib")
    (topics,) = struct.unpack_from(">i", value, pos)
    pos += 4
    partitions: set[TopicPartition] = set()
    for _ in range(max(topics, 0)):
        (tn,) = struct.unpack_from(">h", value, pos)
        topic = value[pos + 2 : pos + 2 + tn].decode()
        pos += 2 + tn
        (count,) = struct.unpack_from(">i", value, pos)
        pos += 4
        for _ in range(count):
            (p,) = struct.unpack_from(">i", value, pos)
            pos += 4
            partitions.add((topic, p))
    last_update, start = struct.unpack_from(">qq", value, pos)
    return tid, TxnMetadata(tid, pid, epoch, timeout, TxnState.from_status(status),
                            partitions, start, last_update)


class TransactionLog:
    """Appends state changes to ``__transaction_state`` and replays them. Event loop only."""

    def __init__(self, logs: LogManager) -> None:
        topic = logs.topics.get(TXN_TOPIC)
        if topic is None:
            topic = logs.create_topic(TXN_TOPIC, 1, TXN_TOPIC_CONFIG)
        self.log = topic.partitions[0]

    def write(self, t: TxnMetadata) -> None:
        t.last_update_ms = int(time.time() * 1000)
        data = bytearray(build_batch([(encode_key(t.transactional_id), encode_value(t))],
                                     timestamp_ms=t.last_update_ms))
        self.log.append(data, validate_batches(data))

    def replay(self) -> dict[str, TxnMetadata]:
        """The latest metadata of every transactional id; undecodable records skipped."""
        found: dict[str, TxnMetadata] = {}
        for raw in self.log.batches():
            for record in DefaultRecordBatch(raw):
                try:
                    tid, meta = decode(record.key or b"", record.value)
                except (struct.error, ValueError, UnicodeDecodeError):
                    continue
                if meta is None:
                    found.pop(tid, None)
                else:
                    found[tid] = meta
        return found
