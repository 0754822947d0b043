"""Helpers of the transaction tests: topics, reading with an isolation level, polling,
and the ``eos_worker`` subprocesses."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from headrace.testing import scaled

REPO_ROOT = Path(__file__).resolve().parents[2]

Record = tuple[int, bytes | None, bytes]  # offset, key, value


def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(scaled(10))


class Stalled(AssertionError):
    """``wait_for`` timed out: something stopped making progress."""


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 30.0,
             interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail after
    ``scaled(timeout)`` seconds naming ``what``."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise Stalled(f"timed out after {scaled(timeout):g}s waiting for {what}")
        time.sleep(interval)


class Reader:
    """A group-less librdkafka consumer of whole partitions at one isolation level.

    ``read_to_end`` returns what it has consumed once every partition is read up to the
    end it may read: the log end offset, or for read_committed the last stable offset
    (asked with ListOffsets at that isolation level when called). It can be called again
    to read what came since.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int = 1,
                 isolation: str = "read_committed", **config: Any) -> None:
        self.topic = topic
        self.isolation = isolation
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader",
                                  "enable.auto.commit": False, "enable.partition.eof": True,
                                  "isolation.level": isolation, "fetch.wait.max.ms": 50,
                                  **config})
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.records: dict[int, list[Record]] = {p: [] for p in range(partitions)}

    def poll_once(self, timeout: float = 0.1) -> dict[int, int]:
        """Consume what is there; returns the partitions that reported EOF, with the
        offset they reported it at."""
        eof: dict[int, int] = {}
        for msg in self.consumer.consume(1000, timeout):
            err = msg.error()
            p = msg.partition()
            assert p is not None
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof[p] = msg.offset() or 0
                    continue
                raise AssertionError(f"consumer error: {err}")
            offset, value = msg.offset(), msg.value()
            assert offset is not None and value is not None
            self.records[p].append((offset, msg.key(), value))
        return eof

    def ends(self) -> dict[int, int]:
        """Per partition, the end this reader may read to (ListOffsets "latest")."""
        level = (IsolationLevel.READ_COMMITTED if self.isolation == "read_committed"
                 else IsolationLevel.READ_UNCOMMITTED)
        futures = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in self.partitions},
                                          isolation_level=level)
        return {tp.partition: f.result(scaled(10)).offset for tp, f in futures.items()}

    def read_to_end(self, timeout: float = 30.0) -> dict[int, list[Record]]:
        ends = self.ends()
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + scaled(timeout)
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"partitions {sorted(pending)} of {self.topic} not read "
                                     f"to {ends}: at {self.consumer.position(self.partitions)}")
            eof = self.poll_once()
            # The position moves past transaction markers too, so it reaches the end.
            for tp in self.consumer.position(self.partitions):
                if max(tp.offset, eof.get(tp.partition, -1)) >= ends[tp.partition]:
                    pending.discard(tp.partition)
        return self.records

    def values(self, partition: int | None = None) -> list[bytes]:
        parts = sorted(self.records) if partition is None else [partition]
        return [v for p in parts for _, _, v in self.records[p]]

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_topic(bootstrap: str, topic: str, partitions: int = 1,
               isolation: str = "read_committed") -> dict[int, list[Record]]:
    with Reader(bootstrap, topic, partitions, isolation) as reader:
        return reader.read_to_end()


def transactional_producer(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 1, **config})
    producer.init_transactions(scaled(30))
    return producer


class EosWorkers:
    """Incarnations of ``tests.integration.eos_worker`` sharing one transactional id;
    each writes its stdout to its own file under ``log_dir``. At most one runs at a
    time; ``kill_all`` (call it in ``finally``) SIGKILLs whatever still runs."""

    def __init__(self, log_dir: Path, bootstrap: str, input_topic: str, output_topic: str,
                 group: str, transactional_id: str, batch: int) -> None:
        self.log_dir = log_dir
        self.args = ["--bootstrap", bootstrap, "--input", input_topic, "--output", output_topic,
                     "--group", group, "--transactional-id", transactional_id,
                     "--batch", str(batch)]
        self.process: subprocess.Popen[bytes] | None = None
        self.incarnations = 0
        self.exit_codes: list[int] = []

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"worker-{self.incarnations}.out"

    def spawn(self) -> subprocess.Popen[bytes]:
        assert self.process is None or self.process.poll() is not None
        self.incarnations += 1
        with open(self.log_path, "wb") as out, \
                open(self.log_dir / f"worker-{self.incarnations}.err", "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.eos_worker", *self.args],
                cwd=REPO_ROOT, stdout=out, stderr=err)
        return self.process

    def timed_lines(self) -> list[tuple[float, str]]:
        """The current incarnation's events: ``(time.monotonic(), event)``."""
        out = []
        for line in self.log_path.read_text().splitlines():
            stamp, _, event = line.partition(" ")
            out.append((float(stamp), event))
        return out

    def lines(self) -> list[str]:
        return [event for _, event in self.timed_lines()]

    def transactions_committed(self) -> int:
        """``committed`` events of every incarnation so far."""
        return sum(path.read_text().count(" committed ")
                   for path in self.log_dir.glob("worker-*.out"))

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reap(self) -> bool:
        """True (and the exit code recorded) when the current incarnation has exited."""
        if self.process is None or self.process.poll() is None:
            return False
        self.exit_codes.append(self.process.returncode)
        self.process = None
        return True

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def kill_all(self) -> None:
        self.kill()

    def all_output(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.log_dir.glob("worker-*")))


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's applied offsets, now. read_uncommitted: librdkafka's default
    (read_committed) asks OffsetFetch for stable offsets, which waits out any transaction
    a killed worker left open (up to its timeout), as Kafka does."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   scaled(10))
        return [tp.offset for tp in found]
    finally:
        consumer.close()
