"""A backfill of a tiered topic with ``format("headrace")`` given the brokers' store settings
reads the tiered segments straight from the object store (a real SeaweedFS, and the
filesystem store) and the hot tail through the broker, and yields exactly the rows of a
read through the broker: offsets, keys, values, headers, timestamps, under read_committed
(an aborted transaction in the tiered part) and read_uncommitted."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from headrace.testing import EmbeddedBroker, SeaweedS3, scaled
from tests.integration.test_tiered_storage import (
    EARLIEST_LOCAL,
    LATEST,
    SEGMENT,
    create,
    list_offset,
    metric,
    tiered_broker,
    wait_tiered,
)

pytestmark = pytest.mark.spark

TOPIC = "backfill"


class Tiered:
    """A broker with a tiered topic: ``store`` holds the source options naming its store."""

    def __init__(self, broker: EmbeddedBroker, store: dict[str, str]) -> None:
        self.broker = broker
        self.store = store
        self.aborted: list[int] = []  # offsets of the aborted transaction's records


def fill(tiered: Tiered) -> None:
    """Transactions (one aborted) with keys, headers and timestamps, compressed, tiered and
    deleted locally; then a hot tail of plain records."""
    bootstrap = tiered.broker.bootstrap_servers
    create(bootstrap, TOPIC, {**SEGMENT, "retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "backfill-tx",
                         "linger.ms": 0, "compression.type": "zstd"})
    producer.init_transactions(scaled(10))
    base_ts = int(time.time() * 1000) - 60_000
    delivered: list[int] = []
    for txn in range(12):
        producer.begin_transaction()
        for i in range(5):
            n = txn * 5 + i
            producer.produce(TOPIC, os.urandom(150).hex().encode() + str(n).encode(),
                             key=None if i == 0 else f"k{n}".encode(),
                             headers=[("h", f"{n}".encode()), ("empty", None)],
                             timestamp=base_ts + n,
                             on_delivery=lambda err, msg: delivered.append(msg.offset()))
        producer.flush(scaled(10))
        if txn == 2:
            producer.abort_transaction(scaled(10))
            tiered.aborted = delivered[-5:]
        else:
            producer.commit_transaction(scaled(10))
    wait_tiered(bootstrap, TOPIC, delivered[-10])
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(5):
        plain.produce(TOPIC, f"hot{n}".encode(), key=b"hot")
    assert plain.flush(scaled(10)) == 0
    assert max(tiered.aborted) < list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)


@pytest.fixture(scope="module", params=["filesystem", "s3"])
def tiered(request: pytest.FixtureRequest) -> Iterator[Tiered]:
    if request.param == "filesystem":
        with tempfile.TemporaryDirectory(prefix="headrace-remote-") as root, EmbeddedBroker(
                extra_args=["--log-retention-check-interval-ms", "100",
                            "--config", "remote.log.storage.system.enable=true",
                            "--config", f"headrace.remote.storage.path={root}",
                            "--config", "remote.log.manager.task.interval.ms=100",
                            "--metrics-port", "0"]) as broker:
            found = Tiered(broker, {"headrace.remote.storage.kind": "filesystem",
                                    "headrace.remote.storage.path": str(Path(root))})
            fill(found)
            yield found
        return
    s3 = SeaweedS3().start()
    try:
        with tiered_broker(s3, "backfill") as broker:
            found = Tiered(broker, {"headrace.remote.storage.kind": "s3",
                                    "headrace.remote.storage.s3.endpoint": s3.endpoint,
                                    "headrace.remote.storage.s3.bucket": "backfill",
                                    "headrace.remote.storage.s3.access.key": "any",
                                    "headrace.remote.storage.s3.secret.key": "any"})
            fill(found)
            yield found
    finally:
        s3.kill()  # its data is thrown away: no clean shutdown to wait for
        shutil.rmtree(s3.dir, ignore_errors=True)


def read(spark: SparkSession, tiered: Tiered, cold: bool, **options: str) -> list[Any]:
    reader = spark.read.format("headrace").option(
        "kafka.bootstrap.servers", tiered.broker.bootstrap_servers).option(
        "subscribe", TOPIC).option("includeHeaders", "true")
    for k, v in {**(tiered.store if cold else {}), **options}.items():
        reader = reader.option(k, v)
    return sorted((tuple(r) for r in reader.load().collect()), key=lambda r: r[4])


def test_backfill_from_the_store_equals_the_broker_read(spark: SparkSession,
                                                        tiered: Tiered) -> None:
    broker = tiered.broker
    end = list_offset(broker.bootstrap_servers, TOPIC, LATEST)
    reads = metric(broker, "headrace_remote_fetch_requests_total")
    through_broker = read(spark, tiered, cold=False)
    assert metric(broker, "headrace_remote_fetch_requests_total") > reads
    reads = metric(broker, "headrace_remote_fetch_requests_total")
    straight = read(spark, tiered, cold=True)
    # Nothing tiered went through the broker: the executors read the store.
    assert metric(broker, "headrace_remote_fetch_requests_total") == reads
    assert straight == through_broker
    offsets = [r[4] for r in straight]
    assert len(offsets) == 60 and offsets[-1] == end - 1
    assert not set(tiered.aborted) & set(offsets)
    first = straight[0]
    assert first[0] is None and first[-1] == [("h", b"0"), ("empty", None)]
    assert [r[1] for r in straight[-5:]] == [f"hot{n}".encode() for n in range(5)]

    if tiered.store["headrace.remote.storage.kind"] == "s3":
        return  # the rest reads the store the same way: once is enough
    uncommitted = read(spark, tiered, cold=True, **{"isolation.level": "read_uncommitted"})
    assert uncommitted == read(spark, tiered, cold=False,
                               **{"isolation.level": "read_uncommitted"})
    assert set(tiered.aborted) < {r[4] for r in uncommitted}

    # A range inside the tiered part, split over more tasks than segments, some columns.
    until = tiered.aborted[-1] + 9
    ranged = {"startingOffsets": f'{{"{TOPIC}":{{"0":7}}}}',
              "endingOffsets": f'{{"{TOPIC}":{{"0":{until}}}}}', "minPartitions": "12"}
    assert read(spark, tiered, cold=True, **ranged) == [r for r in through_broker
                                                        if 7 <= r[4] < until]
