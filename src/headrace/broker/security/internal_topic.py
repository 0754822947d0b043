"""A compacted one-partition internal topic holding broker state as keyed records (SCRAM
credentials, ACLs): replayed at start, written durably (fsynced) before a change applies.
Event loop only."""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka.record.default_records import DefaultRecordBatch

from headrace.protocol.records import build_batch, validate_batches
from headrace.storage.log import PartitionLog
from headrace.storage.manager import LogManager

TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}
Apply = Callable[[bytes, bytes | None], None]


class InternalTopic:
    def __init__(self, logs: LogManager, name: str) -> None:
        self._logs = logs
        self.name = name

    def _log(self, create: bool) -> PartitionLog | None:
        """The topic's partition; created on the first write (a broker that never stored
        such state has no such topic)."""
        topic = self._logs.topics.get(self.name)
        if topic is None and create:
            topic = self._logs.create_topic(self.name, 1, TOPIC_CONFIG)
        return None if topic is None else topic.partitions[0]

    def replay(self, apply: Apply) -> None:
        """``apply(key, value)`` for every keyed record, oldest first (a value None is a
        tombstone); ``apply`` skips what it cannot decode."""
        plog = self._log(create=False)
        if plog is None:
            return
        for raw in plog.batches():
            for record in DefaultRecordBatch(raw):
                if record.key is not None:
                    apply(record.key, record.value)

    def write(self, records: list[tuple[bytes, bytes | None]], apply: Apply) -> None:
        """Append the records in one batch, fsync, then ``apply`` each."""
        data = bytearray(build_batch(records, timestamp_ms=int(time.time() * 1000)))
        plog = self._log(create=True)
        assert plog is not None
        plog.append(data, validate_batches(data))
        plog.flush()
        for key, value in records:
            apply(key, value)
