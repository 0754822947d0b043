"""Committed offsets, stored in the internal compacted topic ``__consumer_offsets``.

Records use Kafka's own key and value layouts, so Kafka tooling can read the topic:

* offset commit: key v1 ``(group, topic, partition)``, value v3 ``(offset, leader epoch,
  metadata, commit timestamp)``; a null value (tombstone) deletes the offset;
* group metadata: key v2 ``(group)``, value v3 ``(protocol type, generation, protocol,
  leader, state timestamp, [])`` (classic members are not persisted: they rejoin after
  a restart); a tombstone deletes the group;
* KIP-848 consumer groups: key types 3-8 (``consumer_records``), kept as raw key/value
  bytes per group for the consumer group coordinator to rebuild its groups from.

The store keeps the latest value of every key in memory (the state of the compacted
topic) and rebuilds it by replaying the topic on start. A commit is acknowledged once
appended, like a produce: it survives ``kill -9`` of the broker.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatch

from headrace.broker.groups.consumer_records import RECORD_TYPES
from headrace.broker.groups.group import Group
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import TRANSACTIONAL_FLAG, build_batch, validate_batches
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1",
                        "segment.bytes": str(100 * 1024 * 1024)}
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation_id: int


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _nullable_string(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else _string(s)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_KEY_VERSION) + _string(group) + _string(topic) + \
        struct.pack(">i", partition)


def group_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group)


def offset_value(c: CommittedOffset) -> bytes:
    return struct.pack(">hqi", OFFSET_VALUE_VERSION, c.offset, c.leader_epoch) + \
        _string(c.metadata) + struct.pack(">q", c.commit_timestamp_ms)


def group_value(g: Group) -> bytes:
    return (struct.pack(">h", GROUP_VALUE_VERSION) + _string(g.protocol_type or "")
            + struct.pack(">i", g.generation_id) + _nullable_string(g.protocol_name)
            + _nullable_string(g.leader_id) + struct.pack(">qi", int(time.time() * 1000), 0))


class OffsetStore:
    """Committed offsets and group records of every group. Event loop only."""

    def __init__(self, logs: LogManager, partitions: int = 1) -> None:
        topic = logs.topics.get(OFFSETS_TOPIC)
        if topic is None:
            topic = logs.create_topic(OFFSETS_TOPIC, partitions, OFFSETS_TOPIC_CONFIG)
        self._partitions = topic.partitions
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.groups: dict[str, GroupRecord] = {}
        # KIP-848 group records: group id -> key -> latest value.
        self.consumer_records: dict[str, dict[bytes, bytes]] = {}
        # Transactional offset records awaiting their marker, by producer id.
        self._pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        # (group, topic, partition) each producer has staged, for require_stable fetches.
        self._unstable: dict[int, set[tuple[str, str, int]]] = {}
        # Offsets retention: when each group was first seen without members, and when this
        # store was loaded (the commit time assumed for records that carry none).
        self._empty_since: dict[str, int] = {}
        self._loaded_at_ms = int(time.time() * 1000)

    def partition_index(self, group: str) -> int:
        """The ``__consumer_offsets`` partition holding ``group`` (stable across restarts)."""
        return zlib.crc32(group.encode()) % len(self._partitions)

    def partition_for(self, group: str) -> PartitionLog:
        return self._partitions[self.partition_index(group)]

    # --- loading ----------------------------------------------------------------------

    def load(self) -> int:
        """Replay the topic into memory; returns the number of records applied. Records
        that cannot be decoded are skipped (and counted out)."""
        applied = 0
        for plog in self._partitions:
            for raw in plog.batches():
                batch = DefaultRecordBatch(raw)
                pid = batch.producer_id
                for record in batch:
                    if batch.is_control_batch:
                        self.complete_txn(pid, bool(getattr(record, "commit", False)))
                    elif batch.is_transactional:
                        self._stage(pid, record.key, record.value)
                    elif record.key is not None and self._apply(record.key, record.value):
                        applied += 1
        return applied

    def _apply(self, key: bytes, value: bytes | None) -> bool:
        try:
            r = _Reader(key)
            version = r.take(">h")
            group = r.string() or ""
            if version in (0, 1):
                tp = (r.string() or "", r.take(">i"))
                if value is None:
                    self.offsets.get(group, {}).pop(tp, None)
                else:
                    self.offsets.setdefault(group, {})[tp] = _decode_offset(value)
            elif version == GROUP_KEY_VERSION:
                if value is None:
                    self.groups.pop(group, None)
                    self.offsets.pop(group, None)
                else:
                    v = _Reader(value)
                    v.take(">h")
                    self.groups[group] = GroupRecord(v.string() or "", v.take(">i"))
            elif version in RECORD_TYPES:
                self._apply_consumer(group, key, value)
            else:
                return False
        except (struct.error, UnicodeDecodeError, ProtocolError):
            return False
        return True

    def _apply_consumer(self, group: str, key: bytes, value: bytes | None) -> None:
        if value is None:
            kept = self.consumer_records.get(group, {})
            kept.pop(key, None)
            if not kept:
                self.consumer_records.pop(group, None)
        else:
            self.consumer_records.setdefault(group, {})[key] = value

    # --- writing ----------------------------------------------------------------------

    def write_consumer_records(self, group: str,
                               records: list[tuple[bytes, bytes | None]]) -> PartitionLog:
        """Persist KIP-848 group records (a None value deletes the key) in one batch."""
        plog = self._append(group, records)
        for key, value in records:
            self._apply_consumer(group, key, value)
        return plog

    def _append(self, group: str, records: list[tuple[bytes, bytes | None]]) -> PartitionLog:
        plog = self.partition_for(group)
        data = bytearray(build_batch(records, timestamp_ms=int(time.time() * 1000)))
        plog.append(data, validate_batches(data))
        return plog

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> PartitionLog:
        """Persist and apply commits; returns the partition written (to flush or notify)."""
        plog = self._append(group, [(offset_key(group, t, p), offset_value(c))
                                    for (t, p), c in offsets.items()])
        self.offsets.setdefault(group, {}).update(offsets)
        return plog

    def commit_transactional(self, group: str, producer_id: int, producer_epoch: int,
                             offsets: dict[TopicPartition, CommittedOffset]) -> PartitionLog:
        """Stage offsets inside a transaction (TxnOffsetCommit): written now as a
        transactional batch, applied when the COMMIT marker lands, dropped on ABORT."""
        plog = self.partition_for(group)
        records = [(offset_key(group, t, p), offset_value(c)) for (t, p), c in offsets.items()]
        data = bytearray(build_batch(records, timestamp_ms=int(time.time() * 1000),
                                     attributes=TRANSACTIONAL_FLAG, producer_id=producer_id,
                                     producer_epoch=producer_epoch))
        plog.append(data, validate_batches(data))
        for key, value in records:
            self._stage(producer_id, key, value)
        return plog

    def _stage(self, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        if key is not None:
            self._pending.setdefault(producer_id, []).append((key, value))
            target = _offset_key_target(key)
            if target is not None:
                self._unstable.setdefault(producer_id, set()).add(target)

    def is_unstable(self, group: str, tp: TopicPartition) -> bool:
        """Whether an open transaction staged an offset for the group's partition (an
        OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for it)."""
        return any((group, *tp) in keys for keys in self._unstable.values())

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """Apply (COMMIT) or drop (ABORT) the offsets the producer staged."""
        self._unstable.pop(producer_id, None)
        staged = self._pending.pop(producer_id, [])
        if committed:
            for key, value in staged:
                self._apply(key, value)

    def delete_offsets(self, group: str, partitions: list[TopicPartition]) -> None:
        present = [tp for tp in partitions if tp in self.offsets.get(group, {})]
        if present:
            self._append(group, [(offset_key(group, t, p), None) for t, p in present])
            for tp in present:
                del self.offsets[group][tp]

    def record_group(self, group: Group) -> None:
        """Persist a group's generation and protocol type (after each rebalance)."""
        self._append(group.group_id, [(group_key(group.group_id), group_value(group))])
        self.groups[group.group_id] = GroupRecord(group.protocol_type or "", group.generation_id)

    def delete_group(self, group: str) -> None:
        """Tombstone the group, its KIP-848 state and all its offsets."""
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group, t, p), None) for t, p in self.offsets.get(group, {})]
        records.append((group_key(group), None))
        records += [(key, None) for key in self.consumer_records.get(group, {})]
        self._append(group, records)
        self.offsets.pop(group, None)
        self.groups.pop(group, None)
        self.consumer_records.pop(group, None)

    def committed(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return self.offsets.get(group, {})

    # --- retention --------------------------------------------------------------------

    def expire(self, now_ms: int, retention_ms: int,
               has_members: Callable[[str], bool]) -> list[str]:
        """Tombstone the committed offsets past retention (Kafka's
        ``offsets.retention.minutes``, KIP-211); returns the groups this left with neither
        offsets nor members, for the coordinators to forget. Event loop; called every
        ``offsets.retention.check.interval.ms``.

        - A group with members keeps all its offsets.
        - A group that has had members (it has a group record) loses all its offsets once
          it has been empty for ``retention_ms``, counted from the first check that saw it
          empty (after a restart, the first check after it): expiry may come up to one
          check interval late, never early. Its group record goes too.
        - Standalone offsets (committed without joining, e.g. manual commits and the
          exactly-once sink's markers) expire each ``retention_ms`` after its commit.
        """
        forgotten: list[str] = []
        for group in list(self.offsets.keys() | self.groups.keys()
                          | self.consumer_records.keys()):
            if has_members(group):
                self._empty_since.pop(group, None)
                continue
            offsets = self.offsets.get(group, {})
            if group in self.groups or group in self.consumer_records:
                since = self._empty_since.setdefault(group, now_ms)
                if since + retention_ms <= now_ms:
                    self.delete_group(group)
                    self._empty_since.pop(group, None)
                    forgotten.append(group)
                continue
            old = [tp for tp, c in offsets.items()
                   if (c.commit_timestamp_ms if c.commit_timestamp_ms >= 0
                       else self._loaded_at_ms) + retention_ms <= now_ms]
            self.delete_offsets(group, old)
            if not self.offsets.get(group):
                self.offsets.pop(group, None)
                forgotten.append(group)
        return forgotten


def _offset_key_target(key: bytes) -> tuple[str, str, int] | None:
    """``(group, topic, partition)`` of an offset-commit key, else None."""
    try:
        r = _Reader(key)
        if r.take(">h") not in (0, 1):
            return None
        return r.string() or "", r.string() or "", r.take(">i")
    except (struct.error, UnicodeDecodeError):
        return None


def _decode_offset(value: bytes) -> CommittedOffset:
    r = _Reader(value)
    version = r.take(">h")
    offset = r.take(">q")
    leader_epoch = r.take(">i") if version >= 3 else -1
    metadata = r.string() or ""
    commit_ts = r.take(">q")
    return CommittedOffset(offset, leader_epoch, metadata, commit_ts)
