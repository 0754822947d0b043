"""Client helpers shared by the differential scenarios: topic admin, reading partitions
whole with confluent-kafka, and polling for a condition (no fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import scaled
from tests.integration.txn_support import wait_for

__all__ = ["Row", "create_topic", "read_partition", "wait_for", "watermarks"]

Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(
        scaled(20))
    # Kafka's metadata reaches its own broker a moment after the controller answers, and
    # its partitions get a leader a moment after that (a produce earlier gets
    # NOT_LEADER_OR_FOLLOWER).
    def ready() -> bool:
        found = admin.list_topics(topic, scaled(5)).topics.get(topic)
        return (found is not None and found.error is None
                and len(found.partitions) == partitions
                and all(p.error is None and p.leader >= 0 for p in found.partitions.values()))
    wait_for(f"{topic} in metadata with a leader for each partition", ready)


def watermarks(bootstrap: str, topic: str, partition: int = 0,
               isolation: str = "read_uncommitted") -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "diff-watermarks",
                  "isolation.level": isolation})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), scaled(10))
        return int(low), int(high)
    finally:
        c.close()


def read_partition(bootstrap: str, topic: str, partition: int = 0,
                   isolation: str = "read_uncommitted", timeout: float = 30.0,
                   **config: Any) -> list[Row]:
    """Every record of the partition from its log start to its end (the high watermark,
    or the last stable offset for read_committed): offset, key, value, headers, timestamp."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "diff-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "fetch.wait.max.ms": 50, **config})
    out: list[Row] = []
    try:
        consumer.assign([TopicPartition(topic, partition, -2)])
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"consumer error: {err}")
                hdrs = tuple((k, None if v is None else bytes(v))
                             for k, v in (msg.headers() or []))
                out.append((msg.offset(), msg.key(), msg.value(), hdrs, msg.timestamp()[1]))
        raise AssertionError(f"{topic}/{partition} not read to its end in {scaled(timeout):g}s")
    finally:
        consumer.close()


def poll_until(what: str, condition: Callable[[], Any], timeout: float = 30.0,
               interval: float = 0.1) -> Any:
    return wait_for(what, condition, timeout, interval)  # (wait_for scales the timeout)
