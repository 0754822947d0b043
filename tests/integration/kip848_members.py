"""Helpers for KIP-848 consumer group tests: librdkafka members polling in threads that
journal their assignment callbacks, and the checks on those journals."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from headrace.testing import scaled


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(scaled(30)) == 0


class Member:
    """A ``group.protocol=consumer`` consumer polling in a thread; it journals
    (time, "assign"/"revoke", partitions) from its callbacks and counts records."""

    journal_lock = threading.Lock()

    def __init__(self, bootstrap: str, group: str, topics: list[str],
                 journal: list[tuple[float, str, str, frozenset[tuple[str, int]]]],
                 name: str, **conf: Any) -> None:
        self.name = name
        self.journal = journal
        self.owned: set[tuple[str, int]] = set()
        self.records: list[tuple[str, int, int]] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **conf})
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _log(self, what: str, partitions: list[TopicPartition]) -> None:
        tps = frozenset((tp.topic, tp.partition) for tp in partitions)
        with self.journal_lock:
            self.journal.append((time.monotonic(), self.name, what, tps))
        if what == "assign":
            self.owned |= tps
        else:
            self.owned -= tps

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._log("assign", partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._log("revoke", partitions)

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.records.append((msg.topic(), msg.partition(), msg.offset()))

    def stop(self, close: bool = True) -> None:
        self._stop.set()
        self.thread.join(scaled(10))
        if close:
            self.consumer.close()


def check_never_owned_twice(
        journal: list[tuple[float, str, str, frozenset[tuple[str, int]]]]) -> None:
    """Replaying the journal in time order, no partition is assigned to a member while
    another still holds it."""
    owner: dict[tuple[str, int], str] = {}
    for _, name, what, tps in sorted(journal, key=lambda e: e[0]):
        for tp in tps:
            if what == "assign":
                assert owner.get(tp) in (None, name), f"{tp} owned by {owner[tp]} and {name}"
                owner[tp] = name
            elif owner.get(tp) == name:
                del owner[tp]
