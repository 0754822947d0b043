"""Acknowledged writes survive ``kill -9`` of the broker; no torn batch is ever served."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.clients import consume_all

PARTITIONS = 3


class AckLog:
    """Delivery reports of acknowledged records: partition -> {offset: value}."""

    def __init__(self) -> None:
        self.acked: dict[int, dict[int, bytes]] = defaultdict(dict)
        self.failed = 0
        self.lock = threading.Lock()

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self.lock:
            if err is None:
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None and offset is not None and value is not None
                self.acked[partition][offset] = value
            else:
                self.failed += 1

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())


def produce_until_stopped(bootstrap: str, topic: str, acks: AckLog, stop: threading.Event,
                          start: int) -> int:
    """Produce numbered records (acks=all) until ``stop``; returns how many were sent."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
        "message.timeout.ms": 4000, "enable.idempotence": False,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
    })
    i = start
    while not stop.is_set():
        try:
            producer.produce(topic, value=f"record-{i:09d}".encode(), partition=i % PARTITIONS,
                             on_delivery=acks.on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(scaled(10))
    return i - start


@pytest.mark.slow
def test_acknowledged_records_survive_kill_9(tmp_path: pytest.TempPathFactory) -> None:
    broker = EmbeddedBroker(data_dir=str(tmp_path))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("durable", PARTITIONS, 1)])["durable"].result(scaled(10))
        acks = AckLog()
        sent = 0
        for round_ in range(3):
            stop = threading.Event()
            box: list[int] = []
            t = threading.Thread(target=lambda b=box, s=stop, n=sent: b.append(
                produce_until_stopped(broker.bootstrap_servers, "durable", acks, s, n)))
            t.start()
            target = acks.count() + 20_000
            deadline = time.monotonic() + scaled(60)
            while acks.count() < target and time.monotonic() < deadline:
                time.sleep(0.01)
            broker.kill()  # mid-stream: requests are in flight
            stop.set()
            t.join(scaled(30))
            sent += box[0]
            broker.start()  # recovery on the same data directory and port
            assert "recovered after an unclean shutdown" in "".join(broker.output_lines()), round_
        assert acks.count() >= 60_000
        assert acks.failed > 0, "the kills should have caught records in flight"
        stored = consume_all(broker.bootstrap_servers,
                             [TopicPartition("durable", p, 0) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            by_offset = dict(stored[p])
            offsets = [o for o, _ in stored[p]]
            assert offsets == list(range(len(offsets))), "offsets must be contiguous from 0"
            for offset, value in acks.acked[p].items():
                assert by_offset.get(offset) == value, (p, offset)
            # Per-partition order: record numbers only increase within a round's producer.
            numbers = [int(v.split(b"-")[1]) for _, v in stored[p]]
            assert all(n % PARTITIONS == p for n in numbers)
    finally:
        broker.stop()


def test_fsync_on_ack_serves_concurrent_producers(tmp_path: pytest.TempPathFactory) -> None:
    """With ``--fsync`` every acknowledged record is on disk; concurrent producers share
    fsyncs (group commit), so they all complete."""
    with EmbeddedBroker(data_dir=str(tmp_path), extra_args=["--fsync"]) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("synced", PARTITIONS, 1)])["synced"].result(scaled(10))
        acks = AckLog()
        producers = [Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                               "linger.ms": 1}) for _ in range(4)]
        for n in range(2000):
            producers[n % 4].produce("synced", value=f"r-{n}".encode(), partition=n % PARTITIONS,
                                     on_delivery=acks.on_delivery)
        for p in producers:
            assert p.flush(scaled(30)) == 0
        assert acks.count() == 2000 and acks.failed == 0
        broker.kill()
        broker.start()
        stored = consume_all(broker.bootstrap_servers,
                             [TopicPartition("synced", p, 0) for p in range(PARTITIONS)])
        assert sum(len(v) for v in stored.values()) == 2000
        for p in range(PARTITIONS):
            assert dict(stored[p]) == acks.acked[p]
