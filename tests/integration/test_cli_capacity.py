"""``headrace capacity`` as a subprocess: the planning arithmetic, and --live against a
real broker with a steady producer and a group that consumes slower than it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import EmbeddedBroker
from tests.integration.test_cli import cli, failed, ok


def test_planned_capacity() -> None:
    out = ok(cli("capacity", "--disk", "2TB", "--rate", "50MB/s", "--replication", "3")).stdout
    assert "150 MB/s written" in out
    assert "buffer 3.7 hours (13,333 s)" in out
    data = json.loads(ok(cli("capacity", "--disk", "6TB", "--rate", "150MB/s", "--json")).stdout)
    assert data["buffer_seconds"] == pytest.approx(40_000)
    assert "not a size" in failed(cli("capacity", "--disk", "lots", "--rate", "1MB/s"), code=2)
    assert "give --disk and --rate" in failed(cli("capacity", "--disk", "1TB"), code=2)


@pytest.fixture
def busy_broker() -> Iterator[EmbeddedBroker]:
    """A topic written at about 200 records/s and a group committing 50/s behind it."""
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([
            NewTopic("payments", 1, 1, config={"retention.ms": "600000"}),
            NewTopic("accounts", 1, 1, config={"cleanup.policy": "compact"})])
        for f in futures.values():
            f.result(10)
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            while not stop.is_set():
                producer.produce("payments", key=b"card", value=b"x" * 100)
                producer.poll(0)
                time.sleep(0.005)
            producer.flush(10)

        def consume_slowly() -> None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "slow-audit",
                                 "enable.auto.commit": False})
            offset = 0
            while not stop.is_set():
                offset += 10
                consumer.commit(offsets=[TopicPartition("payments", 0, offset)],
                                asynchronous=False)
                time.sleep(0.2)
            consumer.close()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume_slowly)]
        for t in threads:
            t.start()
        try:
            time.sleep(1.0)
            yield broker
        finally:
            stop.set()
            for t in threads:
                t.join()


def test_live_capacity(busy_broker: EmbeddedBroker) -> None:
    servers = busy_broker.bootstrap_servers
    data = json.loads(ok(cli("capacity", "--live", "--sample", "2s", "--json",
                             servers=servers)).stdout)
    topics = {t["topic"]: t for t in data["topics"]}
    assert set(topics) == {"payments", "accounts"}
    payments = topics["payments"]
    assert 50 < payments["records_per_s"] < 400
    assert payments["bytes_per_s"] > 50 * 100
    assert payments["window_s"] == 600
    assert topics["accounts"]["window_s"] is None
    assert data["usable_bytes"] > 0 and data["total_bytes"] >= data["usable_bytes"]
    (group,) = data["groups"]
    assert (group["group_id"], group["topic"], group["partition"]) == ("slow-audit", "payments", 0)
    assert group["lag"] > 0
    assert 30 < group["consume_rate"] < 70
    # (records retained - lag) / (produce - consume), from the measured rates.
    window = group["produce_rate"] * 600
    expected = (window - group["lag"]) / (group["produce_rate"] - group["consume_rate"])
    assert group["falls_off_s"] == pytest.approx(expected)
    text = ok(cli("capacity", "--live", "--sample", "1s", servers=servers)).stdout
    assert "payments" in text and "10 minutes" in text and "compacted: latest per key" in text
    assert "slow-audit" in text and "Lag exceeds retention in" in text
    assert "minutes" in text.split("slow-audit", 1)[1]
