"""Plain Kafka-client helpers for Spark tests: create topics, produce known rows, read all."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import scaled


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    """Without time retention unless ``config`` sets one: the fixtures' records carry
    timestamps from 1970, which Apache Kafka's retention check (every 5 minutes) would
    delete between the produce and the read."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"retention.ms": "-1", **(config or {})}
    admin.create_topics([NewTopic(name, num_partitions=partitions, config=settings)]
                        )[name].result(scaled(30))


def produce(bootstrap: str, topic: str, rows: list[tuple[Any, ...]]) -> list[tuple[int, int]]:
    """Produce ``(key, value[, partition[, timestamp_ms]])`` rows in order; return each row's
    (partition, offset)."""
    # Idempotent: a retried batch (a slow broker just after the topic was created) keeps
    # its place and is written once, so the log holds the rows in the order produced.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                         "enable.idempotence": True})
    placed: list[tuple[int, int]] = [(-1, -1)] * len(rows)

    def report(i: int) -> Any:
        def cb(err: KafkaError | None, msg: Any) -> None:
            assert err is None, err
            placed[i] = (msg.partition(), msg.offset())
        return cb

    for i, row in enumerate(rows):
        kwargs: dict[str, Any] = {}
        if len(row) > 2 and row[2] is not None:
            kwargs["partition"] = row[2]
        if len(row) > 3:
            kwargs["timestamp"] = row[3]
        producer.produce(topic, value=row[1], key=row[0], on_delivery=report(i), **kwargs)
        producer.poll(0)
    assert producer.flush(scaled(30)) == 0
    return placed


def read_all(bootstrap: str, topic: str, read_committed: bool = True,
             timeout: float = 30.0) -> list[Any]:
    """Every record of ``topic`` up to its current end, as confluent-kafka messages."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if read_committed
                         else "read_uncommitted"})
    try:
        meta = consumer.list_topics(topic, timeout=scaled(10)).topics[topic]
        parts = sorted(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + scaled(timeout)
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, \
                f"{topic}: no end of partition in {scaled(timeout):g} s"
            for m in consumer.consume(1000, timeout=0.2):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    eof.add(m.partition())
                else:
                    out.append(m)
        return out
    finally:
        consumer.close()


def forget_last_commit(checkpoint: Path) -> None:
    """Make Spark believe the last micro-batch never committed, as after a crash between
    the tasks' writes and the commit log entry: it replays that batch on restart."""
    commits = checkpoint / "commits"
    last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
