"""ListOffsets by timestamp (offsetsForTimes) through real clients equals a brute-force
scan of the records, for arbitrary timestamps: out-of-order record timestamps, several
records per batch, every codec, many segments, a log start moved by DeleteRecords, and a
compacted log with gaps.

The answer Kafka defines: the smallest offset at or after the log start whose record
timestamp is >= the target (-1 when there is none), with that record's timestamp.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_compaction import FAST_CLEANER, read_with_tombstones, set_configs
from tests.integration.txn_support import wait_for

NOW = int(time.time() * 1000)
SPAN = 3_600_000


@dataclass(frozen=True)
class Dataset:
    bootstrap: str
    topic: str
    stamps: list[tuple[int, int]]  # (offset, timestamp) of every record a reader sees
    log_start: int

    def brute_force(self, target: int) -> tuple[int, int]:
        found = [(o, t) for o, t in self.stamps if t >= target and o >= self.log_start]
        return min(found) if found else (-1, -1)


@pytest.fixture(scope="module")
def fast_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=FAST_CLEANER) as b:
        yield b


def write(bootstrap: str, topic: str, count: int, keys: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "4096"})])[topic].result(
        scaled(10))
    stamps: list[tuple[int, int]] = []
    for chunk, codec in enumerate(("none", "gzip", "snappy", "lz4", "zstd")):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "linger.ms": 20, "enable.idempotence": True})

        def on_delivery(err: object, msg: object) -> None:
            assert err is None
            stamps.append((msg.offset(), msg.timestamp()[1]))  # type: ignore[attr-defined]

        for i in range(count // 5):
            ts = NOW - SPAN + rng.randrange(SPAN)
            if rng.random() < 0.1 and stamps:
                ts = stamps[-1][1]  # duplicates
            producer.produce(topic, key=b"k%d" % rng.randrange(keys), value=b"v%d-%d" % (chunk, i),
                             partition=0, timestamp=ts, on_delivery=on_delivery)
            if rng.random() < 0.05:
                producer.flush(scaled(10))  # batch boundaries at random
        assert producer.flush(scaled(10)) == 0
    return sorted(stamps)


@pytest.fixture(scope="module")
def plain(fast_broker: EmbeddedBroker) -> Dataset:
    bootstrap = fast_broker.bootstrap_servers
    stamps = write(bootstrap, "times-plain", 1500, keys=10**6, seed=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([TopicPartition("times-plain", 0, 100)])
    assert next(iter(deleted.values())).result(scaled(10)).low_watermark == 100
    return Dataset(bootstrap, "times-plain", stamps, 100)


@pytest.fixture(scope="module")
def compacted(fast_broker: EmbeddedBroker) -> Dataset:
    bootstrap = fast_broker.bootstrap_servers
    written = write(bootstrap, "times-compacted", 1500, keys=60, seed=2)
    set_configs(bootstrap, "times-compacted", {"cleanup.policy": "compact",
                                               "min.cleanable.dirty.ratio": "0.01"})
    wait_for("compaction", lambda: len(read_with_tombstones(bootstrap, "times-compacted")) < 400,
             timeout=30, interval=0.3)
    surviving = {o for o, _, _ in read_with_tombstones(bootstrap, "times-compacted")}
    return Dataset(bootstrap, "times-compacted", [s for s in written if s[0] in surviving], 0)


def offsets_for_times(consumer: Consumer, topic: str, targets: list[int]) -> list[int]:
    """librdkafka's answers (it does not pass the timestamp found on; kafka-python's test
    checks those)."""
    out = []
    for target in targets:
        (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=scaled(10))
        out.append(tp.offset if tp.offset >= 0 else -1)
    return out


TARGETS = st.lists(st.integers(NOW - SPAN - 1000, NOW + 1000), min_size=1, max_size=8)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(targets=TARGETS)
def test_offsets_for_times_equals_a_brute_force_scan(plain: Dataset, compacted: Dataset,
                                                     targets: list[int]) -> None:
    for data in (plain, compacted):
        exact = [t for _, t in data.stamps[:: max(1, len(data.stamps) // 5)]]
        consumer = Consumer({"bootstrap.servers": data.bootstrap, "group.id": "oft",
                             "enable.auto.commit": False})
        try:
            queries = targets + exact + [t + 1 for t in exact]
            assert offsets_for_times(consumer, data.topic, queries) == [
                data.brute_force(t)[0] for t in queries]
        finally:
            consumer.close()


@pytest.mark.parametrize("which", ["plain", "compacted"])
def test_kafka_python_offsets_for_times(plain: Dataset, compacted: Dataset, which: str) -> None:
    data = plain if which == "plain" else compacted
    consumer = KafkaConsumer(bootstrap_servers=data.bootstrap)
    tp = KpTopicPartition(data.topic, 0)
    try:
        for target in [*range(NOW - SPAN - 10, NOW + 10, SPAN // 97),
                       *(t for _, t in data.stamps[::7])]:
            answer = consumer.offsets_for_times({tp: target})[tp]
            got = (answer.offset, answer.timestamp) if answer is not None else (-1, -1)
            assert got == data.brute_force(target)  # offset and the record's timestamp
    finally:
        consumer.close()
