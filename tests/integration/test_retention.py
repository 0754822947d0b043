"""Retention and DeleteRecords through real clients: expired segments (by age, by size)
and only those are deleted, the log start offset advances, a consumer below it gets
OFFSET_OUT_OF_RANGE and resets per auto.offset.reset, and DeleteRecords (confluent-kafka
and kafka-python admin clients) moves the log start offset durably.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_compaction import set_configs
from tests.integration.txn_support import wait_for

FAST_RETENTION = ["--log-retention-check-interval-ms", "100"]


@pytest.fixture(scope="module")
def retention_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=FAST_RETENTION) as b:
        yield b


def create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(scaled(10))


def produce_one_per_batch(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    """One record per batch (flushed one by one), each with its timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, ts in enumerate(timestamps):
        producer.produce(topic, key=b"k", value=b"record-%03d" % i, partition=0, timestamp=ts)
        assert producer.flush(scaled(10)) == 0


def now_ms() -> int:
    return int(time.time() * 1000)


def earliest(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return int(admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(scaled(10)).offset)


def offsets_read(bootstrap: str, topic: str, start: int = 0, reset: str = "earliest",
                 expect: int | None = None) -> list[int]:
    """Offsets a librdkafka consumer assigned at ``start`` reads up to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{reset}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": reset})
    consumer.assign([TopicPartition(topic, 0, start)])
    got: list[int] = []
    deadline = time.monotonic() + scaled(20)
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.2):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    if expect is None or len(got) >= expect:
                        return got
                    continue
                got.append(msg.offset())  # type: ignore[arg-type]
        raise AssertionError(f"read {got}, expected {expect} records")
    finally:
        consumer.close()


def test_retention_by_time_deletes_exactly_the_expired_segments(retention_broker: EmbeddedBroker,
                                                               topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap_servers
    create(bootstrap, topic_name, **{"segment.bytes": "14", "retention.ms": "60000"})
    now = int(time.time() * 1000)
    old, recent = now - 600_000, now - 5_000
    # Each record is its own segment; the 4th is expired but follows a live one, so, as
    # in Kafka, it stays: deletion goes oldest first and stops at the first segment kept.
    produce_one_per_batch(bootstrap, topic_name, [old, old, recent, old, recent])
    wait_for("retention to run", lambda: earliest(bootstrap, topic_name) == 2, timeout=10)
    time.sleep(0.5)  # a few more retention checks change nothing
    assert earliest(bootstrap, topic_name) == 2
    assert offsets_read(bootstrap, topic_name, expect=3) == [2, 3, 4]


def test_retention_by_size(retention_broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap_servers
    create(bootstrap, topic_name, **{"segment.bytes": "14", "retention.ms": "-1"})
    produce_one_per_batch(bootstrap, topic_name, [1_700_000_000_000] * 6)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        dirs = admin.describe_log_dirs({topic_name: [0]})
    finally:
        admin.close()
    size = dirs[0]["log_dirs"][0]["topics"][0]["partitions"][0]["partition_size"]
    assert size % 6 == 0  # six equal one-record segments
    set_configs(bootstrap, topic_name, {"retention.bytes": str(size // 6 * 3)})
    wait_for("size retention", lambda: earliest(bootstrap, topic_name) == 3, timeout=10)
    time.sleep(0.5)
    assert earliest(bootstrap, topic_name) == 3


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_consumer_below_the_log_start_resets(retention_broker: EmbeddedBroker, topic_name: str,
                                             reset: str) -> None:
    bootstrap = retention_broker.bootstrap_servers
    create(bootstrap, topic_name, **{"segment.bytes": "200"})
    produce_one_per_batch(bootstrap, topic_name, [now_ms() + i for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.delete_records([TopicPartition(topic_name, 0, 6)])
    assert next(iter(result.values())).result(scaled(10)).low_watermark == 6
    if reset == "earliest":
        assert offsets_read(bootstrap, topic_name, start=2, reset=reset, expect=4) == [6, 7, 8, 9]
        # kafka-python too: an out-of-range position resets to the log start.
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 enable_auto_commit=False,
                                 consumer_timeout_ms=int(scaled(3000)))
        tp = KpTopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1)
        assert [m.offset for m in consumer] == [6, 7, 8, 9]
        consumer.close()
    else:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latest-reader",
                             "auto.offset.reset": "latest", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic_name, 0, 2)])
        # Time for the fetch at 2, OFFSET_OUT_OF_RANGE and the reset to the end (which must
        # come before the next record): the machine's pace, so scaled.
        deadline = time.monotonic() + scaled(2)
        while time.monotonic() < deadline:
            assert consumer.poll(0.1) is None  # records 6..9 are skipped
        produce_one_per_batch(bootstrap, topic_name, [now_ms()])
        msg = consumer.poll(scaled(10))
        assert msg is not None and msg.error() is None and msg.offset() == 10
        consumer.close()


def test_delete_records(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, extra_args=FAST_RETENTION) as broker:
        bootstrap = broker.bootstrap_servers
        create(bootstrap, "t", **{"segment.bytes": "200"})
        produce_one_per_batch(bootstrap, "t", [now_ms() + i for i in range(20)])
        segments_before = len(list(tmp_path.glob("t-0/*.log")))

        def delete(offset: int, topic: str = "t") -> int:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            result = admin.delete_records([TopicPartition(topic, 0, offset)],
                                          request_timeout=scaled(10))
            return int(next(iter(result.values())).result(scaled(10)).low_watermark)

        assert delete(7) == 7
        assert earliest(bootstrap, "t") == 7
        assert len(list(tmp_path.glob("t-0/*.log"))) < segments_before  # whole ones below 7
        assert delete(3) == 7  # never lowered
        assert offsets_read(bootstrap, "t", start=7, expect=13)[0] == 7
        with pytest.raises(KafkaException) as e:
            delete(21)
        assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
        # kafka-python's admin client speaks DeleteRecords too.
        kp = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            kp.delete_records({KpTopicPartition("t", 0): 9})
        finally:
            kp.close()
        assert earliest(bootstrap, "t") == 9
        broker.kill()  # the new log start offset is durable
        broker.start()
        assert earliest(bootstrap, "t") == 9
        assert delete(OFFSET_END) == 20
        assert earliest(bootstrap, "t") == 20
        create(bootstrap, "compacted", **{"cleanup.policy": "compact"})
        with pytest.raises(KafkaException) as e:
            delete(0, "compacted")
        assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
