"""``headrace capacity`` as a subprocess: the planning arithmetic, and --live against a
real broker with a steady producer and a group that consumes slower than it.

No check depends on the machine's speed: the group commits a quarter of what the producer
has had acknowledged, so whatever pace the two threads get, the group consumes a quarter
as fast as the topic grows; the checks are on that ratio and on the arithmetic."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_cli import cli, failed, ok


def test_planned_capacity() -> None:
    out = ok(cli("capacity", "--disk", "2TB", "--rate", "50MB/s", "--replication", "3")).stdout
    assert "150 MB/s written" in out
    assert "buffer 3.7 hours (13,333 s)" in out
    data = json.loads(ok(cli("capacity", "--disk", "6TB", "--rate", "150MB/s", "--json")).stdout)
    assert data["buffer_seconds"] == pytest.approx(40_000)
    assert "not a size" in failed(cli("capacity", "--disk", "lots", "--rate", "1MB/s"), code=2)
    assert "give --disk and --rate" in failed(cli("capacity", "--disk", "1TB"), code=2)


def test_planned_capacity_per_broker_of_a_replicated_cluster() -> None:
    out = ok(cli("capacity", "--disk", "2TB", "--rate", "50MB/s", "--replication", "3",
                 "--brokers", "3", "--min-insync-replicas", "2", "--partitions", "12",
                 "--consumer-groups", "2")).stdout
    assert "Disk 6 TB" in out and "buffer 11.1 hours (40,000 s)" in out
    assert ("Each of 3 brokers (disk 50 MB/s written, network in 50 MB/s, out 66.7 MB/s, "
            "12.0 partition replicas)") in out
    assert "acks=all writes go on with up to 1 of them down" in out
    data = json.loads(ok(cli("capacity", "--disk", "1TB", "--rate", "30MB/s", "--replication",
                             "3", "--brokers", "6", "--json")).stdout)
    assert data["per_broker"]["disk_write_bytes_per_s"] == pytest.approx(15e6)
    assert "needs at least 3 brokers" in failed(
        cli("capacity", "--disk", "1TB", "--rate", "1MB/s", "--replication", "3",
            "--brokers", "2"), code=2)


def test_planned_capacity_of_the_two_tiers() -> None:
    """Tiered storage: the brokers' disks keep the local retention (replicated), the object
    store the whole retention (once)."""
    out = ok(cli("capacity", "--rate", "50MB/s", "--local-retention", "1d", "--retention",
                 "30d", "--replication", "3", "--disk", "6TB", "--brokers", "3")).stdout
    assert "Local tier (the brokers' disks, x3): 13 TB." in out
    assert "Remote tier (the object store, one copy): 130 TB." in out
    assert "Disk 18 TB: the local tier fits; the disk holds 1.39 days" in out
    data = json.loads(ok(cli("capacity", "--rate", "10MB/s", "--local-retention", "12h",
                             "--retention", "forever", "--disk", "100GB", "--json")).stdout)
    assert data["local_bytes"] == pytest.approx(432e9) and data["local_fits"] is False
    assert data["remote_bytes"] is None and data["remote_bytes_per_day"] == pytest.approx(864e9)
    assert "cannot be longer than the retention" in failed(
        cli("capacity", "--rate", "1MB/s", "--local-retention", "2d", "--retention", "1d"),
        code=2)
    assert "needs --rate, --local-retention and --retention" in failed(
        cli("capacity", "--rate", "1MB/s", "--local-retention", "2d"), code=2)


CONSUMED_FRACTION = 4  # the group commits 1/4 of what was produced


@pytest.fixture
def busy_broker() -> Iterator[EmbeddedBroker]:
    """A topic written continuously (at most about 200 records/s) and a group that commits,
    every 50 ms, a quarter of the records acknowledged so far: it consumes a quarter as
    fast as the topic grows, at any speed."""
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([
            NewTopic("payments", 1, 1, config={"retention.ms": "600000"}),
            NewTopic("accounts", 1, 1, config={"cleanup.policy": "compact"})])
        for f in futures.values():
            f.result(scaled(10))
        stop = threading.Event()
        acked = [0]  # records acknowledged: offsets 0 .. acked-1 are in the log
        committed = [0]
        failures: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                acked[0] += 1
            else:
                failures.append(str(err))

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            while not stop.is_set():
                producer.produce("payments", key=b"card", value=b"x" * 100,
                                 on_delivery=on_delivery)
                producer.poll(0)
                time.sleep(0.005)  # pacing only: the rates are not checked
            producer.flush(scaled(10))

        def consume_a_quarter() -> None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "slow-audit",
                                 "enable.auto.commit": False})
            while not stop.is_set():
                target = acked[0] // CONSUMED_FRACTION
                if target > committed[0]:
                    consumer.commit(offsets=[TopicPartition("payments", 0, target)],
                                    asynchronous=False)
                    committed[0] = target
                stop.wait(0.05)
            consumer.close()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume_a_quarter)]
        for t in threads:
            t.start()
        try:
            # The group exists (it has committed) before anything is sampled.
            deadline = time.monotonic() + scaled(30)
            while committed[0] == 0:
                assert time.monotonic() < deadline and not failures, failures
                time.sleep(0.05)
            yield broker
        finally:
            stop.set()
            for t in threads:
                t.join(scaled(30))
        assert not failures, failures[:5]


def test_live_capacity(busy_broker: EmbeddedBroker) -> None:
    servers = busy_broker.bootstrap_servers
    data = json.loads(ok(cli("capacity", "--live", "--sample", "3s", "--json",
                             servers=servers)).stdout)
    assert data["seconds"] >= 3
    topics = {t["topic"]: t for t in data["topics"]}
    assert set(topics) == {"payments", "accounts"}
    payments = topics["payments"]
    assert payments["records_per_s"] > 0
    # Bytes per record: a 100-byte value plus the record's and its batch's overhead (the
    # sizes and the offsets are read at slightly different moments: a factor 2 of slack).
    assert 50 < payments["bytes_per_s"] / payments["records_per_s"] < 2 * 250
    assert payments["window_s"] == 600
    assert topics["accounts"]["window_s"] is None
    assert data["usable_bytes"] > 0 and data["total_bytes"] >= data["usable_bytes"]
    (group,) = data["groups"]
    assert (group["group_id"], group["topic"], group["partition"]) == ("slow-audit", "payments", 0)
    assert group["produce_rate"] == pytest.approx(payments["records_per_s"])
    assert group["consume_rate"] > 0
    # A quarter as fast as the topic grows. Not exactly: the sampler reads the end offset
    # and then the group's offset, and the group commits every 50 ms, so each end of the
    # sample is off by what is produced in that gap (a fraction of the 3 s sample).
    ratio = group["consume_rate"] / group["produce_rate"]
    assert 0.5 / CONSUMED_FRACTION < ratio < 2 / CONSUMED_FRACTION, ratio
    # Lag: end - committed, about 3/4 of the log (nothing above what the log holds now).
    end = Consumer({"bootstrap.servers": servers, "group.id": "capacity-check"})
    try:
        end_now = end.get_watermark_offsets(TopicPartition("payments", 0),
                                            timeout=scaled(10))[1]
    finally:
        end.close()
    assert 0 < group["lag"] <= end_now
    # (records retained - lag) / (produce - consume), from the measured rates.
    window = group["produce_rate"] * 600
    expected = (window - group["lag"]) / (group["produce_rate"] - group["consume_rate"])
    assert group["falls_off_s"] == pytest.approx(expected)
    text = ok(cli("capacity", "--live", "--sample", "1s", servers=servers)).stdout
    assert "payments" in text and "10 minutes" in text and "compacted: latest per key" in text
    assert "slow-audit" in text and "Lag exceeds retention in" in text
    assert "minutes" in text.split("slow-audit", 1)[1]
