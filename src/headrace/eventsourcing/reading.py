"""Reading ranges of the event log: one ``read_committed`` consumer without a group.

A ``LogReader`` is used by one thread at a time (the store lends them out from a pool). A
scan ends at the partition's end as the broker reports it to a ``read_committed`` reader
(the last stable offset: aborted and still-open transactions are never seen), so an append
acknowledged before a scan starts is always in it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from headrace.eventsourcing.errors import StoreError


class LogReader:
    """Scans partitions of any topic; ``timeout`` (s) bounds each wait for the broker."""

    def __init__(self, config: dict[str, Any], timeout: float) -> None:
        self.timeout = timeout
        self._closed = False
        self._consumer = Consumer({
            **config, "group.id": f"headrace-es-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
            # A scan ends at the first empty fetch: keep its long poll short; and fetch again
            # at once rather than after librdkafka's default queue backoff.
            "fetch.wait.max.ms": 1, "fetch.queue.backoff.ms": 0,
            "auto.offset.reset": "earliest"})

    def scan(self, topic: str, partition: int, start: int, until: int | None = None,
             min_end: int = 0) -> Iterator[Message]:
        """Records of ``topic``/``partition`` from offset ``start`` to the end (or to just
        before ``until``), in order. The end is not before ``min_end``: Apache Kafka
        acknowledges a commit before its markers are written, so a reader that must see
        its own commit passes the offset after it. Raises ``StoreError`` if the broker
        does not answer (or the end does not reach ``min_end``) within ``timeout``. Stop
        iterating early freely."""
        if until is not None and until <= start:
            return
        self._consumer.assign([TopicPartition(topic, partition, start)])
        try:
            deadline = time.monotonic() + self.timeout
            while True:
                first = self._consumer.poll(0.2)
                if first is None:
                    if time.monotonic() > deadline:
                        raise StoreError(f"reading {topic}[{partition}] from offset {start}: "
                                         f"no answer within {self.timeout:g} s")
                    continue
                deadline = time.monotonic() + self.timeout
                for m in (first, *self._consumer.consume(999, 0)):
                    err = m.error()
                    if err is None:
                        if until is not None and (m.offset() or 0) >= until:
                            return
                        yield m
                    elif err.code() == KafkaError._PARTITION_EOF:
                        if (m.offset() or 0) >= min_end:
                            return
                    elif err.fatal() or not err.retriable():
                        raise StoreError(f"reading {topic}[{partition}]: {err.str()}")
        except KafkaException as e:
            raise StoreError(f"reading {topic}[{partition}]: {e.args[0].str()}") from e
        finally:
            self._consumer.unassign()

    def close(self) -> None:
        """Release the consumer. Idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()
