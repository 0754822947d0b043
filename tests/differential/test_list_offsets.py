"""ListOffsets against both brokers: earliest, latest, max timestamp, and by timestamp
before the first record, exactly on one, between two, and after the last, through
confluent-kafka's AdminClient and kafka-python's offsets_for_times."""

from __future__ import annotations

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from headrace.testing import scaled
from tests.compat.clients import confluent_produce
from tests.compat.records import Record
from tests.differential.conftest import Brokers
from tests.differential.support import create_topic

T0 = 1_700_000_000_000
# Out-of-order timestamps, so the max timestamp is not the last record's.
TIMESTAMPS = [T0 + 10, T0 + 20, T0 + 50, T0 + 30, T0 + 40]
QUERIES = [T0, T0 + 10, T0 + 15, T0 + 20, T0 + 35, T0 + 50, T0 + 51]


def observe(bootstrap: str, topic: str) -> dict[str, object]:
    # The timestamps are from 2023: past the default 7-day retention, which the session's
    # fast retention checks would otherwise apply mid-test (Kafka does, at its own pace).
    create_topic(bootstrap, topic, configs={"retention.ms": "-1"})
    confluent_produce(bootstrap, topic, [Record(b"k", f"v{i}".encode(), (), 0, ts)
                                         for i, ts in enumerate(TIMESTAMPS)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)

    def ask(spec: OffsetSpec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec})[tp].result(scaled(10))
        return info.offset, info.timestamp

    seen: dict[str, object] = {
        "earliest": ask(OffsetSpec.earliest()),
        "latest": ask(OffsetSpec.latest()),
        "max_timestamp": ask(OffsetSpec.max_timestamp()),
    }
    for q in QUERIES:
        seen[f"ts {q - T0}"] = ask(OffsetSpec.for_timestamp(q))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        kp = KpTopicPartition(topic, 0)
        for q in QUERIES:
            found = consumer.offsets_for_times({kp: q})[kp]
            seen[f"kafka-python ts {q - T0}"] = (
                None if found is None else (found.offset, found.timestamp))
        seen["kafka-python beginning"] = consumer.beginning_offsets([kp])[kp]
        seen["kafka-python end"] = consumer.end_offsets([kp])[kp]
    finally:
        consumer.close()
    return seen


def test_list_offsets_match(brokers: Brokers, topic_name: str) -> None:
    reference = observe(brokers.kafka, topic_name)
    ours = observe(brokers.headrace, topic_name)
    assert ours == reference
    assert reference["max_timestamp"] == (2, T0 + 50)
    assert reference["ts 51"] == (-1, -1)
